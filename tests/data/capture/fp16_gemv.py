"""A small fp16 MLP scoring one item at a time (batch 1 of 4096-wide features; --batch-size is
the number of items scored one by one): each Linear is a matrix-vector product, which cuBLAS
runs as a GEMV on the CUDA cores, not on the tensor cores. For `profkit check`'s tests: a
half-precision run with matrix work off the tensor cores."""

PRECISIONS = ("fp32", "fp16", "bf16")
MODES = ("eager",)


def build(spec):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096),
                                torch.nn.ReLU(), torch.nn.Linear(4096, 16))

    class OneByOne(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = model

        def forward(self, x):
            return torch.cat([self.mlp(x[i:i + 1]) for i in range(x.shape[0])])

    return OneByOne(), (torch.randn(spec.batch_size, 4096),)
