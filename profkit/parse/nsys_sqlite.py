"""Nsight Systems SQLite exports (``nsys export --type sqlite``) into kernel-table rows, streamed.

* GPU work: every kernel, memcpy and memset, one row each, ``kind`` kernel, memcpy or memset,
  in the order of their launch calls (the queries are in ``profkit.parse.nsys_export``).
* The NVTX push/pop ranges open on the launch call's thread when it started are the
  operation's ranges: the semantics of ``nsys stats``' nvtx_kern_sum and nvtx_gpu_proj_sum.
  Start/end ranges belong to no thread: every operation that any thread of their process
  launched while one was open is the range's (profkit's iteration ranges are start/end ones,
  so that a training step's backward kernels, launched by autograd's thread, count).
* The calls that blocked the host (stream, event and device synchronisations, synchronous
  copies) with the GPU work around each, and the innermost range open on their thread.
* The ranges PyTorch's own annotation writes (``emit_nvtx``, nsys ``--pytorch``: one around
  every operator call, several a kernel) are read by name and shapes (``ranges.read_range``);
  an operator call is the attribution of what was launched in it, not a range of the run. Only
  the outermost call of a thread counts for that, so the nested ones are left out of the walk,
  and the bulk import hands the outermost to SQL as intervals rather than walking them.

Nothing loads a whole table into Python: the operations come in launch order, batch by batch,
and a walk over the ranges attributes them on the way. A capture of millions of kernels
imports in bounded memory.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..classify import COPY_VERDICT, classify_row
from ..names import short_name
from ..nvtx_ranges import OpLabel, is_iteration_range, is_named_step
from ..processes import stage, stoppable
from .nsys_export import (
    MEMCPY_KEY,
    MEMSET_KEY,
    GpuOpsImport,
    HostSyncCall,
    HostSyncsLater,
    NameRow,
    NsysExport,
    OperatorCall,
    StateRange,
)
from .ranges import (
    MAX_DEPTH,
    OF_RUN,
    OWN_OP,
    RANGE,
    TORCH_OP,
    OpenRange,
    attribute,
    gc_paused,
    inner_operator_calls,
    kept,
    merged,
    nest_in_process_ranges,
    outer_first,
    place,
    range_rows,
    read_range,
)
from .schema import Capture, HostSyncRow, KernelRow, kernel_row

TID_MASK = 0xFFFFFF


def _pid(global_id: int) -> int:
    return (global_id >> 24) & TID_MASK


def _process_tid(global_tid: int) -> int:
    """The key of a process's start/end ranges: its threads' globalTid with the thread part zero."""
    return global_tid - (global_tid & TID_MASK)


def _ranges(
    export: NsysExport, ranks: dict[int, int], notes: list[str]
) -> tuple[list[OpenRange], Callable[[list[HostSyncCall]], list[str | None]]]:
    """The push/pop and start/end ranges the walks that attribute rows need, sorted by walk key
    (thread, or process for start/end ranges) and start, with their paths and depths; those
    nested too deep left out (a note), and so are the operator calls of PyTorch's annotation
    inside another operator range (:func:`ranges.inner_operator_calls`: several a kernel, and
    never a row's attribution). And a function that gives, for each of the host syncs (in start
    order), what names the innermost push/pop range open on its thread when it began, any of
    them."""
    domains = {(_pid(gtid or 0), dom): text for gtid, dom, text in export.domains()}
    order: list[tuple[int, int, int, int]] = []  # (walk key, start, -end, index), sorted below
    read: list[tuple[int, int, int, int, bool, str, OpLabel | None, str]] = []
    for start, end, text, gtid, dom, process_wide in export.nvtx_ranges():
        shown, label, role = read_range(text or "")
        # A step's range is the process's, a push/pop one too (``--step-range``: a user's own, by
        # its name as shown: without what PyTorch's annotation adds to every call's).
        process_wide = bool(process_wide) or (role == OF_RUN and is_named_step(shown))
        # The walk's key: the thread's globalTid, or for a start/end range its process's (the
        # globalTid with the thread part zero, which no thread has): the SQL import's too.
        order.append((_process_tid(gtid) if process_wide else gtid, start, -end, len(read)))
        read.append((start, end, gtid, dom, process_wide, shown, label, role))
    order.sort()
    inner = inner_operator_calls(
        (key, read[i][0], read[i][1], read[i][7], read[i][4]) for key, _, _, i in order
    )
    made: list[OpenRange | None] = [None] * len(read)
    walked = []
    for (key, _, _, i), skip in zip(order, inner):
        if skip:
            continue
        begin, finish, thread, domain, wide, shown, label, role = read[i]
        r = OpenRange(
            shown,
            domains.get((_pid(thread), domain)),
            thread & TID_MASK,
            begin,
            finish,
            process=_pid(thread),
            process_wide=wide,
            read=(shown, label, role),
        )
        r.global_tid = key
        r.rank = ranks.get(_pid(thread))
        made[i] = r
        walked.append(r)
    for _ in attribute((r.global_tid, r.start, RANGE, r) for r in walked):  # sets paths and depths
        pass
    walked = kept(walked, notes)
    nest_in_process_ranges(walked)
    return walked, lambda calls: _innermost(order, read, made, calls)


def _innermost(
    order: list[tuple[int, int, int, int]],
    read: list[Any],
    made: list[OpenRange | None],
    calls: list[HostSyncCall],
) -> list[str | None]:
    """For each call, what names the innermost push/pop range open on its thread when it began
    (:func:`_sync_op`; None outside any): per thread, its ranges (in walk order) and its calls
    (in start order) side by side, with a stack of the ranges begun so far that may still be
    open. Those ended by an instant are popped from its top, so that the top is the latest
    begun of those open then: the innermost, where ranges nest (push/pop ranges do)."""
    out: list[str | None] = [None] * len(calls)
    by_thread: dict[int, list[int]] = {}
    for c, call in enumerate(calls):
        by_thread.setdefault(call[4], []).append(c)
    if not by_thread:
        return out
    k, n = 0, len(order)
    while k < n:
        key = order[k][0]
        end_k = k
        while end_k < n and order[end_k][0] == key:
            end_k += 1
        mine = by_thread.get(key)
        if mine:
            stack: list[int] = []
            j = 0
            for _, start, _neg_end, i in order[k:end_k]:
                r = made[i]
                # a step, not an op
                if r is not None and (
                    r.depth >= MAX_DEPTH  # left out, as the walk leaves it
                    or (r.role == OF_RUN and is_iteration_range(r.name))
                ):
                    continue
                while j < len(mine) and calls[mine[j]][2] < start:
                    out[mine[j]] = _top(stack, read, calls[mine[j]][2])
                    j += 1
                while stack and read[stack[-1]][1] <= start:
                    stack.pop()
                stack.append(i)
            for c in mine[j:]:
                out[c] = _top(stack, read, calls[c][2])
        k = end_k
    return out


def _top(stack: list[int], read: list[Any], t: int) -> str | None:
    """The latest begun range of ``stack`` still open at ``t`` (those ended popped), named as a
    host sync's ``op`` (:func:`_sync_op`)."""
    while stack and read[stack[-1]][1] <= t:
        stack.pop()
    if not stack:
        return None
    _, _, _, _, _, shown, label, role = read[stack[-1]]
    return _sync_op(shown, label, role)


def _sync_op(shown: str, label: OpLabel | None, role: str) -> str:
    """A host sync's ``op`` from the range around it: profkit's operator range, its module and
    operator; an operator's (PyTorch's annotation, or a range named like one), the operator and
    input shapes; any other range, its name."""
    if label is None:
        return shown
    parts = (label.module, label.op) if role == OWN_OP else (label.op, label.shapes)
    return " ".join(x for x in parts if x)


def read_nsys_sqlite(path: str | Path, ranks: dict[int, int] | None = None) -> Capture[KernelRow]:
    """A streamed Capture: its rows come in launch order, and ``capture.ranges`` (with per-range
    counts) is filled once the last one has been read; ``capture.host_syncs`` then too, for an
    export large enough that another thread finds them meanwhile (``HostSyncsLater``).
    ``ranks``: for a capture of a distributed job (one report of every rank's process), each
    process's rank by its pid: the rows' and ranges' ``rank``."""
    ranks = ranks or {}
    export = None
    later: HostSyncsLater | None = None
    try:
        with stoppable():  # a stop signal cuts the export's long statements short
            export = NsysExport(Path(path))
            gpu_name, cc = export.gpu()
            meta = export.meta
            notes: list[str] = []
            later = HostSyncsLater(export)
            stage("host syncs (SQL), or their thread started")
            with gc_paused():
                ranges, innermost = _ranges(export, ranks, notes)
            stage("ranges")
            capture: Capture[KernelRow] = Capture(
                rows=iter(()),
                tool="nsys",
                source_format="nsys-sqlite",
                tool_version=meta.get("EXPORT_PRODUCT_VERSION"),
                gpu_name=gpu_name,
                compute_capability=cc,
                range_paths=[r.path for r in ranges if not r.attribution_only],
            )

            syncs = _Syncs(later, capture, ranges, innermost, ranks)
            if later.calls is not None:
                syncs.place()
    except BaseException:
        if export is not None:
            if later is not None:
                later.cancel()
            export.close()
        raise
    capture.rows = _attributed_rows(export, ranges, capture, ranks, syncs)
    capture.bulk = lambda store, run_id: _bulk(store, run_id, export, ranges, capture, ranks, syncs)
    capture.notes.append(f"nsys export schema {meta.get('EXPORT_SCHEMA_VERSION', '?')}")
    capture.notes.extend(notes)
    return capture


class _Syncs:
    """A capture's host syncs, placed in the walk's ranges (``place``) once the search for them
    (``HostSyncsLater``: in another thread for a large export) has them, or that search stopped
    (``cancel``). What places them is dropped once it has."""

    def __init__(
        self,
        later: HostSyncsLater,
        capture: Capture[KernelRow],
        ranges: list[OpenRange],
        innermost: Callable[[list[HostSyncCall]], list[str | None]],
        ranks: dict[int, int],
    ) -> None:
        self.later, self.capture = later, capture
        self._placing = [lambda calls: _host_syncs(calls, ranges, innermost(calls), ranks)]

    def place(self) -> None:
        if self._placing:
            self.capture.host_syncs.extend(self._placing.pop()(self.later.result()))

    def operations_read(self, operations: Any, calls: list[tuple[Any, ...]] | None) -> None:
        """The bulk import has read the GPU operations (``Store.insert_gpu_ops``): with their
        (globalPid >> 24, start, end), and the blocking calls read with the runtime calls, the
        calls are found from them; without (its SQL path) the thread searches meanwhile."""
        if operations is None:
            self.later.start()
        else:
            self.later.from_operations(operations, calls)

    def cancel(self) -> None:
        self.later.cancel()


def _host_syncs(
    calls: list[HostSyncCall],
    ranges: list[OpenRange],
    innermost: list[str | None],
    ranks: dict[int, int],
) -> list[HostSyncRow]:
    """The export's host-blocking calls, each with what names the innermost push/pop range open
    on its thread when it began as its ``op`` (:func:`_innermost`: an operator's range where the
    program pushes them, ``emit_nvtx`` or nsys ``--pytorch``), and the step it was made in."""
    if not calls:
        return []
    iterations: dict[int | None, list[OpenRange]] = {}
    for r in ranges:
        if not r.attribution_only and is_iteration_range(r.name):
            iterations.setdefault(r.process, []).append(r)
    steps = {p: _Steps(rs) for p, rs in iterations.items()}
    none = _Steps([])
    out: list[HostSyncRow] = []
    for (i, name, start, end, gtid, last_end, next_start), op in zip(calls, innermost):
        step = steps.get(_pid(gtid), none).at(start)
        out.append(
            {
                "sync_id": i,
                "name": name,
                "start_ns": start,
                "end_ns": end,
                "thread_id": gtid & TID_MASK,
                "rank": ranks.get(_pid(gtid)),
                "op": op,
                "gpu_last_end_ns": last_end,
                "gpu_next_start_ns": next_start,
                "iteration": step.name if step else None,
                "iteration_end_ns": step.end if step else None,
            }
        )
    stage("host syncs placed")
    return out


class _Steps:
    """A process's iteration ranges: the first (in their order) open at an instant. Where they
    follow one another without overlapping (profkit's steps), a binary search finds it."""

    def __init__(self, rs: list[OpenRange]) -> None:
        self.rs = rs
        self.starts = [r.start for r in rs]
        self.disjoint = all(a.end <= b.start for a, b in zip(rs, rs[1:]))

    def at(self, t: int) -> OpenRange | None:
        if not self.disjoint:
            return next((r for r in self.rs if r.start <= t < r.end), None)
        k = bisect.bisect_right(self.starts, t) - 1
        return self.rs[k] if k >= 0 and t < self.rs[k].end else None


@gc_paused()  # it builds a tuple or two for every range, all kept until its end
def _bulk(
    store: Any,
    run_id: int,
    export: NsysExport,
    ranges: list[OpenRange],
    capture: Capture[KernelRow],
    ranks: dict[int, int],
    syncs: _Syncs,
) -> tuple[str, int, int]:
    """The rows of ``_attributed_rows``, written by SQL straight from the export into the
    store (``Store.insert_gpu_ops``, the store given): Python computes what is per name (the verdict,
    the short name) and per range (the innermost open range on each thread from each instant
    on), SQLite the rest. Sets the ranges' counts and the capture's range rows, and its host
    syncs (``syncs``) where another thread found them meanwhile."""
    try:
        names: list[NameRow] = []
        for key, sn, name, short in export.kernel_names():
            name = name or ""
            v = classify_row("kernel", name, None, None)
            names.append(
                (
                    key if key is not None else -2,
                    sn,
                    name,
                    short or short_name(name),
                    v.precision,
                    v.tensor_core,
                    v.family,
                    v.evidence,
                    v.evidence_detail,
                )
            )
        for copy_kind, name in export.copy_kinds():
            v = COPY_VERDICT["memcpy"]
            names.append(
                (
                    MEMCPY_KEY,
                    copy_kind,
                    name,
                    short_name(name),
                    v.precision,
                    v.tensor_core,
                    v.family,
                    v.evidence,
                    v.evidence_detail,
                )
            )
        if export.has_memsets():
            v = COPY_VERDICT["memset"]
            names.append(
                (
                    MEMSET_KEY,
                    None,
                    "[CUDA memset]",
                    short_name("[CUDA memset]"),
                    v.precision,
                    v.tensor_core,
                    v.family,
                    v.evidence,
                    v.evidence_detail,
                )
            )
        # PyTorch's operator calls (the outermost of each thread's: see _ranges) go to SQL as
        # they are, intervals that never overlap; the walk's states are of the other ranges, so
        # that they change where the run's ranges or profkit's own operator ranges do, not at
        # every call.
        operators: list[OperatorCall] = [
            (int(r.global_tid), r.start, r.end, r.op.op, r.op.shapes)
            for r in ranges
            if r.role == TORCH_OP and r.op is not None and r.end > r.start
        ]
        ranges = [r for r in ranges if r.role != TORCH_OP]
        states, segments = _segments(ranges)
        tops: list[StateRange] = []

        def state_rows(used: list[int]) -> list[StateRange]:
            tops.extend(_state_row(k, [ranges[i] for i in states[k]]) for k in used)
            return tops

        result: GpuOpsImport = store.insert_gpu_ops(
            run_id,
            export,
            names,
            state_rows,
            segments,
            [
                (i, r.process, r.start, r.end)
                for i, r in enumerate(ranges)
                if not r.attribution_only
            ],
            ranks,
            operators,
            syncs.operations_read,
        )
        stage("GPU operations written")
        syncs.place()
        stage("host syncs")
    finally:
        syncs.cancel()
        export.close()
    # operators' input types: a precision for kernels whose names give none
    if any(t[8] for t in tops):
        store.judge_by_inputs(run_id, lambda name, types: classify_row("kernel", name, None, types))
    stage("judged by inputs")
    for state, kind, n, t in result["per_range"]:
        # every range open on the launching thread then, as the streamed walk counts
        for i in states[state]:
            r = ranges[i]
            r.gpu_ops += n
            if kind == "kernel":
                r.kernels += n
                r.gpu_time_ns += t
    launched = result["launched"]
    index = {id(r): i for i, r in enumerate(ranges)}
    capture.ranges.extend(
        range_rows(ranges, lambda r: launched.get(index[id(r)], 0) - r.kernels, gpu=True)
    )
    if result["unlaunched"]:
        capture.notes.append(
            f"{result['unlaunched']} GPU operations have no launch call in the export, so no range"
        )
    count, total = result["by_kind"].get("kernel", (0, 0))
    return "kernel", count, total


def _state_row(k: int, open_: list[OpenRange]) -> StateRange:
    """What a row launched in a state gets, as :func:`place` gives it: its innermost range
    (not one of profkit's operator ranges) and the attribution of the operator ranges."""
    row = kernel_row(0, "kernel", "", "")
    place(row, open_, count=False)
    return (
        k,
        row["nvtx_range"],
        row["nvtx_path"],
        row["op"],
        row["module"],
        row["module_type"],
        row["shapes"],
        row["phase"],
        row["input_types"],
    )


def _range_events(ranges: list[OpenRange]) -> list[tuple[int, int, int]]:
    """(time, 1 for a start or 0 for an end, range index), in the order the walk applies them:
    at one instant ends before starts. A range that ends when it starts holds nothing and is
    never open."""
    spans = [(i, r) for i, r in enumerate(ranges) if r.end > r.start]
    return sorted([(r.start, 1, i) for i, r in spans] + [(r.end, 0, i) for i, r in spans])


def _segments(ranges: list[OpenRange]) -> tuple[list[list[int]], list[tuple[int, int, int | None]]]:
    """The streamed walk's open ranges per thread, as data for SQL: the distinct states (the
    ranges open for a thread, its process's start/end ranges and its own, in the order they
    opened: innermost last) and per thread, and per process (its key), the state from each
    instant on, (globalTid, start, state index or None)."""
    open_by_thread: dict[int, list[int]] = {}
    state_ids: dict[tuple[int, ...], int] = {}
    states: list[list[int]] = []
    last: dict[int, int | None] = {}
    segments: list[tuple[int, int, int | None]] = []
    threads_of: dict[int, set[int]] = {}  # per process key, the threads with ranges of their own
    for r in ranges:
        if not r.process_wide:
            threads_of.setdefault(_process_tid(int(r.global_tid or 0)), set()).add(
                int(r.global_tid or 0)
            )
    events = _range_events(ranges)

    def state(g: int) -> int | None:
        """A thread's ranges merged with its process's (a process key: its own alone); None
        for a thread with none of its own open, whose operations take the process's state."""
        own = open_by_thread.get(g, [])
        if not own:
            return None
        p = _process_tid(g)
        process_open = open_by_thread.get(p) if p != g else None
        now = tuple(_merged_ix(ranges, process_open, own)) if process_open else tuple(own)
        sid = state_ids.get(now)
        if sid is None:
            sid = state_ids[now] = len(states)
            states.append(list(now))
        return sid

    k = 0
    while k < len(events):
        t = events[k][0]
        touched = set()
        while k < len(events) and events[k][0] == t:  # every event at this instant, then the state
            _, is_start, i = events[k]
            gtid = int(ranges[i].global_tid or 0)
            stack = open_by_thread.setdefault(gtid, [])
            if is_start:
                stack.append(i)
            elif i in stack:
                stack.remove(i)
            touched.add(gtid)
            if ranges[i].process_wide:  # the threads with their own ranges see the change too
                touched.update(threads_of.get(gtid, ()))
            k += 1
        for g in sorted(touched):
            sid = state(g)
            if last.get(g, -1) != sid:
                segments.append((g, t, sid))
                last[g] = sid
    return states, segments


def _merged_ix(
    ranges: list[OpenRange], process_open: list[int], thread_open: list[int]
) -> list[int]:
    """:func:`merged` over range indexes."""
    return sorted(process_open + thread_open, key=lambda i: outer_first(ranges[i]))


def _attributed_rows(
    export: NsysExport,
    ranges: list[OpenRange],
    capture: Capture[KernelRow],
    ranks: dict[int, int],
    syncs: _Syncs,
) -> Iterator[KernelRow]:
    """Walk GPU operations in launch order beside the ranges' starts and ends in time order
    (and, after the last, set the capture's host syncs where another thread found them).

    Per thread, the open push/pop ranges form a stack; an operation whose launch call started
    at t on thread T belongs to the ranges open on T at t (start <= t < end), and to the
    start/end ranges of T's process open at t (a stack of their own). Per process,
    a running count of kernel launches gives, at each range's end, how many kernels the whole
    process launched while it was open; less the range's own, that is other_thread_kernels.
    """
    syncs.later.start()  # a large export's host syncs: found by another thread meanwhile
    events = _range_events(ranges)
    ev = 0
    open_by_thread: dict[int | None, list[OpenRange]] = {}
    launched: dict[int | None, int] = {}  # kernels launched so far, per process
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
    launch_id = 0
    try:
        for (
            kind,
            start,
            end,
            dev,
            stream,
            _corr,
            gpid,
            name,
            short,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            l_start,
            l_tid,
        ) in export.gpu_ops():
            advance(l_start if l_start is not None else start)
            name = name or ""
            row = kernel_row(
                launch_id,
                kind,
                name,
                short or short_name(name),
                duration_ns=end - start,
                start_ns=start,
                grid_x=gx,
                grid_y=gy,
                grid_z=gz,
                block_x=bx,
                block_y=by,
                block_z=bz,
                stream=stream,
                device=dev,
                rank=ranks.get(_pid(gpid)) if gpid is not None else None,
                thread_id=l_tid & TID_MASK if l_tid is not None else None,
            )
            launch_id += 1
            if l_tid is None:
                unlaunched += 1
            else:
                place(
                    row, merged(open_by_thread.get(_process_tid(l_tid)), open_by_thread.get(l_tid))
                )
                if kind == "kernel":
                    pid = _pid(l_tid)
                    launched[pid] = launched.get(pid, 0) + 1
            yield row
        syncs.place()
    finally:
        syncs.cancel()
        export.close()
    advance(float("inf"))
    index = {id(r): i for i, r in enumerate(ranges)}
    capture.ranges.extend(
        range_rows(ranges, lambda r: others.get(index[id(r)], 0) - r.kernels, gpu=True)
    )
    if unlaunched:
        capture.notes.append(
            f"{unlaunched} GPU operations have no launch call in the export, so no range"
        )
