"""Range attribution shared by the timeline importers (torch.profiler traces, nsys exports).

Push/pop ranges belong to the thread that pushed them. A GPU activity belongs to the ranges
that were open *on its launching thread* when its launch call ran (the semantics of
``nsys stats``' nvtx_kern_sum and nvtx_gpu_proj_sum); a CPU operator to the ranges open on
its own thread when it started. Work that other threads launched while a push/pop range was
open (autograd's backward thread, data loaders) is not the range's, and is counted apart as
``other_thread_kernels``.

Process-wide ranges (NVTX start/end ranges, and profkit's own iteration ranges in a
torch.profiler trace) belong to no thread: everything any thread of the process launched
while one was open is its, which is how profkit counts a whole training step. A walk keys them
by their process (:func:`process_key`), and an activity's ranges are its process's open ones
and its thread's, in the order they opened (:func:`merged`).

Everything here streams: the caller feeds events sorted by (thread, start), so memory grows
with the nesting depth and the number of ranges, not with the number of activities.
"""

from __future__ import annotations

import bisect
import gc
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, TypeVar

from ..nvtx_ranges import OP_PREFIX, OpLabel, op_label
from .schema import KernelRow, RangeRow
from .torch_nvtx import TorchRange, read_torch_range

# Sort order at equal start: ranges open before a point that starts with them is tested.
RANGE, POINT = 0, 1
# Ranges nested deeper than this (on one thread, or among a process's start/end ranges) are
# left out, with a note: each range's path names all its outer ranges, so without a bound a
# capture of n nested ranges would take time and space quadratic in n. Real captures nest
# a few dozen deep at most.
MAX_DEPTH = 128


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused: while a walk builds an object or a tuple for
    each of hundreds of thousands of ranges (a capture of PyTorch's annotation), all kept, the
    collector runs again and again over them, to free nothing (a fifth of such an import)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# What a range is to the walk (:func:`read_range`): one of the run's ranges; one of profkit's own
# operator ranges; one PyTorch's annotation wrote around an operator's call. Both kinds of
# operator range are attribution only: no range of the run's, so that a run's ranges are the same
# with or without them, as a torch.profiler trace's are (its operators are no ranges).
OF_RUN, OWN_OP, TORCH_OP = "range", "own operator", "torch operator"


def read_range(name: str) -> tuple[str, OpLabel | None, str]:
    """A range's name as profkit shows it, the attribution it gives, and what it is (OF_RUN,
    OWN_OP or TORCH_OP):

    * profkit's own operator range (``nvtx_ranges.op_range``): OWN_OP, its label;
    * a range PyTorch's annotation wrote (``emit_nvtx``, nsys ``--pytorch``; ``torch_nvtx``), named
      by its name and input shapes: an operator's is TORCH_OP, with the operator and shapes; any
      other (an autograd node's, a ``record_function``'s) is a range;
    * a range with an operator's bare name (``aten::conv2d``; a library's own range named like
      one, CUB's ``cub::DeviceRadixSort``): a range, whose name is the attribution where nothing
      else gives one;
    * any other: a range, as it is."""
    if name.startswith(OP_PREFIX):
        return name, op_label(name), OWN_OP
    # neither annotated nor an operator: most ranges, at once
    if " = " not in name and "::" not in name:
        return name, None, OF_RUN
    torch = read_torch_range(name)
    return (name, None, OF_RUN) if torch is None else _torch_range(torch)


@lru_cache(maxsize=1 << 16)
def _torch_range(torch: TorchRange) -> tuple[str, OpLabel | None, str]:
    """:func:`read_range` of a range PyTorch's annotation wrote (the same for every step's call)."""
    label = OpLabel(torch.name, None, None, None, torch.shapes, None) if torch.operator else None
    return torch.label, label, TORCH_OP if label is not None and torch.annotated else OF_RUN


class OpenRange:
    """A range instance being attributed; becomes a RANGE_COLUMNS row."""

    __slots__ = (
        "name",
        "domain",
        "thread_id",
        "start",
        "end",
        "path",
        "depth",
        "kernels",
        "gpu_ops",
        "gpu_time_ns",
        "process",
        "global_tid",
        "process_wide",
        "rank",
        "op",
        "role",
    )

    def __init__(
        self,
        name: str,
        domain: str | None,
        thread_id: int | None,
        start: int,
        end: int,
        process: int | None = None,
        process_wide: bool = False,
        read: tuple[str, OpLabel | None, str] | None = None,
    ):
        self.domain, self.thread_id, self.start, self.end = domain, thread_id, start, end
        # Its name as shown, an operator range's attribution and what the range is: read_range
        # (``read``: what it gave the caller already).
        self.name, self.op, self.role = read if read is not None else read_range(name)
        self.process = process
        self.process_wide = process_wide
        self.rank: int | None = None  # the process's rank in a distributed job, where known
        # The walk's key: the thread, or for a process-wide range its process (process_key).
        self.global_tid: Any = process_key(process) if process_wide else thread_id
        self.path = ""
        self.depth = 0
        self.kernels = self.gpu_ops = self.gpu_time_ns = 0

    @property
    def attribution_only(self) -> bool:
        """An operator range (profkit's or PyTorch's): attribution, not a range of the run's own."""
        return self.role != OF_RUN

    def label(self) -> str:
        return f"{self.domain}@{self.name}" if self.domain else self.name

    def count(self, kind: str, duration_ns: int) -> None:
        """Count one activity attributed to this range: GPU operations of any kind, and
        kernels (or CPU operators) with their time."""
        if kind != "cpu_op":
            self.gpu_ops += 1
        if kind in ("kernel", "cpu_op"):
            self.kernels += 1
            self.gpu_time_ns += duration_ns


def process_key(process: object) -> tuple[str, object]:
    """The walk key of a process's process-wide ranges (never a thread's key)."""
    return ("process", process)


def outer_first(r: OpenRange) -> tuple[int, int]:
    """Sort key of ranges open at once: the earlier started first, the longer at a tie."""
    return (r.start, -r.end)


def merged(
    process_open: list[OpenRange] | None, thread_open: list[OpenRange] | None
) -> list[OpenRange]:
    """The ranges open for a thread: its process's and its own, outermost (earliest) first."""
    if not process_open:
        return thread_open or []
    if not thread_open:
        return process_open
    return sorted(process_open + thread_open, key=outer_first)


def nest_in_process_ranges(ranges: list[OpenRange]) -> None:
    """Give each thread's range (after :func:`attribute` set its own path) the process-wide
    ranges open when it started as outer ranges: path and depth."""
    by_process: dict[object, list[OpenRange]] = defaultdict(list)
    for r in ranges:
        if r.process_wide:
            by_process[r.process].append(r)
    if not by_process:
        return
    for r in ranges:
        if r.process_wide or r.attribution_only:
            continue
        outer = [p for p in by_process.get(r.process, ()) if p.start <= r.start < p.end]
        if outer:
            outer.sort(key=outer_first)
            r.path = "/".join([p.label() for p in outer] + [r.path])
            r.depth += len(outer)


def place(row: KernelRow, stack: list[OpenRange], count: bool = True) -> None:
    """Put a kernel-table row in the ranges open on its thread (outermost first), and give it
    the attribution of the operator ranges among them (:func:`attribute_row`); profkit's own
    operator ranges are no range of the row's. ``count``: the ranges count it (else only the
    row's columns are set)."""
    ranges = [r for r in stack if not r.attribution_only]
    if ranges:
        row["nvtx_range"], row["nvtx_path"] = ranges[-1].name, ranges[-1].path
    attribute_row(
        row,
        [r.op for r in stack if r.op is not None and r.role != TORCH_OP],
        next((r.op for r in stack if r.role == TORCH_OP), None),
    )
    if count:
        for r in ranges:
            r.count(row["kind"], row["duration_ns"] or 0)


def attribute_row(row: KernelRow, labels: list[OpLabel], call: OpLabel | None = None) -> None:
    """Fill a row's attribution columns from the operator ranges it was launched in: of
    ``labels`` (outermost first), profkit's innermost one, which says everything and wins over
    what the importer knew; else, where the importer knew no operator, the outermost operator
    call PyTorch's annotation wrote around it (``call``: emit_nvtx, nsys --pytorch), the operator
    the model called, with its shapes; else the outermost range named like an operator."""
    own = [lab for lab in labels if lab.phase is not None]  # profkit's ranges always say the phase
    if own:
        lab = own[-1]
        row["op"], row["module"], row["module_type"] = lab.op, lab.module, lab.module_type
        row["shapes"], row["phase"] = lab.shapes, lab.phase
        if lab.input_types:
            row["input_types"] = lab.input_types
    elif row["op"] is None and (call is not None or labels):
        lab = call if call is not None else labels[0]
        row["op"], row["shapes"] = lab.op, lab.shapes


def inner_operator_calls(ranges: Iterable[tuple[object, int, int, str, bool]]) -> list[bool]:
    """For ranges (walk key, start, end, role, process-wide) sorted by walk key, start, the
    longer first: whether each is an operator call of PyTorch's annotation (TORCH_OP) inside
    another operator range of its thread, PyTorch's or profkit's (``aten::empty`` inside
    ``aten::zeros``). Such a range is never the attribution a row gets (:func:`attribute_row`:
    profkit's innermost operator range, else the outermost call), nor a range of the run, so
    that a walk that attributes rows can leave it out: PyTorch writes one around every nested
    call, several for each kernel. Push/pop ranges nest, so an operator range begun earlier on
    the thread that ends after this one begins holds it."""
    out: list[bool] = []
    at: object = object()
    until: int | None = None  # the latest end of the thread's operator ranges begun so far
    for key, start, end, role, process_wide in ranges:
        if key != at:
            at, until = key, None
        inner = role == TORCH_OP and until is not None and start < until and not process_wide
        out.append(inner)
        if not inner and role != OF_RUN and not process_wide:
            until = end if until is None else max(until, end)
    return out


P = TypeVar("P")


def attribute(
    events: Iterable[tuple[object, int, int, OpenRange | P]], paths: bool = True
) -> Iterator[tuple[P, list[OpenRange]]]:
    """Walk events sorted by (thread, start, RANGE before POINT, longer range first).

    Each event is ``(thread, start, RANGE, OpenRange)`` or ``(thread, start, POINT, payload)``,
    a payload never being an OpenRange.
    Yields ``(payload, open)`` for every point, where ``open`` is the list of ranges open on
    that thread at that instant (start <= t < end), outermost (earliest) first. With ``paths``
    ranges get their ``path`` and ``depth``: the ranges that contain them whole are their
    outer ones. Push/pop ranges always nest; start/end ranges may cross (one opens inside
    another and ends after it), and neither is then the other's parent, nor does one keep the
    other open past its end.
    """
    open_: list[OpenRange] = []
    thread = object()
    for t, start, _, obj in events:
        if t != thread:
            open_, thread = [], t
        if open_ and min(r.end for r in open_) <= start:
            open_ = [r for r in open_ if r.end > start]
        if isinstance(obj, OpenRange):  # a RANGE event
            if paths:
                # Operator ranges that are attribution only are no range of the run's: not in a
                # path either (a library's own range inside an operator's: CUB's
                # cub::DeviceSelect::Flagged), nor given one.
                outer = [r for r in open_ if r.end >= obj.end and not r.attribution_only]
                obj.depth = len(outer)
                if obj.depth >= MAX_DEPTH:
                    # Too deep (see MAX_DEPTH): no path, and never open, so that the ranges
                    # inside it are too deep as well; the caller leaves them out (kept()).
                    obj.path = ""
                    continue
                if not obj.attribution_only:
                    obj.path = "/".join([r.label() for r in outer] + [obj.label()])
            open_.append(obj)
        else:
            yield obj, open_


def kept(ranges: list[OpenRange], notes: list[str]) -> list[OpenRange]:
    """The ranges :func:`attribute` gave a path, less those nested too deep (MAX_DEPTH), with
    a note saying how many were left out."""
    out = [r for r in ranges if r.depth < MAX_DEPTH]
    if len(out) < len(ranges):
        notes.append(
            f"{len(ranges) - len(out)} ranges nested more than {MAX_DEPTH} deep were left out; "
            f"their work counts in the ranges around them"
        )
    return out


class LaunchIndex:
    """Launch times per process and per thread, to count what other threads launched while a
    range was open. Add launches in any order, then ``freeze()``."""

    def __init__(self) -> None:
        self.by_process: dict[object, list[int]] = defaultdict(list)
        self.by_thread: dict[tuple[object, object], list[int]] = defaultdict(list)

    def add(self, process: object, thread: object, t: int) -> None:
        self.by_process[process].append(t)
        self.by_thread[(process, thread)].append(t)

    def freeze(self) -> None:
        for v in self.by_process.values():
            v.sort()
        for v in self.by_thread.values():
            v.sort()

    def others(self, r: OpenRange) -> int:
        """Launches by other threads of the range's process while it was open."""

        def count(xs: list[int]) -> int:
            return bisect.bisect_left(xs, r.end) - bisect.bisect_left(xs, r.start)

        return count(self.by_process.get(r.process, [])) - count(
            self.by_thread.get((r.process, r.thread_id), [])
        )


def range_rows(
    ranges: list[OpenRange], other_thread_kernels: Callable[[OpenRange], int | None], gpu: bool
) -> list[RangeRow]:
    """The capture's range rows, in start order."""
    rows: list[RangeRow] = []
    for i, r in enumerate(sorted((r for r in ranges if not r.attribution_only), key=outer_first)):
        rows.append(
            {
                "range_id": i,
                "name": r.name,
                "domain": r.domain,
                "path": r.path,
                "depth": r.depth,
                "thread_id": r.thread_id,
                "start_ns": r.start,
                "wall_ns": r.end - r.start,
                "kernels": r.kernels,
                "gpu_ops": r.gpu_ops if gpu else None,
                "gpu_time_ns": r.gpu_time_ns,
                "other_thread_kernels": other_thread_kernels(r),
                "rank": r.rank,
            }
        )
    return rows
