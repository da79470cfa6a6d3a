"""ncu's per-function plan into the kernel table: counters of one launch per kernel function,
times of every launch.

Tensor-path counters decide a verdict per kernel *function* (measured on H100 against the
7-pass preset launch by launch: benchmarks/RESULTS.md), so profkit's default ncu run
profiles only the first launch of each function in the measured iterations (``--kernel-id
::regex:.:1`` with ``--kernel-name-base mangled``: every template instance is its own
function) and the harness records every kernel's GPU start and end through CUPTI's activity
API in the same process (``profkit.kernel_timer``). This module joins the two:

* one row per kernel CUPTI saw inside a measured iteration's window, in launch order
  (CUPTI's correlation ids), with CUPTI's start, duration, grid, block, stream and device;
* a function's first launch carries ncu's counters for it; every launch of the function has
  the verdict those counters give, and the launches that were not profiled say in
  ``evidence_detail`` which launch's counters decided it;
* a function ncu did not profile (in older runs, whose push/pop iteration ranges ncu's
  filter saw on the main thread only: one launched from another thread) is named as the C++
  runtime demangles it and judged by name rules. Iterations in start/end ranges (profkit's
  now) are the process's: ncu counts every thread's functions, and every kernel timed in an
  iteration's window is the iteration's.

The iterations become range rows (with their CUPTI start and wall time), so the run has a
timeline like nsys's.
"""

from __future__ import annotations

import bisect
import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator, cast

from ..classify import classify_one, last_resorts
from ..nvtx_ranges import OpLabel, op_label
from ..errors import BadExport
from ..names import demangle, short_name
from .ncu_csv import read_ncu_csv
from .ranges import attribute_row
from .schema import Capture, ClassifiedRow, KernelRow, RangeRow, kernel_row

DETAIL_SHARED = "counters of launch {launch} (the first of this kernel function): {detail}"


def read_per_function(csv_path: Path, mangled_csv_path: Path, times_path: Path, run_tag: str,
                      domain: str, thread_ids: dict[int, int] | None = None,
                      process_wide: bool = False) -> Capture[KernelRow]:
    """A classified capture (rows carry their verdicts) from ncu's two raw-page exports of the
    same report (names demangled, and mangled) and the harness's CUPTI kernel times.
    ``thread_ids`` maps CUPTI's thread ids (pthread ids) to OS thread ids where known; other
    threads' launches have no thread id. With ``process_wide`` (iterations in start/end
    ranges, as profkit opens them now) every kernel launched in an iteration's window is the
    iteration's, from whichever thread; without (older push/pop runs), only the main thread's
    are, and the others count as other threads' kernels."""
    profiled = read_ncu_csv(csv_path)
    rows = list(profiled.rows)
    mangled = list(read_ncu_csv(mangled_csv_path).rows)
    if len(mangled) != len(rows):
        raise BadExport(f"{mangled_csv_path.name} and {csv_path.name} list different launches")
    functions: dict[str, KernelRow] = {}
    for m, r in zip(mangled, rows):
        functions.setdefault(m["name"], r)
    try:
        raw = times_path.read_bytes()
        times = json.loads(gzip.decompress(raw) if times_path.suffix == ".gz" else raw)
        marks = [(str(label), int(ts)) for label, ts in times["marks"]]
        kernels = times["kernels"]
        windows = _windows(marks)
        if not isinstance(kernels, list):
            raise TypeError("its kernels are not a list")
    except (OSError, EOFError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise BadExport(f"{times_path} is not a readable kernel-times file: {exc}") from None
    capture: Capture[KernelRow] = Capture(
        rows=iter(()), tool="ncu", source_format="ncu-csv+cupti", gpu_name=profiled.gpu_name,
        compute_capability=profiled.compute_capability, metric_names=profiled.metric_names,
        metric_units=profiled.metric_units)
    ids = thread_ids or {}
    for k in kernels:
        if not isinstance(k, dict):
            raise BadExport(f"{times_path} has a kernel record that is not an object: {str(k)[:80]}")
        thread = k.get("thread")
        k["os_thread"] = ids.get(thread) if isinstance(thread, int) else None
    try:
        ops = _op_finder(times.get("ops"))
        out, ranges = _join(kernels, windows, functions, run_tag, domain, ids, capture.notes, process_wide, ops)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise BadExport(f"{times_path} has a kernel record profkit cannot read ({type(exc).__name__}: {exc})") from None
    capture.rows = cast(Iterator[KernelRow], iter(out))
    capture.ranges.extend(ranges)
    capture.range_paths = [r["path"] for r in ranges]
    unprofiled = {r["name"] for r in out if r["evidence"] != "metrics"}
    if unprofiled:
        capture.notes.append(f"ncu counted no launch of {len(unprofiled)} kernel functions the timing process ran "
                             "(a different kernel choice between the two processes, or, in older runs, launched by another "
                             "thread, outside ncu's per-thread NVTX filter): their verdicts come from names")
    return capture


OpFinder = Callable[[Any, Any], "OpLabel | None"]


def _op_finder(ops: Any) -> OpFinder:
    """Which operator range (the harness's ``profkit.annotate.IntervalLog``: per thread,
    intervals on CUPTI's clock) a launch at time t on a thread was made in, if any."""
    if not ops:
        return lambda thread, t: None
    names = [op_label(str(n)) for n in ops["names"]]
    by_thread: dict[int, list[tuple[int, int, int]]] = {}
    for thread, start, end, index in ops["intervals"]:
        by_thread.setdefault(int(thread), []).append((int(start), int(end), int(index)))
    starts: dict[int, list[int]] = {}
    for thread, spans in by_thread.items():
        spans.sort()
        starts[thread] = [s for s, _, _ in spans]

    def find(thread: Any, t: Any) -> OpLabel | None:
        spans = by_thread.get(thread) if isinstance(thread, int) else None
        if not spans or not isinstance(t, int):
            return None
        i = bisect.bisect_right(starts[thread], t) - 1
        # Operator ranges do not nest: the last one begun by t holds t if any does.
        return names[spans[i][2]] if i >= 0 and spans[i][1] >= t else None

    return find


def _windows(marks: list[tuple[str, int]]) -> list[tuple[int, int, int]]:
    """(iteration, start, end) from the harness's ``iterN.start`` / ``iterN.end`` marks."""
    starts = {label[:-6]: ts for label, ts in marks if label.endswith(".start")}
    out = []
    for label, ts in marks:
        if label.endswith(".end") and label[:-4] in starts:
            out.append((int(label[4:-4]), starts[label[:-4]], ts))
    return sorted(out)


def _join(kernels: list[dict[str, Any]], windows: list[tuple[int, int, int]], functions: dict[str, KernelRow],
          run_tag: str, domain: str, thread_ids: dict[int, int],
          notes: list[str], process_wide: bool = False,
          ops: OpFinder = lambda thread, t: None) -> tuple[list[ClassifiedRow], list[RangeRow]]:
    placed = []
    for k in kernels:
        it = next((i for i, s, e in windows if s <= int(k["start"]) <= e), None)
        if it is not None:
            placed.append((int(k["correlation"]), it, k))
    placed.sort(key=lambda p: (p[0], p[2]["start"]))
    # The thread that opened the iteration ranges: the one that launched the kernels ncu's
    # per-thread filter profiled (CUPTI's runtime records name each launch's thread, where
    # CUPTI gave them; without them every kernel counts as the main thread's).
    threads = Counter(k.get("thread") for _, _, k in placed if k["name"] in functions and k.get("thread") is not None)
    main_thread = threads.most_common(1)[0][0] if threads else None
    first: dict[str, int] = {}  # mangled name -> launch id of its profiled launch
    verdicts: dict[str, Any] = {}
    out: list[ClassifiedRow] = []
    per_iter: dict[int, list[int]] = {}
    for launch_id, (_, it, k) in enumerate(placed):
        mangled = k["name"]
        ncu_row = functions.get(mangled)
        name = ncu_row["name"] if ncu_row else demangle(mangled)
        grid, block = k["grid"], k["block"]
        thread = k.get("thread")
        on_main = process_wide or main_thread is None or thread is None or thread == main_thread
        range_name = f"{run_tag}.iter{it}"
        row = kernel_row(
            launch_id, "kernel", name, ncu_row["short_name"] if ncu_row else short_name(name),
            duration_ns=int(k["end"]) - int(k["start"]), start_ns=int(k["start"]),
            grid_x=grid[0], grid_y=grid[1], grid_z=grid[2], block_x=block[0], block_y=block[1], block_z=block[2],
            stream=k.get("stream"), device=k.get("device"), thread_id=k.get("os_thread"),
            nvtx_range=range_name if on_main else None, nvtx_path=f"{domain}@{range_name}" if on_main else None)
        label = ops(thread, k.get("launched_at"))
        if label is not None:
            attribute_row(row, [label])
        if ncu_row is not None and mangled not in first:
            first[mangled] = launch_id
            row["metrics"] = dict(ncu_row["metrics"])
            verdicts[mangled] = classify_one(name, ncu_row["metrics"])
            v = verdicts[mangled]
            detail = v.evidence_detail
        elif ncu_row is not None:
            v = verdicts[mangled]
            detail = DETAIL_SHARED.format(launch=first[mangled], detail=v.evidence_detail)
        else:
            v = classify_one(name, None)
            detail = v.evidence_detail
        if v.precision == "unknown":  # the operator's types, then (a profiled function's) CUDA-core counters
            v = last_resorts(v, row["input_types"], ncu_row["metrics"] if ncu_row is not None else None)
            detail = v.evidence_detail if v.precision != "unknown" else detail
        done = cast(ClassifiedRow, row)
        done["precision"], done["tensor_core"], done["family"] = v.precision, v.tensor_core, v.family
        done["evidence"], done["evidence_detail"] = v.evidence, detail
        out.append(done)
        per_iter.setdefault(it, []).append(launch_id)
    missing = sorted(set(functions) - set(first))
    if missing:
        notes.append(f"ncu profiled {len(missing)} kernel functions that CUPTI did not time inside the measured "
                     f"iterations (first: {missing[0][:80]})")
    ranges: list[RangeRow] = []
    for i, (it, s, e) in enumerate(windows):
        ids = per_iter.get(it, [])
        mine = [out[j] for j in ids if out[j]["nvtx_path"]]
        ranges.append({
            "range_id": i, "name": f"{run_tag}.iter{it}", "domain": domain, "path": f"{domain}@{run_tag}.iter{it}",
            "depth": 0, "thread_id": thread_ids.get(main_thread) if main_thread is not None else None,
            "start_ns": s, "wall_ns": e - s, "kernels": len(mine),
            "gpu_ops": len(mine), "gpu_time_ns": sum(r["duration_ns"] or 0 for r in mine),
            "other_thread_kernels": len(ids) - len(mine), "rank": None})
    return out, ranges
