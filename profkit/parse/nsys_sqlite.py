"""Nsight Systems SQLite exports (``nsys export --type sqlite``), read in SQL and streamed.

* GPU work: ``CUPTI_ACTIVITY_KIND_KERNEL`` (names through ``StringIds``: demangled and short),
  ``CUPTI_ACTIVITY_KIND_MEMCPY`` and ``_MEMSET``, one row each, ``kind`` kernel, memcpy or
  memset, in the order of their launch calls.
* Each is tied to its launch call in ``CUPTI_ACTIVITY_KIND_RUNTIME`` by ``correlationId``
  within the same process; the NVTX push/pop ranges (``NVTX_EVENTS``) open on that call's
  thread when it started are its ranges: the semantics of ``nsys stats``' nvtx_kern_sum and
  nvtx_gpu_proj_sum. Start/end ranges, which belong to no thread, are not used.
* The GPU comes from ``TARGET_INFO_GPU``; the schema version from ``META_DATA_EXPORT``.

Nothing loads a whole table into Python: one query, ordered by launch time, feeds the rows
to the store as they come, and a walk over the (few) ranges attributes them on the way. A
capture of millions of kernels imports in bounded memory.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import BadExport
from ..names import short_name
from .ranges import RANGE, OpenRange, attribute, place, range_rows
from .schema import Capture

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
DOMAIN_CREATE = 75   # NvtxDomainCreate: text is the domain's name
TID_MASK = 0xFFFFFF


def _pid(global_id: int) -> int:
    return (global_id >> 24) & TID_MASK


def connect(path: Path) -> sqlite3.Connection:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        con.execute("select count(*) from sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise BadExport(f"{path.name} is not a readable SQLite file: {exc}") from exc
    return con


@dataclass
class Schema:
    """What an export holds: its tables, the columns of those this reader uses, its metadata."""

    tables: set[str]
    columns: dict[str, set[str]]
    meta: dict[str, str]


def check_schema(con: sqlite3.Connection, path: Path) -> Schema:
    """Refuse exports whose layout this reader does not know."""
    tables = {r[0] for r in con.execute("select name from sqlite_master where type in ('table', 'view')")}
    if "META_DATA_EXPORT" not in tables:
        raise BadExport(f"{path.name} is SQLite but not an Nsight Systems export (no META_DATA_EXPORT table)",
                        "Make one with: nsys export --type sqlite REPORT.nsys-rep")
    meta = dict(con.execute("select name, value from META_DATA_EXPORT"))
    version = meta.get("EXPORT_SCHEMA_VERSION", "?")
    try:
        major, minor = int(meta["EXPORT_SCHEMA_VERSION_MAJOR"]), int(meta["EXPORT_SCHEMA_VERSION_MINOR"])
    except (KeyError, ValueError):
        raise BadExport(f"{path.name}: the nsys export does not say its schema version") from None
    if major not in KNOWN_SCHEMA or minor < KNOWN_SCHEMA[major]:
        raise BadExport(f"{path.name}: nsys export schema {version} is not a layout profkit knows",
                        "profkit reads schema 3.x (tested with 3.20, nsys 2025.3); export with a matching nsys.")
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        raise BadExport(f"{path.name} holds no CUDA kernels (no CUPTI_ACTIVITY_KIND_KERNEL table)",
                        "Capture with CUDA tracing on: nsys profile -t cuda,nvtx ...")
    columns: dict[str, set[str]] = {}
    for table, cols in {**REQUIRED, **OPTIONAL}.items():
        if table not in tables:
            if table in REQUIRED:
                raise BadExport(f"{path.name}: nsys export schema {version} has no {table} table")
            continue
        have = {r[1] for r in con.execute(f"pragma table_info({table})")}
        missing = [c for c in cols if c not in have]
        if missing:
            raise BadExport(f"{path.name}: nsys export schema {version}: {table} lacks {', '.join(missing)}",
                            "This layout is not one profkit knows.")
        columns[table] = have
    return Schema(tables, columns, meta)


def _gpu_ops_sql(schema: Schema) -> str:
    """One SELECT over kernels, copies and sets with their launch calls, in launch order."""
    parts = ["""
        select 'kernel' as kind, k.start, k.end, k.deviceId, k.streamId, k.correlationId, k.globalPid,
               dn.value as name, sn.value as short, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ
        from CUPTI_ACTIVITY_KIND_KERNEL k
        left join StringIds dn on dn.id = k.demangledName
        left join StringIds sn on sn.id = k.shortName"""]
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in schema.columns:
        label = ("(select label from ENUM_CUDA_MEMCPY_OPER e where e.id = m.copyKind)"
                 if "ENUM_CUDA_MEMCPY_OPER" in schema.tables else "m.copyKind")
        parts.append(f"""
        select 'memcpy', m.start, m.end, m.deviceId, m.streamId, m.correlationId, m.globalPid,
               '[CUDA memcpy ' || coalesce({label}, 'Unknown') || ']', null, null, null, null, null, null, null
        from CUPTI_ACTIVITY_KIND_MEMCPY m""")
    if "CUPTI_ACTIVITY_KIND_MEMSET" in schema.columns:
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


def _ranges(con: sqlite3.Connection, schema: Schema) -> list[OpenRange]:
    """The push/pop ranges, sorted by thread and start, with their paths and depths."""
    if "NVTX_EVENTS" not in schema.columns:
        return []
    domains = {}
    for gtid, dom, text in con.execute(f"select globalTid, domainId, text from NVTX_EVENTS where eventType = {DOMAIN_CREATE}"):
        domains[(_pid(gtid or 0), dom)] = text
    out = []
    rows = con.execute(f"""
        select n.start, n.end, coalesce(n.text, s.value), n.globalTid, n.domainId
        from NVTX_EVENTS n left join StringIds s on s.id = n.textId
        where n.eventType in ({", ".join(map(str, PUSH_POP))}) and n.end is not null
        order by n.globalTid, n.start, n.end desc""")
    for start, end, text, gtid, dom in rows:
        r = OpenRange(text or "", domains.get((_pid(gtid), dom)), gtid & TID_MASK, start, end, process=_pid(gtid))
        r.global_tid = gtid
        out.append(r)
    for _ in attribute((r.global_tid, r.start, RANGE, r) for r in out):  # sets paths and depths
        pass
    return out


def read_nsys_sqlite(path: str | Path) -> Capture:
    """A streamed Capture: ``capture.rows()`` yields kernel-table rows in launch order and fills
    ``capture.ranges`` (with per-range counts) once it has yielded the last one."""
    path = Path(path)
    con = connect(path)
    schema = check_schema(con, path)
    gpu_name = cc = None
    if "TARGET_INFO_GPU" in schema.columns:
        row = con.execute("select name, computeMajor, computeMinor from TARGET_INFO_GPU order by id limit 1").fetchone()
        if row:
            gpu_name, cc = row[0], f"{row[1]}.{row[2]}" if row[1] is not None else None
    meta = schema.meta
    capture = Capture(kernels=None, tool="nsys", tool_version=meta.get("EXPORT_PRODUCT_VERSION"), gpu_name=gpu_name,
                      compute_capability=cc, source_format="nsys-sqlite")
    ranges = _ranges(con, schema)
    sql = _gpu_ops_sql(schema)
    # Until the rows are read the ranges are known but not counted.
    capture.ranges = [{"path": r.path, "name": r.name} for r in ranges]

    def rows() -> Iterator[dict]:
        yield from _attributed_rows(con, sql, ranges, capture)

    capture.rows = rows
    capture.notes.append(f"nsys export schema {meta.get('EXPORT_SCHEMA_VERSION', '?')}")
    return capture


def _attributed_rows(con: sqlite3.Connection, sql: str, ranges: list[OpenRange], capture: Capture) -> Iterator[dict]:
    """Walk GPU operations in launch order beside the ranges' starts and ends in time order.

    Per thread, the open push/pop ranges form a stack; an operation whose launch call started
    at t on thread T belongs to the ranges open on T at t (start <= t < end). Per process,
    a running count of kernel launches gives, at each range's end, how many kernels the whole
    process launched while it was open; less the range's own, that is other_thread_kernels.
    """
    events = sorted([(r.start, 1, i) for i, r in enumerate(ranges)] + [(r.end, 0, i) for i, r in enumerate(ranges)])
    ev = 0
    open_by_thread: dict[int, list[OpenRange]] = {}
    launched: dict[int, int] = {}  # kernels launched so far, per process
    at_start: dict[int, int] = {}
    others: dict[int, int] = {}  # kernels the whole process launched while each range was open

    def advance(t: float) -> None:
        """Open and close the ranges whose start or end is at or before t."""
        nonlocal ev
        while ev < len(events) and events[ev][0] <= t:
            _, is_start, i = events[ev]
            r = ranges[i]
            if is_start:
                open_by_thread.setdefault(r.global_tid, []).append(r)
                at_start[i] = launched.get(r.process, 0)
            else:
                stack = open_by_thread.get(r.global_tid, [])
                if r in stack:
                    stack.remove(r)
                others[i] = launched.get(r.process, 0) - at_start.get(i, 0)
            ev += 1

    unlaunched = 0
    cur = con.execute(sql)
    launch_id = 0
    while True:
        batch = cur.fetchmany(10000)
        if not batch:
            break
        for (kind, start, end, dev, stream, corr, gpid, name, short, gx, gy, gz, bx, by, bz, l_start, l_tid) in batch:
            advance(l_start if l_start is not None else start)
            name = name or ""
            row = {
                "launch_id": launch_id, "kind": kind, "name": name, "short_name": short or short_name(name),
                "duration_ns": end - start, "grid_x": gx, "grid_y": gy, "grid_z": gz,
                "block_x": bx, "block_y": by, "block_z": bz, "stream": stream, "device": dev,
                "thread_id": l_tid & TID_MASK if l_tid is not None else None,
                "nvtx_range": None, "nvtx_path": None, "metrics": {}, "input_types": None,
            }
            launch_id += 1
            if l_tid is None:
                unlaunched += 1
            else:
                place(row, open_by_thread.get(l_tid) or [])
                if kind == "kernel":
                    pid = _pid(l_tid)
                    launched[pid] = launched.get(pid, 0) + 1
            yield row
    advance(float("inf"))
    index = {id(r): i for i, r in enumerate(ranges)}
    capture.ranges = range_rows(ranges, lambda r: others.get(index[id(r)], 0) - r.kernels, gpu=True)
    if unlaunched:
        capture.notes.append(f"{unlaunched} GPU operations have no launch call in the export, so no range")
    con.close()
