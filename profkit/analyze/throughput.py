"""Achieved tensor-core throughput per kernel, from hardware counters, and its share of the
chip's peak for that precision.

The tensor-path op counters (``sm__ops_path_tensor_*``, mapped to precisions in rules.toml)
count operations, two per multiply-add, of the work the tensor cores did: on matrix products
of known size they equal 2·M·N·K (nvjet's padded tiles count 9/8 of it; benchmarks/RESULTS.md).
Divided by the kernel's measured duration they give its achieved tensor FLOP/s: a measured
figure. The peak it is set against is the maker's datasheet figure (``peaks.toml``, with its
source), not a measurement. Under ncu's default ``--clock-control base`` the kernels ran at
the base clock while datasheet peaks assume the boost clock, so the share is a lower bound.

Only ncu runs with those counters have these figures; other runs get none (never estimates).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from ..classify import rules
from ..names import display_name
from ..records import RunRecord, ncu_timed
from ..store import Store

# ncu's default clock control, which the share's note names (profkit passes none).
CLOCK_NOTE = (
    "ncu locks the GPU to its base clock by default (--clock-control base); the datasheet peak "
    "assumes the boost clock, so the share of peak is a lower bound"
)


@dataclass(frozen=True)
class Chip:
    """A chip's dense tensor-core peaks (TFLOP/s, TOPS for int8) by precision, and their source."""

    name: str
    source: str
    peaks_tflops: dict[str, float]


@dataclass(frozen=True)
class KernelThroughput:
    """One kernel (name, precision)'s tensor work: counted ops over its measured time."""

    name: str
    label: str  # a readable name (profkit.names.display_name)
    precision: str  # the counter's input type (fp16, tf32, ...)
    launches: int
    time_ns: int
    tensor_ops: float  # measured: the counters' sum (two per multiply-add)
    achieved_tflops: float  # measured: tensor_ops / time (TOPS for int8)
    peak_tflops: float | None  # datasheet, for this precision on this chip
    peak_pct: float | None  # achieved / peak
    unit: str  # "TFLOP/s", or "TOPS" for integer work

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Throughput:
    """A run's tensor throughput: per kernel, and over the run's whole GPU time."""

    chip: Chip | None
    kernels: list[KernelThroughput]
    tensor_ops: dict[str, float]  # all kernels' counted tensor ops, per precision (most first)
    gpu_time_ns: int  # the run's GPU time (every kernel)
    # tensor_ops over the run's GPU time, per precision (TFLOP/s; TOPS for int8)
    run_rate: dict[str, float]
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@lru_cache(maxsize=1)
def _table() -> list[tuple[re.Pattern[str], Chip]]:
    """peaks.toml's chips with their name patterns, most specific first."""
    data = tomllib.loads(
        resources.files("profkit").joinpath("peaks.toml").read_text(encoding="utf-8")
    )
    return [
        (
            re.compile(c["match"], re.IGNORECASE),
            Chip(
                c["name"],
                c["source"],
                {k: float(v) for k, v in c.items() if k not in ("name", "match", "source")},
            ),
        )
        for c in data["chip"]
    ]


def chips() -> list[Chip]:
    """The chips peaks.toml knows."""
    return [chip for _, chip in _table()]


def chip_of(gpu_name: str | None) -> Chip | None:
    """The chip peaks.toml lists for a GPU name, or None."""
    if not gpu_name:
        return None
    return next((chip for pattern, chip in _table() if pattern.search(gpu_name)), None)


def throughput(store: Store, run: RunRecord) -> Throughput | None:
    """The run's tensor throughput from its counters, or None when the capture has none."""
    counters: dict[str, str] = dict(rules().counters)
    names = [m for m in run.metrics if m in counters]
    if run.activity != "kernel" or not names:
        return None
    chip = chip_of(run.gpu_name)
    kernels = []
    total_ops: dict[str, float] = {}
    for g in store.metric_sums(run.id, names):
        ops_by_precision: dict[str, float] = {}
        for metric, value in g.metrics.items():
            ops_by_precision[counters[metric]] = ops_by_precision.get(counters[metric], 0.0) + value
        for precision, ops in sorted(ops_by_precision.items(), key=lambda kv: -kv[1]):
            total_ops[precision] = total_ops.get(precision, 0.0) + ops
            if not g.time_ns:
                continue
            achieved = ops / g.time_ns / 1e3  # ops per ns = GFLOP/s; / 1e3 = TFLOP/s
            peak = chip.peaks_tflops.get(precision) if chip else None
            kernels.append(
                KernelThroughput(
                    g.name,
                    display_name(g.name, g.short_name),
                    precision,
                    g.calls,
                    g.time_ns,
                    ops,
                    achieved,
                    peak,
                    100.0 * achieved / peak if peak else None,
                    unit(precision),
                )
            )
    kernels.sort(key=lambda k: -k.tensor_ops)
    notes = [CLOCK_NOTE] if ncu_timed(run) else []
    if chip is None:
        notes.append(
            f"peaks.toml lists no peak for {run.gpu_name or 'this GPU'}: achieved figures only"
        )
    ordered = dict(sorted(total_ops.items(), key=lambda kv: -kv[1]))
    rate = {p: ops / run.gpu_time_ns / 1e3 for p, ops in ordered.items()} if run.gpu_time_ns else {}
    return Throughput(chip, kernels, ordered, run.gpu_time_ns, rate, notes)


def unit(precision: str) -> str:
    """TOPS for integer tensor work, TFLOP/s for floating point."""
    return "TOPS" if precision.startswith("int") else "TFLOP/s"
