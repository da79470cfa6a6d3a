"""How many replay passes ncu needs for each tensor-path counter on this GPU, alone and in the
sets profkit uses: the measurement behind the default ncu plan (issue 12).

    python benchmarks/ncu_passes.py OUTDIR [METRIC_SET ...]

Lists the chip's tensor-path metrics (``ncu --query-metrics``), then profiles one tiny fp16
matmul under ncu once per metric (each with ``gpu__time_duration.sum``) and once per
comma-separated set given, and reads the pass count from ncu's progress line. Writes
OUTDIR/ncu_passes.json and prints a table.
"""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

TARGET = (
    "import torch; a = torch.ones(256, 256, device='cuda', dtype=torch.half); "
    "torch.cuda.synchronize(); b = a @ a; torch.cuda.synchronize()"
)
PASSES = re.compile(r"- (\d+) pass")


def chip() -> str:
    out = subprocess.run(["ncu", "--list-chips"], capture_output=True, text=True).stdout
    return "gh100" if "gh100" in out else out.split(",")[0].strip()


def tensor_metrics(outdir: Path) -> list[str]:
    out = subprocess.run(
        ["ncu", "--query-metrics", "--chip", chip()], capture_output=True, text=True
    ).stdout
    (outdir / "query_metrics.txt").write_text(out)
    names = [
        l.split()[0] for l in out.splitlines() if l.strip() and "ops_path_tensor" in l.split()[0]
    ]
    return sorted(set(n for n in names if n.startswith("sm")))


def passes(metrics: list[str]) -> tuple[int | None, str]:
    argv = [
        "ncu",
        "--metrics",
        ",".join(["gpu__time_duration.sum", *metrics]),
        "--kernel-name",
        "regex:gemm|nvjet|Kernel",
        "--launch-count",
        "1",
        sys.executable,
        "-c",
        TARGET,
    ]
    p = subprocess.run(argv, capture_output=True, text=True)
    m = PASSES.search(p.stdout + p.stderr)
    errors = [l for l in (p.stdout + p.stderr).splitlines() if "==ERROR==" in l]
    return (int(m.group(1)) if m else None), (errors[0] if errors else "")


def main() -> None:
    outdir = Path(sys.argv[1])
    outdir.mkdir(parents=True, exist_ok=True)
    sets = [s.split(",") for s in sys.argv[2:]]
    t0 = time.monotonic()
    sets_only = bool(sets) and sets[0] == ["--sets-only"]
    if sets_only:
        sets = sets[1:]
    found = [] if sets_only else tensor_metrics(outdir)
    result = {"chip": chip(), "metrics": found, "single": {}, "sets": []}
    for m in found:
        n, err = passes([m + ".sum"])
        result["single"][m] = n if n is not None else err
        print(f"{n!s:>4}  {m}  {err}", flush=True)
    for s in sets:
        n, err = passes(s)
        result["sets"].append({"metrics": s, "passes": n, "error": err})
        print(f"{n!s:>4}  SET {','.join(s)}  {err}", flush=True)
    result["wall_s"] = round(time.monotonic() - t0, 1)
    (outdir / "ncu_passes.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
