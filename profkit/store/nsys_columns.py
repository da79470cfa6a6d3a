"""The bulk import's columnar path: an Nsight Systems export's GPU operations and launch calls
read as columns (Arrow, through ADBC's SQLite driver, two tables at once on two threads), then
joined, numbered in launch order, placed in their ranges and operator calls, checked and grouped
with numpy and pandas, where ``nsys_import``'s SQL does the same one row at a time on one core
(issue 39: 9 s of a 2-million-kernel import's 25 s on two cores were the SQL's launch-call key
and its sort). The rows are then written by that module's own SQL, from a scratch file of the
operations in launch order.

It gives exactly what the SQL path gives, or nothing: an export whose rows the SQL path would
check or refuse (a value that is not an integer, a launch call listed twice, an operation that
ends before it starts or lasts a day, one listed twice), whose numbers do not fit the columnar
keys, or that the driver cannot read, is left to the SQL path, which names the row at fault."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import StoreError
from ..files import file_uri
from ..parse.nsys_export import (
    ID_COLUMNS,
    INTEGER_COLUMNS,
    LAUNCH_DIMS,
    MEMCPY_KEY,
    MEMSET_KEY,
    NULLABLE_COLUMNS,
    NsysExport,
    OperatorCall,
    Segment,
    cores,
)
from ..parse.schema import DIM_LIMIT, MAX_DURATION_NS

if TYPE_CHECKING:
    import numpy as np

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
KINDS = ("kernel", "memcpy", "memset")  # the kind codes' names, in the SQL's union order
DIMS = ("gx", "gy", "gz", "bx", "by", "bz")
# The columns of the operations' working table after seq, as ``_ops_sql`` selects them.
OPS_COLUMNS = (
    "kind",
    "key",
    "sn",
    "start",
    "end",
    "dev",
    "stream",
    "gx",
    "gy",
    "gz",
    "bx",
    "by",
    "bz",
    "lstart",
    "ltid",
    "lpid",
    "pid",
    "rix",
    "oix",
)
# The scratch files' operations: what a launch's own row is written from (``launches``): its
# group's number (``launch_groups``; the group's columns are written from its first operation),
# its start and end, its state (the innermost range and the range path).
SCRATCH_COLUMNS = ("seq", "grp", "start", "end", "rix")
# The columns of a group's first operation that its group's row is written from (``temp.reps``).
GROUP_SOURCE = ("kind", "key", "sn", *DIMS, "stream", "dev", "pid", "ltid", "rix", "oix")
# Smaller exports: the SQL path (as quick there; no scratch files). On the 2-core machine the
# columnar path was as quick at 2,000 kernels (0.8 MB) and quicker from 25,000 (5.6 MB: 0.86
# against 0.95 s); an export of only the tables profkit reads (``nsys export --tables``) holds
# 390,000 kernels in 62 MB.
MIN_EXPORT_BYTES = 4 << 20
GROUP_BATCH = 65536  # groups made Python tuples at a time (``groups``)
LOW = -(2**63)  # a key's NULL in the groups, as ``fine_aggregates.key_sentinel`` writes it
CORR_BITS = 40  # a launch call's key: its process's code above its correlation id
# Bytes the columnar path holds at its peak, per GPU operation and per runtime call (measured:
# about 700 MB at 2.2 million operations and 6.7 million calls, with the process's own ~150 MB;
# and up to 112 bytes an operation more for the groups, where there is about one an operation).
BYTES_PER_OPERATION = 320
BYTES_PER_CALL = 32
MAX_MEMORY_BYTES = 4 << 30  # the columns' peak at most (and at most half the memory available)
BATCH_ROWS = 65536  # rows a batch read by the driver (its default, 1,024, makes 2,000 a table)
READERS = 8  # threads reading the tables at most (and no more than the cores this process has)
PIECE_VALUES = 1 << 20  # values (rows times columns) a reader's piece of a table at least
RUNTIME_READ = ("correlationId", "globalTid", "start")  # the runtime calls' columns kept
KEYS = ("demangledName", None, None)  # a kernel's name id; a copy's and a set's keys of their own
SCRATCH_PARTS = 6  # at most (each is attached: SQLite attaches 10 at most)
SCRATCH_PART_ROWS = 200_000  # at least, but for the last
SCRATCH_PREFIX = "profkit-import-"  # then the process id: a folder of a process gone is stale


class Column:
    """An integer column: its values, and where they are NULL (None: nowhere)."""

    __slots__ = ("values", "null")

    def __init__(self, values: np.ndarray, null: np.ndarray | None = None):
        self.values = values
        self.null = null if null is not None and null.any() else None

    @classmethod
    def null_column(cls, n: int, dtype: Any = None) -> Column:
        """``n`` rows, every one NULL."""
        import numpy as np

        return cls(np.zeros(n, dtype or np.int64), np.ones(n, bool))

    def take(self, order: np.ndarray) -> Column:
        return Column(self.values[order], None if self.null is None else self.null[order])

    def keyed(self) -> np.ndarray:
        """The values as 64-bit integers with NULL as ``LOW`` (a group key; a narrower column,
        a launch's dimensions, cannot hold it)."""
        import numpy as np

        values = self.values.astype(np.int64, copy=False)
        return values if self.null is None else np.where(self.null, LOW, values)


@dataclass
class Ops:
    """The export's GPU operations in launch order (``seq`` is the position), as the SQL path's
    ``temp.ops`` holds them."""

    kind: np.ndarray  # int8: an index of KINDS
    cols: dict[str, Column]  # OPS_COLUMNS but kind
    procs: np.ndarray  # globalPid >> 24 (the host syncs' process, not masked to 24 bits)
    # the runtime calls that block the host, as ``NsysExport.host_syncs`` takes them (found by
    # a reader beside the columns' reading)
    sync_calls: list[tuple[Any, ...]] | None = None

    def __len__(self) -> int:
        return len(self.kind)


def read(export: NsysExport, segments: list[Segment], operators: list[OperatorCall]) -> Ops | None:
    """The export's operations, launched, numbered, placed and checked; None where the SQL path
    is to do it (see the module's doc), or where pyarrow or ADBC's SQLite driver is missing."""
    try:
        import adbc_driver_sqlite.dbapi  # noqa: F401
        import numpy  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        return None
    columns = export.schema.columns
    if KERNEL not in columns or RUNTIME not in columns:
        return None
    if export.path.stat().st_size < MIN_EXPORT_BYTES:
        return None  # a small export: SQL in memory is as quick, and needs no scratch files
    tables = {
        t: tuple(c for c in INTEGER_COLUMNS[t] if c in columns[t])
        for t in (KERNEL, MEMCPY, MEMSET, RUNTIME)
        if t in columns
    }
    needed = {
        KERNEL: {"start", "end", "correlationId", "globalPid", "deviceId", "streamId"}
        | {"demangledName", "shortName", *LAUNCH_DIMS},
        MEMCPY: {"start", "end", "correlationId", "globalPid", "deviceId", "streamId", "copyKind"},
        MEMSET: {"start", "end", "correlationId", "globalPid", "deviceId", "streamId"},
        RUNTIME: {"start", "correlationId", "globalTid"},
    }
    if any(not needed[t] <= set(cs) for t, cs in tables.items()):
        return None  # a column the SQL path reads is missing: it says so
    rows = {t: int(export.con.execute(f"select count(*) from {t}").fetchone()[0]) for t in tables}
    if _memory_needed(rows) > memory_budget():
        return None  # the SQL path's memory is bounded whatever the export's size
    got = _read_tables(export, tables, rows)
    if got is None:
        return None
    read_tables, calls = got
    ops = _ops(read_tables, segments, operators)
    if ops is not None:
        ops.sync_calls = calls
    return ops


def _memory_needed(rows: dict[str, int]) -> int:
    """The columnar path's peak for an export whose tables have ``rows``."""
    operations = sum(n for t, n in rows.items() if t != RUNTIME)
    return operations * BYTES_PER_OPERATION + rows[RUNTIME] * BYTES_PER_CALL


def memory_budget() -> int:
    """What the columnar path may hold: MAX_MEMORY_BYTES, and at most half the memory this
    machine has available now (Linux's MemAvailable, and what its cgroup, a container's limit,
    leaves); above it the SQL path, whose working tables go to temporary files, imports the
    export. Where neither can be read, MAX_MEMORY_BYTES."""
    available = [MAX_MEMORY_BYTES * 2]
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        cgroup = Path("/sys/fs/cgroup")
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            available.append(int(limit) - int((cgroup / "memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return max(0, min(available)) // 2


def _read_tables(
    export: NsysExport, tables: dict[str, tuple[str, ...]], rows: dict[str, int]
) -> tuple[dict[str, dict[str, Column]], list[tuple[Any, ...]] | None] | None:
    """Each table's columns, read in pieces (ranges of rowids) on up to READERS threads, one
    connection each: the driver lets go of Python's lock as it reads, so the pieces go at once
    on as many cores. The first reader first finds the runtime calls that block the host
    (``NsysExport.sync_calls``: a scan of the runtime calls that would otherwise run after the
    reading, alone). None where a column is not all integers where the SQL path's cheap test
    wants them (``integer_test``), or cannot be read."""
    import numpy as np

    arrays: dict[str, _Arrays] = {}
    pieces: list[_Piece] = []
    # A piece's work: its rows times the columns read (a kernel's 14, a runtime call's 4).
    total = sum(rows[t] * len(names) for t, names in tables.items())
    readers = max(1, min(READERS, cores()))
    # Pieces of about half a reader's share (so that readers finishing early take more), and
    # not smaller than PIECE_VALUES.
    share = max(PIECE_VALUES, -(-total // (2 * readers)))
    for t, names in tables.items():
        n = rows[t]
        size = max(1, share // len(names))
        kept = [c for c in names if t != RUNTIME or c in RUNTIME_READ]
        nullable = [c for c in kept if c in NULLABLE_COLUMNS.get(t, ())]
        arrays[t] = _Arrays(
            {c: np.empty(n, np.int32 if c in LAUNCH_DIMS else np.int64) for c in kept},
            {c: np.zeros(n, bool) for c in nullable},
        )
        low, high = _rowids(export, t, names) if n else (None, None)
        if low is not None and high is not None and high - low + 1 == n:
            # rowids without gaps (nsys writes 1..n): a piece is a range of them
            pieces += [
                _Piece(t, names, low + at, min(n, at + size) - at, at) for at in range(0, n, size)
            ]
        else:  # rowids with gaps (an edited export): the table in one piece
            pieces.append(_Piece(t, names, None, n, 0))
    pieces.sort(key=lambda p: -p.rows * len(p.names))
    calls: list[list[tuple[Any, ...]]] = []
    sync_names = export.sync_call_names()
    search = [sync_names] if sync_names else []  # the blocking calls' search: a reader's first task
    work = iter(pieces)
    lock = threading.Lock()
    failed = threading.Event()
    raised: list[BaseException] = []

    def reader() -> None:
        import adbc_driver_sqlite.dbapi as adbc

        try:
            with adbc.connect(file_uri(export.path, read_only=True)) as con:
                while not failed.is_set():
                    with lock:
                        searching = search.pop() if search else None
                        piece = None if searching else next(work, None)
                    if searching:
                        calls.append(export.sync_calls(searching, own_connection=True))
                    elif piece is None:
                        return
                    elif not _read_piece(con, piece, arrays[piece.table], failed):
                        failed.set()
        except (OSError, sqlite3.Error, adbc_error(), pyarrow_error()):
            # the driver's own (a value of another type in a later batch): the SQL path's
            failed.set()
        except BaseException as exc:  # any other (an interrupt): raised once all have stopped
            raised.append(exc)
            failed.set()

    threads = [threading.Thread(target=reader, daemon=True) for _ in range(readers - 1)]
    for th in threads:
        th.start()
    reader()
    for th in threads:
        th.join()
    if raised:
        raise raised[0]
    if failed.is_set():
        return None
    out: dict[str, dict[str, Column]] = {}
    for t, got in arrays.items():
        cols: dict[str, Column] = {}
        for name in list(got.values):
            col = Column(got.values.pop(name), got.nulls.pop(name, None))
            present = col.values if col.null is None else col.values[~col.null]
            if len(present) and name in ID_COLUMNS and present.min() < 0:
                return None
            cols[name] = col
        out[t] = cols
    # (the search ran where there were names to search for: else the readers failed, above)
    return out, calls[0] if sync_names else []


ROWID_NAMES = {"rowid", "oid", "_rowid_"}


def _rowids(export: NsysExport, table: str, names: tuple[str, ...]) -> tuple[Any, Any]:
    """The first and last rowid of ``table``, where reading ``names`` of it whole scans it in
    rowid order (so that ranges of rowids read the same rows in the same order): else, a table
    that SQLite would read through an index holding those columns, one whose column is named
    like its rowid, or one without rowids, (None, None)."""
    if ROWID_NAMES & {c.lower() for c in export.schema.columns[table]}:
        return None, None
    try:
        plan = export.con.execute(
            f"explain query plan select {', '.join(names)} from {table}"
        ).fetchall()
        if [str(row[-1]).split() for row in plan] not in (
            [["SCAN", table]],
            [["SCAN", "TABLE", table]],
        ):
            return None, None
        # (one of min and max a query: SQLite reads either off the table's b-tree, both a scan)
        return tuple(
            export.con.execute(f"select {f}(rowid) from {table}").fetchone()[0]
            for f in ("min", "max")
        )
    except sqlite3.DatabaseError:  # no rowids, in a form the export's check did not refuse
        return None, None


@dataclass
class _Arrays:
    """A table's columns as read: arrays made at its size, each piece written into its rows."""

    values: dict[str, np.ndarray]
    nulls: dict[str, np.ndarray]  # of the nullable columns kept


@dataclass
class _Piece:
    """Rows of one table to read: ``rows`` rowids from ``first`` on (None: the whole table),
    going at ``at`` in its arrays."""

    table: str
    names: tuple[str, ...]
    first: int | None
    rows: int
    at: int


def _read_piece(con: Any, piece: _Piece, got: _Arrays, failed: threading.Event) -> bool:
    """Read ``piece`` into ``got``, each column as ``integer_test`` wants it (NULL only where
    NULLABLE_COLUMNS allows, launch sizes in range); False otherwise, or where the rows are not
    those counted (the file changed meanwhile). Read in batches: Arrow's own buffers are let
    go of batch by batch, so memory stays near one copy. Of the runtime calls, only the columns
    the join reads are kept (the others are checked)."""
    import pyarrow as pa

    table, names = piece.table, piece.names
    nullable = NULLABLE_COLUMNS.get(table, ())
    sql = f"select {', '.join(names)} from {table}"
    if piece.first is not None:
        sql += f" where rowid between {piece.first} and {piece.first + piece.rows - 1}"
    at, end = piece.at, piece.at + piece.rows
    with con.cursor() as cur:
        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
        cur.execute(sql)
        for batch in cur.fetch_record_batch():
            n = batch.num_rows
            if at + n > end or failed.is_set():
                return False
            for name in names:
                arr = batch.column(name)
                if arr.null_count:
                    if name not in nullable:
                        return False
                    if name in got.nulls:
                        got.nulls[name][at : at + n] = arr.is_null().to_numpy(zero_copy_only=False)
                    if pa.types.is_null(arr.type):
                        continue
                    arr = arr.fill_null(0)
                if arr.type != pa.int64():
                    return False
                if name in got.values:
                    values = arr.to_numpy()
                    # a launch size's range checked before it is narrowed to 32 bits
                    if (
                        name in LAUNCH_DIMS
                        and n
                        and not 0 <= values.min() <= values.max() < DIM_LIMIT
                    ):
                        return False
                    got.values[name][at : at + n] = values
            at += n
    return at == end


def _ops(
    tables: dict[str, dict[str, Column]],
    segments: list[Segment],
    operators: list[OperatorCall],
) -> Ops | None:
    """The operations of ``tables`` (emptied as they are used: memory stays near one copy of
    the columns), launched, numbered, checked and placed; None where the SQL path is to do it."""
    import numpy as np

    # The union of the three tables, in the SQL's order (kernels, copies, sets; each in its
    # rowid order).
    parts = [(i, tables.pop(t)) for i, t in enumerate((KERNEL, MEMCPY, MEMSET)) if t in tables]
    sizes = [len(c["start"].values) for _, c in parts]

    def gather(names: tuple[str | None, str | None, str | None], dtype: Any = np.int64) -> Column:
        """One column of the union, each table's ``names[kind]`` (None: NULL), the tables'
        own columns let go of."""
        got = []
        for (i, c), n in zip(parts, sizes):
            name = names[i]
            col = c.pop(name) if name else Column.null_column(n, dtype)
            if name == "demangledName" and col.null is not None:  # -2: a kernel with no name
                col = Column(np.where(col.null, -2, col.values))
            elif name is None and names == KEYS:
                col = Column(np.full(n, MEMCPY_KEY if i == 1 else MEMSET_KEY, dtype))
            got.append(col)
        values = np.concatenate([g.values for g in got]).astype(dtype, copy=False)
        if all(g.null is None for g in got):
            return Column(values)
        nulls = [g.null if g.null is not None else np.zeros(len(g.values), bool) for g in got]
        return Column(values, np.concatenate(nulls))

    kind = np.concatenate([np.full(n, i, dtype=np.int8) for (i, _), n in zip(parts, sizes)])
    start = gather(("start",) * 3).values
    end = gather(("end",) * 3).values
    if len(kind):
        took = end - start  # wraps past 2^63: negative where end >= start, refused too
        if (end < start).any() or (took < 0).any() or (took > MAX_DURATION_NS).any():
            return None  # the SQL path's checks name the operation
        if float(np.sum(took.astype(np.float64))) >= 2.0**62:
            return None  # a sum past 2^63: the SQL path says so
        del took
    corr = gather(("correlationId",) * 3).values
    gpid = gather(("globalPid",) * 3).values
    launched = _launch_calls(tables.pop(RUNTIME), corr, gpid)
    if launched is None:
        return None
    lstart, ltid = launched
    # Launch order: by the launch call's start (the operation's own without one), then the
    # correlation id; ties in the union's order.
    at = lstart.values if lstart.null is None else np.where(lstart.null, start, lstart.values)
    order = np.lexsort((corr, at))
    at = at[order]  # each operation's launch start (its own without one), in launch order
    del corr
    kind = kind[order]
    cols = {"start": Column(start[order]), "end": Column(end[order])}
    del start, end
    procs = gpid[order] >> 24
    del gpid
    cols["pid"] = Column(procs & 0xFFFFFF)
    lstart, ltid = lstart.take(order), ltid.take(order)
    cols["lstart"], cols["ltid"] = lstart, ltid
    cols["lpid"] = Column((ltid.values >> 24) & 0xFFFFFF, ltid.null)
    for name, sources, dtype in (
        ("key", KEYS, np.int64),
        ("sn", ("shortName", "copyKind", None), np.int64),
        ("dev", ("deviceId",) * 3, np.int64),
        ("stream", ("streamId",) * 3, np.int64),
        *((short, (long, None, None), np.int32) for short, long in zip(DIMS, LAUNCH_DIMS)),
    ):
        cols[name] = gather(sources, dtype).take(order)
    ops = Ops(kind, cols, procs)
    if _listed_twice(ops, at):
        return None
    del at
    ops.cols["rix"] = _states(segments, ltid, lstart)
    ops.cols["oix"] = _operator_calls(operators, ltid, lstart)
    return ops


def _launch_calls(
    runtime: dict[str, Column], corr: np.ndarray, gpid: np.ndarray
) -> tuple[Column, Column] | None:
    """Each operation's launch call's start and thread (NULL where it has none): the runtime
    call of its correlation id in its process. None where a call is listed twice (the SQL path's
    key refuses it) or the ids do not fit the key."""
    import numpy as np

    rcorr, rgtid, rstart = (runtime[c].values for c in ("correlationId", "globalTid", "start"))
    n = len(corr)
    if len(rcorr) == 0:
        return Column.null_column(n), Column.null_column(n)
    opid = gpid >> 24
    rkey = rgtid >> 24
    # the processes (a few; each one's calls in long runs): unique over the runs' first calls
    pids = np.unique(rkey[np.flatnonzero(np.r_[True, rkey[1:] != rkey[:-1]])])
    limit = 1 << CORR_BITS
    if (
        len(pids) >= 1 << (62 - CORR_BITS)
        or rcorr.min() < 0
        or rcorr.max() >= limit
        or (n and (corr.min() < 0 or corr.max() >= limit))
    ):
        return None
    # the key made in place (the calls are most of the import's memory)
    if len(pids) == 1:  # one process (most captures): its code is 0
        rkey.fill(0)
    else:
        rkey[:] = np.searchsorted(pids, rkey)
    rkey <<= CORR_BITS
    rkey |= rcorr
    del rcorr
    runtime.pop("correlationId")
    # in key order already where each process's calls are in one run, as nsys writes them
    by = None if (rkey[1:] > rkey[:-1]).all() else np.argsort(rkey, kind="stable")
    if by is not None:
        rkey = rkey[by]
        if (rkey[1:] == rkey[:-1]).any():
            return None  # a launch call listed twice: the SQL path's key refuses it
    code = np.searchsorted(pids, opid)
    known = (code < len(pids)) & (pids[np.minimum(code, len(pids) - 1)] == opid)
    okey = (code.astype(np.int64) << CORR_BITS) | corr
    at = np.minimum(np.searchsorted(rkey, okey), len(rkey) - 1)
    hit = known & (rkey[at] == okey)
    call = at if by is None else by[at]
    return (
        Column(np.where(hit, rstart[call], 0), ~hit),
        Column(np.where(hit, rgtid[call], 0), ~hit),
    )


def _listed_twice(ops: Ops, at: np.ndarray) -> bool:
    """Whether an operation may be listed twice, as the SQL path's ``_check_once`` asks it
    (neighbours in launch order at one launch start ``at``, the launch call's or its own,
    grouped by what a copy repeats): where so, the SQL path runs the export's checks."""
    import numpy as np
    import pandas as pd

    same = at[1:] == at[:-1]
    if not same.any():
        return False
    rows = np.zeros(len(at), bool)
    rows[1:] |= same
    rows[:-1] |= same
    keys = {"kind": ops.kind[rows]}
    for c in ("pid", "dev", "stream", "start", "lstart", "ltid"):
        keys[c] = ops.cols[c].keyed()[rows]
    return bool(pd.DataFrame(keys).duplicated().any())


def _latest(
    at_g: np.ndarray, at_t: np.ndarray, q_g: np.ndarray, q_t: np.ndarray, q: np.ndarray
) -> np.ndarray:
    """For each query ``q`` (indices into ``q_g``/``q_t``), the index of the entry of its
    ``g`` latest at or before its ``t`` (the last of those at one ``t``), or -1."""
    import numpy as np

    out = np.full(len(q), -1, dtype=np.int64)
    if not len(at_g) or not len(q):
        return out
    by = np.lexsort((np.arange(len(at_g)), at_t, at_g))
    sg, st = at_g[by], at_t[by]
    qo = np.argsort(q_g[q], kind="stable")
    qg = q_g[q][qo]
    bounds = np.flatnonzero(np.diff(sg)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(sg)]):
        g = sg[lo]
        a, b = np.searchsorted(qg, g, "left"), np.searchsorted(qg, g, "right")
        if a == b:
            continue
        which = qo[a:b]
        i = np.searchsorted(st[lo:hi], q_t[q][which], "right") - 1
        out[which] = np.where(i >= 0, by[lo + np.maximum(i, 0)], -1)
    return out


def _states(segments: list[Segment], ltid: Column, lstart: Column) -> Column:
    """Each launch's state (``temp.seg``'s lookup): its thread's state then, where that has one,
    else its process's (the thread part zero); NULL for an operation with no launch call."""
    import numpy as np

    n = len(ltid.values)
    if not segments or n == 0:
        return Column.null_column(n)
    # insert or replace: of a thread's segments at one start, the last
    last = {(g, s): ix for g, s, ix in segments}
    g = np.fromiter((k[0] for k in last), np.int64, len(last))
    t = np.fromiter((k[1] for k in last), np.int64, len(last))
    ix_null = np.fromiter((v is None for v in last.values()), bool, len(last))
    ix = np.fromiter((0 if v is None else v for v in last.values()), np.int64, len(last))
    launched = np.flatnonzero(~ltid.null) if ltid.null is not None else np.arange(n)
    value = np.zeros(n, np.int64)
    null = np.ones(n, bool)
    for q_g in (ltid.values, ltid.values - (ltid.values & 0xFFFFFF)):
        q = launched[null[launched]]
        found = _latest(g, t, q_g, lstart.values, q)
        ok = found >= 0
        ok[ok] &= ~ix_null[found[ok]]
        value[q[ok]] = ix[found[ok]]
        null[q[ok]] = False
    return Column(value, null)


def _operator_calls(operators: list[OperatorCall], ltid: Column, lstart: Column) -> Column:
    """Each launch's operator call (``temp.oc``'s lookup, its 1-based position): the latest its
    thread began by the launch, if it has not ended; NULL otherwise."""
    import numpy as np

    n = len(ltid.values)
    if not operators or n == 0:
        return Column.null_column(n)
    g = np.fromiter((o[0] for o in operators), np.int64, len(operators))
    t = np.fromiter((o[1] for o in operators), np.int64, len(operators))
    e = np.fromiter((o[2] for o in operators), np.int64, len(operators))
    launched = np.flatnonzero(~ltid.null) if ltid.null is not None else np.arange(n)
    found = _latest(g, t, ltid.values, lstart.values, launched)
    ok = found >= 0
    ok[ok] &= e[found[ok]] > lstart.values[launched[ok]]
    value = np.zeros(n, np.int64)
    null = np.ones(n, bool)
    value[launched[ok]] = found[ok] + 1
    null[launched[ok]] = False
    return Column(value, null)


def groups(ops: Ops) -> Iterator[tuple[Any, ...]]:
    """The SQL path's ``temp.opg`` rows, in the order it makes them (each group where its first
    operation is in launch order): (kind, key, sn, rix, oix, pid, dev, launches, time_ns,
    min_ns, max_ns, first_launch, min_thread, unlaunched), NULL keys as ``LOW``. Each key is
    numbered in order of appearance and the numbers combined into one group number (no copy of
    the operations as a frame: memory stays near the columns'), then one stable sort by it.
    Given as Python tuples GROUP_BATCH at a time: with a range around every operator call
    there is about a group an operation."""
    import numpy as np

    n = len(ops)
    if n == 0:
        return
    c = ops.cols
    keys = [ops.kind, c["key"].values, c["sn"].keyed(), c["rix"].keyed(), c["oix"].keyed()]
    keys += [c["pid"].values, c["dev"].keyed()]
    group = _numbered(keys, n)
    order = np.argsort(group, kind="stable")
    starts = np.flatnonzero(np.r_[True, group[order][1:] != group[order][:-1]])
    first = order[starts]  # each group's first operation in launch order (its first_launch)
    d = (c["end"].values - c["start"].values)[order]
    ltid = c["ltid"]
    # the launching thread, the unlaunched ones above any (a thread id is 24 bits)
    thread = (ltid.values & 0xFFFFFF)[order]
    unlaunched = np.zeros(n, np.int64)
    if ltid.null is not None:
        thread[ltid.null[order]] = 1 << 40
        unlaunched = ltid.null[order].astype(np.int64)
    columns = [k[first] for k in keys]
    columns += [np.diff(np.r_[starts, n]), np.add.reduceat(d, starts)]
    columns += [np.minimum.reduceat(d, starts), np.maximum.reduceat(d, starts), first]
    columns += [np.minimum.reduceat(thread, starts), np.add.reduceat(unlaunched, starts)]
    columns = [np.asarray(col, dtype=np.int64) for col in columns]
    for lo in range(0, len(first), GROUP_BATCH):
        values: list[list[int]] = [col[lo : lo + GROUP_BATCH].tolist() for col in columns]
        for row in zip(*values):
            yield (KINDS[row[0]], *row[1:12], None if row[12] >= 1 << 40 else row[12], row[13])


def _numbered(keys: Sequence[np.ndarray | Callable[[], np.ndarray]], n: int) -> np.ndarray:
    """The ``n`` operations' groups by ``keys`` (each a column, or made when it is folded in and
    let go of then), numbered from 0 in order of first appearance: launch order. Each key is coded (a
    narrow one by its offset, another by ``pd.factorize``) and the codes combined into one
    number (no copy of the operations as a frame: memory stays near the columns')."""
    import numpy as np
    import pandas as pd

    group = np.zeros(n, np.int64)
    bound = 1  # the group numbers so far are below it
    for make in keys if n else []:
        key = make() if callable(make) else make
        lo, hi = int(key.min()), int(key.max())
        if hi - lo < 1 << 20:  # a narrow key (a kind, a dimension, a code): its offset is its code
            codes, size = key.astype(np.int64) - lo, hi - lo + 1
        else:
            codes, uniques = pd.factorize(key)
            size = len(uniques)
        del key
        if bound * size >= 1 << 62:
            group, uniques = pd.factorize(group)  # renumbered densely before it would overflow
            bound = len(uniques)
        group *= size
        group += codes
        del codes
        bound *= size
    group, _ = pd.factorize(group)
    return group.astype(np.int64, copy=False)


def states_launched_in(ops: Ops) -> list[int]:
    """The states some operation was launched in (``rix``), ascending."""
    import numpy as np

    rix = ops.cols["rix"]
    values = rix.values if rix.null is None else rix.values[~rix.null]
    return [int(v) for v in np.unique(values)]


def launch_groups(
    ops: Ops,
    state_ix: np.ndarray,
    state_rest: np.ndarray,
    state_call: np.ndarray,
    state_own_call: np.ndarray,
    operator_call: np.ndarray,
    ranks: dict[int, int],
) -> np.ndarray:
    """Number each operation's launch group (``kernel_groups``), in order of first appearance,
    and put it in ``ops.cols["grp"]``; returns each group's first operation. Operations of one
    group have every group column alike (they may be split where they need not be: a group is
    written from its first operation): the same kind, name, configuration, stream, device,
    process, thread, and the same attribution from their state and operator call, compared by
    content, not by which range instance or call gave it (a range around every operator call
    would make a state of nearly every launch), by the rank of their process (``ranks``, by
    process id), not the process. Per state (``state_ix``, sorted): ``state_rest`` the code of
    its input types, module, module type and phase; ``state_call`` of its operator and shapes;
    ``state_own_call`` whether those stand (its phase is known: profkit's own operator range)
    over the launch's operator call, whose operator and shapes' code is ``operator_call[oix -
    1]``, in the same codes as ``state_call``. Code 0 is all of them unknown, as for a launch
    in no state and no call."""
    import numpy as np

    n = len(ops)
    c = ops.cols

    def attribution() -> tuple[np.ndarray, np.ndarray]:
        """Each operation's state's (rest, call) code, its operator call's where that stands."""
        rix = c["rix"]
        if not len(state_ix):
            rest, call, own = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, bool)
        else:
            pos = np.searchsorted(state_ix, rix.values)
            placed = pos < len(state_ix)
            placed[placed] = state_ix[pos[placed]] == rix.values[placed]
            if rix.null is not None:
                placed &= ~rix.null
            pos[~placed] = 0
            rest = np.where(placed, state_rest[pos], 0)
            call = np.where(placed, state_call[pos], 0)
            own = placed & state_own_call[pos]
            del pos, placed
        oix = c["oix"]
        if len(operator_call):
            called = ~own if oix.null is None else ~own & ~oix.null
            idx = np.clip(oix.values - 1, 0, len(operator_call) - 1)
            call = np.where(called, operator_call[idx], call)
        return rest, call

    def rank() -> np.ndarray:
        pid = c["pid"].values
        out = np.full(n, LOW, np.int64)
        for p, r in ranks.items():
            out[pid == p] = r
        return out

    def thread() -> np.ndarray:
        ltid = c["ltid"]
        out = ltid.values & 0xFFFFFF
        return out if ltid.null is None else np.where(ltid.null, LOW, out)

    found = dict(zip(("rest", "call"), attribution()))
    # Each key made when it is folded in, and let go of then: memory stays near two columns'
    # worth above the operations' own (2 million operations: 16 MB a column).
    keys: list[Callable[[], np.ndarray]] = [
        lambda: ops.kind,
        lambda: c["key"].values,
        lambda: c["sn"].keyed(),
        *((lambda d=d: c[d].keyed()) for d in DIMS),
        lambda: c["stream"].keyed(),
        lambda: c["dev"].keyed(),
        rank,
        thread,
        lambda: found.pop("rest"),
        lambda: found.pop("call"),
    ]
    group = _numbered(keys, n)
    c["grp"] = Column(group)
    if n == 0:
        return np.zeros(0, np.int64)
    # numbered in order of first appearance: a group's first operation is where the number
    # first exceeds every one before it
    seen = np.maximum.accumulate(group)
    return np.flatnonzero(np.r_[True, group[1:] > seen[:-1]])


def group_sources(ops: Ops, first: np.ndarray) -> Iterator[tuple[Any, ...]]:
    """Each group's number and its first operation's GROUP_SOURCE columns (``temp.reps``)."""
    c = ops.cols
    columns: list[list[Any]] = [list(range(len(first)))]
    columns.append([KINDS[k] for k in ops.kind[first].tolist()])
    for name in GROUP_SOURCE[1:]:
        col = c[name]
        values = col.values[first].tolist()
        if col.null is not None:
            values = [None if z else v for v, z in zip(values, col.null[first].tolist())]
        columns.append(values)
    return zip(*columns)


def host_operations(ops: Ops) -> np.ndarray:
    """Every operation's (globalPid >> 24, start, end), (n, 3), sorted by process and start:
    the host syncs' search (``NsysExport.host_syncs``)."""
    import numpy as np

    start = ops.cols["start"].values
    order = np.lexsort((start, ops.procs))
    table = np.empty((len(order), 3), dtype=np.int64)
    for i, col in enumerate((ops.procs, start, ops.cols["end"].values)):
        np.take(col, order, out=table[:, i])
    return table


def kernel_launches(ops: Ops) -> np.ndarray:
    """The kernels' launching processes and launch starts, (n, 2), for ``_launched``."""
    import numpy as np

    c = ops.cols
    keep = ops.kind == 0
    if c["lstart"].null is not None:
        keep &= ~c["lstart"].null
    return np.stack([c["lpid"].values[keep], c["lstart"].values[keep]], axis=1)


class Scratch:
    """The operations written in launch order into scratch SQLite files (``ops``, ``seq`` its
    rowid), a part a file, by ADBC's bulk ingest on a thread of its own while the import goes
    on: each part is attached to the import's connection and its rows written as soon as it is
    ready, while the next is written (the ingest and the rows' SQL each take about half the
    time), and its file removed once they are. The folder (``scratch_folder``) is removed by
    ``close``, or by the writer where it was stopped; one a killed import left is removed by the
    next import."""

    def __init__(self, ops: Ops):
        import numpy as np

        folder = scratch_folder()
        self.folder = folder
        n = len(ops)
        count = max(1, min(SCRATCH_PARTS, -(-n // SCRATCH_PART_ROWS)))
        bounds = np.linspace(0, n, count + 1).astype(np.int64).tolist()
        self.parts = [
            (folder / f"ops{i}.sqlite", lo, hi)
            for i, (lo, hi) in enumerate(zip(bounds, bounds[1:]))
        ]
        self._ready = [threading.Event() for _ in self.parts]
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._write, args=(ops,), daemon=True)
        self._thread.start()

    def _write(self, ops: Ops) -> None:
        try:
            import sqlite3

            import adbc_driver_sqlite.dbapi as adbc
            import numpy as np
            import pyarrow as pa

            for (path, lo, hi), ready in zip(self.parts, self._ready):
                if self._stop.is_set():
                    break
                con = sqlite3.connect(path)
                con.execute(
                    f"create table ops (seq integer primary key, {', '.join(SCRATCH_COLUMNS[1:])})"
                )
                con.commit()
                con.close()
                arrays = {"seq": pa.array(np.arange(lo, hi, dtype=np.int64))}
                for name in SCRATCH_COLUMNS[1:]:
                    col = ops.cols[name]
                    null = None if col.null is None else col.null[lo:hi]
                    arrays[name] = pa.array(col.values[lo:hi], mask=null)
                with adbc.connect(str(path)) as out, out.cursor() as cur:
                    cur.adbc_ingest("ops", pa.table(arrays), mode="append")
                    out.commit()
                ready.set()
        except BaseException as exc:  # noqa: BLE001 (raised in the import's thread by part())
            self.error = exc
        finally:
            for ready in self._ready:
                ready.set()
            if self._stop.is_set():
                remove(self.folder)  # whatever the writer made after close() removed the folder

    def part(self, i: int) -> Path:
        """Part ``i``'s file, once written. Where the writer failed on the file (a full disk,
        TMPDIR not writable), a StoreError naming the file and why (nothing of the import is
        kept); any other failure is a bug, raised as it is."""
        self._ready[i].wait()
        error = self.error
        if error is None:
            return self.parts[i][0]
        if isinstance(error, (OSError, adbc_error())) or type(error).__module__ == "sqlite3":
            raise StoreError(
                f"could not write the import's scratch file {self.parts[i][0]}: {_why(error)} "
                "(in the system's temporary folder: TMPDIR names another)"
            ) from None
        raise error

    def done_with(self, i: int) -> None:
        """Part ``i``'s rows are written: its file is removed (the attached copy reads on until
        it is detached), so that the scratch files take one part's room at most."""
        self.parts[i][0].unlink(missing_ok=True)

    def close(self) -> None:
        """No part after the one being written, and the folder removed (the import has every
        part, or has stopped: a stop signal is not kept waiting for the part being written,
        whose file goes from under it; the writer, a daemon thread, ends with that part or with
        the process, and removes what it made after this)."""
        self._stop.set()
        remove(self.folder)


def scratch_folder() -> Path:
    """A private folder (0700) for the scratch files, in the system's temporary folder, named
    with this process's id; the folders of processes that are gone (a killed import's) are
    removed first."""
    import tempfile

    from ..processes import alive

    base = Path(tempfile.gettempdir())
    try:
        for old in base.glob(f"{SCRATCH_PREFIX}*"):
            pid = old.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)) and old.is_dir():
                remove(old)
    except OSError:  # a temporary folder that cannot be listed: the new folder says so, if any
        pass
    return Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))


def remove(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def _why(error: BaseException) -> str:
    """An error's first line, less ADBC's status prefix (``INTERNAL: failed to execute: ``)."""
    import re

    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return re.sub(r"^[A-Z_]+: (failed to \w+: )?", "", first) or type(error).__name__


def adbc_error() -> type[BaseException]:
    """ADBC's base error (the driver's errors: a type mismatch, a full disk)."""
    try:
        from adbc_driver_manager import Error
    except ImportError:
        return OSError
    return Error


def pyarrow_error() -> type[BaseException]:
    try:
        from pyarrow import ArrowException
    except ImportError:
        return OSError
    return ArrowException  # type: ignore[no-any-return]
