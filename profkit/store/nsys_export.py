"""The SQL that reads Nsight Systems SQLite exports (``nsys export --type sqlite``): the one
other database profkit reads, opened read-only. Every query over an export lives here, as the
queries over profkit's own database live in ``database``; ``profkit.parse.nsys_sqlite`` turns
what these return into kernel-table rows and ranges.

* The layout is checked first: ``META_DATA_EXPORT`` must say schema 3.x, and each table and
  column used is checked one by one (other layouts are refused in one line).
* GPU work: ``CUPTI_ACTIVITY_KIND_KERNEL`` (names through ``StringIds``: demangled and short),
  ``CUPTI_ACTIVITY_KIND_MEMCPY`` and ``_MEMSET``, each tied to its launch call in
  ``CUPTI_ACTIVITY_KIND_RUNTIME`` by ``correlationId`` within the same process, in the order
  of those calls, fetched in batches.
* NVTX push/pop and start/end ranges and domain names from ``NVTX_EVENTS``; the GPU from ``TARGET_INFO_GPU``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..errors import BadExport
from ..parse.schema import MAX_DURATION_NS

# Export schema versions this reader knows (major -> oldest minor). 3.20 is what nsys
# 2025.3 writes; the tables and columns used here are checked one by one as well.
KNOWN_SCHEMA = {3: 0}
REQUIRED = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                   "demangledName", "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid", "correlationId"),
    "StringIds": ("id", "value"),
}
OPTIONAL = {
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "copyKind"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "deviceId", "streamId", "correlationId", "globalPid"),
    "NVTX_EVENTS": ("start", "end", "eventType", "text", "textId", "globalTid", "domainId"),
    "TARGET_INFO_GPU": ("name", "computeMajor", "computeMinor"),
}
PUSH_POP = (59, 70)  # NvtxPushPopRange, NvtxtPushPopRange
START_END = (60,)    # NvtxStartEndRange: a process's range, bound to no thread
DOMAIN_CREATE = 75   # NvtxDomainCreate: text is the domain's name

# One GPU operation and its launch call, as gpu_ops() yields it.
GpuOp = tuple  # (kind, start, end, device, stream, correlation, global_pid, name, short_name,
#                 grid x, y, z, block x, y, z, launch start, launch global_tid)


@dataclass
class Schema:
    """What an export holds: its tables, the columns of those this reader uses, its metadata."""

    tables: set[str]
    columns: dict[str, set[str]]
    meta: dict[str, str]


class NsysExport:
    """An nsys SQLite export, opened read-only and checked. Close it when done."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.con = sqlite3.connect(_ro_uri(path), uri=True)
            # Names and NVTX texts are the program's own strings: bytes that are not UTF-8 are
            # shown as U+FFFD rather than failing the import (names are read `cast(... as text)`
            # so that one stored as a BLOB reads as text too).
            self.con.text_factory = lambda b: b.decode("utf-8", "replace")
            self.con.execute("select count(*) from sqlite_master").fetchone()
        except sqlite3.DatabaseError as exc:
            raise BadExport(f"{path.name} is not a readable SQLite file: {exc}") from exc
        try:
            self.schema = self._check_schema()
            self._check_types()
            self._check_once()
        except BaseException:
            self.con.close()
            raise

    def close(self) -> None:
        self.con.close()

    @property
    def meta(self) -> dict[str, str]:
        return self.schema.meta

    def _check_types(self) -> None:
        """Refuse an export whose times, threads or ids are not integers (SQLite stores whatever
        it is given): one line naming the table, the column and the first such value."""
        for table, columns in _INTEGER_COLUMNS.items():
            if table not in self.schema.columns:
                continue
            present = [c for c in columns if c in self.schema.columns[table]]
            tests = [f"typeof({c}) not in {_ALLOWED[c in _NULLABLE.get(table, ())]}" for c in present]
            bounded = [c for c in present if c in _LAUNCH_DIMS]
            tests += [f"{c} < 0 or {c} >= {2 ** 31}" for c in bounded]
            # One scan of the table for all its columns; the column at fault is named after.
            bad = self.con.execute(f"select rowid, {', '.join(present)} from {table} where {' or '.join(tests)} "
                                   "limit 1").fetchone() if present else None
            if bad is not None:
                rowid, values = bad[0], bad[1:]
                column, value = next((c, v) for c, v in zip(present, values)
                                     if not _integer(v, c in _NULLABLE.get(table, ()))
                                     or (c in _LAUNCH_DIMS and not 0 <= v < 2 ** 31))
                what = "not an integer" if not _integer(value, False) else "not a whole number from 0 to 2^31 - 1"
                raise BadExport(f"{self.path.name}: {table} has {column} = {value!r}, {what} (row {rowid})")

    def _check_once(self) -> None:
        """Refuse an export that lists one launch call, or one GPU operation, twice (two exports
        merged, or an edited one): the join of operations to their calls would count them again.
        A CUDA graph's kernels share their launch's correlationId, so an operation is the same
        one only when its process, device, stream, start and correlationId all repeat."""
        name = self.path.name
        twice = self.con.execute(
            "select correlationId, globalTid from CUPTI_ACTIVITY_KIND_RUNTIME "
            "group by correlationId, globalTid >> 24 having count(*) > 1 limit 1").fetchone()
        if twice:
            raise BadExport(f"{name}: CUPTI_ACTIVITY_KIND_RUNTIME lists the launch call with correlationId {twice[0]} "
                            f"twice (globalTid {twice[1]}); is it two exports merged?")
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            if table not in self.schema.columns:
                continue
            twice = self.con.execute(
                f"select correlationId, start, min(rowid), max(rowid) from {table} "
                "group by globalPid, deviceId, streamId, start, correlationId having count(*) > 1 limit 1").fetchone()
            if twice:
                raise BadExport(f"{name}: {table} lists the same operation twice (rows {twice[2]} and {twice[3]}: "
                                f"correlationId {twice[0]}, start {twice[1]}); is it two exports merged?")

    def _check_schema(self) -> Schema:
        """Refuse exports whose layout this reader does not know."""
        name = self.path.name
        tables = {r[0] for r in self.con.execute("select name from sqlite_master where type in ('table', 'view')")}
        if "META_DATA_EXPORT" not in tables:
            raise BadExport(f"{name} is SQLite but not an Nsight Systems export (no META_DATA_EXPORT table)",
                            "Make one with: nsys export --type sqlite REPORT.nsys-rep")
        meta = {str(k): str(v) for k, v in self.con.execute("select name, value from META_DATA_EXPORT")}
        version = meta.get("EXPORT_SCHEMA_VERSION", "?")
        try:
            major, minor = int(meta["EXPORT_SCHEMA_VERSION_MAJOR"]), int(meta["EXPORT_SCHEMA_VERSION_MINOR"])
        except (KeyError, ValueError):
            raise BadExport(f"{name}: the nsys export does not say its schema version") from None
        if major not in KNOWN_SCHEMA or minor < KNOWN_SCHEMA[major]:
            raise BadExport(f"{name}: nsys export schema {version} is not a layout profkit knows",
                            "profkit reads schema 3.x (tested with 3.20, nsys 2025.3); export with a matching nsys.")
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            raise BadExport(f"{name} holds no CUDA kernels (no CUPTI_ACTIVITY_KIND_KERNEL table)",
                            "Capture with CUDA tracing on: nsys profile -t cuda,nvtx ...")
        columns: dict[str, set[str]] = {}
        for table, cols in {**REQUIRED, **OPTIONAL}.items():
            if table not in tables:
                if table in REQUIRED:
                    raise BadExport(f"{name}: nsys export schema {version} has no {table} table")
                continue
            have = {r[1] for r in self.con.execute(f"pragma table_info({table})")}
            missing = [c for c in cols if c not in have]
            if missing:
                raise BadExport(f"{name}: nsys export schema {version}: {table} lacks {', '.join(missing)}",
                                "This layout is not one profkit knows.")
            columns[table] = have
        return Schema(tables, columns, meta)

    def gpu(self) -> tuple[str | None, str | None]:
        """(name, compute capability) of the first GPU the export describes."""
        if "TARGET_INFO_GPU" not in self.schema.columns:
            return None, None
        row = self.con.execute("select cast(name as text), computeMajor, computeMinor from TARGET_INFO_GPU order by id limit 1").fetchone()
        if not row:
            return None, None
        return row[0], (f"{row[1]}.{row[2]}" if row[1] is not None else None)

    def domains(self) -> Iterator[tuple[int, int, str]]:
        """(globalTid, domainId, domain name) for each NVTX domain created."""
        if "NVTX_EVENTS" not in self.schema.columns:
            return iter(())
        return iter(self.con.execute(
            f"select globalTid, domainId, cast(text as text) from NVTX_EVENTS where eventType = {DOMAIN_CREATE}"))

    def nvtx_ranges(self) -> Iterator[tuple[int, int, str | None, int, int, int]]:
        """(start, end, text, globalTid, domainId, 1 for a start/end range else 0) of every closed
        push/pop and start/end range, by thread and start (a start/end range's thread is the one
        that started it)."""
        if "NVTX_EVENTS" not in self.schema.columns:
            return iter(())
        rows = self.con.execute(f"""
            select n.start, n.end, cast(coalesce(n.text, s.value) as text), n.globalTid, n.domainId,
                   n.eventType in ({", ".join(map(str, START_END))})
            from NVTX_EVENTS n left join StringIds s on s.id = n.textId
            where n.eventType in ({", ".join(map(str, PUSH_POP + START_END))}) and n.end is not null
            order by n.globalTid, n.start, n.end desc""")
        return (_checked(r, "NVTX_EVENTS", ((0, "start"), (1, "end"), (3, "globalTid")), self.path, ordered=(0, 1))
                for r in rows)

    def kernel_names(self) -> Iterator[tuple[int | None, int | None, str | None, str | None]]:
        """(demangledName id, shortName id, demangled name, short name) of each pair launched."""
        return iter(self.con.execute("""
            select k.demangledName, k.shortName, cast(dn.value as text), cast(sn.value as text)
            from (select distinct demangledName, shortName from CUPTI_ACTIVITY_KIND_KERNEL) k
            left join StringIds dn on dn.id = k.demangledName left join StringIds sn on sn.id = k.shortName"""))

    def copy_kinds(self) -> Iterator[tuple[int | None, str]]:
        """(copyKind, the copy's name as the rows have it) of each kind of copy made."""
        if "CUPTI_ACTIVITY_KIND_MEMCPY" not in self.schema.columns:
            return iter(())
        return iter(self.con.execute(f"""
            select m.copyKind, {self._copy_name("m")}
            from (select distinct copyKind from CUPTI_ACTIVITY_KIND_MEMCPY) m"""))

    def _copy_name(self, alias: str) -> str:
        """SQL for a copy's name as the kernel table has it (``[CUDA memcpy Host-to-Device]``),
        from its copyKind through the export's enum where it has one."""
        label = (f"(select label from ENUM_CUDA_MEMCPY_OPER e where e.id = {alias}.copyKind)"
                 if "ENUM_CUDA_MEMCPY_OPER" in self.schema.tables else f"{alias}.copyKind")
        return f"'[CUDA memcpy ' || coalesce({label}, 'Unknown') || ']'"

    def has_memsets(self) -> bool:
        return "CUPTI_ACTIVITY_KIND_MEMSET" in self.schema.columns

    def _gpu_ops_sql(self) -> str:
        """One SELECT over kernels, copies and sets with their launch calls, in launch order."""
        parts = ["""
            select 'kernel' as kind, k.start, k.end, k.deviceId, k.streamId, k.correlationId, k.globalPid,
                   cast(dn.value as text) as name, cast(sn.value as text) as short, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ
            from CUPTI_ACTIVITY_KIND_KERNEL k
            left join StringIds dn on dn.id = k.demangledName
            left join StringIds sn on sn.id = k.shortName"""]
        if "CUPTI_ACTIVITY_KIND_MEMCPY" in self.schema.columns:
            parts.append(f"""
            select 'memcpy', m.start, m.end, m.deviceId, m.streamId, m.correlationId, m.globalPid,
                   {self._copy_name("m")}, null, null, null, null, null, null, null
            from CUPTI_ACTIVITY_KIND_MEMCPY m""")
        if "CUPTI_ACTIVITY_KIND_MEMSET" in self.schema.columns:
            parts.append("""
            select 'memset', s.start, s.end, s.deviceId, s.streamId, s.correlationId, s.globalPid,
                   '[CUDA memset]', null, null, null, null, null, null, null
            from CUPTI_ACTIVITY_KIND_MEMSET s""")
        ops = " union all ".join(parts)
        # A launch call is found by correlation id within the same process (ids restart per process).
        return f"""
            with ops as ({ops})
            select ops.*, r.start as launch_start, r.globalTid as launch_tid
            from ops left join CUPTI_ACTIVITY_KIND_RUNTIME r
              on r.correlationId = ops.correlationId and (r.globalTid >> 24) = (ops.globalPid >> 24)
            order by coalesce(r.start, ops.start), ops.correlationId"""

    def gpu_ops(self, batch: int = 10000) -> Iterator[GpuOp]:
        """Every kernel, memcpy and memset with its launch call, in launch order, streamed.
        Their columns' types were checked over whole tables when the export was opened
        (``_check_types``); each row is checked here to end no earlier than it starts."""
        cur = self.con.execute(self._gpu_ops_sql())
        while True:
            rows = cur.fetchmany(batch)
            if not rows:
                return
            for r in rows:
                if r[2] < r[1]:
                    raise BadExport(f"{self.path.name}: CUPTI_ACTIVITY_KIND_{str(r[0]).upper()} has an entry that "
                                    f"ends before it starts (start {r[1]}, end {r[2]})")
                yield r


# Columns that must hold integers in every row (NVTX end may be NULL: a range never closed).
_INTEGER_COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "correlationId", "globalPid", "deviceId", "streamId",
                                   "demangledName", "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY",
                                   "blockZ"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "correlationId", "globalPid", "deviceId", "streamId", "copyKind"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "correlationId", "globalPid", "deviceId", "streamId"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "correlationId", "globalTid"),
    "NVTX_EVENTS": ("start", "eventType"),
}
# Of those, the launch's grid and block sizes: also from 0 to 2^31 - 1 (as ncu's CSV reader takes them).
_LAUNCH_DIMS = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
_ALLOWED = {False: "('integer')", True: "('integer', 'null')"}


def _integer(value: Any, nullable: bool) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (nullable and value is None)


# Of those, the ones that may also be NULL (a copy or set with no device or stream recorded).
_NULLABLE = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("demangledName", "shortName"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("deviceId", "streamId", "copyKind"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("deviceId", "streamId"),
}


def _checked(row: Any, table: str, ints: tuple[tuple[int, str], ...], path: Path, ordered: tuple[int, int]) -> Any:
    """The row, if its integer columns hold integers and it does not end before it starts;
    else a BadExport naming the table, the column and the value."""
    for i, column in ints:
        v = row[i]
        if not isinstance(v, int) or isinstance(v, bool):
            raise BadExport(f"{path.name}: {table} has {column} = {v!r}, not an integer")
    start, end = row[ordered[0]], row[ordered[1]]
    if end < start:
        raise BadExport(f"{path.name}: {table} has an entry that ends before it starts (start {start}, end {end})")
    return row


# ------------------------------------------------------------------------------ bulk import
def insert_gpu_ops(store: Any, run_id: int, export: NsysExport, names: list[tuple], ranges: list[tuple],
                   segments: list[tuple], windows: list[tuple], ranks: dict[int, int] | None = None) -> dict[str, Any]:
    """Write the export's GPU operations as ``run_id``'s kernel rows in SQL, straight from the
    file: what ``parse.nsys_sqlite`` streams row by row, without a Python object per row.

    ``names``: (key, shortName id, name, short name, precision, tensor_core, family, evidence,
    detail) per operation name, the key being the export's demangledName id for kernels (with
    their shortName id), ``MEMCPY_KEY`` with the copyKind for copies and ``MEMSET_KEY`` for
    sets. ``ranges``: (state index, name, path) of the innermost range of each state, a state
    being a set of ranges open on a thread at once. ``segments``: (globalTid, start, state index
    or None), per thread the state from ``start`` on. ``windows``: (range index, process, start,
    end). ``ranks``: the rank of each process (pid) of a distributed job, for the rows' ``rank``.
    Returns the operations counted by kind (count, time), per state and kind (count,
    time), the kernels each range's process launched in its window, and the operations with no
    launch call. One write transaction: nothing stays if it fails."""
    con = store.conn
    ops_sql = _ops_sql(export)
    # The operations' working table (~250 bytes a row) in memory for an export of up to
    # IN_MEMORY_BYTES (about a million kernels), faster; in a temporary file above, so that
    # memory stays bounded whatever the capture's size.
    small = export.path.stat().st_size <= IN_MEMORY_BYTES
    con.execute(f"pragma temp_store = {'memory' if small else 'file'}")
    try:
        return _insert_gpu_ops(store, con, run_id, export, ops_sql, names, ranges, segments, windows, ranks or {})
    finally:
        if con.in_transaction:
            con.execute("rollback")
        if any(r[1] == "src" for r in con.execute("pragma database_list")):
            con.execute("detach database src")
        con.execute("pragma temp_store = default")


def _insert_gpu_ops(store: Any, con: Any, run_id: int, export: NsysExport, ops_sql: str, names: list[tuple],
                    ranges: list[tuple], segments: list[tuple], windows: list[tuple],
                    ranks: dict[int, int]) -> dict[str, Any]:
    from .database import KERNEL_COLUMNS, STORED_COLUMNS

    with store.write():
        ids = store.intern({t for row in names for t in (row[2], row[3], row[6], row[8]) if t is not None} |
                           {t for row in ranges for t in row[1:] if t is not None})
        con.execute("attach database ? as src", [_ro_uri(export.path)])
        try:
            con.execute("create temp table nm (key integer, sn integer, name_id, short_id, precision, tensor_core, "
                        "family_id, evidence, detail_id, primary key (key, sn))")
            con.executemany("insert into temp.nm values (?, ?, ?, ?, ?, ?, ?, ?, ?)", (
                (k, sn, ids.get(n), ids.get(sh), p, tc, ids.get(f), ev, ids.get(d))
                for k, sn, n, sh, p, tc, f, ev, d in names))
            con.execute("create temp table rg (ix integer primary key, range_id, path_id)")
            con.executemany("insert into temp.rg values (?, ?, ?)", ((i, ids.get(n), ids.get(p)) for i, n, p in ranges))
            con.execute("create temp table seg (gtid integer, start integer, ix integer, primary key (gtid, start))")
            con.executemany("insert or replace into temp.seg values (?, ?, ?)", segments)
            con.execute("create temp table rk (pid integer primary key, rank integer)")
            con.executemany("insert into temp.rk values (?, ?)", ranks.items())
            con.execute(f"create temp table ops as {ops_sql}")
            bad = con.execute("select kind, start, end from temp.ops where end < start limit 1").fetchone()
            if bad:
                raise BadExport(f"{export.path.name}: CUPTI_ACTIVITY_KIND_{str(bad[0]).upper()} has an entry that "
                                f"ends before it starts (start {bad[1]}, end {bad[2]})")
            long = con.execute("select seq, end - start from temp.ops where end - start > ? limit 1",
                               [MAX_DURATION_NS]).fetchone()
            if long:
                raise BadExport(f"launch {long[0]} lasts {long[1]:,} ns, more than a day: not a real duration")
            source = {"run_id": "?", "launch_id": "o.seq", "kind": "o.kind", "duration_ns": "o.end - o.start",
                      "start_ns": "o.start", "grid_x": "o.gx", "grid_y": "o.gy", "grid_z": "o.gz", "block_x": "o.bx",
                      "block_y": "o.by", "block_z": "o.bz", "stream": "o.stream", "device": "o.dev", "rank": "rk.rank",
                      "thread_id": f"o.ltid & {0xFFFFFF}", "nvtx_range": "rg.range_id", "nvtx_path": "rg.path_id",
                      "input_types": "null", "op": "null", "metrics": "null", "precision": "n.precision",
                      "tensor_core": "n.tensor_core", "family": "n.family_id", "evidence": "n.evidence",
                      "evidence_detail": "n.detail_id", "name": "n.name_id", "short_name": "n.short_id"}
            assert set(source) == set(KERNEL_COLUMNS)
            cols = ", ".join(STORED_COLUMNS)
            values = ", ".join(source[c] for c in KERNEL_COLUMNS)
            con.execute(f"insert into kernel_rows ({cols}) select {values} from temp.ops o "
                        "join temp.nm n on n.key = o.key and n.sn is o.sn left join temp.rg rg on rg.ix = o.rix "
                        "left join temp.rk rk on rk.pid = o.pid order by o.seq",
                        [run_id])
            by_kind = {k: (int(n), int(t or 0)) for k, n, t in con.execute(
                "select kind, count(*), sum(end - start) from temp.ops group by kind")}
            per_range = [(int(i), k, int(n), int(t or 0)) for i, k, n, t in con.execute(
                "select rix, kind, count(*), sum(end - start) from temp.ops where rix is not null group by rix, kind")]
            unlaunched = int(con.execute("select count(*) from temp.ops where ltid is null").fetchone()[0])
            launched: dict[int, int] = {}
            if windows:
                con.execute("create index temp.ops_launch on ops (lpid, lstart) where kind = 'kernel'")
                for ix, pid, start, end in windows:
                    launched[ix] = int(con.execute(
                        "select count(*) from temp.ops where kind = 'kernel' and lpid = ? and lstart >= ? and lstart < ?",
                        [pid, start, end]).fetchone()[0])
        finally:
            for table in ("ops", "nm", "rg", "seg", "rk"):
                con.execute(f"drop table if exists temp.{table}")
    return {"by_kind": by_kind, "per_range": per_range, "launched": launched, "unlaunched": unlaunched}


def _ro_uri(path: Path) -> str:
    from .database import file_uri

    return file_uri(path, read_only=True)


IN_MEMORY_BYTES = 256 << 20

# The ``names`` keys of copies (their second key is the copyKind) and sets: negative, apart
# from kernels' string ids (and -2, a kernel with no name).
MEMSET_KEY = -1
MEMCPY_KEY = -1000


def _ops_sql(export: NsysExport) -> str:
    """The GPU operations with their launch calls, numbered in launch order, each with the
    innermost range open for its launching thread then (``temp.seg``): the thread's own state
    where it has ranges of its own open, else its process's (start/end ranges, keyed by the
    globalTid with the thread part zero)."""
    cols = export.schema.columns
    parts = ["""
        select 'kernel' as kind, coalesce(k.demangledName, -2) as key, k.shortName as sn, k.start, k.end,
               k.deviceId as dev,
               k.streamId as stream, k.correlationId as corr, k.globalPid as gpid,
               k.gridX as gx, k.gridY as gy, k.gridZ as gz, k.blockX as bx, k.blockY as by, k.blockZ as bz
        from src.CUPTI_ACTIVITY_KIND_KERNEL k"""]
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in cols:
        parts.append(f"""
        select 'memcpy', {MEMCPY_KEY}, m.copyKind, m.start, m.end, m.deviceId, m.streamId, m.correlationId,
               m.globalPid, null, null, null, null, null, null
        from src.CUPTI_ACTIVITY_KIND_MEMCPY m""")
    if "CUPTI_ACTIVITY_KIND_MEMSET" in cols:
        parts.append(f"""
        select 'memset', {MEMSET_KEY}, null, s.start, s.end, s.deviceId, s.streamId, s.correlationId, s.globalPid,
               null, null, null, null, null, null
        from src.CUPTI_ACTIVITY_KIND_MEMSET s""")
    ops = " union all ".join(parts)
    return f"""
        with ops as ({ops}),
        launched as (
            select ops.*, r.start as lstart, r.globalTid as ltid
            from ops left join src.CUPTI_ACTIVITY_KIND_RUNTIME r
              on r.correlationId = ops.corr and (r.globalTid >> 24) = (ops.gpid >> 24))
        select row_number() over (order by coalesce(lstart, start), corr) - 1 as seq, kind, key, sn, start, end, dev,
               stream, gx, gy, gz, bx, by, bz, lstart, ltid, (ltid >> 24) & {0xFFFFFF} as lpid,
               (gpid >> 24) & {0xFFFFFF} as pid,
               coalesce((select s.ix from temp.seg s where s.gtid = launched.ltid and s.start <= launched.lstart
                         order by s.start desc limit 1),
                        (select s.ix from temp.seg s where s.gtid = launched.ltid - (launched.ltid & {0xFFFFFF})
                           and s.start <= launched.lstart order by s.start desc limit 1)) as rix
        from launched"""
