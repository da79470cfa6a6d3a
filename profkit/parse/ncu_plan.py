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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ..classify import classify_one, last_resorts
from ..errors import BadExport
from ..names import demangle, short_name
from ..nvtx_ranges import OpLabel, op_label
from ..records import CountedFunction
from .ncu_csv import read_ncu_csv
from .ranges import attribute_row
from .schema import Capture, ClassifiedRow, HostSyncRow, KernelRow, RangeRow, gpu_around, kernel_row

DETAIL_SHARED = "counters of launch {launch} (the first of this kernel function): {detail}"
DETAIL_KEPT = (
    "counters of launch {launch} of run {run!r}, kept across runs (same GPU, libraries, workload, options "
    "and launch configuration): {detail}"
)


@dataclass(frozen=True)
class Counted:
    """One kernel function's counters as the join takes them: ncu's names for it, its counters
    and their units, and ``kept`` where they come from an earlier run (``store.counters``)
    rather than from this run's ncu report."""

    name: str
    short_name: str
    metrics: dict[str, Any]
    metric_units: dict[str, str]
    kept: CountedFunction | None = None


def ncu_functions(
    csv_path: Path, mangled_csv_path: Path
) -> tuple[dict[str, Counted], Capture[KernelRow]]:
    """The functions ncu counted in a report of the per-function plan, by mangled name (its
    two raw-page exports: names demangled, and mangled), and the export's capture (for its GPU
    and metric names)."""
    profiled = read_ncu_csv(csv_path)
    rows = list(profiled.rows)
    mangled = list(read_ncu_csv(mangled_csv_path).rows)
    if len(mangled) != len(rows):
        raise BadExport(f"{mangled_csv_path.name} and {csv_path.name} list different launches")
    functions: dict[str, Counted] = {}
    for m, r in zip(mangled, rows):
        if m["name"] not in functions:
            units = {
                k: profiled.metric_units[k] for k in r["metrics"] if k in profiled.metric_units
            }
            functions[m["name"]] = Counted(r["name"], r["short_name"], dict(r["metrics"]), units)
    return functions, profiled


def counted_functions(counted: dict[str, Any]) -> dict[str, Counted]:
    """The functions CUPTI's Range Profiler counted in the run's process (``kernel_counts.json``:
    ``kernel_counter.count_step``'s ``functions``, mangled name -> counter -> value), as the join
    takes them, each counter with the unit ncu's raw page gives it."""
    functions: dict[str, Counted] = {}
    for mangled, values in counted["functions"].items():
        name = demangle(mangled)
        functions[mangled] = Counted(
            name, short_name(name), dict(values), {m: ncu_unit(m) for m in values}
        )
    return functions


def ncu_unit(metric: str) -> str:
    """The unit ncu's raw page gives a counter of the per-function plan's sets (its exports in
    tests/data/ncu): ns for durations, inst for instruction counts, none for tensor-path ops."""
    return (
        "ns"
        if metric.startswith("gpu__time_duration")
        else "inst"
        if "inst_executed" in metric
        else ""
    )


def read_per_function(
    csv_path: Path,
    mangled_csv_path: Path,
    times_path: Path,
    run_tag: str,
    domain: str,
    thread_ids: dict[int, int] | None = None,
    process_wide: bool = False,
) -> Capture[KernelRow]:
    """A classified capture (rows carry their verdicts) from ncu's two raw-page exports of the
    same report (names demangled, and mangled) and the harness's CUPTI kernel times.
    ``thread_ids`` maps CUPTI's thread ids (pthread ids) to OS thread ids where known; other
    threads' launches have no thread id. With ``process_wide`` (iterations in start/end
    ranges, as profkit opens them now) every kernel launched in an iteration's window is the
    iteration's, from whichever thread; without (older push/pop runs), only the main thread's
    are, and the others count as other threads' kernels."""
    functions, profiled = ncu_functions(csv_path, mangled_csv_path)
    return read_timed(
        times_path,
        functions,
        run_tag,
        domain,
        thread_ids,
        process_wide,
        (profiled.gpu_name, profiled.compute_capability),
    )


def kernel_times(times_path: Path) -> dict[str, Any]:
    """The timing harness's file (``profkit.kernel_timer``): its marks and kernel records,
    checked; refused in one line if unreadable."""
    try:
        raw = times_path.read_bytes()
        times = json.loads(gzip.decompress(raw) if times_path.suffix == ".gz" else raw)
        times["windows"] = _windows([(str(label), int(ts)) for label, ts in times["marks"]])
        if not isinstance(times["kernels"], list):
            raise TypeError("its kernels are not a list")
    except (OSError, EOFError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise BadExport(f"{times_path} is not a readable kernel-times file: {exc}") from None
    for k in times["kernels"]:
        if not isinstance(k, dict):
            raise BadExport(
                f"{times_path} has a kernel record that is not an object: {str(k)[:80]}"
            )
    return cast(dict[str, Any], times)


def timed_functions(times: dict[str, Any]) -> dict[str, str]:
    """The mangled names of the kernel functions timed inside the measured iterations, in the
    order of their first launch, each with that launch's configuration (:func:`launch_config`)."""
    try:
        placed = _placed(times["kernels"], times["windows"])
        found: dict[str, str] = {}
        for _, _, k in placed:
            if str(k["name"]) not in found:
                found[str(k["name"])] = launch_config(k["grid"], k["block"])
        return found
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise BadExport(
            f"the kernel-times file has a kernel record profkit cannot read ({type(exc).__name__}: "
            f"{exc})"
        ) from None


def launch_config(grid: Any, block: Any) -> str:
    """A launch's configuration as kept counters are keyed by it: "grid 8x1x1 block 256x1x1"."""
    return f"grid {'x'.join(map(str, grid))} block {'x'.join(map(str, block))}"


def read_timed(
    times_path: Path,
    functions: dict[str, Counted],
    run_tag: str,
    domain: str,
    thread_ids: dict[int, int] | None = None,
    process_wide: bool = False,
    gpu: tuple[str | None, str | None] = (None, None),
) -> Capture[KernelRow]:
    """The capture of the per-function plan from the harness's CUPTI kernel times and the
    counters of each function, by mangled name: this run's ncu report's, or kept from an
    earlier run (``Counted.kept``: every launch's evidence detail then names that run)."""
    times = kernel_times(times_path)
    metric_names = list(dict.fromkeys(m for f in functions.values() for m in f.metrics))
    units = {k: v for f in functions.values() for k, v in f.metric_units.items()}
    capture: Capture[KernelRow] = Capture(
        rows=iter(()),
        tool="ncu",
        source_format="ncu-csv+cupti",
        gpu_name=gpu[0],
        compute_capability=gpu[1],
        metric_names=metric_names,
        metric_units=units,
    )
    ids = thread_ids or {}
    for k in times["kernels"]:
        thread = k.get("thread")
        k["os_thread"] = ids.get(thread) if isinstance(thread, int) else None
    try:
        ops = _op_finder(times.get("ops"))
        out, ranges, first = _join(
            times["kernels"],
            times["windows"],
            functions,
            run_tag,
            domain,
            ids,
            capture.notes,
            process_wide,
            ops,
        )
        syncs = _host_syncs(times, run_tag, ids, ops)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise BadExport(
            f"{times_path} has a kernel record profkit cannot read ({type(exc).__name__}: {exc})"
        ) from None
    capture.rows = cast(Iterator[KernelRow], iter(out))
    capture.ranges.extend(ranges)
    capture.host_syncs = syncs
    capture.range_paths = [r["path"] for r in ranges]
    capture.counted_launches = {
        m: first[m] for m, f in functions.items() if f.kept is None and m in first
    }
    capture.counted_configs = {m: _row_config(out[i]) for m, i in capture.counted_launches.items()}
    unprofiled = {r["name"] for r in out if r["evidence"] != "metrics"}
    if unprofiled:
        capture.notes.append(
            f"ncu counted no launch of {len(unprofiled)} kernel functions the timing process ran "
            "(a different kernel choice between the two processes, or, in older runs, launched by another "
            "thread, outside ncu's per-thread NVTX filter): their verdicts come from names"
        )
    kept = {m for m, f in functions.items() if f.kept is not None and m in first}
    if kept:
        runs = sorted({functions[m].kept.run_name for m in kept})  # type: ignore[union-attr]
        capture.notes.append(
            f"the counters of {len(kept)} kernel functions were kept from earlier runs "
            f"({', '.join(runs[:3])}{', ...' if len(runs) > 3 else ''}): ncu did not profile them again"
        )
    return capture


OpFinder = Callable[[Any, Any], "OpLabel | None"]


def _host_syncs(
    times: dict[str, Any], run_tag: str, thread_ids: dict[int, int], ops: OpFinder
) -> list[HostSyncRow]:
    """The calls that blocked the host while the harness timed (``KernelTimer.syncs``, files
    since issue 36), in start order, each with the operator range it was made in, the GPU work
    around it and the measured iteration it was made in. A driver call inside a runtime one of
    the same thread (cudaStreamSynchronize calling cuStreamSynchronize) is that call, not another."""
    calls = sorted(times.get("syncs") or [], key=lambda c: (int(c["start"]), bool(c.get("driver"))))
    if not calls:
        return []
    around = gpu_around((int(k["start"]), int(k["end"])) for k in times["kernels"])
    outer: dict[Any, tuple[int, int]] = {}  # thread -> the last runtime call's span
    out: list[HostSyncRow] = []
    for c in calls:
        thread, start, end = c.get("thread"), int(c["start"]), int(c["end"])
        if c.get("driver"):
            span = outer.get(thread)
            if span is not None and span[0] <= start and end <= span[1]:
                continue
        else:
            outer[thread] = (start, end)
        last_end, next_start = around(end)
        step = next(((it, e) for it, s_, e in times["windows"] if s_ <= start <= e), None)
        label = ops(thread, start)
        out.append(
            {
                "sync_id": len(out),
                "name": str(c["name"]),
                "start_ns": start,
                "end_ns": end,
                "thread_id": thread_ids.get(thread) if isinstance(thread, int) else None,
                "rank": None,
                "op": " ".join(x for x in (label.module, label.op) if x)
                if label is not None
                else None,
                "gpu_last_end_ns": last_end,
                "gpu_next_start_ns": next_start,
                "iteration": f"{run_tag}.iter{step[0]}" if step else None,
                "iteration_end_ns": step[1] if step else None,
            }
        )
    return out


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


def _placed(
    kernels: list[dict[str, Any]], windows: list[tuple[int, int, int]]
) -> list[tuple[int, int, dict[str, Any]]]:
    """(correlation id, iteration, record) of the kernels timed inside a measured iteration's
    window, in launch order."""
    placed = []
    for k in kernels:
        it = next((i for i, s, e in windows if s <= int(k["start"]) <= e), None)
        if it is not None:
            placed.append((int(k["correlation"]), it, k))
    placed.sort(key=lambda p: (p[0], p[2]["start"]))
    return placed


def _join(
    kernels: list[dict[str, Any]],
    windows: list[tuple[int, int, int]],
    functions: dict[str, Counted],
    run_tag: str,
    domain: str,
    thread_ids: dict[int, int],
    notes: list[str],
    process_wide: bool = False,
    ops: OpFinder = lambda thread, t: None,
) -> tuple[list[ClassifiedRow], list[RangeRow], dict[str, int]]:
    placed = _placed(kernels, windows)
    # The thread that opened the iteration ranges: the one that launched the kernels ncu's
    # per-thread filter profiled (CUPTI's runtime records name each launch's thread, where
    # CUPTI gave them; without them every kernel counts as the main thread's).
    threads = Counter(
        k.get("thread")
        for _, _, k in placed
        if k["name"] in functions and k.get("thread") is not None
    )
    main_thread = threads.most_common(1)[0][0] if threads else None
    first: dict[str, int] = {}  # mangled name -> launch id of its profiled launch
    verdicts: dict[str, Any] = {}
    out: list[ClassifiedRow] = []
    per_iter: dict[int, list[int]] = {}
    for launch_id, (_, it, k) in enumerate(placed):
        mangled = k["name"]
        ncu_row = functions.get(mangled)
        name = ncu_row.name if ncu_row else demangle(mangled)
        grid, block = k["grid"], k["block"]
        thread = k.get("thread")
        on_main = process_wide or main_thread is None or thread is None or thread == main_thread
        range_name = f"{run_tag}.iter{it}"
        row = kernel_row(
            launch_id,
            "kernel",
            name,
            ncu_row.short_name if ncu_row else short_name(name),
            duration_ns=int(k["end"]) - int(k["start"]),
            start_ns=int(k["start"]),
            grid_x=grid[0],
            grid_y=grid[1],
            grid_z=grid[2],
            block_x=block[0],
            block_y=block[1],
            block_z=block[2],
            stream=k.get("stream"),
            device=k.get("device"),
            thread_id=k.get("os_thread"),
            nvtx_range=range_name if on_main else None,
            nvtx_path=f"{domain}@{range_name}" if on_main else None,
        )
        label = ops(thread, k.get("launched_at"))
        if label is not None:
            attribute_row(row, [label])
        if ncu_row is not None and mangled not in first:
            first[mangled] = launch_id
            row["metrics"] = dict(ncu_row.metrics)
            verdicts[mangled] = classify_one(name, ncu_row.metrics)
            v = verdicts[mangled]
            detail = (
                v.evidence_detail
                if ncu_row.kept is None
                else _kept_detail(ncu_row.kept, v.evidence_detail)
            )
        elif ncu_row is not None:
            v = verdicts[mangled]
            detail = (
                DETAIL_SHARED.format(launch=first[mangled], detail=v.evidence_detail)
                if ncu_row.kept is None
                else _kept_detail(ncu_row.kept, v.evidence_detail)
            )
        else:
            v = classify_one(name, None)
            detail = v.evidence_detail
        # the operator's types, then (a profiled function's) CUDA-core counters
        if v.precision == "unknown":
            v = last_resorts(
                v, row["input_types"], ncu_row.metrics if ncu_row is not None else None
            )
            if v.precision != "unknown":
                detail = v.evidence_detail
                if v.evidence == "metrics" and ncu_row is not None and ncu_row.kept is not None:
                    # CUDA-core counters of an earlier run
                    detail = _kept_detail(ncu_row.kept, detail)
        done = cast(ClassifiedRow, row)
        done["precision"], done["tensor_core"], done["family"] = (
            v.precision,
            v.tensor_core,
            v.family,
        )
        done["evidence"], done["evidence_detail"] = v.evidence, detail
        out.append(done)
        per_iter.setdefault(it, []).append(launch_id)
    missing = sorted(m for m, f in functions.items() if f.kept is None and m not in first)
    if missing:
        notes.append(
            f"ncu profiled {len(missing)} kernel functions that CUPTI did not time inside the measured "
            f"iterations (first: {missing[0][:80]})"
        )
    ranges: list[RangeRow] = []
    for i, (it, s, e) in enumerate(windows):
        ids = per_iter.get(it, [])
        mine = [out[j] for j in ids if out[j]["nvtx_path"]]
        ranges.append(
            {
                "range_id": i,
                "name": f"{run_tag}.iter{it}",
                "domain": domain,
                "path": f"{domain}@{run_tag}.iter{it}",
                "depth": 0,
                "thread_id": thread_ids.get(main_thread) if main_thread is not None else None,
                "start_ns": s,
                "wall_ns": e - s,
                "kernels": len(mine),
                "gpu_ops": len(mine),
                "gpu_time_ns": sum(r["duration_ns"] or 0 for r in mine),
                "other_thread_kernels": len(ids) - len(mine),
                "rank": None,
            }
        )
    return out, ranges, first


def _row_config(row: ClassifiedRow) -> str:
    return launch_config(
        (row["grid_x"], row["grid_y"], row["grid_z"]),
        (row["block_x"], row["block_y"], row["block_z"]),
    )


def _kept_detail(kept: CountedFunction, detail: str) -> str:
    """The evidence detail of a launch judged from counters kept from an earlier run."""
    return DETAIL_KEPT.format(launch=kept.launch_id, run=kept.run_name, detail=detail)
