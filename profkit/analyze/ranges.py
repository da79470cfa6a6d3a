"""A run's NVTX (or record_function) ranges: per range instance, the kernels attributed to it,
their GPU time, its wall time, and the kernels other threads launched while it was open.

Timeline captures (nsys, torch.profiler) store their ranges at import. An ncu run has no
range table (ncu records kernels, not ranges): its ranges are rebuilt from the kernels'
NVTX stacks (``Store.kernel_paths``), with counts and GPU time only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..parse.schema import RangeRow
from ..records import RunRecord
from ..store import Store

_ITER = re.compile(r"\.iter\d+$")  # profkit's measured-iteration ranges: <tag>.iterN


def iteration_ranges(ranges: Iterable[RangeRow]) -> list[RangeRow]:
    """The measured iterations: the outermost of the ranges named like profkit's
    (``<tag>.iterN``); a user's range may hold them all."""
    named = [r for r in ranges if _ITER.search(r["name"] or "")]
    top = min((r["depth"] for r in named), default=0)
    return [r for r in named if r["depth"] == top]


def launches_outside(iterations: list[RangeRow], kernel_count: int) -> int:
    """Launches a run holds beyond those made in its iteration ranges, or by other threads while
    they were open: a warm-up (or other work) the capture holds too."""
    return max(
        0, kernel_count - sum(r["kernels"] + (r["other_thread_kernels"] or 0) for r in iterations)
    )


def caveats(store: Store, run: RunRecord) -> dict[str, str]:
    """What a run's headline figures and its ranges do not show by themselves, in sentences, by
    where they belong: ``headline`` (work captured outside the measured iterations: a warm-up),
    ``timeline`` (a run with no timeline, whose timeline findings are not judged) and ``ranges``
    (kernels other threads launched while the ranges were open). The one source
    of these caveats: the HTML report and ``profkit summary`` both print what this returns."""
    out = {}
    ranges = run_ranges(store, run)
    tops = iteration_ranges(ranges)
    outside = launches_outside(tops, run.kernel_count)
    what = "operator calls" if run.activity == "cpu_op" else "kernel launches"
    if tops and outside:
        out["headline"] = (
            f"The capture also holds {outside:,} {what} outside its "
            f"{len(tops)} measured iteration{'s' if len(tops) != 1 else ''} (a warm-up or other work "
            "captured too); these figures count everything, as profkit summary does."
        )
    if run.activity == "kernel" and not any(r["wall_ns"] for r in tops or ranges):
        out["timeline"] = (
            "This run has no timeline (its tool measured each kernel on its own: ncu profiling every "
            "launch): launch-bound, host synchronisations and exposed communication are not judged "
            "here; the default plan, nsys and torch.profiler record them."
        )
    others = sum(r["other_thread_kernels"] or 0 for r in ranges if r["depth"] == 0)
    if others:
        out["ranges"] = (
            f"Each range counts the kernels launched on its own thread: {others:,} kernels other threads "
            "launched while the ranges were open (autograd's backward pass, for one) are not in the "
            "ranges' figures; profkit ranges lists them."
        )
    return out


def run_ranges(store: Store, run: RunRecord) -> list[RangeRow]:
    rows = store.ranges(run.id)
    if rows:
        return rows
    out: list[RangeRow] = []
    for i, g in enumerate(store.kernel_paths(run.id)):
        path = g.nvtx_path
        leaf = path.rsplit("/", 1)[-1]
        out.append(
            {
                "range_id": i,
                "name": g.name if g.name is not None else leaf.split("@", 1)[-1],
                "domain": leaf.split("@", 1)[0] if "@" in leaf else None,
                "path": path,
                "depth": path.count("/"),
                "thread_id": g.thread_id,
                "start_ns": None,
                "wall_ns": None,
                "kernels": g.kernels,
                "gpu_ops": g.gpu_ops,
                "gpu_time_ns": g.gpu_time_ns,
                "other_thread_kernels": None,
                "rank": None,
            }
        )
    return out
