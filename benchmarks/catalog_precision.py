"""Issue 23's precision acceptance over the built-in catalog: every workload in each half
precision it supports (fp16, bf16, amp), eager and compiled, profiled by `profkit run` under
each tool given, with operator ranges on; per run the share of kernel time whose precision is
unknown and what decided the rest.

    python benchmarks/catalog_precision.py OUT TOOLS [JOBS] [BUDGET_S] [MODES]

TOOLS: comma-separated (ncu, nsys, torch). JOBS runs at once (ncu serialises on the GPU
itself: give 1). No new run starts after BUDGET_S seconds (default 520); what did not run is
listed. Each job has a database of its own (OUT/<tool>-<n>.db); the table goes to stdout and
OUT/catalog-<tools>.json. Batch 2, one measured iteration, two warm-ups.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from profkit.workloads import catalog

HALF = ("fp16", "bf16", "amp")


def variants(tools: list[str], modes: list[str]) -> list[tuple[str, str, str, str]]:
    found = []
    for tool in tools:
        # compiled variants first: they take longest (Inductor compiles them in the warm-up)
        for mode in sorted(modes, key=lambda m: m != "compile"):
            for w in catalog():
                if mode not in w.modes:
                    continue
                for p in HALF:
                    if p in w.precisions:
                        found.append((tool, w.name, p, mode))
    return found


def unknown_share(db: Path, name: str) -> dict[str, object]:
    import profkit

    run = profkit.open_db(db, create=False).run(name)
    total = 0
    unknown = 0
    evidence: dict[str, int] = {}
    worst: dict[str, int] = {}
    for k in run.iter_kernels():
        if k["kind"] != "kernel":
            continue
        t = k["duration_ns"] or 0
        total += t
        evidence[k["evidence"]] = evidence.get(k["evidence"], 0) + t
        if k["precision"] == "unknown":
            unknown += t
            worst[k["short_name"]] = worst.get(k["short_name"], 0) + t
    top = sorted(worst.items(), key=lambda kv: -kv[1])[:3]
    return {
        "kernel_ns": total,
        "unknown_pct": round(100 * unknown / total, 3) if total else None,
        "evidence_pct": {
            e: round(100 * v / total, 1) for e, v in sorted(evidence.items(), key=lambda kv: -kv[1])
        },
        "unknown_top": [(n, round(100 * v / total, 2)) for n, v in top],
    }


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    tools = argv[1].split(",")
    jobs = int(argv[2]) if len(argv) > 2 else 1
    budget = float(argv[3]) if len(argv) > 3 else 520.0
    modes = argv[4].split(",") if len(argv) > 4 else ["eager", "compile"]
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    todo = variants(tools, modes)
    results: list[dict[str, object]] = []

    def one(i: int, v: tuple[str, str, str, str]) -> None:
        tool, w, p, mode = v
        if time.monotonic() - start > budget:
            results.append(
                {
                    "tool": tool,
                    "workload": w,
                    "precision": p,
                    "mode": mode,
                    "status": "not run (budget)",
                }
            )
            return
        db = out / f"{tool}-{i}.db"
        name = f"{w}-{p}-{mode}-{tool}"
        t0 = time.monotonic()
        r = subprocess.run(
            [
                "profkit",
                "run",
                w,
                "--precision",
                p,
                "--mode",
                mode,
                "--tool",
                tool,
                "--attribution",
                "--batch-size",
                "2",
                "--iters",
                "1",
                "--warmup",
                "2",
                "--name",
                name,
                "--db",
                str(db),
                "--no-report",
                "--timeout",
                "280",
            ],
            capture_output=True,
            text=True,
        )
        row: dict[str, object] = {
            "tool": tool,
            "workload": w,
            "precision": p,
            "mode": mode,
            "wall_s": round(time.monotonic() - t0, 1),
        }
        if r.returncode != 0:
            row["status"] = "failed: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200]
        else:
            row["status"] = "ok"
            row.update(unknown_share(db, name))
        results.append(row)
        print(json.dumps(row), flush=True)

    with ThreadPoolExecutor(jobs) as pool:
        for i, v in enumerate(todo):
            pool.submit(one, i, v)
    (out / f"catalog-{'-'.join(tools)}.json").write_text(json.dumps(results, indent=1))
    ok = [r for r in results if r["status"] == "ok"]
    print(
        f"{len(ok)} of {len(todo)} ran; unknown > 1%: "
        f"{[(r['workload'], r['precision'], r['mode'], r['tool'], r['unknown_pct']) for r in ok if (r['unknown_pct'] or 0) > 1]}"
    )
    print("max unknown %:", max((r["unknown_pct"] or 0 for r in ok), default=None))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
