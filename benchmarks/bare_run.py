"""The workload without any profiler: the same harness process `profkit run` launches, same
batch, warm-up and iterations, timed from outside. The baseline for profiled wall times.

    python benchmarks/bare_run.py WORKLOAD PRECISION BATCH [ITERS] [DEVICE] [attribution] [MODE]

With ``attribution``, the measured iterations run under profkit's operator ranges (issue 23)
with no profiler to record them: their host cost alone.
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
    attribution = len(sys.argv) > 6 and sys.argv[6] == "attribution"
    mode = sys.argv[7] if len(sys.argv) > 7 else "eager"
    d = tempfile.mkdtemp()
    job = {
        "spec": {"batch_size": b, "precision": p, "mode": mode, "device": device},
        "workload_path": str(workloads.resolve(w)[1]),
        "warmup": 3,
        "iters": iters,
        "tag": nvtx_ranges.tag(w, p, mode),
        "info_path": os.path.join(d, "info.json"),
        "attribution": attribution,
    }
    with open(os.path.join(d, "job.json"), "w") as f:
        f.write(json.dumps(job))
    t = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "profkit.harness", os.path.join(d, "job.json")], check=True
    )
    wall = time.monotonic() - t
    with open(job["info_path"]) as f:
        info = json.load(f)
    its = [ns / 1e6 for ns in info["iteration_wall_ns"]]
    import statistics

    print(
        f"bare{' with attribution' if attribution else ''} {w} {p} {mode} batch {b}: median "
        f"{statistics.median(its):.2f} ms of {len(its)}; process {wall:.1f} s, measured iterations "
        + ", ".join(f"{ms:.2f}" for ms in its)
        + f" ms; stages (s): {info.get('stages_s')}"
    )


if __name__ == "__main__":
    main()
