"""The bulk import of an Nsight Systems export: its GPU operations copied into profkit's own
database by SQL straight from the file (ATTACHed read-only), with names, verdicts and ranges
worked out once each by ``profkit.parse.nsys_sqlite``. The export's reader is
``profkit.parse.nsys_export``; ``Store.insert_gpu_ops`` is the way in."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import BadExport
from ..files import file_uri
from ..parse.nsys_export import (
    MEMCPY_KEY,
    MEMSET_KEY,
    STATE_COLUMNS,
    GpuOpsImport,
    NameRow,
    NsysExport,
    OperatorCall,
    Segment,
    StateRange,
    Window,
    integer_test,
)
from ..parse.schema import MAX_DURATION_NS
from ..processes import stage
from . import nsys_columns
from .fine_aggregates import fill_fine_aggregates, fine_keys, key_sentinel
from .layout import (
    GROUP_COLUMNS,
    KERNEL_COLUMN_OF,
    KERNEL_COLUMNS,
    LAUNCH_COLUMNS,
    STORED_COLUMNS,
    split_statements,
)

# The names' key where an operation has no short name (copies, sets): the sentinel the
# operations' groups hold for it too (``key_sentinel("sn")``).
NO_SHORT_NAME = nsys_columns.LOW


def insert_gpu_ops(
    store: Any,
    run_id: int,
    export: NsysExport,
    names: list[NameRow],
    ranges: Callable[[list[int]], list[StateRange]],
    segments: list[Segment],
    windows: list[Window],
    ranks: dict[int, int] | None = None,
    operators: list[OperatorCall] | None = None,
    operations_read: Callable[[Any, Any], None] | None = None,
) -> GpuOpsImport:
    """Write the export's GPU operations as ``run_id``'s kernel rows in SQL, straight from the
    file: what ``parse.nsys_sqlite`` streams row by row, without a Python object per row.

    ``names``: (key, shortName id, name, short name, precision, tensor_core, family, evidence,
    detail) per operation name, the key being the export's demangledName id for kernels (with
    their shortName id), ``MEMCPY_KEY`` with the copyKind for copies and ``MEMSET_KEY`` for
    sets. ``segments``: (globalTid, start, state index or None), per thread the state from
    ``start`` on, a state being a set of ranges open on a thread at once. ``ranges``: given the
    states some operation was launched in, their rows (state index, the innermost range's name
    and path, the attribution columns): asked once the operations are placed, since with a range
    around every operator call (PyTorch's annotation) most states hold no operation. ``operators``:
    the operator calls PyTorch's annotation wrote, outermost on their thread (none overlap): a
    launch in one has its operator and shapes, unless its state has profkit's own operator range
    (which says more), and over any range merely named like an operator. ``windows``: (range
    index, process, start, end). ``ranks``: the rank of each process (pid) of a distributed job,
    for the rows' ``rank``. ``operations_read``: called once the operations are read, with every
    operation's (globalPid >> 24, start, end) as an (n, 3) array and the blocking runtime calls
    (``NsysExport.host_syncs``' ``calls``) where the columnar path read them (``nsys_columns``),
    or None and None where SQL is to (the host syncs' search uses them).
    Returns the operations counted by kind (count, time), per state and kind (count,
    time), the kernels each range's process launched in its window, and the operations with no
    launch call. One write transaction: nothing stays if it fails."""
    con = store.conn
    ops_sql = _ops_sql(export)

    ops = nsys_columns.read(export, segments, operators or [])
    stage("operations read as columns" if ops is not None else "operations left to SQL")
    if operations_read is not None:
        if ops is not None:
            operations_read(nsys_columns.host_operations(ops), ops.sync_calls)
        else:
            operations_read(None, None)
    made: list[nsys_columns.Scratch] = []  # the scratch files, once the groups are numbered
    try:
        # The operations' working table (~250 bytes a row) in memory for an export of up to
        # IN_MEMORY_BYTES (about a million kernels), faster; in a temporary file above, so that
        # memory stays bounded whatever the capture's size.
        small = export.path.stat().st_size <= IN_MEMORY_BYTES
        con.execute(f"pragma temp_store = {'memory' if small else 'file'}")
        return _insert_gpu_ops(
            store,
            con,
            run_id,
            export,
            ops_sql,
            names,
            ranges,
            segments,
            windows,
            ranks or {},
            operators or [],
            ops,
            made,
        )
    finally:
        if con.in_transaction:
            con.execute("rollback")
        for attached in [r[1] for r in con.execute("pragma database_list")]:
            if attached == "src" or attached.startswith(SCRATCH):
                con.execute(f"detach database {attached}")
        con.execute("pragma temp_store = default")
        for scratch in made:
            scratch.close()


def _insert_gpu_ops(
    store: Any,
    con: Any,
    run_id: int,
    export: NsysExport,
    ops_sql: str,
    names: list[NameRow],
    ranges: Callable[[list[int]], list[StateRange]],
    segments: list[Segment],
    windows: list[Window],
    ranks: dict[int, int],
    operators: list[OperatorCall],
    columns: nsys_columns.Ops | None,
    made: list[nsys_columns.Scratch],
) -> GpuOpsImport:
    with store.write():
        ids = store.intern(
            {t for row in names for t in (row[2], row[3], row[6], row[8]) if t is not None}
            | {t for row in operators for t in row[3:] if t is not None}
        )
        con.execute("attach database ? as src", [_ro_uri(export.path)])
        try:
            # Keyed without rowids (one search a launch, not two); a copy's or set's missing
            # short name is NO_SHORT_NAME there (a key holds no NULL).
            con.execute(
                "create temp table nm (key integer not null, sn integer not null, name_id, short_id, precision, "
                "tensor_core, family_id, evidence, detail_id, primary key (key, sn)) without rowid"
            )
            con.executemany(
                "insert or ignore into temp.nm values (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    (
                        k,
                        NO_SHORT_NAME if sn is None else sn,
                        ids.get(n),
                        ids.get(sh),
                        p,
                        tc,
                        ids.get(f),
                        ev,
                        ids.get(d),
                    )
                    for k, sn, n, sh, p, tc, f, ev, d in names
                ),
            )
            con.execute(
                "create temp table seg (gtid integer, start integer, ix integer, primary key (gtid, start))"
            )
            con.executemany("insert or replace into temp.seg values (?, ?, ?)", segments)
            con.execute(
                "create temp table oc (ix integer primary key, gtid integer, start integer, end integer, "
                "op_id, shapes_id)"
            )
            con.executemany(
                "insert into temp.oc (gtid, start, end, op_id, shapes_id) values (?, ?, ?, ?, ?)",
                (
                    (g, a, b, ids[op], ids.get(sh) if sh is not None else None)
                    for g, a, b, op, sh in operators
                ),
            )
            con.execute("create index temp.oc_at on oc (gtid, start)")
            con.execute("create temp table rk (pid integer primary key, rank integer)")
            con.executemany("insert into temp.rk values (?, ?)", ranks.items())
            stage("import tables")
            # One pass over the operations groups them by what their rows' aggregates and the
            # counts below group by (an upsert per operation into a small table, no sort): the
            # counts by kind, by state and kind, of operations with no launch, and the run's
            # aggregates (``writes.write_aggregates``) are made from those few groups.
            # NULL's sentinel in the key (a unique index holds NULLs apart)
            low = key_sentinel("sn")
            con.execute(
                "create temp table opg (kind, key, sn, rix, oix, pid, dev, launches, time_ns, min_ns, max_ns, "
                "first_launch, min_thread, unlaunched)"
            )
            con.execute(
                "create unique index temp.opg_key on opg (kind, key, sn, rix, oix, pid, dev)"
            )
            if columns is None:
                # seq, the launch order, is the table's rowid: the rows are written in that order (the
                # window's) and read back in it, so that the copy into kernel_rows sorts nothing.
                # The export's launch calls keyed as the join looks them up (by correlation id within a
                # process), which also refuses a call listed twice (the key is unique) and a value
                # that is not an integer (the key is NULL then): the export's checks then name it.
                con.execute(
                    "create temp table rt (corr integer, pid integer, start integer, gtid integer, primary key (corr, pid)) without rowid"
                )
                rt = "CUPTI_ACTIVITY_KIND_RUNTIME"
                _checked(
                    export,
                    con,
                    f"insert into temp.rt select case when {integer_test(rt, 'r', export.schema.columns[rt])} "
                    f"then r.correlationId end, r.globalTid >> 24, r.start, r.globalTid from src.{rt} r",
                )
                stage("launch calls")
                # kind NOT NULL: an operation whose columns are not all integers has none (its cheap test).
                con.execute(
                    f"create temp table ops (seq integer primary key, kind not null, {', '.join(nsys_columns.OPS_COLUMNS[1:])})"
                )
                _checked(export, con, f"insert into temp.ops {ops_sql}")
                stage("ops table")
                _check_once(export, con)
                bad = con.execute(
                    "select kind, start, end from temp.ops where end < start limit 1"
                ).fetchone()
                if bad:
                    raise BadExport(
                        f"{export.path.name}: CUPTI_ACTIVITY_KIND_{str(bad[0]).upper()} has an entry that "
                        f"ends before it starts (start {bad[1]}, end {bad[2]})"
                    )
                long = con.execute(
                    "select seq, end - start from temp.ops where end - start > ? limit 1",
                    [MAX_DURATION_NS],
                ).fetchone()
                if long:
                    raise BadExport(
                        f"launch {long[0]} lasts {long[1]:,} ns, more than a day: not a real duration"
                    )
                stage("ops checked")
                con.execute(f"""insert into temp.opg
                    select kind, key, coalesce(sn, {low}), coalesce(rix, {low}), coalesce(oix, {low}), pid,
                           coalesce(dev, {low}), 1, end - start, end - start, end - start, seq, ltid & {0xFFFFFF},
                           ltid is null
                    from temp.ops where true
                    on conflict (kind, key, sn, rix, oix, pid, dev) do update set
                        launches = launches + 1, time_ns = time_ns + excluded.time_ns,
                        min_ns = min(min_ns, excluded.min_ns), max_ns = max(max_ns, excluded.max_ns),
                        first_launch = min(first_launch, excluded.first_launch),
                        min_thread = min(coalesce(min_thread, excluded.min_thread), coalesce(excluded.min_thread, min_thread)),
                        unlaunched = unlaunched + excluded.unlaunched""")
            # The rows of the states an operation was launched in, their texts interned.
            rows = ranges(
                [
                    int(r[0])
                    for r in con.execute(f"select distinct rix from temp.opg where rix != {low}")
                ]
                if columns is None
                else nsys_columns.states_launched_in(columns)
            )
            ids.update(
                store.intern({t for row in rows for t in row[1:] if t is not None and t not in ids})
            )
            con.execute(
                f"create temp table rg (ix integer primary key, {', '.join(c + '_id' for c in STATE_COLUMNS)})"
            )
            con.executemany(
                f"insert into temp.rg values (?{', ?' * len(STATE_COLUMNS)})",
                ((r[0], *(ids.get(t) if t is not None else None for t in r[1:])) for r in rows),
            )
            stage("states")
            if columns is not None:
                # Each operation's launch group numbered, then the scratch files written on a
                # thread of their own while the operations are grouped (below) and the groups
                # written.
                first = nsys_columns.launch_groups(columns, *_state_codes(rows, operators), ranks)
                made.append(nsys_columns.Scratch(columns))
                stage("launch groups numbered")
                # in batches: with a range around every operator call, about a group an operation
                con.executemany(
                    f"insert into temp.opg values ({', '.join('?' * 14)})",
                    nsys_columns.groups(columns),
                )
                stage("operations grouped")
            source = {
                "run_id": "?",
                "launch_id": "o.seq",
                "kind": "o.kind",
                "duration_ns": "o.end - o.start",
                "start_ns": "o.start",
                "grid_x": "o.gx",
                "grid_y": "o.gy",
                "grid_z": "o.gz",
                "block_x": "o.bx",
                "block_y": "o.by",
                "block_z": "o.bz",
                "stream": "o.stream",
                "device": "o.dev",
                "rank": "rk.rank",
                "thread_id": f"o.ltid & {0xFFFFFF}",
                **{c: f"rg.{c}_id" for c in STATE_COLUMNS},
                # The operator call around the launch, unless profkit's own operator range
                # (which always says the phase) is, and over a range merely named like one.
                **{
                    c: f"case when rg.phase_id is null and oc.ix is not null then oc.{c}_id else rg.{c}_id end"
                    for c in ("op", "shapes")
                },
                "metrics": "null",
                "precision": "n.precision",
                "tensor_core": "n.tensor_core",
                "family": "n.family_id",
                "evidence": "n.evidence",
                "evidence_detail": "n.detail_id",
                "name": "n.name_id",
                "short_name": "n.short_id",
            }
            assert set(source) == set(KERNEL_COLUMNS)
            joins = (
                f"cross join temp.nm n on n.key = o.key and n.sn = coalesce(o.sn, {NO_SHORT_NAME}) "
                "left join temp.rg rg on rg.ix = o.rix left join temp.oc oc on oc.ix = o.oix "
                "left join temp.rk rk on rk.pid = o.pid"
            )
            if columns is not None:
                # Each launch group's row from its first operation, then each launch's own row
                # from the scratch files (8 values; no look-up but its state's range names).
                con.execute(
                    f"create temp table reps (grp integer primary key, {', '.join(nsys_columns.GROUP_SOURCE)})"
                )
                con.executemany(
                    f"insert into temp.reps values (?{', ?' * len(nsys_columns.GROUP_SOURCE)})",
                    nsys_columns.group_sources(columns, first),
                )
                con.execute(
                    f"insert into kernel_groups (run_id, id, {', '.join(GROUP_COLUMNS)}) select ?, o.grp, "
                    f"{', '.join(source[KERNEL_COLUMN_OF[c]] for c in GROUP_COLUMNS)} from temp.reps o {joins} order by o.grp",
                    [run_id],
                )
                stage("launch groups written")
                scratch = made[-1]
                # cross join: the operations are the outer loop, read in seq order (no sort).
                for i in range(len(scratch.parts)):  # each part once written, the next meanwhile
                    part = f"{SCRATCH}{i}"
                    con.execute(f"attach database ? as {part}", [_ro_uri(scratch.part(i))])
                    con.execute(
                        f"insert into launches ({', '.join(LAUNCH_COLUMNS)}) select ?, o.seq, o.grp, "
                        f"o.end - o.start, o.start, rg.nvtx_range_id, rg.nvtx_path_id, null from {part}.ops o "
                        "left join temp.rg rg on rg.ix = o.rix order by o.seq",
                        [run_id],
                    )
                    scratch.done_with(i)  # its file goes now (the attached one reads on)
            else:
                # Every launch's row as schema 15 stored it, then split (a small export's path).
                con.execute(f"create temp table kr ({', '.join(STORED_COLUMNS)})")
                con.execute(
                    f"insert into temp.kr select {', '.join(source[c] for c in KERNEL_COLUMNS)} "
                    f"from temp.ops o {joins} order by o.seq",
                    [run_id],
                )
                for sql in split_statements("temp.kr"):
                    con.execute(sql)
            stage("rows written")
            by_kind: dict[str, tuple[int, int]] = {}
            per_range: list[tuple[int, str, int, int]] = []
            unlaunched = 0
            for i, k, n, t, u in con.execute(
                f"select nullif(rix, {low}), kind, sum(launches), sum(time_ns), "
                "sum(unlaunched) from temp.opg group by rix, kind"
            ):
                if isinstance(t, float):  # a sum past 2^63 (SQLite goes on in floating point)
                    raise OverflowError("the GPU operations' summed time is past 2^63 ns")
                n, t = int(n), int(t or 0)
                had = by_kind.get(k, (0, 0))
                by_kind[k] = (had[0] + n, had[1] + t)
                unlaunched += int(u)
                if i is not None:
                    per_range.append((int(i), k, n, t))
            # The aggregates' groups: each operation group's row values as the rows have them.
            fill_fine_aggregates(
                store,
                "temp.agg_bulk",
                f"""
                select {", ".join(f"{source[KERNEL_COLUMN_OF[c]]} as {c}" for c in fine_keys())}, o.launches, o.time_ns,
                       o.min_ns, o.max_ns, o.first_launch, o.min_thread, 0 as metric_launches
                from (select kind, key, sn, nullif(rix, {low}) as rix, nullif(oix, {low}) as oix,
                             pid, nullif(dev, {low}) as dev, launches, time_ns, min_ns, max_ns, first_launch, min_thread
                      from temp.opg) o
                cross join temp.nm n on n.key = o.key and n.sn = o.sn left join temp.rg rg on rg.ix = o.rix
                left join temp.oc oc on oc.ix = o.oix left join temp.rk rk on rk.pid = o.pid""",
                [],
            )
            # Kept in Python until the run's last transaction writes them: a change of temp_store
            # (below) drops temporary tables.
            groups = con.execute("select * from temp.agg_bulk").fetchall()
            stage("sums")
            launched = _launched(
                lambda: (
                    nsys_columns.kernel_launches(columns)
                    if columns is not None
                    else _kernel_launches(con)
                ),
                windows,
            )
            stage("launched per range")
        finally:
            for table in (
                "ops",
                "opg",
                "agg_bulk",
                "rt",
                "nm",
                "rg",
                "seg",
                "oc",
                "rk",
                "reps",
                "kr",
            ):
                con.execute(f"drop table if exists temp.{table}")
    store.prepared_aggregates = (run_id, groups)
    return {
        "by_kind": by_kind,
        "per_range": per_range,
        "launched": launched,
        "unlaunched": unlaunched,
    }


def _state_codes(
    rows: list[StateRange], operators: list[OperatorCall]
) -> tuple[Any, Any, Any, Any, Any]:
    """What ``nsys_columns.launch_groups`` compares the operations' attribution by: the states
    (``rows``, by index) and operator calls (``operators``, in order) coded by content."""
    import numpy as np

    # code 0: nothing known (a launch in no state and no operator call is coded so too)
    rest: dict[tuple[Any, ...], int] = {(None, None, None, None): 0}
    call: dict[tuple[Any, ...], int] = {(None, None): 0}
    at = {c: i + 1 for i, c in enumerate(STATE_COLUMNS)}  # a row's text positions
    by_ix = sorted(rows, key=lambda r: r[0])
    ix = np.fromiter((r[0] for r in by_ix), np.int64, len(by_ix))
    rests = np.fromiter(
        (
            rest.setdefault(
                tuple(r[at[c]] for c in ("input_types", "module", "module_type", "phase")),
                len(rest),
            )
            for r in by_ix
        ),
        np.int64,
        len(by_ix),
    )
    calls = np.fromiter(
        (call.setdefault((r[at["op"]], r[at["shapes"]]), len(call)) for r in by_ix),
        np.int64,
        len(by_ix),
    )
    own = np.fromiter((r[at["phase"]] is not None for r in by_ix), bool, len(by_ix))
    operator = np.fromiter(
        (call.setdefault((o[3], o[4]), len(call)) for o in operators), np.int64, len(operators)
    )
    return ix, rests, calls, own, operator


def _checked(export: NsysExport, con: Any, sql: str) -> None:
    """Run ``sql``, a copy from the export into a working table whose constraints are the
    cheap tests of its rows; where one fails, the export's own checks name the row."""
    try:
        con.execute(sql)
    except sqlite3.IntegrityError as exc:
        export.check()
        raise BadExport(
            f"{export.path.name}: a row the import copies is not what an export holds ({exc})"
        ) from None


def _check_once(export: NsysExport, con: Any) -> None:
    """Refuse an operation listed twice, cheaply: its copies have one launch call (the calls'
    key is unique), so they sort into one run of rows with that launch's start (or, with none,
    the operation's start), the launch order's first key, in ``temp.ops``, whatever rows of
    other threads or processes tie with them; where two neighbouring rows share that key (a
    CUDA graph's kernels do), those rows alone are grouped by what a copy repeats, and only a
    repeat found there has the export's check name it (``NsysExport.check``)."""
    pairs = """select a.seq as x, b.seq as y from temp.ops a join temp.ops b on b.seq = a.seq + 1
               where coalesce(b.lstart, b.start) = coalesce(a.lstart, a.start)"""
    if (
        con.execute(f"select exists ({pairs})").fetchone()[0]
        and con.execute(f"""
            with p as ({pairs})
            select 1 from temp.ops where seq in (select x from p union select y from p)
            group by kind, pid, dev, stream, start, lstart, ltid having count(*) > 1 limit 1""").fetchone()
    ):
        export.check()


def _kernel_launches(con: Any) -> Any:
    """The kernels' launching processes and launch starts, (n, 2), from ``temp.ops``."""
    import numpy as np

    cur = con.execute(
        "select lpid, lstart from temp.ops where kind = 'kernel' and lstart is not null"
    )
    chunks = []
    while batch := cur.fetchmany(262144):
        chunks.append(np.array(batch, dtype=np.int64))
    return np.concatenate(chunks) if chunks else np.empty((0, 2), dtype=np.int64)


def _launched(kernel_launches: Callable[[], Any], windows: list[Window]) -> dict[int, int]:
    """Per range, the kernels its process launched in its window [start, end): the kernels'
    launch starts read once, sorted per process, and two binary searches per range (numpy:
    a capture of PyTorch's annotation has several ranges a kernel, and a query or two per
    range cost more than the rest of the import)."""
    if not windows:
        return {}
    import numpy as np

    launches = kernel_launches()
    launches = launches[np.lexsort((launches[:, 1], launches[:, 0]))]
    pids, firsts = np.unique(launches[:, 0], return_index=True)
    bounds = dict(zip(pids.tolist(), zip(firsts.tolist(), [*firsts[1:].tolist(), len(launches)])))
    by_pid: dict[Any, list[Window]] = {}
    for w in windows:
        by_pid.setdefault(w[1], []).append(w)
    out: dict[int, int] = {}
    for pid, ws in by_pid.items():
        lo, hi = bounds.get(pid, (0, 0)) if isinstance(pid, int) else (0, 0)
        starts = launches[lo:hi, 1]
        span = np.array([(s, e) for _, _, s, e in ws], dtype=np.int64).reshape(-1, 2)
        n = np.searchsorted(starts, span[:, 1], side="left") - np.searchsorted(
            starts, span[:, 0], side="left"
        )
        out.update(zip((w[0] for w in ws), np.maximum(n, 0).tolist()))
    return out


def _ro_uri(path: Path) -> str:
    return file_uri(path, read_only=True)


IN_MEMORY_BYTES = 256 << 20
SCRATCH = "profkit_scratch"  # the scratch files' names as attached: profkit_scratch0, ...


def _ops_sql(export: NsysExport) -> str:
    """The GPU operations with their launch calls, numbered in launch order, each with the
    innermost range open for its launching thread then (``temp.seg``): the thread's own state
    where it has ranges of its own open, else its process's (start/end ranges, keyed by the
    globalTid with the thread part zero); and the operator call of PyTorch's annotation it was
    launched in (``temp.oc``: a thread's never overlap, so the latest begun by then is the one,
    if it has not ended)."""
    cols = export.schema.columns

    # NULL where the row's columns are not all integers
    def kind(name: str, table: str, alias: str) -> str:
        return f"case when {integer_test(table, alias, cols[table])} then '{name}' end"

    parts = [
        f"""
        select {kind("kernel", "CUPTI_ACTIVITY_KIND_KERNEL", "k")} as kind, coalesce(k.demangledName, -2) as key, k.shortName as sn, k.start, k.end,
               k.deviceId as dev,
               k.streamId as stream, k.correlationId as corr, k.globalPid as gpid,
               k.gridX as gx, k.gridY as gy, k.gridZ as gz, k.blockX as bx, k.blockY as by, k.blockZ as bz
        from src.CUPTI_ACTIVITY_KIND_KERNEL k"""
    ]
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in cols:
        parts.append(f"""
        select {kind("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY", "m")}, {MEMCPY_KEY}, m.copyKind, m.start, m.end, m.deviceId, m.streamId, m.correlationId,
               m.globalPid, null, null, null, null, null, null
        from src.CUPTI_ACTIVITY_KIND_MEMCPY m""")
    if "CUPTI_ACTIVITY_KIND_MEMSET" in cols:
        parts.append(f"""
        select {kind("memset", "CUPTI_ACTIVITY_KIND_MEMSET", "s")}, {MEMSET_KEY}, null, s.start, s.end, s.deviceId, s.streamId, s.correlationId, s.globalPid,
               null, null, null, null, null, null
        from src.CUPTI_ACTIVITY_KIND_MEMSET s""")
    ops = " union all ".join(parts)
    return f"""
        with ops as ({ops}),
        launched as (
            select ops.*, r.start as lstart, r.gtid as ltid
            from ops left join temp.rt r on r.corr = ops.corr and r.pid = (ops.gpid >> 24))
        select row_number() over (order by coalesce(lstart, start), corr) - 1 as seq, kind, key, sn, start, end, dev,
               stream, gx, gy, gz, bx, by, bz, lstart, ltid, (ltid >> 24) & {0xFFFFFF} as lpid,
               (gpid >> 24) & {0xFFFFFF} as pid,
               coalesce((select s.ix from temp.seg s where s.gtid = launched.ltid and s.start <= launched.lstart
                         order by s.start desc limit 1),
                        (select s.ix from temp.seg s where s.gtid = launched.ltid - (launched.ltid & {0xFFFFFF})
                           and s.start <= launched.lstart order by s.start desc limit 1)) as rix,
               (select case when c.end > launched.lstart then c.ix end from temp.oc c
                where c.gtid = launched.ltid and c.start <= launched.lstart order by c.start desc limit 1) as oix
        from launched"""
