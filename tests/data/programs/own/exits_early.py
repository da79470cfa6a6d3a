"""Trains two steps, then gives up with exit status 3."""
import sys

import torch

model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(2):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
print("giving up", flush=True)
sys.exit(3)
