"""What a first run's ncu process spends, per metric set (issue 25): ncu runs the harness
directly (the per-function plan's filter, as `profkit run --tool ncu` starts it), once per
metric set, with each ncu output line time-stamped; and the bare harness for the baseline.

    python benchmarks/ncu_pass_cost.py WORKLOAD [PRECISION] [BATCH] [SET ...]

A SET is a preset of rules.toml (time, tensor, full), `sass` (the full preset's CUDA-core
instruction counters alone), or a comma-separated list of metrics. Prints one JSON line per
set: the process's wall time, when the first and the last function was profiled, the
functions profiled, passes each, the report's export time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from profkit import nvtx_ranges, workloads
from profkit.tools import ncu

RULES = tomllib.loads((Path(__file__).resolve().parents[1] / "profkit" / "rules.toml").read_text())
SETS = dict(RULES["metric_sets"]["sm_90"])
SETS["sass"] = ["gpu__time_duration.sum"] + [m for m in SETS["full"] if m.startswith("smsp__sass")]


def job_file(d: str, w: str, p: str, b: int, warmup: int = 3) -> str:
    job = {
        "spec": {"batch_size": b, "precision": p, "mode": "eager", "device": "cuda"},
        "workload_path": str(workloads.resolve(w)[1]),
        "warmup": warmup,
        "iters": 1,
        "tag": nvtx_ranges.tag(w, p, "eager"),
        "info_path": os.path.join(d, "info.json"),
    }
    path = os.path.join(d, f"job{warmup}.json")
    Path(path).write_text(json.dumps(job))
    return path


def stages(d: str) -> dict | None:
    try:
        return json.loads(Path(d, "info.json").read_text()).get("stages_s")
    except (OSError, ValueError):
        return None


def stamped(argv: list[str], env: dict | None = None) -> tuple[float, list[tuple[float, str]], int]:
    t0 = time.monotonic()
    p = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    lines = [(time.monotonic() - t0, line.rstrip()) for line in p.stdout]
    rc = p.wait()
    return time.monotonic() - t0, lines, rc


def main() -> None:
    w = sys.argv[1]
    p = sys.argv[2] if len(sys.argv) > 2 else "fp16"
    b = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    names = sys.argv[4:] or ["time", "tensor", "sass", "full"]
    d = tempfile.mkdtemp()
    job = job_file(d, w, p, b)
    harness = [sys.executable, "-m", "profkit.harness", job]
    wall, _, rc = stamped(harness)
    print(
        json.dumps(
            {"workload": w, "set": "bare", "wall_s": round(wall, 2), "rc": rc, "stages": stages(d)}
        ),
        flush=True,
    )
    exe = ncu.find()
    for name in names:
        # VARIANT:SET runs SET with one change: eager (CUDA_MODULE_LOADING=EAGER), warm1 (one
        # warm-up iteration), app (--target-processes application-only).
        variant, _, name = name.rpartition(":")
        env = {"CUDA_MODULE_LOADING": "EAGER"} if variant == "eager" else None
        target = (
            [sys.executable, "-m", "profkit.harness", job_file(d, w, p, b, 1)]
            if variant == "warm1"
            else harness
        )
        metrics = SETS.get(name) or name.split(",")
        report = Path(d) / f"{name[:20].replace(',', '_')}.ncu-rep"
        argv = ncu.profile_argv(
            exe,
            report,
            nvtx_ranges.ncu_include_filter(nvtx_ranges.tag(w, p, "eager")),
            metrics,
            target,
            extra=ncu.per_function_argv(),
        )
        if variant == "app":
            argv[argv.index("all")] = "application-only"
        wall, lines, rc = stamped(argv, env)
        prof = [(t, l) for t, l in lines if l.startswith("==PROF== Profiling")]
        passes = [int(m.group(1)) for _, l in prof if (m := re.search(r"(\d+) pass", l))]
        t = time.monotonic()
        exp = subprocess.run(ncu.export_csv_argv(exe, report), capture_output=True, text=True)
        export_s = time.monotonic() - t
        errors = [l for _, l in lines if "==ERROR==" in l or "==WARNING==" in l][:3]
        print(
            json.dumps(
                {
                    "workload": w,
                    "set": (name if name in SETS else f"{len(metrics)} metrics")
                    + (f" ({variant})" if variant else ""),
                    "wall_s": round(wall, 2),
                    "stages": stages(d),
                    "rc": rc,
                    "first_prof_s": round(prof[0][0], 2) if prof else None,
                    "last_prof_s": round(prof[-1][0], 2) if prof else None,
                    "functions": len(prof),
                    "passes": sorted(set(passes)),
                    "export_s": round(export_s, 2),
                    "export_rc": exp.returncode,
                    "report_kb": report.stat().st_size // 1024 if report.exists() else None,
                    "errors": errors,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
