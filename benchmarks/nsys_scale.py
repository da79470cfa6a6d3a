"""Import a synthetic Nsight Systems capture of 2+ million kernels, made by replicating a real
one (tests/data/nsys/nsys_resnet18_train_amp.sqlite.gz: 2,102 kernels, 199 copies, 39 sets,
7,059 runtime calls, 2 NVTX ranges), and compare with a plain SQL aggregate over the same file.

    python benchmarks/nsys_scale.py [--kernels 2000000] [--workdir /tmp/nsys-scale] [--reuse] [--import-only]

Each copy shifts every timestamp by the capture's span and every correlation id by the
largest one, so launches, GPU work and ranges stay consistent. Prints one JSON object with
the figures that go in benchmarks/RESULTS.md (issue 12's targets, side by side in one run):
wall time and peak RSS of `profkit import` against a plain SQL GROUP BY over the same file;
the database's size against the export's; `profkit kernels --format json` against
`sqlite3 -json` of the same rows (both to /dev/null); `profkit ranges` and `profkit summary`.
The import runs with PROFKIT_TIMINGS=1: its stages' wall and CPU seconds are in
"import_stages". --reuse keeps a synthetic capture already in the workdir (a fresh database);
--import-only stops after the import and the GROUP BY beside it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "data" / "nsys" / "nsys_resnet18_train_amp.sqlite.gz"
GPU_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
)


def synthesize(out: Path, kernels: int) -> dict:
    out.write_bytes(gzip.decompress(SOURCE.read_bytes()))
    con = sqlite3.connect(out)
    base = con.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    copies = -(-kernels // base)
    t0 = time.monotonic()
    span, _ = replicate_gpu_work(con, copies)
    cols = [r[1] for r in con.execute("pragma table_info(NVTX_EVENTS)")]
    sel = ", ".join({"start": "start + :s", "end": "end + :s"}.get(c, c) for c in cols)
    con.execute("create temp table src as select * from NVTX_EVENTS where eventType = 59")
    for i in range(1, copies):
        con.execute(
            f"insert into NVTX_EVENTS ({', '.join(cols)}) select {sel} from src", {"s": i * span}
        )
    con.commit()
    n = con.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    ops = n + sum(con.execute(f"select count(*) from {t}").fetchone()[0] for t in GPU_TABLES[1:])
    con.close()
    return {
        "copies": copies,
        "kernels": n,
        "gpu_ops": ops,
        "ranges": 2 * copies,
        "file_mb": round(out.stat().st_size / 1e6),
        "synth_s": round(time.monotonic() - t0, 1),
    }


def replicate_gpu_work(con: sqlite3.Connection, copies: int) -> tuple[int, int]:
    """Append ``copies - 1`` copies of the export's GPU operations and runtime calls, each
    shifted by the capture's span in time and by the largest correlation id in correlation;
    returns (span, correlation shift), by which a caller shifts what else it copies."""
    lo = min(
        con.execute(f"select min(start) from {t}").fetchone()[0]
        for t in GPU_TABLES + ("CUPTI_ACTIVITY_KIND_RUNTIME",)
    )
    hi = max(
        con.execute(f"select max(end) from {t}").fetchone()[0]
        for t in GPU_TABLES + ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
    )
    span = hi - lo + 1000
    corr = (
        max(
            con.execute(f"select max(correlationId) from {t}").fetchone()[0]
            for t in GPU_TABLES + ("CUPTI_ACTIVITY_KIND_RUNTIME",)
        )
        + 1
    )
    for table in GPU_TABLES + ("CUPTI_ACTIVITY_KIND_RUNTIME",):
        cols = [r[1] for r in con.execute(f"pragma table_info({table})")]
        sel = ", ".join(
            {"start": "start + :s", "end": "end + :s", "correlationId": "correlationId + :c"}.get(
                c, c
            )
            for c in cols
        )
        con.execute(f"create temp table src as select * from {table}")
        for i in range(1, copies):
            con.execute(
                f"insert into {table} ({', '.join(cols)}) select {sel} from src",
                {"s": i * span, "c": i * corr},
            )
        con.execute("drop table src")
    return span, corr


def timed(
    argv: list[str], stdout=subprocess.DEVNULL, env: dict | None = None, cwd: Path | None = None
) -> dict:
    """Wall time, CPU time (user + system) and peak RSS of a command (output to /dev/null),
    through GNU time; with ``stages`` where the command printed PROFKIT_TIMINGS lines."""
    p = subprocess.run(
        ["/usr/bin/time", "-v", *argv],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )
    if p.returncode != 0:
        raise SystemExit(f"{argv} failed: {p.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):(\d+(?:\.\d+)?)", p.stderr)
    h, m, s = (float(x) if x else 0.0 for x in wall.groups())
    cpu = sum(
        float(re.search(rf"{k} time \(seconds\): ([\d.]+)", p.stderr).group(1))
        for k in ("User", "System")
    )
    out = {
        "wall_s": round(h * 3600 + m * 60 + s, 1),
        "cpu_s": round(cpu, 1),
        "peak_rss_mb": round(rss / 1024),
    }
    stages = re.findall(r"^profkit: (.+): ([\d.]+) s \(([\d.]+) s CPU\)$", p.stderr, re.M)
    if stages:
        out["stages"] = {label: {"wall_s": float(w), "cpu_s": float(c)} for label, w, c in stages}
    return out


def sql_aggregate(path: Path) -> dict:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    t0, c0 = time.monotonic(), time.process_time()
    rows = con.execute("""select s.value, count(*), sum(k.end - k.start) from CUPTI_ACTIVITY_KIND_KERNEL k
                          join StringIds s on s.id = k.demangledName group by k.demangledName""").fetchall()
    agg, agg_cpu = time.monotonic() - t0, time.process_time() - c0
    t0 = time.monotonic()
    joined = con.execute("""select count(*) from CUPTI_ACTIVITY_KIND_KERNEL k join CUPTI_ACTIVITY_KIND_RUNTIME r
                            on r.correlationId = k.correlationId""").fetchone()[0]
    join = time.monotonic() - t0
    return {
        "kern_sum_s": round(agg, 1),
        "kern_sum_cpu_s": round(agg_cpu, 1),
        "names": len(rows),
        "launch_join_s": round(join, 1),
        "joined": joined,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", type=int, default=2_000_000)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/nsys-scale"))
    ap.add_argument(
        "--reuse", action="store_true", help="keep the workdir's synthetic capture if there is one"
    )
    ap.add_argument(
        "--import-only", action="store_true", help="only the import and the GROUP BY beside it"
    )
    a = ap.parse_args()
    big, db = a.workdir / "synthetic.sqlite", a.workdir / "bench.db"
    result = {
        "machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
    }
    if a.reuse and big.exists():
        for old in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            old.unlink(missing_ok=True)
        shutil.rmtree(Path(f"{db}-locks"), ignore_errors=True)
        result["capture"] = {"reused": str(big)}
    else:
        shutil.rmtree(a.workdir, ignore_errors=True)
        a.workdir.mkdir(parents=True)
        result["capture"] = synthesize(big, a.kernels)
    result["sql_aggregate"] = sql_aggregate(big)
    profkit = [sys.executable, "-m", "profkit"]
    result["import"] = timed(
        [*profkit, "import", str(big), "--name", "big", "--db", str(db)],
        env={"PROFKIT_TIMINGS": "1"},
    )
    # the same file again, as warm as the import found it
    result["sql_aggregate_after"] = sql_aggregate(big)
    if a.import_only:
        best_sql = min(
            result["sql_aggregate"]["kern_sum_s"], result["sql_aggregate_after"]["kern_sum_s"]
        )
        result["ratios"] = {
            "import_vs_sql_group_by": round(result["import"]["wall_s"] / max(best_sql, 0.1), 1)
        }
        print(json.dumps(result, indent=2))
        return
    checkpoint(db)
    result["export_mb"] = round(big.stat().st_size / 1e6, 1)
    result["db_mb"] = round(db.stat().st_size / 1e6, 1)
    result["kernels_json"] = timed(
        [*profkit, "kernels", "big", "--format", "json", "--db", str(db)]
    )
    # The same rows as sqlite3's own JSON writer gives them (the kernels view, one run).
    result["sqlite3_json"] = timed(
        ["sqlite3", "-json", str(db), "select * from kernels where run_id = 1 order by launch_id"]
    )
    result["ranges_json"] = timed([*profkit, "ranges", "big", "--format", "json", "--db", str(db)])
    result["summary"] = timed([*profkit, "summary", "big", "--db", str(db)])
    best_sql = min(
        result["sql_aggregate"]["kern_sum_s"], result["sql_aggregate_after"]["kern_sum_s"]
    )
    result["ratios"] = {
        "import_vs_sql_group_by": round(result["import"]["wall_s"] / max(best_sql, 0.1), 1),
        "db_vs_export_size": round(result["db_mb"] / result["export_mb"], 2),
        "kernels_json_vs_sqlite3_json": round(
            result["kernels_json"]["wall_s"] / max(result["sqlite3_json"]["wall_s"], 0.1), 2
        ),
    }
    print(json.dumps(result, indent=2))


def checkpoint(db: Path) -> None:
    """Fold the WAL into the database file, so that its size is the database's."""
    con = sqlite3.connect(db)
    con.execute("pragma wal_checkpoint(truncate)")
    con.close()


if __name__ == "__main__":
    main()
