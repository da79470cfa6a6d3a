"""Time and peak memory of `profkit import` on hostile captures (issue 21, item 8), each a
real capture from tests/data mutated: an nsys export with N push/pop ranges nested inside its
first iteration range, and gzip bombs (an ncu CSV / a torch trace followed by a highly
compressible filler, gzipped to about --bomb-mb MB).

    PYTHONPATH=. python3 benchmarks/hostile_scale.py [--nested 4000,20000] [--bomb-mb 4.7]

Each import runs in a process of its own; its wall time, peak RSS (ru_maxrss), exit status
and the database's size are printed, one line per case.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
NSYS = DATA / "nsys" / "nsys_resnet18_fp16.sqlite.gz"
NCU_CSV = DATA / "ncu" / "resnet18_fp16_eager.raw.csv.gz"
KINETO = DATA / "torch" / "kineto_resnet18_fp16.json.gz"


def nested(folder: Path, n: int) -> Path:
    path = folder / f"nested{n}.sqlite"
    path.write_bytes(gzip.decompress(NSYS.read_bytes()))
    con = sqlite3.connect(path)
    con.execute(f"""
        with recursive k(i) as (select 0 union all select i + 1 from k where i < {n - 1})
        insert into NVTX_EVENTS (start, end, eventType, text, globalTid, domainId)
        select r.start + 1 + k.i, r.end - 1 - k.i, 59, 'deep' || k.i, r.globalTid, 0
        from k, (select start, end, globalTid from NVTX_EVENTS where eventType = 59 order by start limit 1) r""")
    con.commit()
    con.close()
    return path


def bomb(folder: Path, name: str, source: Path, filler: bytes, mb: float) -> Path:
    path = folder / name
    chunk = filler * ((1 << 20) // len(filler))
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9) as f:
        f.write(gzip.decompress(source.read_bytes()))
        while raw.tell() < mb * 1e6:
            for _ in range(64):
                f.write(chunk)
    return path


def run(label: str, path: Path, folder: Path) -> None:
    db = folder / f"{label}.db"
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "profkit", "import", str(path), "--db", str(db)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    err = proc.stderr.read().decode().strip().splitlines() if proc.stderr else []
    size = sum(f.stat().st_size for f in folder.glob(f"{label}.db*"))
    print(
        f"{label:14} input {path.stat().st_size / 1e6:7.2f} MB  exit {os.waitstatus_to_exitcode(status)}  "
        f"{wall:6.1f} s  peak RSS {usage.ru_maxrss / 1024:7.0f} MiB  db {size / 1e6:6.2f} MB  "
        f"{(err[-1] if err else '')[:110]}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nested", default="4000,20000")
    ap.add_argument("--bomb-mb", type=float, default=4.7)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="profkit-hostile-"))
    try:
        run("baseline", NSYS, folder)
        for n in (int(x) for x in args.nested.split(",") if x):
            run(f"nested{n}", nested(folder, n), folder)
        run(
            "csv-bomb",
            bomb(folder, "bomb.csv.gz", NCU_CSV, b"," * 4095 + b"\n", args.bomb_mb),
            folder,
        )
        run("json-bomb", bomb(folder, "bomb.json.gz", KINETO, b" " * 4096, args.bomb_mb), folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
