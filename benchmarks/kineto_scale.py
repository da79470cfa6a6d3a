"""Import a synthetic torch.profiler (Kineto) trace of a million events or more, made by
replicating a real one (tests/data/steps/resnet18_train_amp.torch.json.gz: 8,659 events, 860
GPU activities, 1,959 launch calls, 2,562 CPU operators, 6 ranges), and compare with loading
the same file with Python's json.

    python benchmarks/kineto_scale.py [--events 1000000] [--workdir /tmp/kineto-scale] [--big-gb 0]

Each copy shifts every timestamp by the trace's span and every correlation and External id by
the largest one, so launches, GPU work, operators and ranges stay consistent. Prints one JSON
object with the figures of issue 25's Kineto target, side by side in one run: wall time and
peak RSS of ``json.load`` of the file (a process of its own) and of ``profkit import`` (each run
``--repeat`` times, alternating), and their ratios, best against best (the target: import at
most 2x json.load's time, at most half its memory). With
``--big-gb N`` it also imports a trace of about N GB, for the bound on memory (its json.load
is left out: it would need several times N GB).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "data" / "steps" / "resnet18_train_amp.torch.json.gz"
IDS = ("correlation", "External id")


def synthesize(out: Path, events: int) -> dict[str, Any]:
    """Write a trace of at least ``events`` events to ``out``; what it holds."""
    data = json.loads(gzip.decompress(SOURCE.read_bytes()))
    src = data.pop("traceEvents")
    timed_ = [e for e in src if isinstance(e.get("ts"), (int, float))]
    lo = min(e["ts"] for e in timed_)
    hi = max(e["ts"] + (e.get("dur") or 0) for e in timed_)
    span = round(hi - lo + 1000.0, 3)
    step = 1 + max(
        (e.get("args") or {}).get(k) or 0
        for e in src
        for k in IDS
        if isinstance((e.get("args") or {}).get(k), int)
    )
    copies = -(-events // len(src))
    t0 = time.monotonic()
    head = json.dumps(data)[:-1]  # the other keys, traceEvents last
    with open(out, "w") as f:
        f.write(head + ', "traceEvents": [\n')
        first = True
        for i in range(copies):
            for e in src:
                if i:
                    e = dict(e)
                    if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M":
                        e["ts"] = round(e["ts"] + i * span, 3)
                    if isinstance(e.get("args"), dict) and any(k in e["args"] for k in IDS):
                        e["args"] = {
                            k: v + i * step if k in IDS and isinstance(v, int) else v
                            for k, v in e["args"].items()
                        }
                    if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int):
                        e["id"] += i * step
                f.write(("" if first else ",\n") + json.dumps(e))
                first = False
        f.write("\n]}\n")
    return {
        "copies": copies,
        "events": copies * len(src),
        "file_mb": round(out.stat().st_size / 1e6),
        "synth_s": round(time.monotonic() - t0, 1),
    }


def timed(argv: list[str], stdout: Any = subprocess.DEVNULL) -> dict[str, Any]:
    """Wall time and peak RSS of a command (output to /dev/null), through GNU time."""
    p = subprocess.run(
        ["/usr/bin/time", "-v", *argv], stdout=stdout, stderr=subprocess.PIPE, text=True
    )
    if p.returncode != 0:
        raise SystemExit(f"{argv} failed: {p.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))  # type: ignore[union-attr]
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):(\d+(?:\.\d+)?)", p.stderr)
    h, m, s = (float(x) if x else 0.0 for x in wall.groups())  # type: ignore[union-attr]
    return {"wall_s": round(h * 3600 + m * 60 + s, 1), "peak_rss_mb": round(rss / 1024)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/kineto-scale"))
    ap.add_argument(
        "--big-gb", type=float, default=0.0, help="also import a trace of about this many GB"
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="runs of each, alternating (the best of each is compared)",
    )
    ap.add_argument(
        "--keep", action="store_true", help="keep the synthetic traces (else removed at the end)"
    )
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    a.workdir.mkdir(parents=True)
    trace = a.workdir / "synthetic.json"
    result: dict[str, Any] = {
        "machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
    }
    result["capture"] = synthesize(trace, a.events)
    py = sys.executable
    load = [py, "-c", "import json, sys; json.load(open(sys.argv[1]))", str(trace)]
    runs: dict[str, list[dict[str, Any]]] = {"json_load": [], "import": []}
    for i in range(a.repeat):  # side by side, alternating: both see the machine as it is
        runs["json_load"].append(timed(load))
        db = a.workdir / f"bench{i}.db"
        runs["import"].append(
            timed([py, "-m", "profkit", "import", str(trace), "--name", "big", "--db", str(db)])
        )
    result.update(runs)
    best = {
        k: {"wall_s": min(r["wall_s"] for r in v), "peak_rss_mb": min(r["peak_rss_mb"] for r in v)}
        for k, v in runs.items()
    }
    result["ratios"] = {  # best against best
        "import_vs_json_load_time": round(
            best["import"]["wall_s"] / max(best["json_load"]["wall_s"], 0.1), 2
        ),
        "import_vs_json_load_rss": round(
            best["import"]["peak_rss_mb"] / max(best["json_load"]["peak_rss_mb"], 1), 2
        ),
    }
    if a.big_gb:
        big = a.workdir / "big.json"
        per_event = trace.stat().st_size / result["capture"]["events"]
        result["big_capture"] = synthesize(big, int(a.big_gb * 1e9 / per_event))
        result["big_import"] = timed(
            [
                py,
                "-m",
                "profkit",
                "import",
                str(big),
                "--name",
                "big",
                "--db",
                str(a.workdir / "big.db"),
            ]
        )
    if not a.keep:
        for p in a.workdir.glob("*.json"):
            p.unlink()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
