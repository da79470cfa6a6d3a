"""A model that runs in the warm-up and fails in a measured iteration (its third call), as a
model whose cache fills up might."""


def build(spec):
    import torch

    class FillsUp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if self.calls >= 3:
                raise ValueError(f"cache full after {self.calls - 1} calls")
            return x * 2

    return FillsUp(), (torch.randn(spec.batch_size, 4),)
