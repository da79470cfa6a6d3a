"""A plain PyTorch loop of small GPU kernels, about --kernels of them: steps of 100 launches (in-place
elementwise operations and small matrix products, one kernel each), each step in an NVTX range
as a user's script marks its steps. Nothing of profkit's in it: benchmarks/nsys_import_gpu.sh
captures it with `nsys profile` as a user would, for a large capture to import."""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--kernels", type=int, default=500_000)
args = parser.parse_args()

x = torch.randn(256, 256, device="cuda")
w = torch.randn(256, 256, device="cuda") / 16
y = torch.empty_like(x)
for step in range(args.kernels // 100):
    torch.cuda.nvtx.range_push(f"step {step}")
    for _ in range(25):
        torch.mm(x, w, out=y)
        y.tanh_()
        x.mul_(0.5)
        x.add_(y)
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
print("launched about", args.kernels // 100 * 100, "kernels")
