"""A small model that prints, on stderr, a line looking like profkit's own harness errors: a
good run all the same (profkit learns of workload errors from its error file, not output)."""

import sys


def build(spec):
    import torch

    print("profkit-harness: error: this is the workload talking, not an error", file=sys.stderr)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU())
    return model, (torch.randn(spec.batch_size, 64),)
