"""pytorch/examples' mnist model as a workload file: its Net (imported from the unmodified
script), Adadelta, batch 64 of 1x28x28 images; the step the script's training loop runs.
For benchmarks/program_verdicts.py: the program's window against this workload's run."""

import importlib.util
from pathlib import Path

import torch
import torch.nn.functional as F

SCRIPT = Path(__file__).resolve().parents[2] / "tests/data/programs/pytorch-examples/mnist/main.py"


def build(spec):
    loaded = importlib.util.spec_from_file_location("mnist_example", SCRIPT)
    example = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(example)
    model = example.Net().to(spec.device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    data = torch.randn(64, 1, 28, 28, device=spec.device)
    target = torch.randint(0, 10, (64,), device=spec.device)

    def step():
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()

    return step
