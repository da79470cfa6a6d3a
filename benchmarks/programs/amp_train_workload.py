"""tests/data/programs/own/amp_train.py's model and step as a workload file (AMP fp16 with a
GradScaler, AdamW, batch 16 of 3x32x32): for benchmarks/program_verdicts.py."""

import torch
from torch import nn


def build(spec):
    device = spec.device
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(256, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(16, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (16,), device=device)

    def step():
        with torch.autocast(device, dtype=torch.float16):
            loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return step
