"""Hostile input, round two (issue 21, items 6, 7 and 8): real captures edited so that an
importer would store wrong numbers or do unbounded work. Each is refused in one line with the
database unchanged, or (ranges nested absurdly deep) imported in bounded space with a note."""

from __future__ import annotations

import csv
import gzip
import io
import json
import sqlite3
from pathlib import Path

import pytest

import profkit
from profkit.errors import BadExport
from profkit.parse import load
from profkit.parse.gzipped import MAX_RATIO, MIN_LIMIT
from profkit.parse.ranges import MAX_DEPTH

from .conftest import DATA, cli, cli_json, one_line_error
from .test_bad_inputs import (  # noqa: F401 (seeded: a fixture)
    NCU_CSV,
    NSYS,
    ncu_edit,
    ncu_rows,
    nsys_edit,
    seeded,
    unchanged,
    write_csv,
)

KINETO = DATA / "torch" / "kineto_resnet18_fp16.json.gz"
TENSOR = "sm__ops_path_tensor_src_fp16.sum"


def content(db: Path) -> str:
    """The database's whole content (every table's rows), as text: what an import left. One
    line is left out: the highest run id given so far (meta max_run_id), which a refused import
    may have raised (it had reserved an id, and ids are never given twice)."""
    con = sqlite3.connect(db)
    try:
        return "\n".join(
            line
            for line in con.iterdump()
            if not line.startswith("INSERT INTO \"meta\" VALUES('max_run_id'")
        )
    finally:
        con.close()


def refused(db: Path, path: Path, message: str) -> None:
    """One line naming the problem, non-zero exit, and the database as it was (all its content)."""
    before = content(db)
    one_line_error(cli("import", path, db=db), message)
    unchanged(db)
    assert content(db) == before


# ------------------------------------------------------------------ 6a: nsys rows listed twice
def test_nsys_repeated_launch_call_is_refused(seeded, tmp_path):
    path = nsys_edit(
        tmp_path,
        "insert into CUPTI_ACTIVITY_KIND_RUNTIME select * from CUPTI_ACTIVITY_KIND_RUNTIME "
        "where correlationId = (select correlationId from CUPTI_ACTIVITY_KIND_KERNEL limit 1) "
        "limit 1",
    )
    message = "CUPTI_ACTIVITY_KIND_RUNTIME lists the launch call with correlationId"
    refused(seeded, path, message)
    # the streamed reader (not only the SQL bulk path), as it reads
    with pytest.raises(BadExport, match=message):
        list(load(path).rows)


def test_nsys_duplicated_kernel_row_is_refused(seeded, tmp_path):
    path = nsys_edit(
        tmp_path,
        "insert into CUPTI_ACTIVITY_KIND_KERNEL select * from CUPTI_ACTIVITY_KIND_KERNEL "
        "where rowid = 5",
    )
    refused(seeded, path, "CUPTI_ACTIVITY_KIND_KERNEL lists the same operation twice (rows 5 and")
    # the streamed reader, as it reads
    with pytest.raises(BadExport, match="lists the same operation twice"):
        list(load(path).rows)


def test_nsys_cuda_graph_kernels_sharing_a_launch_still_import(tmp_path, diff_dir):
    """A CUDA graph's kernels share one correlationId: they are not duplicates."""
    db = profkit.open_db(tmp_path / "g.db")
    assert db.import_file(diff_dir / "r18_fp16_graphs_nsys.sqlite").kernel_count == 116


def test_nsys_import_counts_each_kernel_once(tmp_path):
    assert profkit.open_db(tmp_path / "n.db").import_file(NSYS).kernel_count == 913


# ------------------------------------------------------------------ 6c: nsys grid and block
@pytest.mark.parametrize(
    "column, value, message",
    [
        ("gridX", "'abc'", "gridX = 'abc', not an integer (row 3)"),
        ("blockY", "1.5", "blockY = 1.5, not an integer (row 3)"),
        ("gridZ", "-5", "gridZ = -5, not a whole number from 0 to 2^31 - 1 (row 3)"),
        ("blockX", str(2**40), f"blockX = {2**40}, not a whole number from 0 to 2^31 - 1 (row 3)"),
    ],
)
def test_nsys_bad_grid_or_block_is_refused(seeded, tmp_path, column, value, message):
    path = nsys_edit(
        tmp_path, f"update CUPTI_ACTIVITY_KIND_KERNEL set {column} = {value} where rowid = 3"
    )
    refused(seeded, path, f"CUPTI_ACTIVITY_KIND_KERNEL has {message}")
    # the streamed reader, as it reads
    with pytest.raises(BadExport, match="CUPTI_ACTIVITY_KIND_KERNEL has"):
        list(load(path).rows)


# ------------------------------------------------------------------ 6b: ncu counters
@pytest.mark.parametrize(
    "value, message",
    [
        ("abc", f"row 3: {TENSOR} is 'abc', not a number"),
        ("12 345", f"row 3: {TENSOR} is '12 345', not a number"),
        ("-5", f"row 3: {TENSOR} is '-5', not a finite non-negative number"),
        ("inf", f"row 3: {TENSOR} is 'inf', not a finite non-negative number"),
    ],
)
def test_ncu_counter_text_or_negative_is_refused(seeded, tmp_path, value, message):
    refused(seeded, ncu_edit(tmp_path, TENSOR, value), message)


def test_ncu_counter_blank_is_no_value(tmp_path):
    """ncu's own blanks ('', 'n/a') stay what they were: no value."""
    kernels = list(load(ncu_edit(tmp_path, TENSOR, "n/a")).rows)
    assert TENSOR not in kernels[0]["metrics"] and TENSOR in kernels[1]["metrics"]


def test_ncu_large_ids_and_counters_are_exact(tmp_path):
    rows = ncu_rows()
    big = 2**53 + 1
    rows[2][rows[0].index("ID")] = str(big)
    rows[2][rows[0].index(TENSOR)] = f"{2**60 + 1:,}"
    kernels = list(load(write_csv(tmp_path / "big.csv", rows)).rows)
    assert kernels[0]["launch_id"] == big
    assert kernels[0]["metrics"][TENSOR] == 2**60 + 1


def test_ncu_id_in_float_form_past_2_53_is_refused(seeded, tmp_path):
    refused(seeded, ncu_edit(tmp_path, "ID", "1e17"), "ID is '1e17', not written as a whole number")


def test_ncu_duplicate_id_names_the_row(seeded, tmp_path):
    rows = ncu_rows()
    rows[3][rows[0].index("ID")] = rows[2][rows[0].index("ID")]
    launch = rows[2][rows[0].index("ID")]
    refused(
        seeded,
        write_csv(tmp_path / "twice.csv", rows),
        f"lists the same kernel ID twice ({launch}, twice.csv row 4)",
    )


# ------------------------------------------------------------------ 7: a field past csv's limit
def test_ncu_long_field_is_read_up_to_the_bound(tmp_path):
    rows = ncu_rows()
    rows[2][rows[0].index("Kernel Name")] = "k" * (200 << 10)  # past csv's default 128 KiB
    kernels = list(load(write_csv(tmp_path / "long.csv", rows)).rows)
    assert len(kernels[0]["name"]) == 200 << 10


def test_ncu_field_past_the_bound_is_one_line(seeded, tmp_path):
    rows = ncu_rows()
    rows[2][rows[0].index("Kernel Name")] = "k" * ((16 << 20) + 1)
    refused(
        seeded,
        write_csv(tmp_path / "huge.csv", rows),
        "not readable as CSV (a field is longer than 16 MiB)",
    )


# ------------------------------------------------------------------ 6d: CSV output
def test_kernels_csv_quotes_carriage_returns(tmp_path):
    rows = ncu_rows()
    rows[2][rows[0].index("Kernel Name")] = "evil\rname"
    rows[3][rows[0].index("Kernel Name")] = 'evil\nname, "quoted"'
    db = tmp_path / "c.db"
    assert cli("import", write_csv(tmp_path / "cr.csv", rows), "--name", "cr", db=db).exit_code == 0
    r = cli("kernels", "cr", "-f", "csv", "--limit", "0", db=db)
    assert r.exit_code == 0, r.output
    records = list(csv.DictReader(io.StringIO(r.stdout, newline="")))
    assert len(records) == 162
    names = [x["name"] for x in records]
    assert "evil\rname" in names and 'evil\nname, "quoted"' in names
    # and a reader that splits lines first (awk, wc -l) sees one line per record too
    assert '"evil\rname"' in r.stdout


# ------------------------------------------------------------------ 8a: gzip bombs
def _bomb(path: Path, inner: bytes, repeat: bytes, size: int) -> Path:
    """A real capture's text followed by ``size`` bytes of one repeated filler: tiny gzipped."""
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(inner)
        chunk = repeat * ((1 << 20) // len(repeat))
        for _ in range(size // len(chunk)):
            f.write(chunk)
    return path


def test_ncu_csv_gzip_bomb_is_refused(seeded, tmp_path):
    text = gzip.decompress(NCU_CSV.read_bytes())
    path = _bomb(tmp_path / "bomb.csv.gz", text, b"," * 4095 + b"\n", MIN_LIMIT + (8 << 20))
    assert path.stat().st_size * MAX_RATIO < MIN_LIMIT  # the bound here is the floor
    refused(seeded, path, "bomb.csv.gz decompresses to more than")


def test_kineto_gzip_bomb_is_refused(seeded, tmp_path):
    text = gzip.decompress(KINETO.read_bytes())
    path = _bomb(tmp_path / "bomb.json.gz", text, b" " * 64, MIN_LIMIT + (8 << 20))
    refused(seeded, path, "bomb.json.gz decompresses to more than")


def test_nsys_gzip_bomb_is_refused_and_leaves_no_file(seeded, tmp_path):
    export = gzip.decompress(NSYS.read_bytes())
    path = _bomb(tmp_path / "bomb.sqlite.gz", export, b"\0" * 64, MIN_LIMIT + (8 << 20))
    refused(seeded, path, "bomb.sqlite.gz decompresses to more than")
    raw = tmp_path / "p-runs"
    assert not raw.exists() or not any(raw.rglob("*.sqlite"))


def test_gzipped_captures_within_the_bound_import(tmp_path):
    db = profkit.open_db(tmp_path / "ok.db")
    assert db.import_file(NCU_CSV).kernel_count == 162
    assert db.import_file(KINETO).kernel_count > 0
    assert db.import_file(NSYS).kernel_count == 913


# ------------------------------------------------------------------ 8b: ranges nested deep
def _nested(tmp: Path, n: int) -> Path:
    """The nsys export with ``n`` push/pop ranges nested inside its first iteration range,
    on the thread that launched its kernels."""
    return nsys_edit(
        tmp,
        f"""
        with recursive k(i) as (select 0 union all select i + 1 from k where i < {n - 1})
        insert into NVTX_EVENTS (start, end, eventType, text, globalTid, domainId)
        select r.start + 1 + k.i, r.end - 1 - k.i, 59, 'deep' || k.i, r.globalTid, 0
        from k, (select start, end, globalTid from NVTX_EVENTS where eventType = 59 order by start limit 1) r""",
    )


@pytest.mark.parametrize("n", [MAX_DEPTH + 10, 4000])
def test_deeply_nested_ranges_import_in_bounded_space(tmp_path, n):
    base = tmp_path / "base.db"
    assert cli("import", NSYS, "--name", "base", db=base).exit_code == 0
    db = tmp_path / "deep.db"
    r = cli("import", _nested(tmp_path, n), "--name", "deep", db=db)
    assert r.exit_code == 0, r.output
    assert cli_json("runs", db=db)[0]["kernel_count"] == 913
    ranges = cli_json("ranges", "deep", db=db)
    deep = [x for x in ranges if x["name"].startswith("deep")]
    # the iteration range is depth 0; depths 1 .. MAX_DEPTH - 1 kept
    assert len(deep) == MAX_DEPTH - 1
    assert max(x["depth"] for x in deep) == MAX_DEPTH - 1
    assert {"name", "domain", "path", "depth", "kernels"} <= set(deep[-1])
    assert deep[-1]["path"].count("/") == MAX_DEPTH - 1
    assert len(ranges) == len(cli_json("ranges", "base", db=base)) + MAX_DEPTH - 1
    info = profkit.open_db(db).run("deep").info
    assert any(
        f"{n - MAX_DEPTH + 1} ranges nested more than {MAX_DEPTH} deep were left out" in note
        for note in info["notes"]
    )
    # Bounded: the database grows by what 127 nested paths take, not n^2 (4000: was 145 MB).
    assert db.stat().st_size < base.stat().st_size + (2 << 20)


def test_deeply_nested_ranges_streamed_reader(tmp_path):
    capture = load(_nested(tmp_path, 1000))
    rows = list(capture.rows)
    assert len([r for r in rows if r["kind"] == "kernel"]) == 913
    assert len([r for r in capture.ranges if r["name"].startswith("deep")]) == MAX_DEPTH - 1
    assert any("left out" in n for n in capture.notes)


def test_deeply_nested_kineto_ranges(tmp_path):
    trace = json.loads(gzip.decompress(KINETO.read_bytes()))
    events = trace["traceEvents"]
    outer = next(e for e in events if e.get("cat") == "user_annotation")
    for i in range(MAX_DEPTH + 50):
        events.append(
            {
                **outer,
                "name": f"deep{i}",
                "ts": outer["ts"] + (i + 1) * 1e-3,
                "dur": outer["dur"] - 2 * (i + 1) * 1e-3,
            }
        )
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(trace))
    capture = load(path)
    list(capture.rows)
    assert max(r["depth"] for r in capture.ranges) <= MAX_DEPTH
    assert any("left out" in n for n in capture.notes)
