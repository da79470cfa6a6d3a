"""Computes something with torch, with no model, optimizer or backward in it."""
import torch

a = torch.randn(64, 64)
for _ in range(3):
    a = torch.tanh(a @ a.T / 64)
print("sum", float(a.sum()))
