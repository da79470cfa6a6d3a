"""The analyses of a 2-million-kernel run against a plain SQL GROUP BY (issue 25's acceptance:
summary, diff and ranges at most 1x it, report at most 2x, each under 1 GB of memory), side by
side in one run. The capture is benchmarks/nsys_scale.py's synthetic Nsight Systems export
(the AMP ResNet-18 training step replicated), imported twice (runs ``a`` and ``b``).

    python benchmarks/analysis_scale.py [--kernels 2000000] [--workdir /tmp/agg-scale] [--reuse]

``--reuse`` keeps the export and database a previous run left in the work folder (the analyses
measured again, not the import). Prints one JSON object: each command's wall time and peak RSS
(GNU time), its ratio to the GROUP BY, the imports' times and how long writing one run's
aggregates takes (``write_aggregates`` again on run ``a``, inside a transaction rolled back).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nsys_scale import checkpoint, sql_aggregate, synthesize, timed  # noqa: E402


def aggregate_step(db: Path) -> dict:
    """Seconds to write run ``a``'s aggregates from its rows (what the import spends on them)."""
    from profkit.store import Store
    from profkit.store.writes import write_aggregates

    store = Store(db)
    run = store.get_run("a")
    con: sqlite3.Connection = store.conn
    con.execute("begin immediate")
    t0 = time.monotonic()
    write_aggregates(store, run.id)
    took = time.monotonic() - t0
    groups = store.execute(
        "select count(*) from kernel_aggs where run_id = ?", [run.id]
    ).fetchone()[0]
    paths = store.execute("select count(*) from path_aggs where run_id = ?", [run.id]).fetchone()[0]
    con.execute("rollback")
    store.close()
    return {"wall_s": round(took, 1), "kernel_aggs_rows": groups, "path_aggs_rows": paths}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", type=int, default=2_000_000)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/agg-scale"))
    ap.add_argument("--reuse", action="store_true")
    a = ap.parse_args()
    big, db = a.workdir / "synthetic.sqlite", a.workdir / "bench.db"
    result: dict = {
        "machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
    }
    profkit = [sys.executable, "-m", "profkit"]
    if not (a.reuse and db.exists()):
        shutil.rmtree(a.workdir, ignore_errors=True)
        a.workdir.mkdir(parents=True)
        result["capture"] = synthesize(big, a.kernels)
        for name in ("a", "b"):
            result[f"import_{name}"] = timed(
                [*profkit, "import", str(big), "--name", name, "--db", str(db)]
            )
        checkpoint(db)
    result["aggregate_step"] = aggregate_step(db)
    result["sql_group_by"] = sql_aggregate(big)
    out = a.workdir / "out"
    out.mkdir(exist_ok=True)
    db_arg = ["--db", str(db)]
    result["summary"] = timed([*profkit, "summary", "a", *db_arg])
    result["diff"] = timed([*profkit, "diff", "a", "b", *db_arg])
    result["ranges_json"] = timed([*profkit, "ranges", "a", "--format", "json", *db_arg])
    result["report"] = timed([*profkit, "report", "a", "-o", str(out / "a.html"), *db_arg])
    result["report_vs"] = timed(
        [*profkit, "report", "a", "--vs", "b", "-o", str(out / "ab.html"), *db_arg]
    )
    result["sql_group_by_after"] = sql_aggregate(big)
    best = max(
        min(result["sql_group_by"]["kern_sum_s"], result["sql_group_by_after"]["kern_sum_s"]), 0.1
    )
    result["ratios_to_group_by"] = {
        k: round(result[k]["wall_s"] / best, 2)
        for k in ("summary", "diff", "ranges_json", "report", "report_vs")
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
