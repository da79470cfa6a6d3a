"""Two runs' kernel lists side by side: what appeared, vanished, or got faster or slower.

Each run's rows are aggregated by a key and the two sides outer-joined:

* ``exact``: the kernel's name. Names from different exports of the same kernel differ (ncu's
  CSV simplifies the demangling, its report reader gives the full form, nsys and
  torch.profiler another), so runs imported from different formats are matched on their
  short names instead, and the diff says so.
* ``family``: the work a kernel does (``profkit.classify.work_key``, rules in rules.toml):
  autotuned tile sizes, template instances, cuDNN/cuBLAS/nvjet/CUTLASS variants and Triton's
  generated names line up; each row keeps which variants each side used.
* ``op``: the PyTorch operator that launched the kernel, where the run recorded it
  (torch.profiler runs): which operator got faster when the kernels behind it changed names
  entirely (a cuDNN convolution replaced by a Triton kernel).
* ``module``: the module whose code launched the kernel (its whole path, ``model.layers.0.mlp``;
  ``analyze.modules``), where the run has attribution (``profkit run`` records it): what
  compile or a precision did to each module. Kernels only; a row's ``variants`` are the
  module's class.

Where B has kernels torch.compile generated, every row only A has is what compile removed
(``DiffTotals.replaced_by_fusion``), each traced by its launching operators to the generated
kernels that fused them (``analyze.fusion``).

A row is ``added`` (only in B), ``removed`` (only in A), ``changed`` (the calls differ, or the
time moved by more than the noise threshold: ``threshold_pct`` of A's time and at least
``MIN_DELTA_NS``) or ``same``; where a side is a CPU run of fewer than ``MIN_CPU_ITERS``
measured iterations, whose times are noise, by its calls alone (``DiffTotals.noise_bound``).
When both runs know how many measured iterations they hold and the counts differ, calls and times are per iteration. Memcpy and memset rows take part; the
totals count kernels (or CPU operators) only, as the summary does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ..choices import DEFAULT_MATCH, Match, values
from ..classify import operation_of, work_key
from ..errors import UsageError, require_choice
from ..formatting import fmt_ns
from ..formatting import num as _num
from ..parse.schema import Kind
from ..records import MatrixWork, RunRecord, ncu_timed
from ..rows import KernelGroup, ModuleGroup
from ..store import Store
from .fusion import TakenOver, generated, taken_over
from .matrix import MATRIX_FAMILIES, of_run
from .modules import NOT_ATTRIBUTED, attributed, no_attribution
from .ranges import iteration_ranges, launches_outside, run_ranges

if TYPE_CHECKING:
    import pandas as pd

K = TypeVar("K")
MATCHES = values(Match)
Status = Literal["added", "removed", "changed", "same"]
DEFAULT_THRESHOLD_PCT = 10.0
MIN_DELTA_NS = 1000  # below a microsecond of total time a change is noise whatever its share
# CPU operators' self times over fewer measured iterations than this are noise: one iteration of a
# CPU ResNet-18 put aten::sum at 47.8 us in one run and 27.9 ms in the next (first-call set-up,
# the allocator, other processes on the cores), so such a diff judges rows by their calls alone.
MIN_CPU_ITERS = 5
SHARE_MOVE_PCT = 20.0  # how far an operation's tensor-core share must move to say it moved


# What the fusion accounting says where A's removed kernels have no launching operators.
NOT_TRACED = (
    "A recorded no launching operators (profile it with --attribution, or under ncu or torch.profiler): "
    "not traced to B's kernels"
)


@dataclass(frozen=True)
class DiffRow:
    """One key (kernel name, work or operator) on both sides. Times are integer ns, or
    per-iteration floats when the runs' iteration counts differ."""

    name: str
    kind: Kind  # kernel, memcpy, memset or cpu_op
    status: Status
    calls_a: float
    calls_b: float
    time_a_ns: float
    time_b_ns: float
    mean_a_ns: float | None
    mean_b_ns: float | None
    delta_calls: float
    delta_time_ns: float
    delta_pct: float | None  # of A's time; None for added rows
    precision_a: str | None  # the precisions seen, comma-joined
    precision_b: str | None
    tensor_core_pct_a: float | None  # share of the row's time on tensor cores
    tensor_core_pct_b: float | None
    family: str | None
    variants_a: list[str] = field(default_factory=list)  # kernel names behind the row, per side
    variants_b: list[str] = field(default_factory=list)
    # precision -> time, largest first
    time_by_precision_a_ns: dict[str, float] = field(default_factory=dict)
    time_by_precision_b_ns: dict[str, float] = field(default_factory=dict)
    # tensor-core coverage of the row's matrix work (its GEMM, conv and attention time;
    # analyze.matrix), per side; None without matrix work
    matrix_tensor_core_pct_a: float | None = None
    matrix_tensor_core_pct_b: float | None = None


@dataclass(frozen=True)
class StatusCounts:
    """How many rows of the diff have each status."""

    added: int
    removed: int
    changed: int
    same: int


@dataclass(frozen=True)
class MovedOperation:
    """An operation (conv fprop, gemm, ...) both runs do whose tensor-core share of time rose
    or fell by ``SHARE_MOVE_PCT`` points or more. Times as the rows' (ns, per iteration where
    the runs' iteration counts differ); shares are percentages of the operation's time."""

    name: str
    time_a_ns: float
    time_b_ns: float
    tensor_core_pct_a: float
    tensor_core_pct_b: float
    precision_a: str  # the precisions seen, comma-joined
    precision_b: str
    works_a: list[str]  # the works (kernel families) that did it on each side
    works_b: list[str]


@dataclass(frozen=True)
class FusedKernel:
    """A row only B has whose kernels torch.compile generated (Triton's ``triton_*``)."""

    name: str
    calls_b: float
    time_b_ns: float
    variants_b: list[str]


@dataclass(frozen=True)
class ReplacedKernel:
    """A row only A has (no counterpart in B) where B has generated kernels: what compile
    removed, whatever its family. ``fused_time_a_ns`` of its time was launched by operators
    that B's generated kernels fused (``analyze.fusion``: Inductor's operator lists, else the
    kernels' names), ``fused_ops`` those operators and ``fused_into`` the rows of B's kernels
    that fused them, most time first."""

    name: str
    calls_a: float
    time_a_ns: float
    family: str
    fused_time_a_ns: float = 0
    fused_ops: list[str] = field(default_factory=list)
    fused_into: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DiffSide:
    """One side's headline figures of :class:`DiffTotals` (``DiffTotals.side("a")``)."""

    kernels: float
    gpu_time_ns: float
    tensor_core_time_pct: float
    time_by_precision_ns: dict[str, float]
    iterations: int | None
    tool: str | None
    matrix_work: MatrixWork | None = (
        None  # tensor-core coverage of its GEMM, conv and attention time
    )


@dataclass(frozen=True)
class DiffTotals:
    """The diff's headline, side A then side B. Counts and times cover kernels (or CPU
    operators for a CPU run) only, as the summary does; memcpy/memset rows are left out.
    ``kernels_*`` are launches (operator calls) and ``*_ns`` integer nanoseconds, both per
    iteration (floats, rounded to 3 places) when ``per_iteration``. ``to_dict()`` is the
    ``totals`` of ``profkit diff --format json``."""

    kernels_a: float  # launches (CPU operator calls)
    kernels_b: float
    gpu_time_a_ns: float  # their summed duration (CPU self time)
    gpu_time_b_ns: float
    tensor_core_time_pct_a: float  # % of that time on tensor cores (0.0 when none)
    tensor_core_time_pct_b: float
    time_by_precision_a_ns: dict[str, float]  # precision -> time, largest first
    time_by_precision_b_ns: dict[str, float]
    iterations_a: int | None  # measured iterations the run holds, None when unknown
    iterations_b: int | None
    tool_a: str | None  # ncu, nsys or torch
    tool_b: str | None
    status: StatusCounts  # rows per status
    # operations B runs on tensor cores more, most time (B) first
    onto_tensor_cores: list[MovedOperation]
    off_tensor_cores: list[MovedOperation]  # and less, most time (A) first
    fused_kernels: list[FusedKernel]  # B's added Triton kernels
    # every row only A has, most time first (empty unless fused_kernels)
    replaced_by_fusion: list[ReplacedKernel]
    per_iteration: bool = False  # the runs' iteration counts differ: figures per iteration
    fusion_traced: bool = (
        True  # A's removed kernels carry their launching operators (else not traceable)
    )
    # what to know to read the diff (matching, warm-ups, ncu times)
    notes: list[str] = field(default_factory=list)
    # tensor-core coverage of each side's GEMM, conv and attention time (analyze.matrix), over
    # the compared kernels and per iteration as the rest; None for CPU operators
    matrix_work_a: MatrixWork | None = None
    matrix_work_b: MatrixWork | None = None
    # a CPU run of fewer than MIN_CPU_ITERS measured iterations: times too noisy to judge, rows
    # changed by their calls alone (a note says so)
    noise_bound: bool = False

    def side(self, which: str) -> DiffSide:
        """Side ``"a"`` or ``"b"``'s figures."""
        if which not in ("a", "b"):
            raise ValueError(f"a diff's sides are 'a' and 'b', not {which!r}")
        return DiffSide(
            *(
                getattr(self, f"{f}_{which}{unit}")
                for f, unit in (
                    ("kernels", ""),
                    ("gpu_time", "_ns"),
                    ("tensor_core_time_pct", ""),
                    ("time_by_precision", "_ns"),
                    ("iterations", ""),
                    ("tool", ""),
                    ("matrix_work", ""),
                )
            )
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Diff:
    """``rows`` largest change first; ``totals`` the headline. ``to_dict()`` is what
    ``profkit diff --format json`` prints."""

    run_a: str
    run_b: str
    match: str
    threshold_pct: float
    rows: list[DiffRow]
    totals: DiffTotals

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_a": self.run_a,
            "run_b": self.run_b,
            "match": self.match,
            "threshold_pct": self.threshold_pct,
            "rows": [asdict(r) for r in self.rows],
            "totals": self.totals.to_dict(),
        }

    def frame(self) -> pd.DataFrame:
        """The rows as a DataFrame (one row per key, DiffRow's fields as columns)."""
        import pandas as pd

        return pd.DataFrame(
            [asdict(r) for r in self.rows], columns=list(DiffRow.__dataclass_fields__)
        )

    # ---- in a notebook: one line, or a card with the headline and the largest changes
    def _cpu(self) -> bool:
        return any(r.kind == "cpu_op" for r in self.rows)

    def __repr__(self) -> str:
        t = self.totals
        what = "CPU self time" if self._cpu() else "GPU time"
        change = (
            f" ({100 * (t.gpu_time_b_ns - t.gpu_time_a_ns) / t.gpu_time_a_ns:+.1f}%)"
            if t.gpu_time_a_ns
            else ""
        )
        s = t.status
        return (
            f"<Diff {self.run_a!r} -> {self.run_b!r} (match {self.match}): {what} {fmt_ns(t.gpu_time_a_ns)} -> "
            f"{fmt_ns(t.gpu_time_b_ns)}{change}; {s.added} added, {s.removed} removed, {s.changed} changed, "
            f"{s.same} same>"
        )

    def _repr_html_(self, top: int = 10) -> str:
        from ..formatting import html_card, pct

        t = self.totals
        cpu = self._cpu()
        per = " per iteration" if t.per_iteration else ""
        facts = [
            ("match", f"{self.match} (noise threshold {self.threshold_pct:g}%)"),
            (
                "CPU self time" if cpu else "GPU time",
                f"{fmt_ns(t.gpu_time_a_ns)} -> {fmt_ns(t.gpu_time_b_ns)}{per}",
            ),
            (
                "operator calls" if cpu else "kernel launches",
                f"{_num(t.kernels_a):,} -> {_num(t.kernels_b):,}{per}",
            ),
        ]
        if not cpu:
            mw_a, mw_b = t.matrix_work_a, t.matrix_work_b
            facts.append(
                (
                    "tensor cores, of matrix work",
                    f"{pct(mw_a.tensor_core_pct if mw_a else None)} -> {pct(mw_b.tensor_core_pct if mw_b else None)}",
                )
            )
        s = t.status
        facts.append(
            ("rows", f"{s.added} added, {s.removed} removed, {s.changed} changed, {s.same} same")
        )
        if t.noise_bound:
            facts.append(
                (
                    "times",
                    (
                        f"noise-bound (a CPU run of fewer than {MIN_CPU_ITERS} measured iterations): "
                        "rows changed by their calls alone"
                    ),
                )
            )
        if t.replaced_by_fusion:
            gone = t.replaced_by_fusion
            facts.append(
                (
                    "A's kernels without counterpart in B",
                    f"{len(gone)} kinds, {fmt_ns(sum(x.time_a_ns for x in gone))}{per}, "
                    + (
                        f"of which {fmt_ns(sum(x.fused_time_a_ns for x in gone))} fused into B's generated kernels"
                        if t.fusion_traced
                        else NOT_TRACED
                    ),
                )
            )
        name = {
            "exact": "operator" if cpu else "kernel",
            "family": "work",
            "op": "operator",
            "module": "module",
        }.get(self.match, "name")
        shown = [r for r in self.rows if r.status != "same"][:top]
        rows = [
            [
                r.status,
                r.name,
                "-" if r.status == "added" else fmt_ns(r.time_a_ns),
                "-" if r.status == "removed" else fmt_ns(r.time_b_ns),
                "-" if r.delta_pct is None else f"{r.delta_pct:+.1f}%",
                f"{r.precision_a or '-'} -> {r.precision_b or '-'}",
            ]
            for r in shown
        ]
        hidden = len([r for r in self.rows if r.status != "same"]) - len(shown)
        return html_card(
            "Diff",
            f"{self.run_a} -> {self.run_b}",
            facts,
            ["status", name, "time A", "time B", "change", "precision"],
            rows,
            caption="largest changes first",
            numeric={2, 3, 4},
            note=f"{hidden} more changed rows: Diff.frame() has them all" if hidden > 0 else None,
        )


def iterations(store: Store, run: RunRecord) -> tuple[int | None, bool]:
    """How many measured iterations a run holds (what profkit ran, else the outermost ranges
    named like profkit's, ``<tag>.iterN``), and whether the capture also holds work outside
    them (a warm-up captured too): kernels beyond those launched in the ranges or by other
    threads while they were open."""
    tops = iteration_ranges(run_ranges(store, run))
    return run.iters or len(tops) or None, bool(tops) and launches_outside(
        tops, run.kernel_count
    ) > 0


def _dialect(run: RunRecord) -> str:
    """Which spelling of kernel names a run's import gave (see profkit.names)."""
    formats = set(run.raw_files) & {"ncu-csv", "ncu-rep", "nsys-sqlite", "nsys-rep", "kineto-json"}
    # names ncu's, kept or read now
    if "ncu-csv" in formats or (run.info.get("ncu_plan") or {}).get("counters"):
        return "ncu-csv"
    if "ncu-rep" in formats:
        return "ncu-rep"
    return "cupti"  # nsys and torch.profiler both name kernels as CUPTI demangles them


def _key(group: KernelGroup, match: str, by_short: bool) -> str:
    if match == "family":
        return work_key(group.short_name or group.name, group.name)[0]
    if match == "op":
        if group.kind == "cpu_op":  # a CPU run's rows are the operators themselves
            return group.name
        return group.op or f"(no operator) {group.short_name if by_short else group.name}"
    return str(group.short_name if by_short else group.name)


@dataclass
class _Sum:
    """Groups summed under one key of one side (per iteration where scaled): calls, time and
    tensor-core time (ns), with the distinct precisions, families and variant names met, in
    first-seen order."""

    calls: float = 0.0
    time: float = 0.0
    tc: float = 0.0
    precisions: list[str] = field(default_factory=list)
    families: list[str] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    by_precision: dict[str, float] = field(default_factory=dict)
    matrix: float = 0.0
    matrix_tc: float = 0.0

    def add(self, g: KernelGroup, variant: str, scale: float) -> None:
        self._add(g.calls, g.time_ns, g.tc_time_ns, g.precision, g.family, variant, scale)

    def add_module(self, g: ModuleGroup, scale: float) -> None:
        self._add(
            g.launches,
            g.time_ns,
            g.time_ns if g.tensor_core else 0,
            g.precision,
            g.family,
            g.module_type or "",
            scale,
        )

    def _add(
        self,
        calls: int,
        time_ns: int,
        tc_ns: int,
        precision: str,
        family: str | None,
        variant: str,
        scale: float,
    ) -> None:
        self.calls += calls / scale
        self.time += time_ns / scale
        self.tc += tc_ns / scale
        self.by_precision[precision] = self.by_precision.get(precision, 0.0) + time_ns / scale
        if family in MATRIX_FAMILIES:
            self.matrix += time_ns / scale
            self.matrix_tc += tc_ns / scale
        for seen, value in (
            (self.precisions, precision),
            (self.families, family),
            (self.variants, variant),
        ):
            if value and value not in seen:
                seen.append(value)

    def precision_times(self) -> dict[str, float]:
        return {
            p: _num(t) for p, t in sorted(self.by_precision.items(), key=lambda x: (-x[1], x[0]))
        }

    def matrix_share(self) -> float | None:
        """Percent of the matrix work's time on tensor cores (2 places), None without it."""
        return round(100 * self.matrix_tc / self.matrix, 2) if self.matrix else None

    def share(self) -> float | None:
        """Percent of the time on tensor cores (2 places), None without time."""
        return round(100 * self.tc / self.time, 2) if self.time else None


def _side(
    groups: list[KernelGroup], match: str, by_short: bool, scale: float
) -> dict[tuple[str, Kind], _Sum]:
    """One side of the diff: per (key, kind), calls, time, tensor-core time, precisions,
    families and the kernel names behind it."""
    return _aggregate(
        groups,
        lambda g: (_key(g, match, by_short), g.kind),
        lambda g: str(g.short_name if by_short else g.name),
        scale,
    )


def _module_side(
    groups: list[ModuleGroup], scale: float, kind: Kind = "kernel"
) -> dict[tuple[str, Kind], _Sum]:
    """One side of a diff by module: per module path (``(not attributed)`` for kernels the
    capture gives none), its kernels' calls, time, tensor-core time and the module's class."""
    out: dict[tuple[str, Kind], _Sum] = {}
    for g in groups:
        out.setdefault((NOT_ATTRIBUTED if g.module is None else g.module, kind), _Sum()).add_module(
            g, scale
        )
    return out


def _aggregate(
    groups: list[KernelGroup],
    key: Callable[[KernelGroup], K],
    variant: Callable[[KernelGroup], str],
    scale: float,
) -> dict[K, _Sum]:
    """Groups summed under ``key`` (per iteration when ``scale`` is the iteration count), with
    the distinct precisions, families and ``variant`` names met, in first-seen order."""
    out: dict[K, _Sum] = {}
    for g in groups:
        out.setdefault(key(g), _Sum()).add(g, variant(g), scale)
    return out


def diff(
    store: Store,
    run_a: RunRecord,
    run_b: RunRecord,
    match: str = DEFAULT_MATCH.value,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
) -> Diff:
    """Compare two stored runs' kernel lists (see the module's docstring)."""
    require_choice("match", match, MATCHES)
    if (
        isinstance(threshold_pct, bool)
        or not isinstance(threshold_pct, (int, float))
        or not 0 <= threshold_pct <= 1000
    ):
        raise UsageError(
            f"`threshold_pct` must be a percentage from 0 to 1000, not {threshold_pct!r}"
        )
    for run in (run_a, run_b):
        if not isinstance(run, RunRecord):
            raise UsageError(
                f"a diff compares two runs, not {run!r}", "Get runs with open_db(...).run(name)."
            )
    if run_a.activity != run_b.activity:
        what = {"kernel": "GPU kernels", "cpu_op": "CPU operators"}
        raise UsageError(
            f"{run_a.name} holds {what.get(run_a.activity, run_a.activity)} and {run_b.name} "
            f"{what.get(run_b.activity, run_b.activity)}: they do not line up",
            "Compare a CPU run with a CPU run, a GPU run with a GPU run.",
        )
    notes: list[str] = []
    (iters_a, outside_a), (iters_b, outside_b) = iterations(store, run_a), iterations(store, run_b)
    for run, outside in ((run_a, outside_a), (run_b, outside_b)):
        if outside:
            notes.append(
                f"{run.name} also holds work outside its measured iterations (a warm-up captured too): "
                "only the kernels launched inside its iteration ranges are compared"
            )
    groups_a = store.kernel_groups(run_a.id, in_iterations=outside_a)
    groups_b = store.kernel_groups(run_b.id, in_iterations=outside_b)
    lacking = [
        r.name
        for r, g in ((run_a, groups_a), (run_b, groups_b))
        if r.activity != "cpu_op" and not any(x.op for x in g)
    ]
    if match == "op" and lacking:
        raise UsageError(
            f"{' and '.join(repr(n) for n in lacking)} recorded no launching operators, so `match` op "
            "cannot line their kernels up",
            "Profile with `tool` torch (torch.profiler records them), or match exact or family.",
        )
    modules_a = modules_b = None
    if match == "module":
        modules_a = store.module_groups(run_a.id, in_iterations=outside_a, kind=run_a.activity)
        modules_b = store.module_groups(run_b.id, in_iterations=outside_b, kind=run_b.activity)
        for r, mg in ((run_a, modules_a), (run_b, modules_b)):
            if not attributed(mg):
                raise UsageError(
                    f"`match` module lines kernels up by module, and {no_attribution(r)}",
                    "Or match exact, family or op.",
                )
    by_short = _dialect(run_a) != _dialect(run_b)
    if by_short and match not in ("family", "module"):
        notes.append(
            f"kernel names are spelt differently in {run_a.name}'s and {run_b.name}'s exports "
            f"({_dialect(run_a)} against {_dialect(run_b)}): kernels are matched on their short names"
        )
    per_iteration = bool(iters_a and iters_b and iters_a != iters_b)
    scale_a, scale_b = (float(iters_a or 1), float(iters_b or 1)) if per_iteration else (1.0, 1.0)
    if per_iteration:
        notes.append(
            f"{run_a.name} holds {_plural(iters_a, 'iteration')} and {run_b.name} "
            f"{_plural(iters_b, 'iteration')}: calls and times are per iteration"
        )
    times_compare = ncu_timed(run_a) == ncu_timed(run_b)
    few = [
        (r, n)
        for r, n in ((run_a, iters_a), (run_b, iters_b))
        if r.activity == "cpu_op" and (n or 0) < MIN_CPU_ITERS
    ]
    if few:
        times_compare = False
        notes.append(
            "noise-bound: "
            + " and ".join(
                f"{r.name} holds {_plural(n, 'measured iteration')}"
                if n
                else f"{r.name} holds an unknown number of measured iterations"
                for r, n in few
            )
            + f" of CPU operators, too few (under {MIN_CPU_ITERS}) to tell a change of time from noise: "
            "times are shown, not judged, and a row is changed only where its calls are; profile "
            f"{MIN_CPU_ITERS} iterations or more (--iters {MIN_CPU_ITERS}) to compare times"
        )
    elif not times_compare:
        replayed = run_a if ncu_timed(run_a) else run_b
        notes.append(
            f"{replayed.name}'s durations are ncu's, which replays each kernel alone with its clocks locked "
            "to base: they are not comparable with times as the kernels ran (a timeline tool's, or ncu's "
            "default per-function plan's), so a row's status follows its calls alone; compare names, calls "
            "and shares rather than times"
        )
    if modules_a is not None and modules_b is not None:
        kind: Kind = "cpu_op" if run_a.activity == "cpu_op" else "kernel"
        side_a, side_b = (
            _module_side(modules_a, scale_a, kind),
            _module_side(modules_b, scale_b, kind),
        )
    else:
        side_a = _side(groups_a, match, by_short, scale_a)
        side_b = _side(groups_b, match, by_short, scale_b)
    rows = [
        _row(
            key,
            kind,
            side_a.get((key, kind)),
            side_b.get((key, kind)),
            threshold_pct,
            times_compare,
        )
        for key, kind in dict.fromkeys([*side_a, *side_b])
    ]
    rows.sort(key=lambda r: (-abs(r.delta_time_ns), r.name))
    key = None if match == "module" else (lambda g: (_key(g, match, by_short), g.kind))
    totals = _totals(
        run_a,
        run_b,
        rows,
        groups_a,
        groups_b,
        iters_a,
        iters_b,
        scale_a,
        scale_b,
        per_iteration,
        notes,
        (of_run(store, run_a, outside_a, scale_a), of_run(store, run_b, outside_b, scale_b)),
        key,
    )
    if few:
        totals = replace(totals, noise_bound=True)
    return Diff(run_a.name, run_b.name, match, float(threshold_pct), rows, totals)


def _plural(n: int | None, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _row(
    key: str,
    kind: Kind,
    a: _Sum | None,
    b: _Sum | None,
    threshold_pct: float,
    times_compare: bool = True,
) -> DiffRow:
    sa, sb = a or _Sum(), b or _Sum()
    d_time = sb.time - sa.time
    status: Status
    if a is None:
        status = "added"
    elif b is None:
        status = "removed"
    elif round(sa.calls, 6) != round(sb.calls, 6) or (
        times_compare
        and abs(d_time) > threshold_pct / 100 * sa.time
        and abs(d_time) >= MIN_DELTA_NS
    ):
        status = "changed"
    else:
        status = "same"
    return DiffRow(
        name=key,
        kind=kind,
        status=status,
        calls_a=_num(sa.calls),
        calls_b=_num(sb.calls),
        time_a_ns=_num(sa.time),
        time_b_ns=_num(sb.time),
        mean_a_ns=_num(sa.time / sa.calls) if sa.calls else None,
        mean_b_ns=_num(sb.time / sb.calls) if sb.calls else None,
        delta_calls=_num(sb.calls - sa.calls),
        delta_time_ns=_num(d_time),
        delta_pct=round(100 * d_time / sa.time, 2) if sa.time else None,
        precision_a=",".join(sa.precisions) or None,
        precision_b=",".join(sb.precisions) or None,
        tensor_core_pct_a=sa.share() if a else None,
        tensor_core_pct_b=sb.share() if b else None,
        family=",".join(dict.fromkeys(sa.families + sb.families)) or None,
        variants_a=list(sa.variants),
        variants_b=list(sb.variants),
        time_by_precision_a_ns=sa.precision_times(),
        time_by_precision_b_ns=sb.precision_times(),
        matrix_tensor_core_pct_a=sa.matrix_share(),
        matrix_tensor_core_pct_b=sb.matrix_share(),
    )


def _totals(
    run_a: RunRecord,
    run_b: RunRecord,
    rows: list[DiffRow],
    groups_a: list[KernelGroup],
    groups_b: list[KernelGroup],
    iters_a: int | None,
    iters_b: int | None,
    scale_a: float,
    scale_b: float,
    per_iteration: bool,
    notes: list[str],
    matrix: tuple[MatrixWork | None, MatrixWork | None] = (None, None),
    key: Callable[[KernelGroup], tuple[str, Kind]] | None = None,
) -> DiffTotals:
    main = [r for r in rows if r.kind in ("kernel", "cpu_op")]
    ta = _sums(groups_a, run_a.activity, scale_a, iters_a, run_a.tool)
    tb = _sums(groups_b, run_b.activity, scale_b, iters_b, run_b.tool)
    # Onto / off the tensor cores, by operation (conv fprop, gemm, ...: whichever library's
    # kernels did it on each side): an operation both runs do whose tensor-core share of time
    # rose or fell by SHARE_MOVE_PCT points or more.
    ops_a, ops_b = _by_operation(groups_a, scale_a), _by_operation(groups_b, scale_b)
    onto: list[tuple[str, _Sum, _Sum]] = []
    off: list[tuple[str, _Sum, _Sum]] = []
    for op in ops_a.keys() & ops_b.keys():
        a, b = ops_a[op], ops_b[op]
        share_a, share_b = (
            100 * a.tc / a.time if a.time else 0.0,
            100 * b.tc / b.time if b.time else 0.0,
        )
        if share_b - share_a >= SHARE_MOVE_PCT:
            onto.append((op, a, b))
        elif share_a - share_b >= SHARE_MOVE_PCT:
            off.append((op, a, b))
    onto.sort(key=lambda x: -x[2].time)
    off.sort(key=lambda x: -x[1].time)
    # What compile removed: every row of A without a counterpart in B, where B has generated
    # kernels; the part of each that those kernels fused, by the operators that launched it.
    fused = [r for r in main if r.status == "added" and any(generated(v) for v in r.variants_b)]
    replaced = (
        sorted((r for r in main if r.status == "removed"), key=lambda r: (-r.time_a_ns, r.name))
        if fused
        else []
    )
    gone = {(r.name, r.kind) for r in replaced}
    taken = taken_over(groups_a, key, gone, groups_b, key, scale_a) if key and replaced else {}
    return DiffTotals(
        kernels_a=ta.kernels,
        kernels_b=tb.kernels,
        gpu_time_a_ns=ta.gpu_time_ns,
        gpu_time_b_ns=tb.gpu_time_ns,
        tensor_core_time_pct_a=ta.tensor_core_time_pct,
        tensor_core_time_pct_b=tb.tensor_core_time_pct,
        time_by_precision_a_ns=ta.time_by_precision_ns,
        time_by_precision_b_ns=tb.time_by_precision_ns,
        iterations_a=ta.iterations,
        iterations_b=tb.iterations,
        tool_a=ta.tool,
        tool_b=tb.tool,
        status=StatusCounts(
            *(
                sum(1 for r in rows if r.status == st)
                for st in ("added", "removed", "changed", "same")
            )
        ),
        onto_tensor_cores=[_moved(f, a, b) for f, a, b in onto],
        off_tensor_cores=[_moved(f, a, b) for f, a, b in off],
        fused_kernels=[FusedKernel(r.name, r.calls_b, r.time_b_ns, r.variants_b) for r in fused],
        replaced_by_fusion=[_replaced(r, taken.get((r.name, r.kind))) for r in replaced],
        fusion_traced=not replaced or any(g.op for g in groups_a if key and key(g) in gone),
        per_iteration=per_iteration,
        notes=notes,
        matrix_work_a=matrix[0],
        matrix_work_b=matrix[1],
    )


def _replaced(row: DiffRow, taken: TakenOver[tuple[str, Kind]] | None) -> ReplacedKernel:
    """A row only A has, with the part of it B's generated kernels fused."""
    if taken is None:
        return ReplacedKernel(row.name, row.calls_a, row.time_a_ns, row.family or "")
    return ReplacedKernel(
        row.name,
        row.calls_a,
        row.time_a_ns,
        row.family or "",
        _num(taken.time_ns),
        taken.ops,
        [k[0] for k in taken.into],
    )


def _sums(
    groups: list[KernelGroup], activity: str, scale: float, iterations: int | None, tool: str | None
) -> DiffSide:
    """The summary's headline figures over the compared rows: kernels (or CPU operators), their
    time, its tensor-core share and its split by precision (largest first)."""
    main = [g for g in groups if g.kind == activity]
    total = sum(g.time_ns for g in main)
    by_precision: dict[str, float] = {}
    for g in main:
        by_precision[g.precision] = by_precision.get(g.precision, 0) + g.time_ns
    return DiffSide(
        kernels=_num(sum(g.calls for g in main) / scale),
        gpu_time_ns=_num(total / scale),
        tensor_core_time_pct=round(100 * sum(g.tc_time_ns for g in main) / total, 2)
        if total
        else 0.0,
        time_by_precision_ns={
            p: _num(t / scale) for p, t in sorted(by_precision.items(), key=lambda x: -x[1])
        },
        iterations=iterations,
        tool=tool,
    )


def _by_operation(groups: list[KernelGroup], scale: float) -> dict[str, _Sum]:
    """A run's kernels per operation (conv fprop, gemm, ...), with the works that did it as
    its variants."""
    return _aggregate(
        [g for g in groups if g.kind == "kernel"],
        lambda g: operation_of(g.short_name or g.name, g.name),
        lambda g: work_key(g.short_name or g.name, g.name)[0],
        scale,
    )


def _moved(operation: str, a: _Sum, b: _Sum) -> MovedOperation:
    """An operation whose tensor-core share moved: its time, share, precisions and the works
    (kernels) that did it on each side."""
    return MovedOperation(
        operation,
        _num(a.time),
        _num(b.time),
        a.share() or 0.0,
        b.share() or 0.0,
        ",".join(a.precisions),
        ",".join(b.precisions),
        a.variants,
        b.variants,
    )
