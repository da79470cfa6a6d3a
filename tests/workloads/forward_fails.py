"""A model whose forward pass fails: the warm-up (where torch.compile compiles) must report it
as one line."""


def build(spec):
    import torch

    class Broken(torch.nn.Module):
        def forward(self, x):
            return x @ torch.ones(3, 5)  # x is (batch, 4): the shapes do not match

    return Broken(), (torch.randn(spec.batch_size, 4),)
