"""A tiny classifier (two linear layers, ten classes) for profkit bench's tests: quick in every
precision on a CPU, except that its forward pass refuses bf16, as a model with an fp16-only
custom kernel would: the one combination that fails at run time."""


def build(spec):
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

        def forward(self, x):
            if x.dtype == torch.bfloat16:
                raise RuntimeError("this model has no bf16 kernel")
            return self.layers(x)

    return Tiny(), (torch.randn(spec.batch_size, 32),)
