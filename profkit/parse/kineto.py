"""torch.profiler (Kineto) traces: the Chrome-trace JSON that ``export_chrome_trace`` writes,
plain or gzipped, from ``profkit run --tool torch`` or from anyone's own profiling.

* A trace with GPU activity (``cat`` kernel, gpu_memcpy, gpu_memset) gives one row per
  activity, in launch order. Each is tied to its launch call (cuda_runtime / cuda_driver
  event with the same ``correlation``), whose thread and start place it in the
  ``record_function`` ranges (``user_annotation``) open on that thread at the time, and in
  profkit's iteration ranges (``<tag>.iterN``) open in its process: those hold a whole step,
  whichever thread launched its work (autograd's backward runs on a thread of its own).
* Its launch calls that blocked the host (synchronisations, synchronous copies: ``cuda_runtime``
  events named in ``schema.HOST_SYNC_CALLS``), each with the operator that made it.
* A trace without GPU activity (``--device cpu``) gives one row per CPU operator
  (``cpu_op``), ``kind`` ``cpu_op``, with its self time: its span less the spans of the
  operators and ranges it called, as torch.profiler's own "Self CPU" column counts it.

Timestamps in these files are microseconds with three decimals; they become integer ns.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import BadExport
from ..names import short_name
from ..nvtx_ranges import is_iteration_range
from .gzipped import GZIP_ERRORS, open_text
from .ranges import (MAX_DEPTH, POINT, RANGE, LaunchIndex, OpenRange, attribute, kept, merged,
                     nest_in_process_ranges, place, range_rows)
from .schema import Capture, HostSyncRow, KernelRow, Kind, RangeRow, host_sync_call, kernel_row

GPU_KINDS: dict[str, Kind] = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
OP_CATS = {"cpu_op", "operator"}
RANGE_CATS = {"user_annotation"}
# "Input type" entries that are not tensors.
NOT_TENSOR_TYPES = {"", "Scalar", "ScalarList", "TensorList", "GenericList", "None"}

# A trace event: a JSON object as loaded (any keys, any values), to which the reader adds its
# start and duration in ns (``_start``, ``_dur``) once checked, and for the CPU operators'
# self times their tree (``_parent``, ``_kids``, ``_merged``, ``_children``).
TraceEvent = dict[str, Any]
# The thread of an event: its (pid, tid), as the trace has them (numbers or names).
Thread = tuple[Any, Any]
# A row to place in ranges: (launching thread, launch start, POINT, row).
Point = tuple[Thread, int, int, KernelRow]


def _ns(us: Any) -> int:
    """Microseconds (a JSON number) -> integer ns; anything else (a bool, a string, a value
    no int64 holds, NaN or infinity) raises ValueError."""
    if isinstance(us, bool) or not isinstance(us, (int, float)):
        raise ValueError(f"{us!r} is not a number")
    if not math.isfinite(us) or abs(us) * 1000 >= 2 ** 62:
        raise ValueError(f"{us!r} is not a finite time")
    return int(round(us * 1000))


def load_trace(path: Path) -> dict[str, Any]:
    """The trace's JSON object, from .json or gzipped .json."""
    try:
        # A gzipped trace is read through gzipped.open_text, which refuses one that expands
        # past its bound (json.load holds the whole text, and its objects, in memory).
        with open_text(path) as f:
            data = json.load(f)
    except (*GZIP_ERRORS, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadExport(f"{path.name} is not a readable JSON trace: {exc}") from exc
    except RecursionError:
        raise BadExport(f"{path.name} is nested too deeply to be a Chrome/Kineto trace") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise BadExport(f"{path.name} is JSON but not a Chrome/Kineto trace (no traceEvents list)",
                        "profkit imports traces written by torch.profiler's export_chrome_trace.")
    return data


def _input_types(args: dict[str, Any]) -> str | None:
    types = args.get("Input type")
    if not isinstance(types, list):
        return None
    seen = list(dict.fromkeys(t for t in types if isinstance(t, str) and t not in NOT_TENSOR_TYPES))
    return ",".join(seen) or None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _xyz(v: Any) -> list[int | None]:
    return [_int(x) for x in v[:3]] if isinstance(v, list) and len(v) >= 3 else [None, None, None]


def read_kineto(path: str | Path) -> Capture[KernelRow]:
    path = Path(path)
    data = load_trace(path)
    gpu, ops, annotations, launches = _events(data["traceEvents"], path.name)
    syncs: list[HostSyncRow] = []
    if gpu:
        kernels, ranges, notes = _gpu_rows(gpu, launches, annotations, ops)
        syncs = _host_syncs(launches.values(), gpu, ops, ranges)
    elif ops:
        kernels, ranges, notes = _cpu_rows(ops, annotations)
    else:
        raise BadExport(f"{path.name} holds no GPU kernels and no CPU operators",
                        "Record it with torch.profiler (ProfilerActivity.CUDA for GPU kernels).")
    gpu_name, cc = _device(data, gpu, path.name)
    return Capture(rows=iter(kernels), tool="torch", source_format="kineto-json", gpu_name=gpu_name,
                   compute_capability=cc, notes=notes, ranges=ranges, range_paths=[r["path"] for r in ranges],
                   host_syncs=syncs)


# The event torch.profiler records for a Python dispatch mode's handling of each operator
# (profkit's attribution, :mod:`profkit.annotate`): its cost, not an operator of the model.
PYTHON_MODE = "PythonDispatchMode"


def _events(events: list[Any], filename: str) -> tuple[list[TraceEvent], list[TraceEvent], list[TraceEvent],
                                                       dict[Any, TraceEvent]]:
    """The trace's complete events that profkit reads, checked (:func:`_check`), by what they
    are: GPU activities, CPU operators, annotations (ranges), and launch calls by correlation id."""
    gpu, ops, annotations, launches = [], [], [], {}
    for n, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = str(e.get("cat", "")).lower()
        if cat in GPU_KINDS or cat in OP_CATS or cat in RANGE_CATS or cat in LAUNCH_CATS:
            _check(e, f"{filename}: traceEvents[{n}] ({cat} {str(e.get('name', ''))[:60]!r})")
        if cat in GPU_KINDS:
            gpu.append(e)
        elif cat in OP_CATS:
            if e.get("name") != PYTHON_MODE:
                ops.append(e)
        elif cat in RANGE_CATS:
            annotations.append(e)
        elif cat in LAUNCH_CATS:
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                launches[corr] = e
    return gpu, ops, annotations, launches


def _check(e: TraceEvent, where: str) -> None:
    """Refuse an event profkit reads whose fields are missing or of the wrong type (``where``
    names it), and set its ``_start`` and ``_dur`` in ns."""
    if not isinstance(e.get("name"), str):
        raise BadExport(f"{where}: name is {e.get('name')!r}, not a string")
    try:
        e["_start"], e["_dur"] = _ns(e["ts"]), _ns(e["dur"])
    except KeyError as missing:
        raise BadExport(f"{where} has no {missing.args[0]} (a complete event needs ts and dur)") from None
    except ValueError as exc:
        raise BadExport(f"{where}: ts/dur {exc}") from None
    if e["_dur"] < 0:
        raise BadExport(f"{where} has a negative duration ({e.get('dur')!r} us)")
    for key in ("pid", "tid"):
        if key in e and not isinstance(e[key], (int, str)) or isinstance(e.get(key), bool):
            raise BadExport(f"{where}: {key} is {e[key]!r}, not a number or a name")
    if "args" in e and not isinstance(e["args"], dict):
        raise BadExport(f"{where}: args is {type(e['args']).__name__}, not an object")
    corr = (e.get("args") or {}).get("correlation")
    if corr is not None and _int(corr) is None:
        raise BadExport(f"{where}: args.correlation is {corr!r}, not an integer")
    ext = (e.get("args") or {}).get("External id")
    if ext is not None and _int(ext) is None:
        raise BadExport(f"{where}: args['External id'] is {ext!r}, not an integer")


def _device(data: dict[str, Any], gpu: list[TraceEvent], filename: str) -> tuple[str | None, str | None]:
    """The GPU's name and compute capability, from the trace's deviceProperties entry for the
    device of its first GPU activity (else its first entry); None and None for a CPU trace."""
    props = data.get("deviceProperties") or []
    if not isinstance(props, list) or not all(isinstance(p, dict) for p in props):
        raise BadExport(f"{filename}: deviceProperties is not a list of objects")
    if not (gpu and props):
        return None, None
    dev = (gpu[0].get("args") or {}).get("device", 0)
    p = next((p for p in props if p.get("id") == dev), props[0])
    gpu_name = str(p["name"]) if p.get("name") is not None else None
    cc = f"{p['computeMajor']}.{p.get('computeMinor', 0)}" if p.get("computeMajor") is not None else None
    return gpu_name, cc


def _range(e: TraceEvent) -> OpenRange:
    name = str(e.get("name", ""))
    return OpenRange(name, None, _int(e.get("tid")), e["_start"], e["_start"] + e["_dur"],
                     process=e.get("pid"), process_wide=is_iteration_range(name))


def _place(points: list[Point], annotations: list[TraceEvent], notes: list[str]) -> list[OpenRange]:
    """Give each point's row the innermost range open for its thread (its own ranges and its
    process's iteration ranges), and count it in every open range: kernels (or CPU operators)
    with their time, and GPU operations of any kind. Ranges nested too deep are left out
    (``ranges.MAX_DEPTH``, a note in ``notes``)."""
    ranges = [_range(a) for a in annotations]
    own = [((a.get("pid"), a.get("tid")), r.start, RANGE, r) for a, r in zip(annotations, ranges) if not r.process_wide]
    own.sort(key=lambda x: (str(x[0]), x[1], -x[3].end))
    process = sorted((r for r in ranges if r.process_wide), key=lambda r: (str(r.process), r.start, -r.end))
    # Paths: the process's ranges among themselves, each thread's among its own, then each
    # thread range under the process ranges open when it began.
    for _ in attribute((r.global_tid, r.start, RANGE, r) for r in process):
        pass
    for _ in attribute(own):
        pass
    ranges = kept(ranges, notes)
    own = [x for x in own if x[3].depth < MAX_DEPTH]
    process = [r for r in process if r.depth < MAX_DEPTH]
    nest_in_process_ranges(ranges)
    by_process: dict[Any, list[OpenRange]] = {}
    for r in process:
        by_process.setdefault(r.process, []).append(r)
    # A point's payload becomes (row, process, time), to find its process's open ranges.
    timeline: list[tuple[Thread, int, int, OpenRange | tuple[KernelRow, Any, int]]] = [
        (thread, t, POINT, (row, thread[0], t)) for thread, t, _, row in points]
    timeline += own
    timeline.sort(key=lambda x: (str(x[0]), x[1], x[2], -x[3].end if isinstance(x[3], OpenRange) else 0))
    for (row, pid, t), stack in attribute(timeline, paths=False):
        around = [r for r in by_process.get(pid, ()) if r.start <= t < r.end] if by_process else []
        place(row, merged(around, stack))
    return ranges


def _others(index: LaunchIndex) -> Callable[[OpenRange], int]:
    """Other threads' launches in a range: none for a process-wide range, which counts them."""
    return lambda r: 0 if r.process_wide else index.others(r)


def _gpu_rows(gpu: list[TraceEvent], launches: dict[Any, TraceEvent], annotations: list[TraceEvent],
              ops: list[TraceEvent]) -> tuple[list[KernelRow], list[RangeRow], list[str]]:
    op_types, op_names = {}, {}
    for op in ops:
        args = op.get("args") or {}
        if "External id" in args:
            op_types[args["External id"]] = _input_types(args)
            op_names[args["External id"]] = str(op.get("name", "")) or None

    def order(e: TraceEvent) -> tuple[int, int]:
        corr = (e.get("args") or {}).get("correlation")
        launch = launches.get(corr)
        return (launch["_start"] if launch else e["_start"], corr if isinstance(corr, int) else 0)

    gpu.sort(key=order)
    rows: list[KernelRow] = []
    timeline: list[Point] = []
    index = LaunchIndex()
    unlaunched = 0
    for i, e in enumerate(gpu):
        args = e.get("args") or {}
        kind = GPU_KINDS[str(e.get("cat")).lower()]
        launch = launches.get(args.get("correlation"))
        grid, block = _xyz(args.get("grid")), _xyz(args.get("block"))
        name = str(e.get("name", ""))
        row = kernel_row(
            i, kind, name, short_name(name), duration_ns=e["_dur"], start_ns=e["_start"],
            grid_x=grid[0], grid_y=grid[1], grid_z=grid[2], block_x=block[0], block_y=block[1], block_z=block[2],
            stream=_int(args.get("stream")), device=_int(args.get("device")),
            thread_id=_int(launch.get("tid")) if launch else None, input_types=op_types.get(args.get("External id")),
            op=op_names.get(args.get("External id")),
        )
        rows.append(row)
        if launch is None:
            unlaunched += 1
            continue
        thread = (launch.get("pid"), launch.get("tid"))
        timeline.append((thread, launch["_start"], POINT, row))
        if kind == "kernel":
            index.add(launch.get("pid"), _int(launch.get("tid")), launch["_start"])
    notes: list[str] = []
    ranges = _place(timeline, annotations, notes)
    index.freeze()
    if unlaunched:
        notes.append(f"{unlaunched} GPU activities have no launch call in the trace, so no range")
    return rows, range_rows(ranges, _others(index), gpu=True), notes


def _host_syncs(calls: Iterable[TraceEvent], gpu: list[TraceEvent], ops: list[TraceEvent],
                ranges: list[RangeRow]) -> list[HostSyncRow]:
    """The runtime calls that blocked the host (``schema.HOST_SYNC_CALLS``), in start order, each
    with the operator that made it (the one whose External id it carries: ``aten::_local_scalar_dense``
    for ``.item()``), the GPU work around it and the measured iteration it was made in (a trace
    is one process's)."""
    steps = [(r["start_ns"] or 0, (r["start_ns"] or 0) + (r["wall_ns"] or 0), r["name"]) for r in ranges
             if is_iteration_range(r["name"])]
    found = sorted(((e, name) for e in calls if (name := host_sync_call(str(e.get("name", "")))) is not None),
                   key=lambda x: (x[0]["_start"], x[0].get("args", {}).get("correlation") or 0))
    if not found:
        return []
    op_names = {args["External id"]: str(op.get("name", "")) or None
                for op in ops if "External id" in (args := op.get("args") or {})}
    spans = sorted((e["_start"], e["_start"] + e["_dur"]) for e in gpu)
    starts = [s for s, _ in spans]
    ends_so_far = list(itertools.accumulate((e for _, e in spans), max))
    out: list[HostSyncRow] = []
    for i, (e, name) in enumerate(found):
        end = e["_start"] + e["_dur"]
        k = bisect.bisect_right(starts, end)  # operations begun before the call returned: spans[:k]
        ext = (e.get("args") or {}).get("External id")
        step = next((x for x in steps if x[0] <= e["_start"] < x[1]), None)
        out.append({"sync_id": i, "name": name, "start_ns": e["_start"], "end_ns": end, "thread_id": _int(e.get("tid")),
                    "rank": None, "op": op_names.get(ext) if ext is not None else None,
                    "gpu_last_end_ns": ends_so_far[k - 1] if k else None,
                    "gpu_next_start_ns": starts[k] if k < len(starts) else None,
                    "iteration": step[2] if step else None, "iteration_end_ns": step[1] if step else None})
    return out


def _cpu_rows(ops: list[TraceEvent], annotations: list[TraceEvent]) -> tuple[list[KernelRow], list[RangeRow], list[str]]:
    # Self time: each thread's operators and ranges form a tree by time containment; an
    # operator's self time is its span less its children's spans. As torch.profiler's own
    # table does, an operator whose only child is the same operator (aten::div_ re-dispatching
    # to aten::div_) counts as one call.
    nodes = sorted(ops + annotations, key=lambda e: (str((e.get("pid"), e.get("tid"))), e["_start"], -e["_dur"]))
    stack: list[TraceEvent] = []
    thread = None
    for e in nodes:
        t = str((e.get("pid"), e.get("tid")))
        if t != thread:
            stack, thread = [], t
        while stack and stack[-1]["_start"] + stack[-1]["_dur"] <= e["_start"]:
            stack.pop()
        e["_parent"] = stack[-1] if stack else None
        e["_kids"] = []
        if stack:
            stack[-1]["_kids"].append(e)
        stack.append(e)
    for e in nodes:
        p = e["_parent"]
        if p is not None and p.get("name") == e.get("name") and len(p["_kids"]) == 1:
            p["_kids"] = e["_kids"]
            for k in e["_kids"]:
                k["_parent"] = p
            e["_merged"] = True
    ops = [e for e in ops if not e.get("_merged")]
    for e in ops:
        e["_children"] = sum(k["_dur"] for k in e["_kids"])

    ops.sort(key=lambda e: (e["_start"], -e["_dur"]))
    rows: list[KernelRow] = []
    timeline: list[Point] = []
    index = LaunchIndex()
    for i, e in enumerate(ops):
        name = str(e.get("name", ""))
        row = kernel_row(
            i, "cpu_op", name, short_name(name), duration_ns=max(0, e["_dur"] - e["_children"]),
            start_ns=e["_start"],
            thread_id=_int(e.get("tid")), input_types=_input_types(e.get("args") or {}),
        )
        rows.append(row)
        timeline.append(((e.get("pid"), e.get("tid")), e["_start"], POINT, row))
        index.add(e.get("pid"), _int(e.get("tid")), e["_start"])
    notes: list[str] = []
    ranges = _place(timeline, annotations, notes)
    index.freeze()
    return rows, range_rows(ranges, _others(index), gpu=False), notes
