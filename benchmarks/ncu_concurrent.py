"""Do two ncu processes on one GPU profile at the same time, or take turns? (issue 25's first
run.) Runs the per-function plan's ncu on the harness alone, then two of them at once, each
line time-stamped; prints when each process profiled its first and last function.

    python benchmarks/ncu_concurrent.py WORKLOAD [PRECISION] [BATCH]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ncu_pass_cost import SETS, job_file  # noqa: E402

from profkit import nvtx_ranges  # noqa: E402
from profkit.tools import ncu  # noqa: E402


def one(argv: list[str], out: dict, t0: float) -> None:
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    prof = [time.monotonic() - t0 for line in p.stdout if line.startswith("==PROF== Profiling")]
    p.wait()
    out.update(
        end=round(time.monotonic() - t0, 2),
        first=round(prof[0], 2) if prof else None,
        last=round(prof[-1], 2) if prof else None,
        n=len(prof),
    )


def main() -> None:
    w = sys.argv[1]
    p = sys.argv[2] if len(sys.argv) > 2 else "fp16"
    b = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    d = tempfile.mkdtemp()
    harness = [sys.executable, "-m", "profkit.harness", job_file(d, w, p, b)]
    flt = nvtx_ranges.ncu_include_filter(nvtx_ranges.tag(w, p, "eager"))
    exe = ncu.find()
    for count in (1, 2):
        t0 = time.monotonic()
        outs: list[dict] = [{} for _ in range(count)]
        threads = [
            threading.Thread(
                target=one,
                args=(
                    ncu.profile_argv(
                        exe,
                        Path(d) / f"r{i}.ncu-rep",
                        flt,
                        SETS["full"],
                        harness,
                        extra=ncu.per_function_argv(),
                    ),
                    outs[i],
                    t0,
                ),
            )
            for i in range(count)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(json.dumps({"workload": w, "processes": count, "each": outs}), flush=True)


if __name__ == "__main__":
    main()
