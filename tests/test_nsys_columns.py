"""The nsys bulk import's two paths give one stored result (issue 39): the columnar path
(``store.nsys_columns``: the export's tables read as Arrow columns, joined, numbered, placed and
grouped with numpy and pandas) and the SQL path it stands in for (``store.nsys_import`` with
``columns=None``). Each committed export, and variants made from them by SQL edits (operations
with no launch call, NULL names and ids, ties in launch order, a launch call listed twice,
values that are not integers, impossible durations, no launch calls at all), is imported twice
into fresh databases, once as the import runs (columnar, spied on) and once with the columnar
path refused (``nsys_columns.read`` returning None, the SQL path's cue); the runs' kernel rows,
aggregates, ranges, host syncs, run records and ``summary``/``ranges`` JSON must be equal, or
both imports refused with the same one-line error and nothing stored."""

from __future__ import annotations

import gzip
import json
import os
import re
import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from profkit.parse.nsys_export import NULLABLE_COLUMNS
from profkit.store import nsys_columns

from .conftest import DATA, cli

K = "CUPTI_ACTIVITY_KIND_KERNEL"
MC = "CUPTI_ACTIVITY_KIND_MEMCPY"
MS = "CUPTI_ACTIVITY_KIND_MEMSET"
RT = "CUPTI_ACTIVITY_KIND_RUNTIME"
READ = nsys_columns.read  # the real one, whatever a test patches in after

R18 = "nsys/nsys_resnet18_fp16.sqlite.gz"  # inference: kernels, copies, sets, one process
RUN18 = "nsys/nsys_run_resnet18_train_amp.sqlite.gz"  # profkit run: a capture range
SHAPES = "nsys/autograd_shapes.sqlite.gz"  # PyTorch's operator ranges (shapes): operator calls
GRAPHS = "diff/r18_fp16_graphs_nsys.sqlite.gz"  # CUDA graphs: kernels sharing one launch
DDP = "ddp/nsys_resnet50_ddp_train_amp.sqlite.gz"  # two processes (ranks) in one export
SYNC = "where/host_sync_train-fp32-eager-nsys/report.sqlite.gz"  # profkit's ranges, host syncs
GPT2 = "where/hf_gpt2_train-amp-eager-nsys/report.sqlite.gz"  # operator ranges (states)
COMPILED = "catalog/resnet18-bf16-compile-nsys/report.sqlite.gz"  # no MEMCPY table
EXPORTS = [R18, RUN18, SHAPES, GRAPHS, DDP, SYNC, GPT2, COMPILED]

# The run record's columns that differ between two imports of one file (when, who, where).
VOLATILE_RUN_COLUMNS = {"id", "started_at", "finished_at", "owner", "folder", "profiled_wall_s"}


@pytest.fixture(autouse=True)
def _every_export_read_as_columns(monkeypatch):
    """The columnar path is taken for exports of 4 MB or more; here for every export."""
    monkeypatch.setattr(nsys_columns, "MIN_EXPORT_BYTES", 0)


# ------------------------------------------------------------------ the edits
def launch_of(table: str, rowid: int) -> str:
    """SQL for the correlationId of ``table``'s row ``rowid``."""
    return f"(select correlationId from {table} where rowid = {rowid})"


def nullable(table: str, *columns: str) -> Callable[[sqlite3.Connection], None]:
    """An edit: ``columns`` of ``table`` no longer NOT NULL (nsys 2025.3 declares names, devices,
    streams and copy kinds NOT NULL; the reader takes NULL there, as other versions write it)."""

    def edit(con: sqlite3.Connection) -> None:
        (sql,) = con.execute("select sql from sqlite_master where name = ?", [table]).fetchone()
        for c in columns:
            sql, n = re.subn(rf"(\n\s*{c}\s+INTEGER)\s+NOT NULL", r"\1", sql)
            assert n == 1, (table, c)
        (version,) = con.execute("pragma schema_version").fetchone()
        con.execute("pragma writable_schema = on")
        con.execute("update sqlite_master set sql = ? where name = ?", [sql, table])
        con.execute(f"pragma schema_version = {version + 1}")
        con.execute("pragma writable_schema = off")

    return edit


# Every column the reader takes NULL in (nsys_export.NULLABLE_COLUMNS) made nullable.
ALL_NULLABLE = tuple(nullable(t, *cs) for t, cs in NULLABLE_COLUMNS.items())

# Runtime rows whose correlationId some operations use (one process per export here).
UNLAUNCH = (
    f"delete from {RT} where correlationId in (select correlationId from {K} where rowid % 7 = 3 "
    f"union select correlationId from {K} where rowid between 20 and 24)"
)
UNLAUNCH_COPIES = (
    f"delete from {RT} where correlationId in (select correlationId from {MC} where rowid % 5 = 1 "
    f"union select correlationId from {MS} where rowid = 1)"
)
# The runtime calls that blocked the host (the host syncs, read before the bulk import).
SYNC_CALL = "nameId in (select id from StringIds where value like 'cu%Synchronize%' or value like 'cu%Memcpy%')"
NO_SYNCS = (
    f"delete from {RT} where nameId in (select id from StringIds where value like "
    "'cu%Synchronize%' or value like 'cu%Memcpy%')"
)
# Launch calls moved onto the start, or the end, of the latest NVTX push/pop range of their
# thread (a state's first instant; an operator call's first, and the instant after its last).
AT_RANGE_EDGES = tuple(
    f"update {RT} set start = coalesce((select max(n.{edge}) from NVTX_EVENTS n where "
    f"n.globalTid = {RT}.globalTid and n.eventType = 59 and n.{edge} <= {RT}.start), start) "
    f"where correlationId in (select correlationId from {K} where rowid % 3 = {i})"
    for i, edge in enumerate(("start", "end"))
)
# The rows reversed in each GPU table: its rowid order (the union's, ties' last key) no longer
# the order of the operations' starts.
REVERSED = tuple(
    s
    for t in (K, MC, MS)
    for s in (
        f"create temp table r_{t} as select * from {t} order by rowid desc",
        f"delete from {t}",
        f"insert into {t} select * from temp.r_{t}",
    )
)

# name: (export, edits, expected). expected: "columnar" (the columnar path gives the rows),
# "fallback" (it returns None, the SQL path imports), or ("error", words of the one line).
Edit = str | Callable[[sqlite3.Connection], None]
CASES: dict[str, tuple[str, tuple[Edit, ...], Any]] = {
    # 1. operations with no launch call
    "no launch call": (R18, (UNLAUNCH, UNLAUNCH_COPIES), "columnar"),
    "no launch call, operator calls": (SHAPES, (UNLAUNCH, UNLAUNCH_COPIES), "columnar"),
    "no launch call, ranges and syncs": (SYNC, (UNLAUNCH, UNLAUNCH_COPIES), "columnar"),
    "no launch call, graphs": (GRAPHS, (f"delete from {RT} where rowid % 2 = 0",), "columnar"),
    "launch call in another process": (
        DDP,
        (f"update {K} set globalPid = globalPid + {1 << 24} where rowid % 11 = 0",),
        "columnar",
    ),
    "a runtime call copied into another process": (
        R18,
        (
            f"create temp table t as select * from {RT} where correlationId = {launch_of(K, 10)}",
            f"update temp.t set globalTid = globalTid + {1 << 24}",
            f"insert into {RT} select * from temp.t",
        ),
        "columnar",
    ),
    # 2. NULL names, devices, streams, copy kinds
    "null names and copy ids": (
        R18,
        (
            *ALL_NULLABLE,
            f"update {K} set demangledName = null where rowid in (5, 6, 300)",
            f"update {K} set shortName = null where rowid in (6, 7, 301)",
            f"update {MC} set deviceId = null where rowid = 2",
            f"update {MC} set streamId = null where rowid in (3, 4)",
            f"update {MC} set copyKind = null where rowid in (4, 5)",
            f"update {MS} set deviceId = null, streamId = null where rowid = 1",
        ),
        "columnar",
    ),
    "null names in the tables' first rows": (
        R18,
        (
            *ALL_NULLABLE,
            f"update {K} set demangledName = null, shortName = null where rowid in (1, 2)",
            f"update {MC} set deviceId = null, streamId = null, copyKind = null where rowid = 1",
            f"update {MS} set deviceId = null, streamId = null where rowid = 1",
        ),
        "columnar",
    ),
    "null in every row of a column": (
        R18,
        (
            nullable(K, "shortName"),
            nullable(MC, "deviceId", "copyKind"),
            nullable(MS, "streamId"),
            f"update {K} set shortName = null",
            f"update {MC} set deviceId = null, copyKind = null",
            f"update {MS} set streamId = null",
        ),
        "columnar",
    ),
    # 3. ties in launch order: operations sharing one correlationId and launch
    "kernels sharing a launch": (
        R18,
        (
            f"update {K} set correlationId = {launch_of(K, 300)} where rowid in (40, 120, 200, 299, 600)",
            f"update {MC} set correlationId = {launch_of(K, 300)} where rowid = 10",
            f"update {MS} set correlationId = {launch_of(K, 300)} where rowid = 2",
        ),
        "columnar",
    ),
    "kernels sharing a launch, rows reversed": (
        R18,
        (
            f"update {K} set correlationId = {launch_of(K, 300)} where rowid in (40, 120, 200, 299, 600)",
            *REVERSED,
        ),
        "columnar",
    ),
    "graphs, rows reversed": (GRAPHS, REVERSED[:3], "columnar"),
    "kernels sharing a launch in operator calls": (
        SHAPES,
        (
            f"update {K} set correlationId = {launch_of(K, 700)} where rowid in (100, 400, 699, 900)",
            *REVERSED,
        ),
        "columnar",
    ),
    "kernels sharing a launch with no call": (
        R18,
        (
            f"update {K} set correlationId = {launch_of(K, 300)} where rowid in (40, 120, 200)",
            f"delete from {RT} where correlationId = {launch_of(K, 300)}",
        ),
        "columnar",
    ),
    "launches at range edges, operator calls": (SHAPES, AT_RANGE_EDGES, "columnar"),
    "launches at range edges, states": (SYNC, AT_RANGE_EDGES, "columnar"),
    "launches at range edges, two processes": (DDP, AT_RANGE_EDGES, "columnar"),
    # correlation ids the columnar key does not hold: left to the SQL path
    "correlation ids past 2^40": (
        R18,
        (
            f"update {RT} set correlationId = correlationId + {1 << 40} where correlationId in "
            f"(select correlationId from {K} where rowid between 10 and 12)",
            f"update {K} set correlationId = correlationId + {1 << 40} where rowid between 10 and 12",
        ),
        "fallback",
    ),
    "negative correlation ids": (
        R18,
        (
            f"update {RT} set correlationId = -correlationId where correlationId in "
            f"(select correlationId from {K} where rowid between 10 and 12)",
            f"update {K} set correlationId = -correlationId where rowid between 10 and 12",
        ),
        "fallback",
    ),
    "no copies or sets": (R18, (f"delete from {MC}", f"delete from {MS}"), "columnar"),
    # 4. a launch call listed twice
    "launch call twice": (
        R18,
        (f"insert into {RT} select * from {RT} where correlationId = {launch_of(K, 10)}",),
        ("error", f"{RT} lists the launch call with correlationId"),
    ),
    "graph launch call twice": (
        GRAPHS,
        (
            f"insert into {RT} select * from {RT} where correlationId = "
            f"(select correlationId from {K} group by correlationId order by count(*) desc limit 1)",
        ),
        ("error", f"{RT} lists the launch call with correlationId"),
    ),
    # 5. values that are not integers
    "kernel start real": (
        R18,
        (f"update {K} set start = start + 0.5 where rowid = 4",),
        ("error", f"{K} has start = "),
    ),
    "kernel correlationId text": (
        R18,
        (f"update {K} set correlationId = 'x' where rowid = 4",),
        ("error", f"{K} has correlationId = 'x', not an integer (row 4)"),
    ),
    "kernel correlationId text, last row": (
        R18,
        (f"update {K} set correlationId = 'x' where rowid = (select max(rowid) from {K})",),
        ("error", f"{K} has correlationId = 'x', not an integer"),
    ),
    "runtime start real on a launch": (
        R18,
        (f"update {RT} set start = start + 0.5 where correlationId = {launch_of(K, 4)}",),
        ("error", f"{RT} has start = "),
    ),
    "runtime correlationId text": (
        R18,
        (f"update {RT} set correlationId = 'x' where correlationId = {launch_of(K, 4)}",),
        ("error", f"{RT} has correlationId = 'x', not an integer"),
    ),
    "runtime end text": (
        R18,
        (f"update {RT} set end = 'late' where correlationId = {launch_of(K, 4)}",),
        ("error", f"{RT} has end = 'late', not an integer"),
    ),
    "memcpy copyKind real": (
        R18,
        (f"update {MC} set copyKind = 1.5 where rowid = 2",),
        ("error", f"{MC} has copyKind = 1.5, not an integer (row 2)"),
    ),
    "kernel gridX too large": (
        R18,
        (f"update {K} set gridX = {2**31} where rowid = 4",),
        ("error", f"gridX = {2**31}, not a whole number from 0 to 2^31 - 1 (row 4)"),
    ),
    "kernel blockY 2^32 + 5": (  # 5 in 32 bits
        R18,
        (f"update {K} set blockY = {2**32 + 5} where rowid = 4",),
        ("error", f"blockY = {2**32 + 5}, not a whole number from 0 to 2^31 - 1 (row 4)"),
    ),
    "memset deviceId negative": (
        R18,
        (f"update {MS} set deviceId = -3 where rowid = 1",),
        ("error", f"{MS} has deviceId = -3, a negative id (row 1)"),
    ),
    "kernel correlationId null": (
        R18,
        (f"update {K} set correlationId = null where rowid = 4",),
        ("error", f"{K} has correlationId = None, not an integer (row 4)"),
    ),
    "kernel globalPid null": (  # no host syncs: they would read globalPid first
        R18,
        (NO_SYNCS, f"update {K} set globalPid = null where rowid = 4"),
        ("error", f"{K} has globalPid = None, not an integer (row 4)"),
    ),
    "runtime correlationId null": (
        R18,
        (f"update {RT} set correlationId = null where correlationId = {launch_of(K, 4)}",),
        ("error", f"{RT} has correlationId = None, not an integer"),
    ),
    "runtime globalTid null": (
        R18,
        (f"update {RT} set globalTid = null where correlationId = {launch_of(K, 4)}",),
        ("error", f"{RT} has globalTid = None, not an integer"),
    ),
    # 6. impossible durations
    "kernel ends before it starts": (
        R18,
        (f"update {K} set end = start - 1 where rowid = 4",),
        ("error", "ends before it starts"),
    ),
    "memcpy ends before it starts": (
        R18,
        (f"update {MC} set end = start - 5 where rowid = 3",),
        ("error", "ends before it starts"),
    ),
    # a duration past 2^63 - 1 ns (SQLite's end - start goes on in floating point, numpy's
    # wraps round to a negative one)
    "kernel lasts 2^63 ns": (
        R18,
        (f"update {K} set start = -1, end = {2**63 - 1} where rowid = 4",),
        ("error", "more than a day: not a real duration"),
    ),
    "kernel lasts 2^63 ns, from -2^62": (
        R18,
        (f"update {K} set start = {-(2**62)}, end = {2**62} where rowid = 4",),
        ("error", "more than a day: not a real duration"),
    ),
    "kernel lasts a day": (
        R18,
        (f"update {K} set end = start + {86_400 * 10**9} where rowid = 4",),
        "columnar",
    ),
    "kernel lasts more than a day": (
        R18,
        (f"update {K} set end = start + {86_400 * 10**9 + 1} where rowid = 4",),
        ("error", "more than a day: not a real duration"),
    ),
    # 7. no launch calls at all
    "runtime table empty": (R18, (f"delete from {RT}",), "columnar"),
    # copies tied in launch order (one launch call), in a table SQLite reads in another order
    # than its rowids': through an index holding every column read, or with a column named
    # rowid hiding them (read whole then, not in ranges of rowids)
    "copies read through a covering index": (
        R18,
        (
            f"update {MC} set correlationId = {launch_of(K, 300)} where rowid between 10 and 20",
            f"create index mc_cover on {MC} (end desc, start, correlationId, globalPid, deviceId, "
            "streamId, copyKind)",
        ),
        "columnar",
    ),
    "copies with a column named rowid": (
        R18,
        (
            f"update {MC} set correlationId = {launch_of(K, 300)} where rowid between 10 and 20",
            f"update {MC} set correlationId = {launch_of(K, 300)} where rowid in (60, 100)",
            f"alter table {MC} add column rowid integer",
            f"update {MC} set rowid = 124 - oid",
        ),
        "columnar",
    ),
    # the blocking calls, found by a reader beside the columns' readers (in pieces: see
    # test_read_in_pieces_on_many_threads), by the SQL path's own statement: a name of another
    # type than an integer is no blocking call's there either
    "blocking calls, as captured": (SYNC, (), "columnar"),
    "a blocking call's name text": (
        SYNC,
        (
            f"update {RT} set nameId = 'x' where rowid = (select max(rowid) from {RT} where {SYNC_CALL})",
        ),
        "columnar",
    ),
    "runtime table empty, operator calls": (SHAPES, (f"delete from {RT}",), "columnar"),
    # an operation listed twice (the columnar path leaves the check to the SQL path)
    "kernel twice": (
        R18,
        (f"insert into {K} select * from {K} where rowid = 5",),
        ("error", f"{K} lists the same operation twice (rows 5 and"),
    ),
    "graph kernel twice": (
        GRAPHS,
        (
            f"insert into {K} select * from {K} where rowid = (select rowid from {K} where "
            f"correlationId in (select correlationId from {K} group by correlationId "
            "having count(*) > 3) order by rowid limit 1 offset 2)",
        ),
        ("error", f"{K} lists the same operation twice (rows"),
    ),
    # neighbours at one launch start that are no repeat (the columnar path cannot tell: the
    # SQL path checks, and imports)
    "two kernels with no launch call at one start": (
        R18,
        (
            f"delete from {RT} where correlationId in ({launch_of(K, 40)}, {launch_of(K, 300)})",
            *(
                f"update {K} set {c} = (select {c} from {K} where rowid = 300) where rowid = 40"
                for c in ("start", "end", "streamId")
            ),
        ),
        "fallback",
    ),
    "two launch calls at one start, their kernels too": (
        R18,
        (
            f"update {RT} set start = (select start from {RT} where correlationId = "
            f"{launch_of(K, 300)}) where correlationId = {launch_of(K, 40)}",
            *(
                f"update {K} set {c} = (select {c} from {K} where rowid = 300) where rowid = 40"
                for c in ("start", "end", "streamId")
            ),
        ),
        "fallback",
    ),
}


def unpacked(folder: Path, export: str, *edits: Edit) -> Path:
    """A committed export, decompressed into ``folder``, with ``edits`` made on it (SQL, or a
    function of a connection), each on a connection of its own."""
    path = folder / "export.sqlite"
    path.write_bytes(gzip.decompress((DATA / export).read_bytes()))
    con = sqlite3.connect(path)
    for q in edits:
        if callable(q):
            con.commit()
            con.close()
            con = sqlite3.connect(path)
            q(con)
            con.commit()
            con.close()
            con = sqlite3.connect(path)
        else:
            con.execute(q)
    con.commit()
    con.close()
    return path


# ------------------------------------------------------------------ the two imports
class Imported(dict):
    """What an import gave: ``read`` (what ``nsys_columns.read`` returned, per call), ``exit``,
    ``output`` (its one line: the summary, or the error) and ``stored``."""

    def __repr__(self) -> str:
        read = [None if r is None else f"{len(r)} operations" for r in self["read"]]
        return f"<exit {self['exit']}: {self['output']!r}; read gave {read}>"


def imported(folder: Path, export: Path, monkeypatch, columnar: bool) -> Imported:
    """``profkit import`` of ``export`` into a fresh database in ``folder``; the columnar path
    taken as the import takes it (``columnar``), or refused. Returns what was stored (or the
    error) and what ``nsys_columns.read`` gave."""
    folder.mkdir()
    got: list[Any] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        ops = READ(*args, **kwargs) if columnar else None
        got.append(ops)
        return ops

    monkeypatch.setattr(nsys_columns, "read", spy)
    db = folder / "p.db"
    r = cli("import", export, "--name", "run", db=db)
    monkeypatch.setattr(nsys_columns, "read", READ)
    out = Imported(read=got, exit=r.exit_code, stderr=r.stderr)
    out["output"] = (r.stderr or r.stdout).strip().replace(str(export), "EXPORT")
    out["stored"] = stored(db, with_json=r.exit_code == 0)
    return out


def stored(db: Path, with_json: bool) -> dict[str, tuple[tuple[str, ...], list[tuple]]]:
    """Each table's rows of the database's one run (by name, ids replaced by their texts), as
    (columns, rows): the kernels view in launch order, the aggregates, ranges, host syncs, the
    run's record; and ``summary``/``ranges`` JSON."""
    con = sqlite3.connect(db)
    try:
        runs = con.execute("select count(*) from runs").fetchone()[0]
        if not with_json:
            return {"runs": (("count",), [(runs,)])}
        (run_id,) = con.execute("select id from runs where name = 'run'").fetchone()

        def table(sql: str, order: str | None = None) -> tuple[tuple[str, ...], list[tuple]]:
            cur = con.execute(sql, [run_id])
            cols = tuple(d[0] for d in cur.description)
            rows = cur.fetchall()
            return cols, rows if order else sorted(rows, key=repr)

        def texts(t: str) -> str:
            """``t``'s rows of the run, each ``*_id`` column as its text."""
            cols = [c[1] for c in con.execute(f"pragma table_info({t})")]
            sel = ", ".join(
                f"(select text from strings where id = t.{c}) as {c[:-3]}"
                if c.endswith("_id") and c != "run_id"
                else f"t.{c}"
                for c in cols
            )
            return f"select {sel} from {t} t where run_id = ?"

        out = {
            "kernels": table("select * from kernels where run_id = ? order by launch_id", "id"),
            "kernel_aggs": table(texts("kernel_aggs")),
            "path_aggs": table(texts("path_aggs")),
            "ranges": table(texts("ranges") + " order by range_id", "id"),
            "host_syncs": table(texts("host_syncs") + " order by sync_id", "id"),
        }
        cols, rows = table("select * from runs where id = ?", "id")
        keep = [i for i, c in enumerate(cols) if c not in VOLATILE_RUN_COLUMNS]
        out["runs"] = (tuple(cols[i] for i in keep), [tuple(r[i] for i in keep) for r in rows])
    finally:
        con.close()
    for command in ("summary", "ranges"):
        r = cli(command, "run", "-f", "json", db=db)
        assert r.exit_code == 0, r.output
        out[command] = (("json",), [(json.dumps(json.loads(r.stdout), sort_keys=True),)])
    return out


def same(u: Any, v: Any) -> bool:
    """Equal, and of one type (an integer stored as a REAL is no longer the SQL path's row)."""
    return type(u) is type(v) and u == v


def first_difference(a: dict, b: dict) -> str | None:
    """Where the columnar import's tables (``a``) first differ from the SQL path's (``b``):
    the table, the row (its launch_id for kernels), the column and both values."""
    for name in [*a, *(n for n in b if n not in a)]:
        if name not in a or name not in b:
            return f"{name}: stored by one import only"
        (ca, ra), (cb, rb) = a[name], b[name]
        if ca != cb:
            return f"{name}: columns {ca} vs {cb}"
        for i, (x, y) in enumerate(zip(ra, rb)):
            if not all(map(same, x, y)):
                col = next(c for c, u, v in zip(ca, x, y) if not same(u, v))
                at = f"launch_id {x[1]}" if name == "kernels" else f"row {i}"
                return (
                    f"{name}, {at}, column {col}: columnar {x[ca.index(col)]!r}, "
                    f"SQL {y[cb.index(col)]!r}"
                )
        if len(ra) != len(rb):
            return f"{name}: {len(ra)} rows (columnar) vs {len(rb)} (SQL)"
    return None


def both(tmp_path: Path, monkeypatch, export: Path) -> tuple[Imported, Imported]:
    columnar = imported(tmp_path / "columnar", export, monkeypatch, columnar=True)
    sql = imported(tmp_path / "sql", export, monkeypatch, columnar=False)
    return columnar, sql


def assert_same(columnar: Imported, sql: Imported) -> None:
    assert sql["read"] == [None]
    assert (columnar["exit"], columnar["stderr"]) == (sql["exit"], sql["stderr"]), (
        f"columnar: {columnar!r}, SQL: {sql!r}"
    )
    difference = first_difference(columnar["stored"], sql["stored"])
    assert difference is None, difference


def assert_columnar_taken(columnar: Imported) -> None:
    """The columnar import's rows came from the columns: read gave them, one per operation
    the run stores (every operation has a name here)."""
    assert columnar["exit"] == 0, columnar["stderr"]
    assert len(columnar["read"]) == 1 and columnar["read"][0] is not None
    kernels = columnar["stored"]["kernels"][1]
    assert len(columnar["read"][0]) == len(kernels) > 0


# ------------------------------------------------------------------ the tests
@pytest.mark.parametrize("export", EXPORTS)
def test_committed_exports_import_alike(tmp_path, monkeypatch, export):
    columnar, sql = both(tmp_path, monkeypatch, unpacked(tmp_path, export))
    assert_columnar_taken(columnar)
    assert_same(columnar, sql)


@pytest.mark.parametrize("export", EXPORTS)
def test_launches_share_their_groups_as_the_sql_path_finds_them(tmp_path, monkeypatch, export):
    """Schema 16: each launch is stored once in ``launches`` and what a run's launches share
    once per group in ``kernel_groups``. The columnar path numbers the groups by what they hold
    (not by the range instance or operator call a launch was in), into as many groups as the
    SQL path's DISTINCT finds, each used, and fewer than the launches."""
    path = unpacked(tmp_path, export)
    counts = {}
    for columnar in (True, False):
        folder = tmp_path / ("columnar" if columnar else "sql")
        assert imported(folder, path, monkeypatch, columnar)["exit"] == 0
        con = sqlite3.connect(folder / "p.db")
        counts[columnar] = con.execute(
            "select (select count(*) from launches), (select count(*) from kernel_groups), "
            "(select count(distinct group_id) from launches)"
        ).fetchone()
        con.close()
    assert counts[True] == counts[False], counts
    launches, groups, used = counts[True]
    assert groups == used and groups < launches, counts


def test_a_narrow_column_keyed_holds_its_null_apart():
    """A launch's dimensions are read as 32-bit integers; as a group key their NULL (a copy's, a
    set's) is ``LOW``, which only a 64-bit integer holds: never wrapped into a dimension, nor
    refused (the H200's numpy refused it: a real capture with copies did not import)."""
    import numpy as np

    column = nsys_columns.Column(
        np.array([0, 7, 2**31 - 1], np.int32), np.array([True, False, False])
    )
    keyed = column.keyed()
    assert keyed.dtype == np.int64
    assert keyed.tolist() == [nsys_columns.LOW, 7, 2**31 - 1]


@pytest.mark.parametrize("case", list(CASES))
def test_edited_exports_import_alike(tmp_path, monkeypatch, case):
    export, edits, expected = CASES[case]
    columnar, sql = both(tmp_path, monkeypatch, unpacked(tmp_path, export, *edits))
    # the SQL path does what the case means
    if isinstance(expected, tuple):
        lines = sql["stderr"].strip().splitlines()
        assert sql["exit"] == 1 and len(lines) == 1 and expected[1] in lines[0], sql["stderr"]
        assert sql["stored"]["runs"][1] == [(0,)]
    else:
        assert sql["exit"] == 0, sql["stderr"]
    # the columnar import gives what it gives
    assert_same(columnar, sql)
    if expected == "columnar":
        assert_columnar_taken(columnar)
    else:
        # the columnar path was asked, and left the export to the SQL path
        assert columnar["read"] == [None], columnar["read"]


def test_the_edits_hit_what_they_mean(tmp_path):
    """The edits change what they say they do (else a case would test nothing): operations
    left with no launch call, kernels sharing one launch, NULLs where set."""
    path = unpacked(tmp_path, R18, *CASES["kernels sharing a launch"][1])
    con = sqlite3.connect(path)
    shared = con.execute(f"select count(*) from {K} where correlationId = {launch_of(K, 300)}")
    assert shared.fetchone()[0] == 6
    con.close()
    path = unpacked(tmp_path, R18, *CASES["no launch call"][1])
    con = sqlite3.connect(path)
    unlaunched = con.execute(
        f"select count(*) from {K} k where not exists (select 1 from {RT} r "
        "where r.correlationId = k.correlationId)"
    ).fetchone()[0]
    assert unlaunched > 100
    con.close()


@pytest.mark.parametrize(
    "case",
    [
        "no launch call, operator calls",
        "no launch call, ranges and syncs",
        "kernels sharing a launch, rows reversed",
        "null names in the tables' first rows",
        "null in every row of a column",
        "kernel start real",
        "kernel correlationId text, last row",
        "runtime correlationId text",
        "a blocking call's name text",
    ],
)
def test_read_in_small_batches(tmp_path, monkeypatch, case):
    """The driver's batches of a few rows (an export of millions of operations is read in
    many): a NULL batch, a value of another type in a later batch, still as the SQL path."""
    monkeypatch.setattr(nsys_columns, "BATCH_ROWS", 64)
    export, edits, expected = CASES[case]
    columnar, sql = both(tmp_path, monkeypatch, unpacked(tmp_path, export, *edits))
    if expected == "columnar":
        assert_columnar_taken(columnar)
    else:
        assert columnar["read"] == [None]
    assert_same(columnar, sql)


@pytest.mark.parametrize(
    "case",
    [
        "no launch call, graphs",  # runtime rows deleted: rowids with gaps, the table one piece
        "no launch call, ranges and syncs",  # rowids with gaps too
        "copies read through a covering index",  # the copies read whole
        "copies with a column named rowid",  # the copies read whole
        "blocking calls, as captured",
        "kernels sharing a launch, rows reversed",
        "null names in the tables' first rows",
        "null in every row of a column",
        "kernel correlationId text, last row",
        "runtime correlationId text",
    ],
)
def test_read_in_pieces_on_many_threads(tmp_path, monkeypatch, case):
    """Each table read in pieces (ranges of rowids) by four threads at once, in batches of a
    few rows: the same as the SQL path, and as one reader; a table whose rowids have gaps is
    read whole."""
    monkeypatch.setattr(nsys_columns, "BATCH_ROWS", 64)
    monkeypatch.setattr(nsys_columns, "PIECE_VALUES", 1)
    monkeypatch.setattr(nsys_columns, "READERS", 4)
    monkeypatch.setattr(nsys_columns, "cores", lambda: 4)
    pieces: list[tuple[str, int | None]] = []
    read_piece = nsys_columns._read_piece

    def spy(con, piece, got, failed):
        pieces.append((piece.table, piece.first))
        return read_piece(con, piece, got, failed)

    monkeypatch.setattr(nsys_columns, "_read_piece", spy)
    export, edits, expected = CASES[case]
    columnar, sql = both(tmp_path, monkeypatch, unpacked(tmp_path, export, *edits))
    if expected == "columnar":
        assert_columnar_taken(columnar)
        by_table = Counter(t for t, _ in pieces)
        assert by_table[nsys_columns.KERNEL] > 1
        gaps = case.startswith("no launch call")  # runtime calls deleted
        assert (by_table[nsys_columns.RUNTIME] == 1) == gaps
        assert ((nsys_columns.RUNTIME, None) in pieces) == gaps
        # read whole where SQLite would not scan the table in rowid order
        assert ((nsys_columns.MEMCPY, None) in pieces) == case.startswith("copies")
    else:
        assert columnar["read"] == [None]
    assert_same(columnar, sql)


def test_an_export_whose_path_has_uri_characters(tmp_path, monkeypatch):
    """The driver opens the export by a ``file:`` URI too: a folder named with ?, # and % is
    still that file, and the columnar path is taken there."""
    folder = tmp_path / "a ?#%b"
    folder.mkdir()
    columnar, sql = both(folder, monkeypatch, unpacked(folder, RUN18))
    assert_columnar_taken(columnar)
    assert_same(columnar, sql)


@pytest.mark.parametrize(
    "case",
    [
        None,
        "no launch call, ranges and syncs",
        "launch call in another process",
        "kernel globalPid null",
        "kernel start real",
        "runtime table empty",
    ],
)
def test_host_syncs_found_from_the_columns(tmp_path, monkeypatch, case):
    """An export large enough that its host syncs are not found before the import (another
    thread finds them on the SQL path; the columnar path finds them from the operations it
    read): the same calls, with the same GPU work around them, as the SQL path's."""
    from profkit.parse import nsys_export

    monkeypatch.setattr(nsys_export, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(nsys_export, "cores", lambda: 2)
    export, edits, expected = CASES[case] if case else (SYNC, (), "columnar")
    columnar, sql = both(tmp_path, monkeypatch, unpacked(tmp_path, export, *edits))
    assert_same(columnar, sql)
    if expected == "columnar":
        assert_columnar_taken(columnar)
        if case != "runtime table empty":  # no runtime calls, no syncs
            assert columnar["stored"]["host_syncs"][1]
    else:
        assert columnar["read"] == [None]


def test_an_export_past_the_memory_budget_is_imported_by_sql(tmp_path, monkeypatch):
    """The columns' memory is bounded: an export whose columns would need more than the
    budget (here made tiny) is imported by the SQL path, whose working tables go to temporary
    files, with the same result."""
    export = unpacked(tmp_path, R18)
    monkeypatch.setattr(nsys_columns, "memory_budget", lambda: 1000)
    columnar, sql = both(tmp_path, monkeypatch, export)
    assert columnar["read"] == [None]  # the real read() gave way to SQL
    assert_same(columnar, sql)


def test_a_scratch_file_that_cannot_be_written_is_one_line_and_stores_nothing(
    tmp_path, monkeypatch
):
    """Where the scratch files cannot be written (a full disk: SQLite's own error), the import
    fails in one line naming the file and why, and the database holds nothing of it."""
    import tempfile

    export = unpacked(tmp_path, R18)
    full = tmp_path / "full"
    full.mkdir()

    def disk_full(self: Any, ops: Any) -> None:
        self.error = sqlite3.OperationalError("database or disk is full")
        for ready in self._ready:
            ready.set()

    monkeypatch.setattr(nsys_columns.Scratch, "_write", disk_full)
    monkeypatch.setattr(tempfile, "tempdir", str(full))
    db = tmp_path / "p.db"
    r = cli("import", export, "--name", "run", db=db)
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 1 and len(lines) == 1, r.stderr
    assert "could not write the import's scratch file" in lines[0]
    assert str(full) in lines[0] and "database or disk is full" in lines[0]
    con = sqlite3.connect(db)
    assert con.execute("select count(*) from runs").fetchone()[0] == 0
    assert con.execute("select count(*) from kernel_rows").fetchone()[0] == 0
    con.close()
    assert list(full.iterdir()) == []  # the scratch folder removed


MIN_EXPORT_BYTES = nsys_columns.MIN_EXPORT_BYTES  # as the module has it (every test here sets 0)


def test_small_exports_are_imported_by_sql(tmp_path, monkeypatch):
    """Below MIN_EXPORT_BYTES the SQL path imports (in memory, as quick there): no columns
    read, no scratch files."""
    monkeypatch.setattr(nsys_columns, "MIN_EXPORT_BYTES", MIN_EXPORT_BYTES)
    assert unpacked(tmp_path, R18).stat().st_size < MIN_EXPORT_BYTES
    columnar = imported(tmp_path / "small", unpacked(tmp_path, R18), monkeypatch, columnar=True)
    assert columnar["exit"] == 0 and columnar["read"] == [None]


def test_scratch_folders_of_processes_gone_are_removed(tmp_path, monkeypatch):
    """A killed import leaves its scratch folder; the next import's removes the folders of
    processes that are gone, and no other."""
    import subprocess
    import sys
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    stale = tmp_path / f"{nsys_columns.SCRATCH_PREFIX}{gone.stdout.strip()}-abc"
    (stale / "ops0.sqlite").parent.mkdir()
    (stale / "ops0.sqlite").write_bytes(b"x")
    live = tmp_path / f"{nsys_columns.SCRATCH_PREFIX}1-abc"  # init: alive
    live.mkdir()
    other = tmp_path / f"{nsys_columns.SCRATCH_PREFIX}x-abc"  # not one of ours
    other.mkdir()
    made = nsys_columns.scratch_folder()
    assert not stale.exists() and live.exists() and other.exists()
    assert made.is_dir() and made.name.startswith(f"{nsys_columns.SCRATCH_PREFIX}{os.getpid()}-")
    nsys_columns.remove(made)


def test_the_drivers_errors_read_in_one_line():
    """ADBC's errors carry a status and the statement: the line says what went wrong."""
    why = nsys_columns._why(
        OSError(
            "INTERNAL: failed to execute: disk I/O error\nquery was: INSERT INTO ops VALUES (?)"
        )
    )
    assert why == "disk I/O error"
    assert nsys_columns._why(OSError("")) == "OSError"
