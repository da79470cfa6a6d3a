"""What a performance engineer would point out in a run, each with its evidence, the kernels
it is about and where they were launched from (the operators, where the run records them):
half-precision matrix work that missed the tensor cores, fp32 kernels in a half-precision run
(in an AMP run, fp32 matrix work outside autocast alone), fp32 matrix work on CUDA cores on a
GPU with TF32, NCCL communication of a distributed run left exposed (no compute beside it),
time in layout conversions, memory-bound kernels fusion would remove, a launch-bound timeline,
kernels launched from autograd's thread, and host synchronisations inside the step; and in a
CPU run (operators, not kernels: ``activity = "cpu_op"`` in the rule) half-precision operators
on PyTorch's slow fallback and time converting tensors between layouts.

The findings' titles, advice and thresholds are data (``[[finding]]`` in rules.toml); the
checks here read the store's aggregates (``Store.kernel_groups``) and the run's ranges. CPU
runs get only the CPU's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import cache, cached_property, lru_cache
from typing import Any

from ..classify import RULES_PATH, operation_of
from ..formatting import cut_middle, fmt_ns
from ..names import short_name
from ..parse.schema import HostSyncRow, Precision, RangeRow
from ..records import RunRecord
from ..rows import KernelGroup, ShapeGroup
from ..store import Store
from .ranges import iteration_ranges, run_ranges
from .ranks import COMM, rank_report

HALF = ("fp16", "bf16")


@dataclass(frozen=True, slots=True)
class FindingKernel:
    """One kernel name behind a finding: its launches and summed time (ns) among the
    finding's, in the precision and family of its first group."""

    name: str
    launches: int
    time_ns: int
    precision: Precision
    family: str | None


@dataclass(frozen=True, slots=True)
class FindingWhere:
    """One place a finding's work came from: the operator that launched its kernels (or made its
    host syncs), how many launches (syncs) and their time (for syncs, the GPU's idle time after
    them), largest first. ``where`` is None for work no operator is known for."""

    where: str | None
    count: int
    time_ns: int


@dataclass(frozen=True)
class Finding:
    """One thing to look at: what was seen (``detail``), how much of the run's GPU time it
    covers, the kernels behind it (largest first) and what to try."""

    id: str
    title: str
    detail: str
    advice: str
    time_ns: int
    share_pct: float | None
    kernels: list[FindingKernel] = field(default_factory=list)
    where: list[FindingWhere] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FindingRule:
    """One ``[[finding]]`` of rules.toml: its id, title and advice, and the thresholds its
    check reads (``settings``, read through :meth:`number`, :meth:`names` and :meth:`text`)."""

    id: str
    title: str
    advice: str
    settings: Mapping[str, object] = field(default_factory=dict)

    def number(self, key: str) -> float:
        """A threshold (a percentage, a count)."""
        value = self.settings.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(
                f"rules.toml's finding {self.id!r} needs a number {key!r}, not {value!r}"
            )
        return value

    def names(self, key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        """A list of names (families), ``default`` where the rule gives none."""
        value = self.settings.get(key, default)
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ValueError(
                f"rules.toml's finding {self.id!r} needs a list of names {key!r}, not {value!r}"
            )
        return tuple(value)

    def table(self, key: str) -> dict[str, object]:
        """A table of names to values (per precision, per operator)."""
        value = self.settings.get(key)
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ValueError(
                f"rules.toml's finding {self.id!r} needs a table {key!r}, not {value!r}"
            )
        return dict(value)

    def text(self, key: str) -> str:
        value = self.settings.get(key)
        if not isinstance(value, str):
            raise ValueError(
                f"rules.toml's finding {self.id!r} needs a text {key!r}, not {value!r}"
            )
        return value


@lru_cache(maxsize=1)
def finding_rules() -> dict[str, FindingRule]:
    """rules.toml's findings by id, in its order."""
    import tomllib

    data = tomllib.loads(RULES_PATH.read_text(encoding="utf-8"))
    return {
        r["id"]: FindingRule(
            r["id"],
            r["title"],
            r["advice"],
            {k: v for k, v in r.items() if k not in ("id", "title", "advice")},
        )
        for r in data.get("finding", [])
    }


def findings(store: Store, run: RunRecord) -> list[Finding]:
    """The findings that hold for a stored run, the most time first (where two cover as much,
    in the order rules.toml lists them): a GPU run's over its kernels, a CPU run's (``activity``
    cpu_op) over its operators' CPU self time, each rule on the runs of its ``activity`` (kernel
    unless it says)."""
    if run.activity not in ("kernel", "cpu_op"):
        return []
    groups = [g for g in store.kernel_groups(run.id) if g.kind == run.activity]
    total = sum(g.time_ns for g in groups)
    if not total:
        return []
    ctx = _Context(run, groups, total, store)
    out = []
    for rule_id, rule in finding_rules().items():
        if rule.settings.get("activity", "kernel") != run.activity:
            continue
        check = CHECKS.get(rule_id)
        if check is None:
            raise ValueError(f"rules.toml has a finding {rule_id!r} that no check implements")
        found = check(ctx, rule)
        if found is not None:
            out.append(_stretched(run, found))
    return sorted(out, key=lambda f: -f.time_ns)


# Findings read from the host side of a timeline: the gaps between kernels, what blocked the host.
TIMELINE = frozenset({"launch_bound", "host_syncs", "exposed_communication"})


@dataclass(frozen=True, slots=True)
class Stretch:
    """How much longer a run's profiled iterations ran than its bare ones (the warm-up steps
    after the first, timed with no profiler and no ranges: ``HarnessInfo.bare_iteration_ns``):
    the profiler's and profkit's ranges' cost on the host, which widens the gaps a timeline
    finding reads."""

    profiled_ns: float  # the measured iterations' mean wall time
    bare_ns: int  # the fastest bare step's

    @property
    def ratio(self) -> float:
        return self.profiled_ns / self.bare_ns  # stretch() keeps only a positive bare step

    def text(self) -> str:
        return (
            f"the profiled iterations ran {self.ratio:.1f}x the bare one ({fmt_ns(int(self.profiled_ns))} against "
            f"{fmt_ns(self.bare_ns)} with no profiler)"
        )


def stretch(run: RunRecord) -> Stretch | None:
    """The run's :class:`Stretch`, where its harness timed bare steps and measured iterations."""
    harness = run.info.harness or {}
    walls, bare = harness.get("iteration_wall_ns") or [], harness.get("bare_iteration_ns") or []
    if not walls or not bare or min(bare) <= 0:
        return None
    return Stretch(sum(walls) / len(walls), min(bare))


def _stretched(run: RunRecord, found: Finding) -> Finding:
    """A timeline finding (other than launch-bound, which judges the bare iteration itself) of a
    run whose profiled iterations ran notably longer than its bare ones says so: its gaps are
    partly the profiler's (nsys and torch.profiler record each operator, 2-3x host time per
    iteration on an H100; the default ncu plan's timing harness with operator ranges, 4-7x)."""
    if found.id not in TIMELINE or found.id == "launch_bound":
        return found
    s = stretch(run)
    if s is not None and s.ratio >= finding_rules()["launch_bound"].number("stretched_ratio"):
        what = (
            "the GPU's idle time after them was measured on that stretched timeline: without the profiler it is "
            "shorter"
            if found.id == "host_syncs"
            else "the exposed time was measured on that stretched timeline"
        )
        return replace(found, detail=found.detail + f"; {s.text()}: {what}")
    if (
        s is None
        and (run.info.harness or {}).get("attribution") == "ranges"
        and run.source == "run"
    ):
        return replace(found, detail=found.detail + "; " + NO_BARE)
    return found


NO_BARE = "this run timed no bare iteration, and its operator ranges stretched the host side of its timeline"


def half_precision_run(run: RunRecord, groups: list[KernelGroup]) -> bool:
    """Whether a run was meant to be half precision (fp16, bf16 or amp): profkit's tag, else
    most of its kernels' time (``groups``: its kernel groups) in fp16 or bf16."""
    if run.precision:
        return run.precision in (*HALF, "amp")
    kernels = [g for g in groups if g.kind == "kernel"]
    half = sum(g.time_ns for g in kernels if g.precision in HALF)
    total = sum(g.time_ns for g in kernels)
    return bool(total and half >= 0.5 * total)


# Where a finding's kernels came from is listed place by place up to this many; beyond, the
# index of a module list's item (``blocks.3.mlp.fc2``) is folded: ``blocks.*.mlp.fc2``.
WHERE_PLACES = 8
# A place named in a finding's sentence is cut to this many characters (an RNN's shapes run long).
WHERE_TEXT = 100
_LAYER_INDEX = re.compile(r"(?<=\.)\d+(?=\.)|^\d+(?=\.)")


@dataclass
class _Context:
    run: RunRecord
    groups: list[KernelGroup]
    total: int
    store: Store

    @cached_property
    def top_ranges(self) -> list[RangeRow]:
        """The run's outermost ranges (read once for every check that needs them)."""
        return [r for r in run_ranges(self.store, self.run) if r["depth"] == 0]

    def half_run(self) -> bool:
        """Whether the run was meant to be half precision (:func:`half_precision_run`)."""
        return half_precision_run(self.run, self.groups)

    def amp_run(self) -> bool:
        """Whether the run was an AMP one (profkit's tag): autocast keeps some kernels fp32 on purpose."""
        return self.run.precision == "amp"

    def finding(self, rule: FindingRule, detail: str, chosen: list[KernelGroup]) -> Finding:
        time = sum(g.time_ns for g in chosen)
        merged: dict[str, FindingKernel] = {}
        for g in chosen:
            k = merged.get(g.name) or FindingKernel(g.name, 0, 0, g.precision, g.family)
            merged[g.name] = replace(
                k, launches=k.launches + g.calls, time_ns=k.time_ns + g.time_ns
            )
        kernels = sorted(merged.values(), key=lambda k: -k.time_ns)
        return Finding(
            rule.id,
            rule.title,
            detail,
            rule.advice,
            int(time),
            self.share(chosen),
            kernels,
            self.where(chosen),
        )

    def where(self, chosen: list[KernelGroup]) -> list[FindingWhere]:
        """Where in the model the chosen kernels came from (module, operator, input shapes) on a
        run with attribution, else their operators (:func:`where_of`)."""
        keys = {(g.name, g.precision) for g in chosen}
        families = sorted({g.family for g in chosen if g.family})
        places = _places(
            (" ".join(x for x in (s.module, s.op, s.shapes) if x), s.launches, s.time_ns)
            for s in (self.store.shape_groups(self.run.id, families) if families else [])
            if s.module is not None and (s.name, s.precision) in keys
        )
        if not places:
            return where_of(chosen)
        return _folded(places)

    def share(self, chosen: list[KernelGroup]) -> float:
        """Percent of the run's time, rounded as Finding.share_pct is (so texts agree)."""
        return round(100.0 * sum(g.time_ns for g in chosen) / self.total, 2)


def where_of(chosen: list[KernelGroup]) -> list[FindingWhere]:
    """The operators that launched the chosen kernels, most time first; none where the run
    records no operators (ncu, nsys)."""
    places = _places((g.op, g.calls, g.time_ns) for g in chosen)
    return [] if all(w.where is None for w in places) else places


def _places(items: Iterable[tuple[str | None, int, int]]) -> list[FindingWhere]:
    """(place, count, time) summed by place, most time first (then by place)."""
    by: dict[str | None, FindingWhere] = {}
    for place, count, time_ns in items:
        w = by.get(place) or FindingWhere(place, 0, 0)
        by[place] = replace(w, count=w.count + count, time_ns=w.time_ns + time_ns)
    return sorted(by.values(), key=lambda w: (-w.time_ns, w.where or ""))


def where_text(where: list[FindingWhere], total_ns: int, limit: int = 3) -> str:
    """`` (in aten::addmm 60%, aten::bmm 40%)``: the leading operators' share of the finding's
    time, for its detail; empty where none is known."""
    known = [w for w in where if w.where]
    if not known or not total_ns:
        return ""
    shown = ", ".join(f"{w.where} {100 * w.time_ns / total_ns:.0f}%" for w in known[:limit])
    more = f", {len(known) - limit} more" if len(known) > limit else ""
    return f" (in {shown}{more})"


def _folded(places: list[FindingWhere]) -> list[FindingWhere]:
    """Beyond ``WHERE_PLACES`` places, the same layer in every block as one line
    (``blocks.*.mlp.fc2``)."""
    if len(places) <= WHERE_PLACES:
        return places
    return _places(
        (_LAYER_INDEX.sub("*", w.where, count=1) if w.where else "", w.count, w.time_ns)
        for w in places
    )


def _launches(chosen: list[KernelGroup]) -> int:
    return sum(g.calls for g in chosen)


def _half_missed(ctx: _Context, rule: FindingRule) -> Finding | None:
    if not ctx.half_run():
        return None
    # Depthwise convolutions never use tensor cores: their own finding says so.
    depthwise = _depthwise_pattern()
    chosen = [
        g
        for g in ctx.groups
        if g.family in ("gemm", "conv", "attention")
        and g.precision in HALF
        and not g.tc_time_ns
        and not depthwise.search(g.name)
    ]
    if not chosen or ctx.share(chosen) < rule.number("min_share_pct"):
        return None
    return ctx.finding(
        rule,
        f"{sum(g.calls for g in chosen)} half-precision GEMM/convolution/attention launches took "
        f"{ctx.share(chosen):.1f}% of GPU time without tensor cores",
        chosen,
    )


def _fp32_in_half(ctx: _Context, rule: FindingRule) -> Finding | None:
    if not ctx.half_run() or ctx.amp_run():  # AMP: fp32_matrix_outside_autocast
        return None
    skip = set(rule.names("except_families"))
    chosen = [g for g in ctx.groups if g.precision == "fp32" and g.family not in skip]
    if not chosen or ctx.share(chosen) < rule.number("min_share_pct"):
        return None
    found = ctx.finding(rule, "", chosen)
    # which modules (or, without attribution, operators) keep them: the answer to "find what"
    owners = _places(((w.where or "").split(" ")[0], w.count, w.time_ns) for w in found.where)
    detail = (
        f"{sum(g.calls for g in chosen)} fp32 launches took {ctx.share(chosen):.1f}% of GPU time in a "
        f"half-precision run{where_text(owners, sum(g.time_ns for g in chosen))}"
    )
    return replace(found, detail=detail)


def _fp32_matrix_in_amp(ctx: _Context, rule: FindingRule) -> Finding | None:
    """An AMP run's matrix work in fp32 or TF32: autocast would have run it in half precision,
    so it ran outside autocast (or on inputs autocast does not cast)."""
    if not ctx.amp_run():
        return None
    families, precisions = set(rule.names("families")), set(rule.names("precisions"))
    chosen = [g for g in ctx.groups if g.family in families and g.precision in precisions]
    if not chosen or ctx.share(chosen) < rule.number("min_share_pct"):
        return None
    time = sum(g.time_ns for g in chosen)
    found = ctx.finding(rule, "", chosen)
    detail = (
        f"{_launches(chosen)} GEMM/convolution/attention launches in fp32 or TF32 took {fmt_ns(time)} "
        f"({ctx.share(chosen):.1f}% of GPU time) in an AMP run{where_text(found.where, time)}: autocast "
        "would have run them in half precision"
    )
    return replace(found, detail=detail)


def _compute_capability(run: RunRecord) -> float | None:
    try:
        major, _, minor = (run.compute_capability or "").partition(".")
        return int(major) + int(minor or 0) / 10
    except ValueError:
        return None


def _tf32_left_off(ctx: _Context, rule: FindingRule) -> Finding | None:
    """fp32 matrix work on CUDA cores on a GPU with TF32 tensor cores, in a run not meant to be
    half precision (those have their own findings). A convolution counts only where none of the
    run's convolutions ran TF32: cuDNN's TF32 is on by default, so beside TF32 convolutions an
    fp32 one is cuDNN's choice for its shape (a first layer over 3 channels), not TF32 left off."""
    cc = _compute_capability(ctx.run)
    if cc is None or cc < rule.number("min_compute_capability") or ctx.half_run():
        return None
    families = set(rule.names("families"))
    matrix = [g for g in ctx.groups if g.family in families]
    conv = {
        g.name
        for g in matrix
        if operation_of(g.short_name or short_name(g.name), g.name).startswith("conv")
    }
    conv_tf32 = any(g.name in conv and (g.precision == "tf32" or g.tc_time_ns) for g in matrix)
    depthwise = _depthwise_pattern()
    chosen = [
        g
        for g in matrix
        if g.precision == "fp32"
        and not g.tc_time_ns
        and not depthwise.search(g.name)
        and not (g.name in conv and conv_tf32)
    ]
    if not chosen or ctx.share(chosen) < rule.number("min_share_pct"):
        return None
    time = sum(g.time_ns for g in chosen)
    found = ctx.finding(rule, "", chosen)
    gpu = (
        f"{ctx.run.gpu_name} (compute capability {ctx.run.compute_capability})"
        if ctx.run.gpu_name
        else f"a GPU of compute capability {ctx.run.compute_capability}"
    )
    detail = (
        f"{_launches(chosen)} fp32 GEMM/convolution/attention launches took {fmt_ns(time)} "
        f"({ctx.share(chosen):.1f}% of GPU time) on CUDA cores{where_text(found.where, time)}; {gpu} has "
        "TF32 tensor cores"
    )
    return replace(found, detail=detail)


def _misaligned(ctx: _Context, rule: FindingRule) -> Finding | None:
    """Tensor-core matrix work that cannot load aligned vectors, each kind of work judged by the
    best evidence the run has for it:

    - input shapes (the launching operator's, where the run records them; ``ops`` says which
      dimensions of which operator are matrix dimensions, cuDNN's RNNs' input and hidden sizes
      among them): a dimension not a multiple of what the precision needs (``multiple``) is the
      cause, and the advice is to pad it. A row count (the tokens or images a linear layer
      takes: its first matrix's rows) is a leading dimension only in some of the backward pass's
      products, so one alone counts where the kernel's name says it loaded unaligned too;
    - shapes that are all multiples, a convolution, and a kernel whose name says it loads
      unaligned (``pattern``: cuDNN runs NCHW convolutions, 1x1 ones as GEMMs, with 2-element
      loads): the layout is the cause, and the advice channels-last;
    - no shapes: the name is a lead, not a verdict. A convolution's kernel (or, in a run whose
      convolutions convert layouts or run NCHW kernels, any GEMM's) gets the layout advice; the
      detail says the run recorded no shapes."""
    multiple = {k: int(v) for k, v in rule.table("multiple").items() if isinstance(v, (int, float))}
    ops = {k: str(v) for k, v in rule.table("ops").items()}
    named = re.compile(rule.text("pattern"))
    groups = ctx.store.shape_groups(ctx.run.id, rule.names("families"))
    row_ops = set(rule.names("row_ops"))
    rows = {
        d
        for g in groups
        if g.shapes and g.op in row_ops
        for d in _row_counts(g.shapes, ops.get(g.op or ""))
    }
    channels_last = bool((ctx.run.info.options or {}).get("channels_last"))
    padded: list[tuple[ShapeGroup, list[int]]] = []  # misaligned by shape
    layout: list[ShapeGroup] = []  # aligned channels, unaligned kernels: NCHW
    leads: list[ShapeGroup] = []  # no shapes: the kernel's name alone
    for g in groups:
        need = multiple.get(g.precision)
        if need is None:
            continue
        kind = ops.get(g.op or "")
        unaligned_name = bool(named.search(g.name))
        if g.shapes and kind is not None:
            # 1: a vector, nothing to pad; a convolution's input of fewer channels than the multiple
            # (an image's 3) runs cuDNN's first-layer kernels, which pad them themselves.
            first = _first_layer_channels(g.shapes, need) if kind == "conv" else None
            bad = [d for d in _matrix_dims(g.shapes, kind) if d % need and d > 1 and d != first]
            features = [d for d in bad if d not in rows]
            if features or (bad and unaligned_name):
                padded.append((g, features or bad))
            elif not bad and unaligned_name and kind == "conv" and not channels_last:
                layout.append(g)
        elif unaligned_name:  # no shapes, or an operator the rule cannot read: the name is a lead
            leads.append(g)
    chosen = [g for g, _ in padded] + layout + leads
    time = sum(g.time_ns for g in chosen)
    share = round(100.0 * time / ctx.total, 2)
    if not chosen or share < rule.number("min_share_pct"):
        return None
    # A lead is the layout's where it is a convolution's, or of an unknown operator in an NCHW run;
    # never where its operator is a linear, matrix or recurrent one, nor in a channels-last run.
    nchw = not channels_last and _nchw_run(ctx, groups, ops)
    led_layout = [
        g
        for g in leads
        if not channels_last
        and (g.family == "conv" or ops.get(g.op or "") == "conv" or (nchw and not g.op))
    ]
    parts = []
    dims = {d for _, bad in padded for d in bad}

    def needs(of: list[ShapeGroup]) -> str:  # "8 (fp16)": the multiples the groups' precisions need
        return " or ".join(
            f"{n} ({p})" for p, n in multiple.items() if any(g.precision == p for g in of)
        )

    if padded:
        shown = ", ".join(str(d) for d in sorted(dims)[:6])
        mis = [g for g, _ in padded]
        parts.append(f"{_launches_of(mis)} with dimensions {shown} not a multiple of {needs(mis)}")
    if layout:
        parts.append(
            f"{_launches_of(layout)} NCHW convolutions whose channel counts are all multiples of "
            f"{needs(layout)}, in kernels that load unaligned (align1/align2)"
        )
    if leads:
        parts.append(
            f"{_launches_of(leads)} in kernels whose names say they load unaligned (align1/align2); the run "
            "recorded no input shapes it can read to say why"
            + (" (its convolutions run NCHW: the layout is the likely cause)" if led_layout else "")
        )
    where = _places(
        (" ".join(x for x in (g.module, g.op, g.shapes) if x) or None, g.launches, g.time_ns)
        for g in chosen
    )
    kernels: dict[str, FindingKernel] = {}
    for g in chosen:
        k = kernels.get(g.name) or FindingKernel(g.name, 0, 0, g.precision, g.family)
        kernels[g.name] = replace(
            k, launches=k.launches + g.launches, time_ns=k.time_ns + g.time_ns
        )
    detail = (
        f"{_launches_of(chosen)} GEMM/convolution/RNN launches took {fmt_ns(time)} ({share:.1f}% of GPU time): "
        + "; ".join(parts)
    )
    if where and where[0].where:
        detail += f"; most in {_place_text(where[0].where)} ({100 * where[0].time_ns / time:.0f}%)"
    vocabulary = rule.number("vocabulary")
    if any(d >= vocabulary for d in dims):
        detail += f"; {max(d for d in dims if d >= vocabulary)} looks like a vocabulary: pad it to a multiple of 64"
    layout_time = sum(g.time_ns for g in layout + led_layout)
    advice = rule.advice
    if layout_time * 2 > time:  # mostly the layout: channels-last first
        advice = rule.text("layout_advice") + (
            " " + rule.advice if padded or len(led_layout) < len(leads) else ""
        )
    elif layout_time:
        advice = rule.advice + " " + rule.text("layout_advice")
    return Finding(
        rule.id,
        rule.title,
        detail,
        advice,
        int(time),
        share,
        sorted(kernels.values(), key=lambda k: -k.time_ns),
        where,
    )


def _place_text(place: str) -> str:
    """A place (module, operator, shapes) for a finding's sentence: shapes past ``WHERE_TEXT``
    characters cut at a tensor's end (``...;[2,20,1020];...``), never inside one."""
    if len(place) <= WHERE_TEXT:
        return place
    head, sep, shapes = place.rpartition(" ")
    if not sep or not shapes.startswith("["):
        return cut_middle(place, WHERE_TEXT)
    tensors = shapes.split(";")
    kept: list[str] = []
    for t in tensors:
        if len(head) + len(";".join([*kept, t])) + 6 > WHERE_TEXT:
            break
        kept.append(t)
    return f"{head} {';'.join(kept)};... ({len(tensors)} inputs)" if kept else head


def _launches_of(groups: list[ShapeGroup]) -> int:
    return sum(g.launches for g in groups)


def _first_layer_channels(shapes: str, need: int) -> int | None:
    """A convolution's input channels where fewer than ``need`` (an image's 3), else None."""
    tensors = _tensors(shapes)
    channels = tensors[0][1] if tensors and len(tensors[0]) >= 3 else None
    return channels if channels is not None and channels < need else None


def _row_counts(shapes: str, kind: str | None) -> list[int]:
    """The row counts of a linear layer's forward product (the tokens or images it takes): a
    "linear" operator's input's leading dimensions' product, addmm's first matrix's rows (the
    rule's ``row_ops`` are the forward operators)."""
    tensors = [t for t in _tensors(shapes) if len(t) >= 2]
    if not tensors:
        return []
    return [math.prod(tensors[0][:-1])] if kind == "linear" else [tensors[0][-2]]


def _nchw_run(ctx: _Context, groups: list[ShapeGroup], ops: dict[str, str]) -> bool:
    """Whether the run's convolutions ran in NCHW: it converts layouts for cuDNN (kernels of the
    layout family) or runs convolution kernels named for NCHW."""
    if any(g.family == "layout" for g in ctx.groups):
        return True
    return any(
        _NCHW_NAME.search(g.name)
        for g in groups
        if g.family == "conv" or ops.get(g.op or "") == "conv"
    )


_NCHW_NAME = re.compile(r"_nchw(?:kcrs)?_")


def _tensors(shapes: str) -> list[list[int]]:
    """``[8,256];[256]`` -> [[8, 256], [256]]."""
    return [[int(x) for x in t.strip("[]").split(",") if x] for t in shapes.split(";")]


def _matrix_dims(shapes: str, kind: str) -> list[int]:
    """The matrix dimensions of an operator's inputs (``[512,256];[256,50257]``): for a
    "matrix" operator the last two of every input of two or more dimensions (a batch of
    matrices for bmm); for a "linear" one (linear, matmul) the same, an input of more
    dimensions read as the matrix of its leading dimensions' product by its last; for a "conv"
    one the input's channels and the weight's output channels (its input channels, per group,
    too where not 1: a depthwise weight has 1); for an "rnn" one (cuDNN's) the last dimension
    of every 3-D tensor: the input's features and the hidden and cell states' size."""
    tensors = _tensors(shapes)
    # cuDNN's RNN: the input's features and the hidden state's (every 3-D tensor's last)
    if kind == "rnn":
        return list(dict.fromkeys(t[-1] for t in tensors if len(t) == 3))
    if kind == "linear":
        return [d for t in tensors if len(t) >= 2 for d in (math.prod(t[:-1]), t[-1])]
    if kind == "conv":
        dims = []
        if len(tensors) >= 1 and len(tensors[0]) >= 3:
            dims.append(tensors[0][1])
        if len(tensors) >= 2 and len(tensors[1]) >= 3:
            dims.append(tensors[1][0])
            if tensors[1][1] > 1:
                dims.append(tensors[1][1])
        return dims
    return [d for t in tensors if len(t) >= 2 for d in t[-2:]]


def _unfused_attention(ctx: _Context, rule: FindingRule) -> Finding | None:
    """Attention computed by hand: a module (the run, where no modules are known) that launched
    a softmax kernel between batched matrix products, at least ``min_products_per_softmax`` of
    them per softmax kernel. Where shapes are recorded, the softmax's input is the products'
    scores: ``min_score_dims`` dimensions or more, its last two a product's output. Where
    neither modules nor shapes are, a run that also ran fused attention is not judged (nothing
    tells its softmax and products from a router's and its experts'). Needs the launching
    operators (the default tool, or nsys and torch with attribution); GPU runs only."""
    softmax, matmul = set(rule.names("softmax_ops")), set(rule.names("matmul_ops"))
    named = _rule_pattern(f"{rule.id}.softmax_kernels", rule.text("softmax_kernels"))
    groups = ctx.store.shape_groups(ctx.run.id, sorted(softmax | matmul), by="op")
    per: dict[str | None, list[ShapeGroup]] = {}
    for g in groups:
        per.setdefault(g.module, []).append(g)
    need = rule.number("min_products_per_softmax")
    dims = rule.number("min_score_dims")
    chosen: list[ShapeGroup] = []
    soft_total = products_total = 0
    for module_groups in per.values():
        scores = {out for g in module_groups if g.op in matmul for out in _product_out(g.shapes)}
        # A softmax over fewer dimensions (a classifier's, a router's over its experts), or over
        # no product's output, scores no attention.
        kept = [
            g
            for g in module_groups
            if g.op not in softmax or _scores_attention(g.shapes, scores, dims)
        ]
        # Softmax kernels alone count (a softmax operator launches others: _safe_softmax's
        # masks, the backward's product), though all of its kernels' time is the finding's.
        soft = sum(g.launches for g in kept if g.op in softmax and named.search(g.name))
        products = sum(g.launches for g in kept if g.op in matmul)
        if soft and products >= need * soft:
            chosen += kept
            soft_total, products_total = soft_total + soft, products_total + products
    if (
        chosen
        and all(g.module is None and not g.shapes for g in chosen)
        and any(g.family == "attention" for g in ctx.groups)
    ):
        return None
    as_kernels = [
        KernelGroup(
            kind="kernel",
            name=g.name,
            op=g.op,
            short_name=g.short_name,
            family=g.family,
            calls=g.launches,
            time_ns=g.time_ns,
            tc_time_ns=g.time_ns if g.tensor_core else 0,
            precision=g.precision,
        )
        for g in chosen
    ]
    if not as_kernels or ctx.share(as_kernels) < rule.number("min_share_pct"):
        return None
    found = ctx.finding(rule, "", as_kernels)
    places = _folded(
        _places((g.module, g.launches, g.time_ns) for g in chosen if g.module is not None)
    )
    return replace(
        found,
        where=places or found.where,
        detail=f"{soft_total} softmax and {products_total} batched matrix product kernels took "
        f"{ctx.share(as_kernels):.1f}% of GPU time as attention computed kernel by kernel"
        f"{where_text(places or found.where, found.time_ns)}",
    )


def _shape_list(shapes: str | None) -> list[list[int]] | None:
    """A row's input shapes, None where not recorded or not a list of integer lists."""
    if not shapes:
        return None
    try:
        return _tensors(shapes)
    except ValueError:  # a scalar, a nested list
        return None


def _product_out(shapes: str | None) -> list[tuple[int, int]]:
    """A matrix product's output's last two dimensions, from its first two inputs' shapes."""
    t = _shape_list(shapes)
    if not t or len(t) < 2 or len(t[0]) < 2 or len(t[1]) < 2:
        return []
    return [(t[0][-2], t[1][-1])]


def _scores_attention(shapes: str | None, scores: set[tuple[int, int]], dims: float) -> bool:
    """Whether a softmax's input can be attention's scores: unknown shapes can; else at least
    ``dims`` dimensions and, where its module's products' shapes are known, one's output."""
    t = _shape_list(shapes)
    if not t:
        return True
    first = t[0]
    return len(first) >= dims and (not scores or (first[-2], first[-1]) in scores)


def _exposed_communication(ctx: _Context, rule: FindingRule) -> Finding | None:
    report = rank_report(ctx.store, ctx.run)
    if report is None or not any(f.comm_overlap_ns is not None for f in report.ranks):
        return None
    exposed = {f.rank: f.comm_time_ns - (f.comm_overlap_ns or 0) for f in report.ranks}
    total = sum(exposed.values())
    share = round(100.0 * total / ctx.total, 2)
    if share < rule.number("min_share_pct"):
        return None
    per_rank = ", ".join(
        f"rank {f.rank} {fmt_ns(exposed[f.rank])} of {fmt_ns(f.comm_time_ns)}" for f in report.ranks
    )
    detail = (
        f"NCCL kernels ran {fmt_ns(total)} ({share:.1f}% of GPU time) with no compute kernel of their rank beside "
        f"them on its GPU: {per_rank}"
    )
    chosen = [g for g in ctx.groups if g.family == COMM]
    found = ctx.finding(rule, detail, chosen)
    return Finding(found.id, found.title, detail, found.advice, total, share, found.kernels)


@lru_cache(maxsize=1)
def _depthwise_pattern() -> re.Pattern[str]:
    return re.compile(finding_rules()["depthwise_convolutions"].text("pattern"))


def _depthwise(ctx: _Context, rule: FindingRule) -> Finding | None:
    chosen = [g for g in ctx.groups if _depthwise_pattern().search(g.name)]
    if not chosen or ctx.share(chosen) < rule.number("min_share_pct"):
        return None
    tc = 100 * sum(g.tc_time_ns for g in ctx.groups) / ctx.total
    return ctx.finding(
        rule,
        f"{sum(g.calls for g in chosen)} depthwise/grouped convolution launches took "
        f"{ctx.share(chosen):.1f}% of GPU time on CUDA cores; the run had {tc:.1f}% of its GPU "
        "time on tensor cores",
        chosen,
    )


def _by_family(
    families: tuple[str, ...], what: str
) -> Callable[[_Context, FindingRule], Finding | None]:
    def check(ctx: _Context, rule: FindingRule) -> Finding | None:
        wanted = rule.names("families", families)
        chosen = [g for g in ctx.groups if g.family in wanted]
        if not chosen or ctx.share(chosen) < rule.number("min_share_pct"):
            return None
        return ctx.finding(
            rule,
            f"{sum(g.calls for g in chosen)} {what} launches took {ctx.share(chosen):.1f}% "
            "of GPU time",
            chosen,
        )

    return check


def _launch_bound(ctx: _Context, rule: FindingRule) -> Finding | None:
    """The GPU busy less than ``max_busy_pct`` of an iteration, with many kernels in it: judged
    on the bare iteration's wall time (the warm-up steps after the first, no profiler and no
    ranges), since a profiler stretches the host side of the iterations it records (ncu's
    per-function plan 4-7x, nsys and torch.profiler 2-3x on an H100); where the run timed no
    bare step (an imported capture, an older run), on the profiled iterations, saying so."""
    if ctx.run.info.compile_mode == "reduce-overhead":
        return None  # already replaying CUDA graphs: the advice is taken
    tops = [r for r in ctx.top_ranges if r["wall_ns"]]
    if not tops:
        return None  # ncu records kernels, not a timeline (the run's caveats say so)
    wall = sum(r["wall_ns"] or 0 for r in tops) / len(tops)
    busy = sum(r["gpu_time_ns"] for r in tops) / len(tops)
    per_iteration = sum(r["kernels"] for r in tops) / len(tops)
    s = stretch(ctx.run)
    judged = min(float(s.bare_ns), wall) if s is not None else wall  # tops' walls are positive
    busy_pct = min(100.0, 100 * busy / judged)
    if busy_pct >= rule.number("max_busy_pct") or per_iteration < rule.number(
        "min_kernels_per_iteration"
    ):
        return None
    each = f"{per_iteration:.0f} kernels per iteration, {busy / max(1.0, per_iteration) / 1000:.1f} us each on average"
    if s is not None:
        detail = (
            f"the GPU ran kernels {busy_pct:.0f}% of the bare iteration's wall time ({fmt_ns(int(busy))} of "
            f"{fmt_ns(s.bare_ns)} with no profiler; {each})"
        )
        if s.ratio >= rule.number("stretched_ratio"):
            detail += f"; {s.text()}"
    else:
        detail = (
            f"the GPU ran kernels {busy_pct:.0f}% of each range's wall time ({each}); judged on the profiled "
            "timeline: the run timed no bare iteration, and a profiler stretches the host side of what it records"
        )
    return Finding(
        rule.id, rule.title, detail, rule.advice, int(max(0.0, judged - busy) * len(tops)), None, []
    )


def _autograd_thread(ctx: _Context, rule: FindingRule) -> Finding | None:
    tops = ctx.top_ranges
    others = sum(r["other_thread_kernels"] or 0 for r in tops)
    if others < rule.number("min_kernels"):
        return None
    detail = (
        f"{others} kernels were launched by other threads of the process (autograd's backward pass) while "
        f"the {len(tops)} measured ranges were open; {sum(r['kernels'] for r in tops)} on the ranges' own thread"
    )
    return Finding(rule.id, rule.title, detail, rule.advice, 0, None, [])


def _host_syncs(ctx: _Context, rule: FindingRule) -> Finding | None:
    """The runtime calls that blocked the host inside the measured iterations (all of a
    capture's where it has none), and the GPU's idle time after each: from when it last had
    work (or the call began, if later) to the next operation begun after the call returned,
    within the iteration. The last device synchronisation of an iteration with no GPU work
    after it in the iteration is the harness's own (it times the step) and is not counted."""
    syncs = ctx.store.host_syncs(ctx.run.id)
    if not syncs:
        return None
    steps: dict[tuple[int | None, str, int], list[HostSyncRow]] = {}
    for s in syncs:
        if s["iteration"] is not None and s["iteration_end_ns"] is not None:
            steps.setdefault((s["rank"], s["iteration"], s["iteration_end_ns"]), []).append(s)
    kept: list[tuple[HostSyncRow, int]] = []  # (call, GPU idle after it)
    for (_, _, end), inside in steps.items():
        if inside[-1]["name"] in DEVICE_SYNCS and not _work_after(inside[-1], end):
            inside = inside[:-1]  # the harness's torch.cuda.synchronize() ending the step
        kept += _idle_after(inside, end)
    if not steps:  # a capture without profkit's iteration ranges: every sync the GPU had work after
        by_rank: dict[int | None, list[HostSyncRow]] = {}
        for s in syncs:
            if s["gpu_next_start_ns"] is not None:
                by_rank.setdefault(s["rank"], []).append(s)
        kept = [x for calls in by_rank.values() for x in _idle_after(calls, None)]
    if len(kept) < rule.number("min_syncs"):
        return None
    idle = sum(i for _, i in kept)
    by: dict[str | None, FindingWhere] = {}
    for s, i in kept:
        w = by.get(s["op"]) or FindingWhere(s["op"], 0, 0)
        by[s["op"]] = replace(w, count=w.count + 1, time_ns=w.time_ns + i)
    where = sorted(by.values(), key=lambda w: (-w.time_ns, -w.count, w.where or ""))
    calls: dict[str, int] = {}
    for s, _ in kept:
        calls[s["name"]] = calls.get(s["name"], 0) + 1
    named = ", ".join(f"{c} {n}" for n, c in sorted(calls.items(), key=lambda x: (-x[1], x[0])))
    per = f", {len(kept) / len(steps):.3g} per iteration" if steps else ""
    ops = [w for w in where if w.where]
    unplaced = sum(w.count for w in where if not w.where)
    called = (
        (
            ", from "
            + ", ".join(f"{w.where} ({w.count})" for w in ops[:3])
            + (f", {len(ops) - 3} more" if len(ops) > 3 else "")
            + (f", {unplaced} in no operator's range" if unplaced else "")
        )
        if ops
        else ""
    )
    wall = sum(r["wall_ns"] or 0 for r in iteration_ranges(run_ranges(ctx.store, ctx.run)))
    share = f" ({100 * idle / wall:.1f}% of the iterations' wall time)" if steps and wall else ""
    detail = (
        f"{len(kept)} host synchronisation{'s' if len(kept) != 1 else ''}{per} ({named}){called}; the GPU "
        f"idled {fmt_ns(idle)} after "
        f"{'them' if len(kept) != 1 else 'it'}{share} until the next launch reached it"
    )
    return Finding(rule.id, rule.title, detail, rule.advice, int(idle), None, [], where)


DEVICE_SYNCS = ("cudaDeviceSynchronize", "cudaThreadSynchronize", "cuCtxSynchronize")


def _work_after(s: HostSyncRow, end: int) -> bool:
    """Whether the GPU began work after the call returned and before ``end``."""
    return s["gpu_next_start_ns"] is not None and s["gpu_next_start_ns"] < end


def _idle_after(calls: list[HostSyncRow], end: int | None) -> list[tuple[HostSyncRow, int]]:
    """Each of one process's syncs (in start order) with the GPU's idle time after it: from its
    last work (or the call's start, if later) to the next operation begun after the call
    returned, less what an earlier sync's idle time already counts (syncs in a row wait for
    the same gap); 0 where no operation began before ``end``."""
    out = []
    counted = 0  # the idle time counted so far ends here
    for s in calls:
        nxt = s["gpu_next_start_ns"]
        if nxt is None or (end is not None and nxt >= end):
            out.append((s, 0))
            continue
        begin = max(s["gpu_last_end_ns"] or s["start_ns"], s["start_ns"], counted)
        out.append((s, max(0, nxt - begin)))
        counted = max(counted, nxt)
    return out


def _cpu_slow_fallback(ctx: _Context, rule: FindingRule) -> Finding | None:
    """A CPU run's half-precision operators that ran on PyTorch's reference kernels (the rule's
    ``pattern``), where no fast one exists for that precision on this CPU."""
    pattern = _pattern(rule)
    precisions = set(rule.names("precisions"))
    chosen = [g for g in ctx.groups if g.precision in precisions and pattern.search(g.name)]
    if not chosen or ctx.share(chosen) < rule.number("min_share_pct"):
        return None
    found = ctx.finding(rule, "", chosen)
    names = ", ".join(k.name for k in found.kernels[:3])
    return replace(
        found,
        detail=f"{_launches(chosen)} {'/'.join(sorted({g.precision for g in chosen}))} calls of "
        f"{names} took {ctx.share(chosen):.1f}% of CPU self time on PyTorch's slow fallback"
        f"{where_text(found.where, found.time_ns)}",
    )


def _cpu_layout_conversions(ctx: _Context, rule: FindingRule) -> Finding | None:
    """A CPU run's time converting tensors between layouts: the operators the rule's ``pattern``
    names, and the copies they made (rows whose launching operator it names)."""
    pattern = _pattern(rule)
    chosen = [
        g
        for g in ctx.groups
        if pattern.search(g.name) or (g.op is not None and pattern.search(g.op))
    ]
    if not chosen or ctx.share(chosen) < rule.number("min_share_pct"):
        return None
    found = ctx.finding(rule, "", chosen)
    # the conversions themselves, not their copies
    named = [g for g in chosen if pattern.search(g.name)]
    ops = sorted(
        {g.name for g in named}, key=lambda n: -sum(g.time_ns for g in named if g.name == n)
    )
    return replace(
        found,
        detail=f"{_launches(named)} layout conversions ({', '.join(ops[:3]) or 'copies'}) took "
        f"{ctx.share(chosen):.1f}% of CPU self time{where_text(found.where, found.time_ns)}",
    )


@cache
def _rule_pattern(rule_id: str, text: str) -> re.Pattern[str]:
    return re.compile(text)


def _pattern(rule: FindingRule) -> re.Pattern[str]:
    """A rule's ``pattern``, compiled once."""
    return _rule_pattern(rule.id, rule.text("pattern"))


CHECKS: dict[str, Callable[[_Context, FindingRule], Finding | None]] = {
    "half_missed_tensor_cores": _half_missed,
    "fp32_in_half_run": _fp32_in_half,
    "fp32_matrix_outside_autocast": _fp32_matrix_in_amp,
    "tf32_left_off": _tf32_left_off,
    "misaligned_shapes": _misaligned,
    "host_syncs": _host_syncs,
    "exposed_communication": _exposed_communication,
    "unfused_attention": _unfused_attention,
    "depthwise_convolutions": _depthwise,
    "layout_conversions": _by_family(("layout",), "NCHW <-> NHWC layout conversion"),
    "fusable_kernels": _by_family(
        ("elementwise", "norm", "layout", "memory"), "batch-norm, activation, copy and layout"
    ),
    "launch_bound": _launch_bound,
    "autograd_thread": _autograd_thread,
    "cpu_slow_fallback": _cpu_slow_fallback,
    "cpu_layout_conversions": _cpu_layout_conversions,
}
