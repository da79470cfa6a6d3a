"""The reader of Nsight Systems SQLite exports (``nsys export --type sqlite``): the one other
database profkit reads, opened read-only. Every query that reads an export alone lives here
(a reader of a foreign file, with the parsers); ``profkit.parse.nsys_sqlite`` turns what these
return into kernel-table rows and ranges, and ``profkit.store.nsys_import`` copies an export's
GPU operations into profkit's own database in SQL (the bulk import).

* The layout is checked first: ``META_DATA_EXPORT`` must say schema 3.x, and each table and
  column used is checked one by one (other layouts are refused in one line).
* GPU work: ``CUPTI_ACTIVITY_KIND_KERNEL`` (names through ``StringIds``: demangled and short),
  ``CUPTI_ACTIVITY_KIND_MEMCPY`` and ``_MEMSET``, each tied to its launch call in
  ``CUPTI_ACTIVITY_KIND_RUNTIME`` by ``correlationId`` within the same process, in the order
  of those calls, fetched in batches.
* Host-blocking runtime calls (``host_syncs``: stream, event and device synchronisations,
  synchronous copies) from ``CUPTI_ACTIVITY_KIND_RUNTIME``, with the GPU work around each.
* NVTX push/pop and start/end ranges and domain names from ``NVTX_EVENTS``; the GPU from ``TARGET_INFO_GPU``.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

from ..errors import BadExport
from ..files import file_uri
from ..processes import stage, watch
from .schema import DIM_LIMIT, Evidence, Precision, host_sync_call

# Export schema versions this reader knows (major -> oldest minor). 3.20 is what nsys
# 2025.3 writes; the tables and columns used here are checked one by one as well.
KNOWN_SCHEMA = {3: 0}
REQUIRED = {
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start",
        "end",
        "deviceId",
        "streamId",
        "correlationId",
        "globalPid",
        "demangledName",
        "shortName",
        "gridX",
        "gridY",
        "gridZ",
        "blockX",
        "blockY",
        "blockZ",
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid", "correlationId"),
    "StringIds": ("id", "value"),
}
OPTIONAL = {
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start",
        "end",
        "deviceId",
        "streamId",
        "correlationId",
        "globalPid",
        "copyKind",
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start",
        "end",
        "deviceId",
        "streamId",
        "correlationId",
        "globalPid",
    ),
    "NVTX_EVENTS": ("start", "end", "eventType", "text", "textId", "globalTid", "domainId"),
    "TARGET_INFO_GPU": ("name", "computeMajor", "computeMinor"),
}
# Every table read (the enum of copy kinds where there is one): each must be a plain table.
READ_TABLES = ("META_DATA_EXPORT", *REQUIRED, *OPTIONAL, "ENUM_CUDA_MEMCPY_OPER")
PUSH_POP = (59, 70)  # NvtxPushPopRange, NvtxtPushPopRange
START_END = (60,)  # NvtxStartEndRange: a process's range, bound to no thread
DOMAIN_CREATE = 75  # NvtxDomainCreate: text is the domain's name

# One GPU operation and its launch call, as gpu_ops() yields it: (kind, start, end, device,
# stream, correlation, global_pid, name, short_name, grid x, y, z, block x, y, z, launch start,
# launch global_tid). The launch's columns are None for an operation with no launch call.
_Dim = int | None
GpuOp = tuple[
    Literal["kernel", "memcpy", "memset"],
    int,
    int,
    int | None,
    int | None,
    int,
    int,
    str | None,
    str | None,
    _Dim,
    _Dim,
    _Dim,
    _Dim,
    _Dim,
    _Dim,
    int | None,
    int | None,
]

# What the bulk import (``Store.insert_gpu_ops``, ``store/nsys_import.py``) is given, worked out
# in Python (``nsys_sqlite._bulk``), and what it gives back.
# Per operation name: (key, shortName id or copyKind, name, short name, precision, tensor_core,
# family, evidence, evidence detail).
NameRow = tuple[int, int | None, str, str, Precision, bool | None, str | None, Evidence, str]
# Per state (the ranges open on a thread at once): see StateRange below.
# A state's row values: (state index, nvtx_range, nvtx_path, then the attribution columns
# op, module, module_type, shapes, phase, input_types), texts or None.
StateRange = tuple[
    int,
    str | None,
    str | None,
    str | None,
    str | None,
    str | None,
    str | None,
    str | None,
    str | None,
]
STATE_COLUMNS = (
    "nvtx_range",
    "nvtx_path",
    "op",
    "module",
    "module_type",
    "shapes",
    "phase",
    "input_types",
)
# Per thread: (globalTid, start, state index or None), the thread's state from ``start`` on.
Segment = tuple[int, int, int | None]
# An operator call PyTorch's annotation wrote, outermost on its thread: (globalTid, start, end,
# operator, input shapes or None); those of a thread never overlap.
OperatorCall = tuple[int, int, int, str, str | None]
# Per range: (range index, process, start, end).
Window = tuple[int, int | None, int, int]
# A runtime call that blocked the host, as host_syncs() gives it.
HostSyncCall = tuple[int, str, int, int, int, int | None, int | None]


class GpuOpsImport(TypedDict):
    """What the bulk import counted."""

    by_kind: dict[str, tuple[int, int]]  # per kind: (count, summed time)
    per_range: list[tuple[int, str, int, int]]  # (state index, kind, count, summed time)
    launched: dict[int, int]  # per range index: kernels its process launched in its window
    unlaunched: int  # operations with no launch call


@dataclass
class Schema:
    """What an export holds: its tables, the columns of those this reader uses, its metadata."""

    tables: set[str]
    columns: dict[str, set[str]]
    meta: dict[str, str]


class NsysExport:
    """An nsys SQLite export, opened read-only and checked. Close it when done. ``watched``: a
    stop signal cuts its long statements short (processes.stoppable); an export opened in
    another thread is not (signals are the main thread's), and is interrupted by that thread's
    owner instead (``HostSyncsLater.cancel``)."""

    def __init__(self, path: Path, watched: bool = True):
        self.path = path
        self._sync_names: dict[int, str] | None = None  # sync_call_names', once found
        try:
            self.con = sqlite3.connect(file_uri(path, read_only=True), uri=True)
            # Names and NVTX texts are the program's own strings: bytes that are not UTF-8 are
            # shown as U+FFFD rather than failing the import (names are read `cast(... as text)`
            # so that one stored as a BLOB reads as text too).
            self.con.text_factory = lambda b: b.decode("utf-8", "replace")
            self.con.execute("select count(*) from sqlite_master").fetchone()
            if watched:
                watch(self, self.con)  # a stop signal cuts a long statement short
        except sqlite3.DatabaseError as exc:
            raise BadExport(f"{path.name} is not a readable SQLite file: {exc}") from exc
        try:
            self.schema = self._check_schema()
            # The NVTX ranges are read first, here: their columns are checked now. The GPU and
            # runtime tables are checked where they are read (``check``): by the bulk import as
            # it copies them (a type or a repeat there fails a cheap test in its working tables,
            # and only then does this check run, to name the row), by ``gpu_ops`` before it streams.
            self._check_types(("NVTX_EVENTS",))
            stage("types checked")
        except BaseException:
            self.con.close()
            raise

    def close(self) -> None:
        self.con.close()

    @property
    def meta(self) -> dict[str, str]:
        return self.schema.meta

    def check(self) -> None:
        """Every check of the export's rows (types, then repeats), each naming the first row at
        fault: what the streamed reader runs before it reads, and what the bulk import runs
        when its cheap tests (constraints of its working tables) fire, for the message."""
        self._check_types()
        self._check_once()
        for _ in self.kernel_names():  # each name id found in StringIds
            pass

    def _check_types(self, tables: tuple[str, ...] | None = None) -> None:
        """Refuse an export whose times, threads or ids are not integers (SQLite stores whatever
        it is given): one line naming the table, the column and the first such value."""
        for table, columns in INTEGER_COLUMNS.items():
            if table not in self.schema.columns or (tables is not None and table not in tables):
                continue
            present = [c for c in columns if c in self.schema.columns[table]]
            tests = [
                f"typeof({c}) not in {_ALLOWED[c in NULLABLE_COLUMNS.get(table, ())]}"
                for c in present
            ]
            bounded = [c for c in present if c in LAUNCH_DIMS]
            tests += [f"{c} < 0 or {c} >= {DIM_LIMIT}" for c in bounded]
            tests += [f"{c} < 0" for c in present if c in ID_COLUMNS]
            # One scan of the table for all its columns; the column at fault is named after.
            bad = (
                self.con.execute(
                    f"select rowid, {', '.join(present)} from {table} where {' or '.join(tests)} "
                    "limit 1"
                ).fetchone()
                if present
                else None
            )
            if bad is not None:
                rowid, values = bad[0], bad[1:]
                column, value = next(
                    (c, v)
                    for c, v in zip(present, values)
                    if not _integer(v, c in NULLABLE_COLUMNS.get(table, ()))
                    or (c in LAUNCH_DIMS and not 0 <= v < DIM_LIMIT)
                    or (c in ID_COLUMNS and v is not None and v < 0)
                )
                what = (
                    "not an integer"
                    if not _integer(value, False)
                    else "not a whole number from 0 to 2^31 - 1"
                    if column in LAUNCH_DIMS
                    else "a negative id"
                )
                raise BadExport(
                    f"{self.path.name}: {table} has {column} = {value!r}, {what} (row {rowid})"
                )

    def _check_once(self) -> None:
        """Refuse an export that lists one launch call, or one GPU operation, twice (two exports
        merged, or an edited one): the join of operations to their calls would count them again.
        A CUDA graph's kernels share their launch's correlationId, so an operation is the same
        one only when its process, device, stream, start and correlationId all repeat."""
        name = self.path.name
        twice = self.con.execute(
            "select correlationId, globalTid from CUPTI_ACTIVITY_KIND_RUNTIME "
            "group by correlationId, globalTid >> 24 having count(*) > 1 limit 1"
        ).fetchone()
        if twice:
            raise BadExport(
                f"{name}: CUPTI_ACTIVITY_KIND_RUNTIME lists the launch call with correlationId {twice[0]} "
                f"twice (globalTid {twice[1]}); is it two exports merged?"
            )
        for table in (
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET",
        ):
            if table not in self.schema.columns:
                continue
            twice = self.con.execute(
                f"select correlationId, start, min(rowid), max(rowid) from {table} "
                "group by globalPid, deviceId, streamId, start, correlationId having count(*) > 1 limit 1"
            ).fetchone()
            if twice:
                raise BadExport(
                    f"{name}: {table} lists the same operation twice (rows {twice[2]} and {twice[3]}: "
                    f"correlationId {twice[0]}, start {twice[1]}); is it two exports merged?"
                )

    def _check_schema(self) -> Schema:
        """Refuse exports whose layout this reader does not know."""
        name = self.path.name
        found = {
            r[0]: (r[1], r[2])
            for r in self.con.execute(
                "select name, type, sql from sqlite_master where type in ('table', 'view')"
            )
        }
        tables = set(found)
        self._check_plain(found)
        if "META_DATA_EXPORT" not in tables:
            raise BadExport(
                f"{name} is SQLite but not an Nsight Systems export (no META_DATA_EXPORT table)",
                "Make one with: nsys export --type sqlite REPORT.nsys-rep",
            )
        meta = {
            str(k): str(v) for k, v in self.con.execute("select name, value from META_DATA_EXPORT")
        }
        version = meta.get("EXPORT_SCHEMA_VERSION", "?")
        try:
            major, minor = (
                int(meta["EXPORT_SCHEMA_VERSION_MAJOR"]),
                int(meta["EXPORT_SCHEMA_VERSION_MINOR"]),
            )
        except (KeyError, ValueError):
            raise BadExport(f"{name}: the nsys export does not say its schema version") from None
        if major not in KNOWN_SCHEMA or minor < KNOWN_SCHEMA[major]:
            raise BadExport(
                f"{name}: nsys export schema {version} is not a layout profkit knows",
                "profkit reads schema 3.x (tested with 3.20, nsys 2025.3); export with a matching nsys.",
            )
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            raise BadExport(
                f"{name} holds no CUDA kernels (no CUPTI_ACTIVITY_KIND_KERNEL table)",
                "Capture with CUDA tracing on: nsys profile -t cuda,nvtx ...",
            )
        columns: dict[str, set[str]] = {}
        for table, cols in {**REQUIRED, **OPTIONAL}.items():
            if table not in tables:
                if table in REQUIRED:
                    raise BadExport(f"{name}: nsys export schema {version} has no {table} table")
                continue
            have = {r[1] for r in self.con.execute(f"pragma table_info({table})")}
            missing = [c for c in cols if c not in have]
            if missing:
                raise BadExport(
                    f"{name}: nsys export schema {version}: {table} lacks {', '.join(missing)}",
                    "This layout is not one profkit knows.",
                )
            columns[table] = have
        self._check_string_ids()
        return Schema(tables, columns, meta)

    def _check_plain(self, found: dict[str, tuple[str, str | None]]) -> None:
        """Refuse an export in which a table this reader reads (``READ_TABLES``) is a view, a
        virtual table, has generated columns or no rowids: nsys writes plain tables, and SQLite
        would run whatever the definition says at every read (a recursive view never ends, and
        fills the disk with its temporary results); the readers read rows by their rowids."""
        by_name = {n.lower(): (n, kind, sql) for n, (kind, sql) in found.items()}
        without_rowid = self._without_rowid()
        for table in READ_TABLES:
            if table.lower() not in by_name:
                continue
            real, kind, sql = by_name[table.lower()]
            what = (
                "a view"
                if kind == "view"
                else "a virtual table"
                if re.match(r"\s*create\s+virtual\b", sql or "", re.IGNORECASE)
                else "a table without rowids"
                if (
                    real.lower() in without_rowid
                    if without_rowid is not None
                    else re.search(r"\bwithout\s+rowid\b", sql or "", re.IGNORECASE)
                )
                else None
            )
            if what is None and any(
                r[-1] not in (0, 1) for r in self.con.execute(f'pragma table_xinfo("{real}")')
            ):
                what = "a table with generated columns"
            if what is not None:
                raise BadExport(
                    f"{self.path.name}: {real} is {what}, not a plain table as nsys writes it; "
                    "profkit does not read it",
                    "Export the report again with nsys export --type sqlite.",
                )

    def _without_rowid(self) -> set[str] | None:
        """The export's tables declared WITHOUT ROWID (lower case), as SQLite itself says
        (``pragma table_list``, SQLite 3.37 and later: whatever else the declaration holds,
        STRICT or comments); None where this SQLite lacks that pragma (the declaration is read)."""
        try:
            rows = self.con.execute("pragma main.table_list").fetchall()
        except sqlite3.Error:
            return None
        return {str(r[1]).lower() for r in rows if r[4]}

    def _check_string_ids(self) -> None:
        """Refuse an export whose StringIds holds an id twice (two exports merged, or an edited
        one): a name looked up by its id would be two names. Where the id is the table's primary
        key (nsys writes it so) or has a unique index, it is unique already."""
        info = list(self.con.execute("pragma table_info(StringIds)"))
        if [r[1] for r in info if r[5]] == ["id"]:
            return
        for _, index, unique, *_ in self.con.execute("pragma index_list(StringIds)").fetchall():
            if unique and [r[2] for r in self.con.execute(f'pragma index_info("{index}")')] == [
                "id"
            ]:
                return
        twice = self.con.execute(
            "select id from StringIds group by id having count(*) > 1 limit 1"
        ).fetchone()
        if twice:
            raise BadExport(
                f"{self.path.name}: the export's StringIds has duplicate ids ({twice[0]!r} more than "
                "once), so a name looked up by its id is ambiguous; is it two exports merged?"
            )

    def gpu(self) -> tuple[str | None, str | None]:
        """(name, compute capability) of the first GPU the export describes."""
        if "TARGET_INFO_GPU" not in self.schema.columns:
            return None, None
        row = self.con.execute(
            "select cast(name as text), computeMajor, computeMinor from TARGET_INFO_GPU order by id limit 1"
        ).fetchone()
        if not row:
            return None, None
        return row[0], (f"{row[1]}.{row[2]}" if row[1] is not None else None)

    def domains(self) -> Iterator[tuple[int, int, str]]:
        """(globalTid, domainId, domain name) for each NVTX domain created."""
        if "NVTX_EVENTS" not in self.schema.columns:
            return iter(())
        return iter(
            self.con.execute(
                f"select globalTid, domainId, cast(text as text) from NVTX_EVENTS where eventType = {DOMAIN_CREATE}"
            )
        )

    def nvtx_ranges(self) -> Iterator[tuple[int, int, str | None, int, int, int]]:
        """(start, end, text, globalTid, domainId, 1 for a start/end range else 0) of every closed
        push/pop and start/end range, in the table's order (a start/end range's thread is the one
        that started it). The caller orders them as its walk needs: a sort in SQL costs more."""
        if "NVTX_EVENTS" not in self.schema.columns:
            return iter(())
        ranges = (
            f"n.eventType in ({', '.join(map(str, PUSH_POP + START_END))}) and n.end is not null"
        )
        rows = self.con.execute(f"""
            select n.start, n.end, cast(coalesce(n.text, s.value) as text), n.globalTid, n.domainId,
                   n.eventType in ({", ".join(map(str, START_END))})
            from NVTX_EVENTS n left join StringIds s on s.id = n.textId
            where {ranges}""")
        # One scan in SQL for what each row must be (a capture with a range around every operator
        # call has hundreds of thousands); only where one is not are the rows checked one by one,
        # to name it (start is checked with the table's types).
        if not self.con.execute(f"""select exists (select 1 from NVTX_EVENTS n where {ranges} and (
                typeof(n.end) != 'integer' or typeof(n.globalTid) != 'integer' or n.end < n.start))""").fetchone()[
            0
        ]:
            return iter(rows)
        return (
            _checked(
                r,
                "NVTX_EVENTS",
                ((0, "start"), (1, "end"), (3, "globalTid")),
                self.path,
                ordered=(0, 1),
            )
            for r in rows
        )

    def kernel_names(self) -> Iterator[tuple[int | None, int | None, str | None, str | None]]:
        """(demangledName id, shortName id, demangled name, short name) of each pair launched.
        A kernel whose name id StringIds does not hold is refused, naming the id (its name
        would be empty)."""
        for dn_id, sn_id, name, short, dn_found, sn_found in self.con.execute("""
                select k.demangledName, k.shortName, cast(dn.value as text), cast(sn.value as text),
                       dn.id is not null, sn.id is not null
                from (select distinct demangledName, shortName from CUPTI_ACTIVITY_KIND_KERNEL) k
                left join StringIds dn on dn.id = k.demangledName left join StringIds sn on sn.id = k.shortName"""):
            for column, i, found in (
                ("demangledName", dn_id, dn_found),
                ("shortName", sn_id, sn_found),
            ):
                if i is not None and not found:
                    self._check_types()  # an id that is no integer is named so
                    raise BadExport(
                        f"{self.path.name}: CUPTI_ACTIVITY_KIND_KERNEL has {column} = {i!r}, "
                        "an id StringIds does not hold: the kernel's name is missing from the export"
                    )
            yield dn_id, sn_id, name, short

    def copy_kinds(self) -> Iterator[tuple[int | None, str]]:
        """(copyKind, the copy's name as the rows have it) of each kind of copy made."""
        if "CUPTI_ACTIVITY_KIND_MEMCPY" not in self.schema.columns:
            return iter(())
        return iter(
            self.con.execute(f"""
            select m.copyKind, {self._copy_name("m")}
            from (select distinct copyKind from CUPTI_ACTIVITY_KIND_MEMCPY) m""")
        )

    def _copy_name(self, alias: str) -> str:
        """SQL for a copy's name as the kernel table has it (``[CUDA memcpy Host-to-Device]``),
        from its copyKind through the export's enum where it has one."""
        label = (
            f"(select label from ENUM_CUDA_MEMCPY_OPER e where e.id = {alias}.copyKind)"
            if "ENUM_CUDA_MEMCPY_OPER" in self.schema.tables
            else f"{alias}.copyKind"
        )
        return f"'[CUDA memcpy ' || coalesce({label}, 'Unknown') || ']'"

    def has_memsets(self) -> bool:
        return "CUPTI_ACTIVITY_KIND_MEMSET" in self.schema.columns

    def _gpu_ops_sql(self) -> str:
        """One SELECT over kernels, copies and sets with their launch calls, in launch order."""
        parts = [
            """
            select 'kernel' as kind, k.start, k.end, k.deviceId, k.streamId, k.correlationId, k.globalPid,
                   cast(dn.value as text) as name, cast(sn.value as text) as short, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ
            from CUPTI_ACTIVITY_KIND_KERNEL k
            left join StringIds dn on dn.id = k.demangledName
            left join StringIds sn on sn.id = k.shortName"""
        ]
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

    def sync_call_names(self) -> dict[int, str]:
        """The StringIds ids of the runtime calls that block the host (``schema.HOST_SYNC_CALLS``),
        each with its call's name without its version suffix; none where the runtime calls have
        no names. Found once (a scan of the strings), by the bulk import's readers or by
        ``host_syncs``, whichever asks first."""
        if self._sync_names is None:
            if "nameId" not in self.schema.columns["CUPTI_ACTIVITY_KIND_RUNTIME"]:
                self._sync_names = {}
            else:
                self._sync_names = {
                    i: base
                    for i, v in self.con.execute(
                        "select id, cast(value as text) from StringIds where value like 'cu%Synchronize%' "
                        "or value like 'cu%Memcpy%'"
                    )
                    if (base := host_sync_call(v)) is not None
                }
        return dict(self._sync_names)

    def sync_calls(
        self, names: dict[int, str], own_connection: bool = False
    ) -> list[tuple[Any, ...]]:
        """The runtime calls named ``names`` (``sync_call_names``), as ``host_syncs`` takes them:
        (nameId, start, end, globalTid, globalTid >> 24, rowid), in the table's order. One scan
        of the runtime calls, on a connection of its own with ``own_connection`` (another
        thread's: this export's connection is its opener's)."""
        ids = ", ".join(str(int(i)) for i in names)
        sql = (
            "select nameId, start, end, globalTid, globalTid >> 24, rowid "
            f"from CUPTI_ACTIVITY_KIND_RUNTIME where nameId in ({ids})"
        )
        if not own_connection:
            return self.con.execute(sql).fetchall()
        con = sqlite3.connect(file_uri(self.path, read_only=True), uri=True)
        try:
            return con.execute(sql).fetchall()
        finally:
            con.close()

    def host_syncs(
        self, operations: Any = None, calls: list[tuple[Any, ...]] | None = None
    ) -> list[HostSyncCall]:
        """The runtime calls that blocked the host (``schema.HOST_SYNC_CALLS``), in start order:
        (call name without its version suffix, start, end, globalTid, the latest end of the
        GPU operations of its process begun before the call returned, the first start of one
        begun at its end or after). One sort of the operations, then a binary search per call.
        ``operations``: every GPU operation's (globalPid >> 24, start, end), an (n, 3) integer
        array sorted by process and start, where the caller has read them already (the bulk
        import's columns); else they are read here. ``calls``: ``sync_calls``' rows, where the
        caller has found them already (the bulk import's readers, beside its columns); else
        they are found here."""
        names = self.sync_call_names()
        if not names:
            return []
        if calls is None:
            calls = self.sync_calls(names)
        if not calls:
            return []
        # Per process, the operations' starts in order and the latest end so far at each: a call
        # (at its end, when the host went on) follows the operations begun before that instant,
        # and the first begun at it or later is the next. The operations are read unsorted in
        # batches into one integer array and sorted there (a sort in SQL and a Python loop over
        # every operation took twice as long at two million); a value that is not an integer
        # either fails the conversion (named by the type checks then) or is refused by the
        # import's own copy of the operations, which tests every column it reads.
        import numpy as np

        if operations is not None:
            table = operations
        else:
            ops = ["select globalPid >> 24 as pid, start, end from CUPTI_ACTIVITY_KIND_KERNEL"]
            ops += [
                f"select globalPid >> 24, start, end from {t}"
                for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
                if t in self.schema.columns
            ]
            cur = self.con.execute(" union all ".join(ops))
            chunks = []
            try:
                while batch := cur.fetchmany(262144):
                    chunks.append(np.array(batch, dtype=np.int64))
            except (TypeError, ValueError, OverflowError):
                self._check_types()
                raise
            table = np.concatenate(chunks) if chunks else np.empty((0, 3), dtype=np.int64)
            table = table[np.lexsort((table[:, 1], table[:, 0]))]
        pids, firsts = np.unique(table[:, 0], return_index=True)
        bounds = dict(zip(pids.tolist(), zip(firsts.tolist(), [*firsts[1:].tolist(), len(table)])))
        by_pid: dict[int, list[int]] = {}
        for i, call in enumerate(calls):
            by_pid.setdefault(call[4], []).append(i)
        out = []
        for p, which in by_pid.items():
            lo, hi = bounds.get(p, (0, 0)) if isinstance(p, int) else (0, 0)
            st, tops = table[lo:hi, 1], np.maximum.accumulate(table[lo:hi, 2])
            try:
                ends = np.array([calls[i][2] for i in which], dtype=np.int64)
            except (TypeError, ValueError, OverflowError):
                self._check_types()
                raise
            ks = np.searchsorted(st, ends, side="left")
            n = len(st)
            # Only the calls' neighbours become Python integers (not every operation).
            last = (
                np.where(ks > 0, tops[np.maximum(ks - 1, 0)], 0).tolist() if n else [0] * len(which)
            )
            nxt = np.where(ks < n, st[np.minimum(ks, n - 1)], 0).tolist() if n else [0] * len(which)
            for i, k, a, b in zip(which, ks.tolist(), last, nxt):
                nm, s, t, tid, _, rowid = calls[i]
                out.append((s, rowid, names[nm], t, tid, a if k else None, b if k < n else None))
        try:
            out.sort(key=lambda c: (c[0], c[1]))
        except TypeError:  # a start that is not an integer: named by the type checks, in one line
            self._check_types()
            raise
        # The columns are checked where the import reads them, after this: a value read here that
        # is not an integer is named by the type checks now, in one line.
        if not all(type(c[0]) is int and type(c[3]) is int and type(c[4]) is int for c in out):
            self._check_types()
        return [
            (i, name, s, t, tid, last, n) for i, (s, _, name, t, tid, last, n) in enumerate(out)
        ]

    def gpu_ops(self, batch: int = 10000) -> Iterator[GpuOp]:
        """Every kernel, memcpy and memset with its launch call, in launch order, streamed.
        Their columns' types and repeats are checked over whole tables first (``check``);
        each row is checked here to end no earlier than it starts."""
        self.check()
        cur = self.con.execute(self._gpu_ops_sql())
        while True:
            rows = cur.fetchmany(batch)
            if not rows:
                return
            for r in rows:
                if r[2] < r[1]:
                    raise BadExport(
                        f"{self.path.name}: CUPTI_ACTIVITY_KIND_{str(r[0]).upper()} has an entry that "
                        f"ends before it starts (start {r[1]}, end {r[2]})"
                    )
                yield r


# Columns that must hold integers in every row (NVTX end may be NULL: a range never closed).
INTEGER_COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start",
        "end",
        "correlationId",
        "globalPid",
        "deviceId",
        "streamId",
        "demangledName",
        "shortName",
        "gridX",
        "gridY",
        "gridZ",
        "blockX",
        "blockY",
        "blockZ",
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start",
        "end",
        "correlationId",
        "globalPid",
        "deviceId",
        "streamId",
        "copyKind",
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start",
        "end",
        "correlationId",
        "globalPid",
        "deviceId",
        "streamId",
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "correlationId", "globalTid"),
    "NVTX_EVENTS": ("start", "eventType"),
}
# Of those, the launch's grid and block sizes: also from 0 to 2^31 - 1 (as ncu's CSV reader takes them).
LAUNCH_DIMS = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
# And the ids (of a device, a stream, a name in StringIds, a kind of copy): never negative. The
# import keys its working tables with negative values of its own (no name, a copy, a set, NULL).
ID_COLUMNS = ("deviceId", "streamId", "demangledName", "shortName", "copyKind")
_ALLOWED = {False: "('integer')", True: "('integer', 'null')"}


def integer_test(table: str, alias: str, columns: set[str]) -> str:
    """SQL true where a row of ``table`` (as ``alias``) passes ``_check_types``' tests of the
    columns it has: the bulk import's cheap test, made as it copies the row."""
    tests = [
        f"typeof({alias}.{c}) in {_ALLOWED[c in NULLABLE_COLUMNS.get(table, ())]}"
        for c in INTEGER_COLUMNS[table]
        if c in columns
    ]
    tests += [
        f"{alias}.{c} >= 0 and {alias}.{c} < {DIM_LIMIT}" for c in LAUNCH_DIMS if c in columns
    ]
    tests += [f"coalesce({alias}.{c} >= 0, 1)" for c in ID_COLUMNS if c in columns]
    return " and ".join(tests) or "1"


def _integer(value: Any, nullable: bool) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (nullable and value is None)


# Of those, the ones that may also be NULL (a copy or set with no device or stream recorded).
NULLABLE_COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("demangledName", "shortName"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("deviceId", "streamId", "copyKind"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("deviceId", "streamId"),
}


def _checked(
    row: Any, table: str, ints: tuple[tuple[int, str], ...], path: Path, ordered: tuple[int, int]
) -> Any:
    """The row, if its integer columns hold integers and it does not end before it starts;
    else a BadExport naming the table, the column and the value."""
    for i, column in ints:
        v = row[i]
        if not isinstance(v, int) or isinstance(v, bool):
            raise BadExport(f"{path.name}: {table} has {column} = {v!r}, not an integer")
    start, end = row[ordered[0]], row[ordered[1]]
    if end < start:
        raise BadExport(
            f"{path.name}: {table} has an entry that ends before it starts (start {start}, end {end})"
        )
    return row


# The ``names`` keys of copies (their second key is the copyKind) and sets: negative, apart
# from kernels' string ids (and -2, a kernel with no name).
MEMSET_KEY = -1
MEMCPY_KEY = -1000


# An export at least this large has its host syncs found by a second thread while the import
# writes its GPU operations (2.8 s of a 26 s import at two million kernels on a 2-core machine).
# Below, the thread's own connection and schema checks cost more than they save.
PARALLEL_BYTES = 64 << 20


class HostSyncsLater:
    """``NsysExport.host_syncs()`` of ``export``, later: from the operations the bulk import
    read as columns (``from_operations``), or, on a machine this process may run on two or more
    cores of, for an export of ``PARALLEL_BYTES`` or more, in a thread of its own once
    ``start()`` is called (with a connection of its own: SQLite's statements and numpy's sort
    let go of Python's lock, so the import's SQL in this thread goes on meanwhile). ``result()``
    waits for it, or finds the calls itself where neither was done (never before the columns
    are read: a 59 MB export's calls took 0.6-0.9 s of SQL on the H200 that its columns give in
    a few milliseconds).
    Where the thread fails, the calls are found again here, so that a bad export's error is
    raised as the import always raises it; ``cancel()`` cuts its statement short."""

    def __init__(self, export: NsysExport) -> None:
        self.export = export
        self.calls: list[HostSyncCall] | None = None
        self.thread: threading.Thread | None = None
        self._found: list[HostSyncCall] | None = None
        self._con: sqlite3.Connection | None = None
        self._stop = threading.Event()
        self._parallel = cores() > 1 and export.path.stat().st_size >= PARALLEL_BYTES

    def start(self) -> None:
        """Start the thread (a large export's, where nothing has found the calls yet): the
        streamed rows' walk and the bulk import's SQL path start it; the bulk import's columns
        give the calls instead (``from_operations``), without a thread beside the columns'
        own."""
        if self.calls is None and self.thread is None and self._parallel:
            self.thread = threading.Thread(
                target=self._find, name="profkit host syncs", daemon=True
            )
            self.thread.start()

    def from_operations(self, operations: Any, calls: list[tuple[Any, ...]] | None) -> None:
        """The calls, found here and now from every GPU operation's (globalPid >> 24, start,
        end) and the blocking runtime calls the caller has read (``NsysExport.host_syncs``)."""
        if self.calls is None:
            self.cancel()
            self.calls = self.export.host_syncs(operations, calls)

    def _find(self) -> None:
        try:
            other = NsysExport(self.export.path, watched=False)
            try:
                self._con = other.con
                if not self._stop.is_set():
                    self._found = other.host_syncs()
            finally:
                other.close()
        except BaseException:  # found again by result(), where its error is the import's
            self._found = None

    def result(self) -> list[HostSyncCall]:
        if self.calls is None:
            if self.thread is not None:
                self.thread.join()
                self.thread = None
            found = self._found
            self.calls = found if found is not None else self.export.host_syncs()
        return self.calls

    def cancel(self) -> None:
        if self.thread is not None:
            self._stop.set()
            con = self._con
            if con is not None:
                try:
                    con.interrupt()  # meant to be called from another thread
                except sqlite3.ProgrammingError:  # closed already
                    pass
            self.thread.join()
            self.thread = None


def cores() -> int:
    """The cores this process may run on (its affinity, where the platform tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
