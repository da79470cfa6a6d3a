"""Tensor-core coverage of matrix work: of the time a run spent in GEMM, convolution and
attention kernels (the kernel table's ``family`` gemm, conv or attention), the share that ran
on tensor cores. It answers "did my matrix math use the tensor cores?", which the share of
all GPU time does not: normalisations, element-wise and layout kernels never use tensor cores,
so a run whose every GEMM and convolution ran on them can still show 25% of its GPU time there.

Defined here once, over the store's per-family aggregates (``Store.family_totals``), and read
by the summary, the diff's totals (and so compare's rows), the reports and the index page.
Launches whose tensor-core use nothing told are counted in the matrix time but not in its
tensor-core time, and their time is reported (``undecided_time_ns``). A run of CPU operators
has no tensor cores and no coverage (None).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..formatting import fmt_ns, num
from ..records import MatrixWork

if TYPE_CHECKING:
    from ..records import RunRecord
    from ..rows import FamilyTotals
    from ..store import Store

MATRIX_FAMILIES = ("gemm", "conv", "attention")
WHAT = "GEMM, conv, attention"  # the families, as the wording names them


def matrix_work(families: Iterable[FamilyTotals], scale: float = 1.0) -> MatrixWork:
    """The coverage of matrix work from a run's per-family totals (all its families: their sum
    is the run's GPU time); times divided by ``scale`` (a diff's iteration count)."""
    time = tc = undecided = total = 0
    for f in families:
        total += f.time_ns
        if f.family in MATRIX_FAMILIES:
            time += f.time_ns
            tc += f.tensor_core_time_ns
            undecided += f.undecided_time_ns
    return MatrixWork(
        time_ns=num(time / scale),
        tensor_core_time_ns=num(tc / scale),
        undecided_time_ns=num(undecided / scale),
        tensor_core_pct=round(100 * tc / time, 2) if time else None,
        gpu_time_pct=round(100 * time / total, 2) if total else 0.0,
    )


def of_run(
    store: Store, run: RunRecord, in_iterations: bool = False, scale: float = 1.0
) -> MatrixWork | None:
    """A stored run's coverage of matrix work (only the rows launched in its measured
    iterations where ``in_iterations``, as a diff compares them); None for CPU operators."""
    if run.activity == "cpu_op":
        return None
    return matrix_work(store.family_totals(run.id, run.activity, in_iterations), scale)


def tensor_core_pct(families: Iterable[FamilyTotals]) -> float:
    """The share of all the time on tensor cores (%, 2 places; 0.0 without time): the
    summary's ``tensor_core_time_pct``, from the same per-family totals."""
    rows = list(families)
    total = sum(f.time_ns for f in rows)
    return round(100.0 * sum(f.tensor_core_time_ns for f in rows) / total, 2) if total else 0.0


def pct_text(mw: MatrixWork | None) -> str:
    """The coverage as a short figure: "97.3%", "no matrix work", or "-" (CPU operators)."""
    if mw is None:
        return "-"
    return "no matrix work" if mw.tensor_core_pct is None else f"{mw.tensor_core_pct:.1f}%"


def matrix_detail(mw: MatrixWork, gpu_share: bool = False) -> str:
    """What the coverage is of: "GEMM, conv, attention: 24.1 ms" (with its share of all GPU
    time where ``gpu_share``), and the undecided time."""
    if mw.tensor_core_pct is None:
        return f"no {WHAT.replace(', attention', ' or attention')} kernels"
    text = f"{WHAT}: {fmt_ns(mw.time_ns)}"
    if gpu_share:
        text += f" ({mw.gpu_time_pct:.1f}% of GPU time)"
    if mw.undecided_time_ns:
        text += f", of which {fmt_ns(mw.undecided_time_ns)} undecided (tensor-core use unknown, not counted)"
    return text


def describe(mw: MatrixWork | None, all_pct: float) -> str | None:
    """The headline in words: "tensor cores: 97.3% of matrix work (GEMM, conv, attention:
    24.1 ms), 24.7% of all GPU time"; None for CPU operators (no tensor cores)."""
    if mw is None:
        return None
    if mw.tensor_core_pct is None:
        return f"tensor cores: no matrix work ({matrix_detail(mw)}); {all_pct:.1f}% of all GPU time"
    return f"tensor cores: {mw.tensor_core_pct:.1f}% of matrix work ({matrix_detail(mw)}), {all_pct:.1f}% of all GPU time"


def describe_change(a: MatrixWork | None, b: MatrixWork | None) -> str | None:
    """The coverage from A to B in words, for a diff's headline; None for CPU operators."""
    if a is None or b is None:
        return None

    def side(mw: MatrixWork) -> str:
        if mw.tensor_core_pct is None:
            return "no matrix work"
        undecided = f", {fmt_ns(mw.undecided_time_ns)} undecided" if mw.undecided_time_ns else ""
        return f"{mw.tensor_core_pct:.1f}% of {fmt_ns(mw.time_ns)}{undecided}"

    return f"tensor cores on matrix work ({WHAT}): {side(a)} -> {side(b)}"
