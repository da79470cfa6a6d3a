"""Kineto traces of CPU-only runs, made on a machine without a GPU, with torch.profiler's own
per-operator table as the oracle for the importer (``key_averages()``: calls and self CPU
time per operator name).

    python tests/data/capture/capture_cpu.py tests/data/torch

The profiling is the same as ``profkit run --device cpu`` does (profkit.harness): warm-up
outside the profiler, then each measured iteration in a record_function range named like
profkit's NVTX ranges, CPU activity with record_shapes.
"""

import csv
import gzip
import shutil
import sys
from pathlib import Path

import torch
import torchvision
from torch.profiler import ProfilerActivity, profile, record_function

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def capture(dest: Path, name: str, tag: str, step, iters: int) -> None:
    for _ in range(2):
        step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for i in range(iters):
            with record_function(f"{tag}.iter{i}"):
                step()
    trace = dest / f"{name}.json"
    prof.export_chrome_trace(str(trace))
    with open(trace, "rb") as f, gzip.open(f"{trace}.gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    trace.unlink()
    with open(dest / f"{name}.key_averages.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "calls", "self_cpu_time_total_us", "cpu_time_total_us"])
        for e in sorted(prof.key_averages(), key=lambda e: e.key):
            w.writerow([e.key, e.count, f"{e.self_cpu_time_total:.3f}", f"{e.cpu_time_total:.3f}"])


def main() -> None:
    dest = Path(sys.argv[1])
    dest.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    x = torch.randn(2, 3, 224, 224)
    m = torchvision.models.resnet18(weights=None).eval()
    with torch.inference_mode():
        capture(dest, "cpu_resnet18_fp32", "resnet18.fp32.eager", lambda: m(x), iters=2)
        mb, xb = m.to(torch.bfloat16), x.to(torch.bfloat16)
        capture(dest, "cpu_resnet18_bf16", "resnet18.bf16.eager", lambda: mb(xb), iters=1)

    from workloads.resnet18_train import build
    from profkit.workloads import Spec

    step = build(Spec(batch_size=2, precision="fp32", mode="eager", device="cpu"))
    capture(dest, "cpu_resnet18_train_fp32", "resnet18_train.fp32.eager", step, iters=1)
    (dest / "cpu_env.txt").write_text(f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
                                      f"{torch.get_num_threads()} threads, no GPU\n")


if __name__ == "__main__":
    main()
