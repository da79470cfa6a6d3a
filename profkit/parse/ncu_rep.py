"""Nsight Compute reports (.ncu-rep) into the kernel table, through NVIDIA's ``ncu_report``
package (PyPI ``ncu-report``), so that a report copied to a laptop imports without ncu.

Names come as the reader demangles them (the full form, e.g. ``(int)4`` template
arguments), which differs from the CSV export's simplified form; ``short_name`` is the
normal form both agree on. Metric values keep the report's own base units (ns for time).
"""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ..errors import BadExport
from ..names import short_name
from .ncu_common import DURATION, TIME_SCALE, kernel_metric_names, nvtx_path, path_list
from .schema import Capture, KernelRow, kernel_row


def _reader() -> Any:
    try:
        import ncu_report
    except ImportError as exc:  # pragma: no cover - a dependency, but say what to do
        raise BadExport(
            "reading .ncu-rep files needs NVIDIA's ncu-report package",
            "pip install ncu-report, or export a CSV with: ncu --import X.ncu-rep --csv --page raw",
        ) from exc
    return ncu_report


def _value(metric: Any, ncu_report: Any) -> float | int | str:
    kind = metric.kind()
    if kind == ncu_report.IMetric.ValueKind_STRING:
        return str(metric.as_string())
    if kind in (ncu_report.IMetric.ValueKind_UINT32, ncu_report.IMetric.ValueKind_UINT64):
        return int(metric.as_uint64())
    v = metric.as_double()
    return int(v) if float(v).is_integer() else v


@contextmanager
def _reader_log() -> Iterator[None]:
    """The reader's C++ parser logs what it cannot parse in a damaged file straight to file
    descriptor 2 (absl's ``E0000 ... Can't parse message ...`` lines): while it reads, that
    goes to a scratch file instead, so that the file's one-line error is all a user sees."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        with tempfile.TemporaryFile() as scratch:
            os.dup2(scratch.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _damaged(path: Path, what: str) -> BadExport:
    return BadExport(f"{path.name} is damaged or incomplete ({what}); an ncu run stopped while writing it leaves "
                     "such a file", "Profile again, or import the report of a run that finished.")


def read_ncu_rep(path: Path) -> Capture[KernelRow]:
    """The kernel table of a report. A damaged or truncated file (the reader then returns
    launches without a name or metrics, or fails inside) is a BadExport."""
    ncu_report = _reader()
    try:
        with _reader_log():
            return _read(path, ncu_report)
    except BadExport:
        raise
    except (AttributeError, TypeError, ValueError, ArithmeticError, LookupError, RuntimeError, MemoryError) as exc:
        # What NVIDIA's reader does with bytes it cannot make sense of: values of the wrong
        # kind, None where an object was, or its own exceptions.
        raise _damaged(path, f"{type(exc).__name__}: {exc}") from exc


def _read(path: Path, ncu_report: Any) -> Capture[KernelRow]:
    if path.stat().st_size == 0:
        raise BadExport(f"{path} is empty")
    try:
        ctx = ncu_report.load_report(str(path))
    except Exception as exc:  # the reader raises plain exceptions for damaged files
        raise BadExport(f"{path.name} could not be read as an Nsight Compute report: {exc}") from exc
    if ctx is None or ctx.num_ranges() == 0:
        raise BadExport(f"{path.name} could not be read as an Nsight Compute report, or holds no profiled kernels")

    rows: list[KernelRow] = []
    names: set[str] = set()
    metric_units: dict[str, str] = {}
    gpu_name = cc = None
    launch_id = 0
    for ri in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(ri)
        for ai in range(rng.num_actions()):
            act = rng.action_by_idx(ai)
            if act is None or not act.name():  # what a report cut short ends with
                raise _damaged(path, f"kernel launch {launch_id + 1} has no name")
            all_names = list(act.metric_names())
            metrics = {}
            for m in kernel_metric_names([n for n in all_names if "__" in n]):
                metric = act[m]
                if metric is None or not metric.has_value():
                    continue
                v = _value(metric, ncu_report)
                if isinstance(v, str):
                    continue
                unit = metric.unit() or ""
                if unit in TIME_SCALE:
                    v = v * TIME_SCALE[unit]
                    unit = "ns"
                if unit:
                    metric_units[m] = unit
                metrics[m] = v
                names.add(m)

            def launch(name: str) -> int | None:
                metric = act[name]
                return int(metric.as_uint64()) if metric is not None and metric.has_value() else None

            ranges = []
            state = act.nvtx_state()
            if state is not None:  # the process's start/end ranges (outermost), then the thread's push/pop ones
                doms = [state.domain_by_id(did) for did in state.domains()]
                for dom in doms:
                    for text in (dom.start_end_ranges() if hasattr(dom, "start_end_ranges") else ()):
                        ranges.append((dom.name(), text))
                for dom in doms:
                    for text in dom.push_pop_ranges():
                        ranges.append((dom.name(), text))
            name = act.name(ncu_report.IAction.NameBase_DEMANGLED) or act.name()
            duration = metrics.get(DURATION)
            rows.append(kernel_row(
                launch_id, "kernel", name, act.name(ncu_report.IAction.NameBase_FUNCTION) or short_name(name),
                duration_ns=int(round(duration)) if duration is not None else None,
                grid_x=launch("launch__grid_dim_x"), grid_y=launch("launch__grid_dim_y"),
                grid_z=launch("launch__grid_dim_z"), block_x=launch("launch__block_dim_x"),
                block_y=launch("launch__block_dim_y"), block_z=launch("launch__block_dim_z"),
                stream=launch("launch__stream_id"), device=launch("launch__device_id"),
                nvtx_range=ranges[-1][1] if ranges else None, nvtx_path=nvtx_path(ranges), metrics=metrics,
            ))
            launch_id += 1
            if gpu_name is None:
                dn = act["device__attribute_display_name"]
                gpu_name = dn.as_string() if dn is not None and dn.has_value() else None
                major, minor = act["device__attribute_compute_capability_major"], act["device__attribute_compute_capability_minor"]
                if major is not None and minor is not None and major.has_value():
                    cc = f"{int(major.as_uint64())}.{int(minor.as_uint64())}"
    if DURATION not in metric_units and rows and rows[0]["duration_ns"] is None:
        raise BadExport(f"{path.name} has no {DURATION} values", "Profile with ncu metrics that include it (ncu --metrics gpu__time_duration.sum,...).")
    return Capture(
        rows=iter(rows), tool="ncu", source_format="ncu-rep", gpu_name=gpu_name, compute_capability=cc,
        metric_names=sorted(names), metric_units=metric_units, range_paths=path_list(rows),
    )
