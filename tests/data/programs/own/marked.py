"""Marks its own steps with profkit.step(): two model calls and a manual update per step."""
import torch

import profkit

enc, dec = torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)
for i in range(50):
    loss = dec(enc(torch.randn(4, 8))).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for p in [*enc.parameters(), *dec.parameters()]:
            p -= 0.01 * p.grad
            p.grad = None
    profkit.step()
