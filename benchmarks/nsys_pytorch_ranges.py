"""What PyTorch's own NVTX annotation costs an nsys import: the same capture imported with its
annotation ranges and without them, side by side (issue 36, item 5: at most 2x).

    python benchmarks/nsys_pytorch_ranges.py [--copies 1,5,20] [--runs 3] [--workdir /tmp/nsys-pytorch-ranges]

The imports run this checkout's profkit, or the one PYTHONPATH names (another checkout's, to
compare commits); the capture without annotation is made with this checkout's
``profkit.parse.torch_nvtx``.

The capture is tests/data/nsys/autograd_shapes.sqlite.gz (20 steps of
tests/data/programs/own/amp_train.py under ``nsys profile --pytorch=autograd-shapes-nvtx`` on
an H100: 1,278 kernels, 9,259 ranges), made longer by repeating it ``--copies`` times: every
copy's GPU operations and runtime calls shifted by the capture's span in time and by the
largest correlation id (``nsys_scale.replicate_gpu_work``), its ranges by the span, and the
op_ids in the ranges' names (``op_id = N`` and ``input_op_ids``) by the largest op_id, so that,
as in a longer real capture, no range name repeats. The capture without annotation is the same
file less every range ``profkit.parse.torch_nvtx`` reads as PyTorch's (all of this capture's).

Each variant is imported ``--runs`` times (``profkit import`` into a fresh database, alternating
the two), and the fastest run of each is kept. Prints one JSON object: per number of copies,
the kernels and ranges, the wall and CPU seconds and peak RSS of each import, and the ratio
of the annotated import's wall time to the bare one's.
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
import sys
import time
from pathlib import Path

from nsys_scale import replicate_gpu_work, timed

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "data" / "nsys" / "autograd_shapes.sqlite.gz"
_OP_ID = re.compile(r"(op_id = |\()(\d+)")


def annotated(out: Path, copies: int) -> dict[str, int]:
    """The capture repeated ``copies`` times, with its annotation ranges (see above)."""
    out.write_bytes(gzip.decompress(SOURCE.read_bytes()))
    con = sqlite3.connect(out)
    span, _ = replicate_gpu_work(con, copies)
    cols = [r[1] for r in con.execute("pragma table_info(NVTX_EVENTS)")]
    rows = con.execute(f"select {', '.join(cols)} from NVTX_EVENTS").fetchall()
    if con.execute(
        "select count(*) from NVTX_EVENTS where text is null and textId is not null"
    ).fetchone()[0]:
        raise SystemExit(
            f"{SOURCE.name}: range names in StringIds; this script shifts inline names only"
        )
    top = max(
        (
            int(m.group(2))
            for r in rows
            if r[cols.index("text")]
            for m in _OP_ID.finditer(r[cols.index("text")])
        ),
        default=0,
    )
    at = {c: cols.index(c) for c in ("start", "end", "text")}

    def shifted(row: tuple, i: int) -> tuple:
        row = list(row)
        for c in ("start", "end"):
            if row[at[c]] is not None:
                row[at[c]] += i * span
        if row[at["text"]]:  # op 0 is "no op" in input_op_ids: (0,-1)
            row[at["text"]] = _OP_ID.sub(
                lambda m: m.group(1) + str(int(m.group(2)) and int(m.group(2)) + i * top),
                row[at["text"]],
            )
        return tuple(row)

    for i in range(1, copies):
        con.executemany(
            f"insert into NVTX_EVENTS ({', '.join(cols)}) values ({', '.join('?' * len(cols))})",
            (shifted(r, i) for r in rows),
        )
    con.commit()
    counts = {
        "kernels": con.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0],
        "ranges": con.execute("select count(*) from NVTX_EVENTS").fetchone()[0],
    }
    con.close()
    return counts


def without_annotation(src: Path, out: Path) -> int:
    """``src`` less the ranges PyTorch's annotation wrote; returns how many ranges are left."""
    sys.path.insert(0, str(ROOT))
    from profkit.parse.torch_nvtx import read_torch_range

    shutil.copy(src, out)
    con = sqlite3.connect(out)
    gone = [
        (i,)
        for i, text in con.execute("select rowid, text from NVTX_EVENTS")
        if text and read_torch_range(text) is not None
    ]
    con.executemany("delete from NVTX_EVENTS where rowid = ?", gone)
    con.commit()
    con.execute("vacuum")
    left = con.execute("select count(*) from NVTX_EVENTS").fetchone()[0]
    con.close()
    return left


def imported(capture: Path, workdir: Path) -> dict:
    db = workdir / "bench.db"
    for old in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        old.unlink(missing_ok=True)
    shutil.rmtree(Path(f"{db}-locks"), ignore_errors=True)
    shutil.rmtree(workdir / "bench-runs", ignore_errors=True)
    t0 = time.monotonic()
    # In the workdir: ``python -m`` puts its folder first on the path, and PYTHONPATH (made
    # absolute; this checkout where unset) names the tree measured.
    path = [
        os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
    ] or [str(ROOT)]
    out = timed(
        [sys.executable, "-m", "profkit", "import", str(capture), "--name", "x", "--db", str(db)],
        env={"PROFKIT_TIMINGS": "1", "PYTHONPATH": os.pathsep.join(path)},
        cwd=workdir,
    )
    out["wall_s"] = round(time.monotonic() - t0, 2)  # timed's own is to 0.1 s
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--copies", default="1,5,20", help="how many times to repeat the capture, comma separated"
    )
    ap.add_argument(
        "--runs", type=int, default=3, help="imports of each variant (the fastest is kept)"
    )
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/nsys-pytorch-ranges"))
    a = ap.parse_args()
    result: dict = {
        "machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "source": str(SOURCE.relative_to(ROOT)),
        "captures": [],
    }
    for copies in (int(c) for c in a.copies.split(",")):
        shutil.rmtree(a.workdir, ignore_errors=True)
        a.workdir.mkdir(parents=True)
        with_, bare = a.workdir / "annotated.sqlite", a.workdir / "bare.sqlite"
        entry: dict = {"copies": copies, **annotated(with_, copies)}
        entry["ranges_without_annotation"] = without_annotation(with_, bare)
        runs: dict[str, list[dict]] = {"annotated": [], "bare": []}
        for _ in range(a.runs):
            for name, path in (("bare", bare), ("annotated", with_)):
                runs[name].append(imported(path, a.workdir))
        for name, rs in runs.items():
            best = min(rs, key=lambda r: r["wall_s"])
            entry[name] = {
                "wall_s": best["wall_s"],
                "cpu_s": best["cpu_s"],
                "peak_rss_mb": best["peak_rss_mb"],
                "walls_s": [r["wall_s"] for r in rs],
                "stages_over_0.05_s": {
                    k: v["wall_s"] for k, v in best.get("stages", {}).items() if v["wall_s"] >= 0.05
                },
            }
        entry["ratio"] = round(entry["annotated"]["wall_s"] / max(entry["bare"]["wall_s"], 0.01), 2)
        result["captures"].append(entry)
        print(json.dumps(entry), file=sys.stderr)
    shutil.rmtree(a.workdir, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
