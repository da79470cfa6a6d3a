"""Trains, and raises in its fourth step."""
import torch


def train_step(model, opt, i):
    if i == 3:
        raise ValueError("the batch was empty")
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()


model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(100):
    train_step(model, opt, i)
