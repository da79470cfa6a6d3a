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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import BadExport
from ..names import short_name
from .ncu_common import DURATION, TIME_SCALE, kernel_metric_names, nvtx_columns, path_list
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
    return BadExport(
        f"{path.name} is damaged or incomplete ({what}); an ncu run stopped while writing it leaves "
        "such a file",
        "Profile again, or import the report of a run that finished.",
    )


def read_ncu_rep(path: Path) -> Capture[KernelRow]:
    """The kernel table of a report. A damaged or truncated file (the reader then returns
    launches without a name or metrics, or fails inside) is a BadExport."""
    ncu_report = _reader()
    try:
        with _reader_log():
            return _read(path, ncu_report)
    except BadExport:
        raise
    except (
        AttributeError,
        TypeError,
        ValueError,
        ArithmeticError,
        LookupError,
        RuntimeError,
        MemoryError,
    ) as exc:
        # What NVIDIA's reader does with bytes it cannot make sense of: values of the wrong
        # kind, None where an object was, or its own exceptions.
        raise _damaged(path, f"{type(exc).__name__}: {exc}") from exc


def _read(path: Path, ncu_report: Any) -> Capture[KernelRow]:
    ctx = _load(path, ncu_report)
    rows: list[KernelRow] = []
    metric_units: dict[str, str] = {}
    names: set[str] = set()
    gpu_name = cc = None
    for act in _actions(ctx, path):
        metrics = _metrics(act, ncu_report, metric_units)
        names.update(metrics)
        rows.append(_row(len(rows), act, ncu_report, metrics))
        if gpu_name is None:  # from the first launch that names its device
            gpu_name, this_cc = _device(act)
            cc = this_cc or cc
    if DURATION not in metric_units and rows and rows[0]["duration_ns"] is None:
        raise BadExport(
            f"{path.name} has no {DURATION} values",
            "Profile with ncu metrics that include it (ncu --metrics gpu__time_duration.sum,...).",
        )
    return Capture(
        rows=iter(rows),
        tool="ncu",
        source_format="ncu-rep",
        gpu_name=gpu_name,
        compute_capability=cc,
        metric_names=sorted(names),
        metric_units=metric_units,
        range_paths=path_list(rows),
    )


def _load(path: Path, ncu_report: Any) -> Any:
    """The report's context, refused if the file is empty, unreadable or holds no range."""
    if path.stat().st_size == 0:
        raise BadExport(f"{path} is empty")
    try:
        ctx = ncu_report.load_report(str(path))
    except Exception as exc:  # the reader raises plain exceptions for damaged files
        raise BadExport(
            f"{path.name} could not be read as an Nsight Compute report: {exc}"
        ) from exc
    if ctx is None or ctx.num_ranges() == 0:
        raise BadExport(
            f"{path.name} could not be read as an Nsight Compute report, or holds no profiled kernels"
        )
    return ctx


def _actions(ctx: Any, path: Path) -> Iterator[Any]:
    """Every profiled launch (an action) of every range, in order; one without a name is what a
    report cut short ends with, and is refused."""
    n = 0
    for ri in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(ri)
        for ai in range(rng.num_actions()):
            act = rng.action_by_idx(ai)
            if act is None or not act.name():
                raise _damaged(path, f"kernel launch {n + 1} has no name")
            yield act
            n += 1


def _metrics(act: Any, ncu_report: Any, units: dict[str, str]) -> dict[str, float | int]:
    """A launch's numeric kernel metrics (times in ns); each one's unit, where it has one, goes
    into ``units``."""
    metrics: dict[str, float | int] = {}
    for m in kernel_metric_names([n for n in act.metric_names() if "__" in n]):
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
            units[m] = unit
        metrics[m] = v
    return metrics


def _launch(act: Any, name: str) -> int | None:
    """An integer launch attribute (``launch__grid_dim_x``), None where the report has none."""
    metric = act[name]
    return int(metric.as_uint64()) if metric is not None and metric.has_value() else None


def _nvtx(act: Any) -> list[tuple[str, str]]:
    """The NVTX ranges open at the launch, (domain, text), outermost first: the process's
    start/end ranges, then the thread's push/pop ones."""
    ranges: list[tuple[str, str]] = []
    state = act.nvtx_state()
    if state is not None:
        doms = [state.domain_by_id(did) for did in state.domains()]
        for dom in doms:
            for text in dom.start_end_ranges() if hasattr(dom, "start_end_ranges") else ():
                ranges.append((dom.name(), text))
        for dom in doms:
            for text in dom.push_pop_ranges():
                ranges.append((dom.name(), text))
    return ranges


def _row(launch_id: int, act: Any, ncu_report: Any, metrics: dict[str, float | int]) -> KernelRow:
    ranges = _nvtx(act)
    name = act.name(ncu_report.IAction.NameBase_DEMANGLED) or act.name()
    duration = metrics.get(DURATION)
    return kernel_row(
        launch_id,
        "kernel",
        name,
        act.name(ncu_report.IAction.NameBase_FUNCTION) or short_name(name),
        duration_ns=int(round(duration)) if duration is not None else None,
        grid_x=_launch(act, "launch__grid_dim_x"),
        grid_y=_launch(act, "launch__grid_dim_y"),
        grid_z=_launch(act, "launch__grid_dim_z"),
        block_x=_launch(act, "launch__block_dim_x"),
        block_y=_launch(act, "launch__block_dim_y"),
        block_z=_launch(act, "launch__block_dim_z"),
        stream=_launch(act, "launch__stream_id"),
        device=_launch(act, "launch__device_id"),
        metrics=metrics,
        **nvtx_columns(ranges),
    )


def _device(act: Any) -> tuple[str | None, str | None]:
    """The GPU's name and compute capability as a launch records them (None where it does not)."""
    dn = act["device__attribute_display_name"]
    gpu_name = dn.as_string() if dn is not None and dn.has_value() else None
    major, minor = (
        act["device__attribute_compute_capability_major"],
        act["device__attribute_compute_capability_minor"],
    )
    if major is None or minor is None or not major.has_value():
        return gpu_name, None
    return gpu_name, f"{int(major.as_uint64())}.{int(minor.as_uint64())}"
