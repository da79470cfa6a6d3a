"""The workload without any profiler: the same harness process `profkit run` launches, same
batch, warm-up and iterations, timed from outside. The baseline for profiled wall times.

    python benchmarks/bare_run.py WORKLOAD PRECISION BATCH [ITERS] [DEVICE]
"""

import json
import os
import subprocess
import sys
import tempfile
import time

from profkit import nvtx_ranges, workloads


def main() -> None:
    w, p, b = sys.argv[1], sys.argv[2], int(sys.argv[3])
    iters = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    device = sys.argv[5] if len(sys.argv) > 5 else "cuda"
    d = tempfile.mkdtemp()
    job = {"spec": {"batch_size": b, "precision": p, "mode": "eager", "device": device},
           "workload_path": str(workloads.resolve(w)[1]), "warmup": 3, "iters": iters,
           "tag": nvtx_ranges.tag(w, p, "eager"), "info_path": os.path.join(d, "info.json")}
    with open(os.path.join(d, "job.json"), "w") as f:
        f.write(json.dumps(job))
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "profkit.harness", os.path.join(d, "job.json")], check=True)
    wall = time.monotonic() - t
    with open(job["info_path"]) as f:
        info = json.load(f)
    its = [ns / 1e6 for ns in info["iteration_wall_ns"]]
    print(f"bare {w} {p} batch {b}: process {wall:.1f} s, measured iterations "
          + ", ".join(f"{ms:.2f}" for ms in its) + f" ms; stages (s): {info.get('stages_s')}")


if __name__ == "__main__":
    main()
