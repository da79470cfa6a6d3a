"""Made tests/data/torch/profiler_steps.json.gz: the torch.profiler recipe's loop as its tutorial
writes it (a schedule of wait 1, warmup 1, active 3; ``prof.step()`` after each training step),
on the CPU, exported with export_chrome_trace. Run: python tests/data/capture/profiler_steps.py OUT.json"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule

model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3), record_shapes=True,
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
    for _ in range(5):
        loss = torch.nn.functional.cross_entropy(model(torch.randn(32, 64)), torch.randint(0, 10, (32,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        prof.step()
