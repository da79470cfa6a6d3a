"""A run's stored tuning (``profkit tune``) as the summary, the report and ``profkit check`` show
it: the run's latest tuning, and its figures in words. A measured trial's saving reads as a
measurement (``71.6%``); a fix that needs the user's code reads as an estimate
(``≤ 12% (estimate)``), never as a measurement. Plain values in, text out: the report escapes
what it places in HTML, the command prints through ``formatting.shown``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..records import RunRecord, TuneTrial, Tuning
    from ..store import Store

GAIN = "gain"
ESTIMATE = "estimate"


def latest(store: Store, run: RunRecord) -> Tuning | None:
    """The run's latest tuning; None where it has none."""
    return store.latest_tuning(run.id, run.name)


def when(tuning: Tuning) -> str:
    """When the tuning was made, in minutes: ``2026-11-28 03:00 UTC`` (its stored time as
    stored where that is no ISO time)."""
    from datetime import UTC, datetime

    try:
        t = datetime.fromisoformat(tuning.created_at)
    except (TypeError, ValueError):
        return tuning.created_at
    if t.tzinfo is None:
        return t.strftime("%Y-%m-%d %H:%M")
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def decimals(ms: float) -> int:
    """How many decimals a time in milliseconds is shown with (bench's and tune's tables)."""
    return 0 if ms >= 100 else 1 if ms >= 10 else 2 if ms >= 1 else 3


def ms_number(ms: float) -> str:
    """Milliseconds with as many decimals as their size calls for: ``30.3``, ``8.60``."""
    return f"{ms:,.{decimals(ms)}f}"


def step_text(trial: TuneTrial) -> str:
    """A trial's time a step and its spread, to the median's decimals (``8.60 ms ±0.05``, as
    ``profkit bench`` and ``tune`` print them); ``-`` where not measured."""
    if trial.median_ms is None:
        return "-"
    d = decimals(trial.median_ms)
    text = f"{trial.median_ms:,.{d}f} ms"
    return text if trial.spread_ms is None else f"{text} ±{trial.spread_ms:,.{d}f}"


def bound_pct(pct: float, ms: float | None = None) -> str:
    """An estimate's share, an upper bound, in whole percent rounded up (``0.3`` -> ``1%``),
    never ``0%`` for one that is not nothing (``ms``, its time, more than 0: the stored share
    has two decimals)."""
    return f"{max(math.ceil(round(pct, 6)), 1 if (ms or 0) > 0 else 0):.0f}%"


def share_pct(pct: float, ms: float | None = None) -> str:
    """A share of time in whole percent, ``<1%`` for one that is not nothing (``pct`` or its
    time ``ms`` more than 0) but rounds to 0."""
    return "<1%" if (pct > 0 or (ms or 0) > 0) and pct < 0.5 else f"{pct:.0f}%"


def saving_text(trial: TuneTrial) -> str:
    """What a trial saves of the baseline's step: measured (``71.6%``, negative where the step
    took longer), or an estimate, said as one (``≤ 12% (estimate)``)."""
    if trial.verdict == ESTIMATE:
        if trial.estimate_pct is None:
            return "- (estimate)"
        return f"≤ {bound_pct(trial.estimate_pct, trial.estimate_ms)} (estimate)"
    if trial.saving_pct is None:
        return "-"
    return f"{trial.saving_pct:.1f}%"


def outputs_text(trial: TuneTrial) -> str:
    """How the trial's outputs compare with the baseline's: ``agree (rel. diff 4e-03)``,
    ``disagree (rel. diff 2e-01, tolerance 1e-02)``, ``n/a: why``; ``-`` where not compared."""
    if trial.rel_diff is not None:
        tol = f", tolerance {trial.tolerance:.0e}" if trial.tolerance is not None else ""
        return f"{trial.agreement or 'compared'} (rel. diff {trial.rel_diff:.0e}{tol})"
    return trial.agreement or "-"


def best_fix_line(tuning: Tuning) -> str:
    """One line naming the tuning's best measured fix (``best measured fix (profkit tune): TF32
    matmuls, 71% less time a step (30.3 -> 8.60 ms), outputs agree to 4e-03``), or saying that
    none gains."""
    best = tuning.best
    if best is None:
        tried = sum(1 for t in tuning.trials if t.median_ms is not None)
        return (
            "profkit tune found no fix that gains beyond the steps' spread "
            f"({tried} measured, {when(tuning)})"
        )
    line = (
        f"best measured fix (profkit tune): {best.title}, {best.saving_pct:.0f}% less time a step"
    )
    if tuning.baseline.median_ms is not None and best.median_ms is not None:
        line += f" ({ms_number(tuning.baseline.median_ms)} -> {ms_number(best.median_ms)} ms)"
    if best.rel_diff is not None:
        line += f", outputs agree to {best.rel_diff:.0e}"
    elif best.agreement:
        line += f", outputs {best.agreement}"
    return line


def gains_over(tuning: Tuning, limit_pct: float) -> list[TuneTrial]:
    """The tuning's measured gains that save more than ``limit_pct`` % a step, most first."""
    over = [
        t
        for t in tuning.trials
        if t.verdict == GAIN and t.saving_pct is not None and t.saving_pct > limit_pct
    ]
    return sorted(over, key=lambda t: -(t.saving_pct or 0.0))
