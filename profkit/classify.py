"""Verdicts for every launch: precision, tensor-core use, kernel family, and the evidence.

The rules live in ``rules.toml`` beside this file (data); this module loads them and applies
them. Hardware counters win where the run has them: the tensor-path op counters per source
type say both whether a kernel used the tensor cores and in which precision. Names decide
otherwise, and also give the precision of kernels that did no tensor math. Memcpy and memset
rows do no math. CPU operators (``kind`` cpu_op) never use tensor cores; their precision
comes from the input tensor types torch.profiler recorded, their family from op rules. Every
verdict records its evidence (``metrics``, ``name``, ``dtypes`` or ``none``) and which
counter or rule gave it.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from .errors import UsageError
from .parse.schema import PRECISIONS, Capture, ClassifiedRow, Evidence, KernelRow, Precision, frame

if TYPE_CHECKING:
    import pandas as pd

RULES_PATH = Path(__file__).with_name("rules.toml")


@dataclass(frozen=True)
class NameRule:
    id: str
    description: str
    regex: re.Pattern[str]
    precision: (
        Any  # a Precision, or {"group": g, "map": {...: Precision}}, or None (checked on load)
    )
    tensor_core: bool | None
    family: str | None
    examples: tuple[str, ...]
    precision_from_inputs: bool = (
        False  # names carry no type: the launching operator's input types tell
    )
    # Where the launching operator's types are not known: what the name still says (a Precision,
    # RUN_HALF or RUN_FLOAT), as ``precision`` is given. Applied once the run's rows are stored
    # (``Store.judge_by_run``), since the run's own types decide the last two.
    precision_else: Any = None

    def precision_for(self, match: re.Match[str]) -> Precision | None:
        return cast("Precision | None", _mapped(self.precision, match))

    def else_for(self, match: re.Match[str]) -> str | None:
        return _mapped(self.precision_else, match)


def _mapped(spec: Any, match: re.Match[str]) -> str | None:
    """A rule's precision given as a value or as {group, map}, for one match of its pattern."""
    if isinstance(spec, dict):
        return cast("str | None", spec["map"].get(match.group(spec["group"])))
    return cast("str | None", spec)


# The values a rule's ``precision_else`` may give besides a precision: the run's 2-byte float
# type (fp16 or bf16: its tag, else the one with more kernel time) and the run's float type
# (its tag; an AMP run's kernels are of both: mixed).
RUN_HALF, RUN_FLOAT = "run-half", "run-float"


@dataclass(frozen=True)
class Verdict:
    precision: Precision
    tensor_core: bool | None
    family: str | None
    evidence: Evidence
    evidence_detail: str


@dataclass(frozen=True)
class Rules:
    """rules.toml, read once (:func:`rules`): the name rules (precision, tensor cores and
    family from a kernel's name), the counters (ncu metric -> the precision its tensor-path
    ops are), the metric presets and ncu plans per chip, the operator rules (a CPU operator's
    family), torch.profiler's input types (-> precision) and the work rules (``diff --match
    family``). Every precision it names is one of ``PRECISIONS`` (checked on load)."""

    name_rules: tuple[NameRule, ...]
    counters: dict[str, Precision]
    # ncu metric -> the float width its CUDA-core instructions are (half, fp32, fp64)
    core_counters: dict[str, str]
    core_min: float  # fewer float instructions than this: no float arithmetic to speak of
    # chip (sm_90, other) -> preset -> metric list; "default" -> preset
    metric_sets: dict[str, dict[str, Any]]
    ncu_plans: dict[str, str]  # chip -> "per-function" where that is ncu's default plan
    op_rules: tuple[OpRule, ...]
    torch_types: dict[str, Precision]
    work_rules: tuple[WorkRule, ...]


def _precisions(where: str, values: Iterable[Any]) -> None:
    bad = sorted({str(v) for v in values if v not in PRECISIONS})
    if bad:
        raise ValueError(
            f"{RULES_PATH}: {where} names unknown precisions {bad}: not one of {', '.join(PRECISIONS)}"
        )


@lru_cache(maxsize=1)
def rules() -> Rules:
    data = tomllib.loads(RULES_PATH.read_text(encoding="utf-8"))
    for r in data.get("name_rule", []):
        for key, extra in (("precision", ()), ("precision_else", (RUN_HALF, RUN_FLOAT))):
            p = r.get(key)
            values = p["map"].values() if isinstance(p, dict) else [] if p is None else [p]
            _precisions(f"name rule {r['id']}'s {key}", [v for v in values if v not in extra])
    name_rules = tuple(
        NameRule(
            id=r["id"],
            description=r.get("description", ""),
            regex=re.compile(r["pattern"]),
            precision=r.get("precision"),
            tensor_core=r.get("tensor_core"),
            family=r.get("family"),
            examples=tuple(r.get("examples", ())),
            precision_from_inputs=r.get("precision_from") == "inputs",
            precision_else=r.get("precision_else"),
        )
        for r in data.get("name_rule", [])
    )
    counters: dict[str, Precision] = {}
    for table in data.get("counters", {}).values():
        counters.update(table)
    _precisions("counters", counters.values())
    core: dict[str, str] = {}
    for table in data.get("core_counters", {}).values():
        core.update({k: v for k, v in table.items() if k != "min_instructions"})
    core_min = min(
        (float(t.get("min_instructions", 0)) for t in data.get("core_counters", {}).values()),
        default=0.0,
    )
    if set(core.values()) - set(CORE_WIDTHS):
        raise ValueError(
            f"{RULES_PATH}: core_counters names widths other than {', '.join(CORE_WIDTHS)}"
        )
    _precisions("torch_types", data.get("torch_types", {}).values())
    op_rules = tuple(
        OpRule(
            id=r["id"],
            regex=re.compile(r["pattern"]),
            family=r["family"],
            examples=tuple(r.get("examples", ())),
        )
        for r in data.get("op_rule", [])
    )
    work_rules = tuple(
        WorkRule(
            id=r["id"],
            regex=re.compile(r["pattern"]),
            label=r["label"],
            examples=tuple(r.get("examples", ())),
            lowercase=bool(r.get("lowercase", False)),
            operation=r.get("operation"),
        )
        for r in data.get("work_rule", [])
    )
    return Rules(
        name_rules=name_rules,
        counters=counters,
        core_counters=core,
        core_min=core_min,
        metric_sets=data.get("metric_sets", {}),
        ncu_plans=data.get("ncu_plans", {}),
        op_rules=op_rules,
        torch_types=data.get("torch_types", {}),
        work_rules=work_rules,
    )


@dataclass(frozen=True)
class WorkRule:
    id: str
    regex: re.Pattern[str]
    label: str
    examples: tuple[str, ...]
    lowercase: bool = False
    operation: str | None = None  # "conv {pass}", "gemm": the same operation across libraries


@lru_cache(maxsize=65536)
def work_key(short_name: str, name: str = "") -> tuple[str, str]:
    """(the work a kernel does, the work rule that said so): what ``diff --match family`` lines
    up across autotuned tiles, template instances and generated names. Rules are tried on the
    short name, then on the full name (``cutlass::Kernel<cutlass_tensorop_..._fprop_...>``
    is only ``Kernel`` short). Without a rule: the short name with what differs between
    variants wildcarded (:func:`variant_label`; rule id "")."""
    label, rule_id, _ = _work(short_name, name)
    return label, rule_id


@lru_cache(maxsize=65536)
def operation_of(short_name: str, name: str = "") -> str:
    """The operation a kernel implements, the same whichever library's kernel did it (``conv
    fprop``: cuDNN xmma, implicit_convolve_sgemm, CUTLASS; ``gemm``: nvjet, sgemm, CUTLASS):
    the rule's ``operation``, else the work."""
    return _work(short_name, name)[2]


def _work(short_name: str, name: str) -> tuple[str, str, str]:
    for text in (short_name, name):
        for rule in rules().work_rules:
            m = rule.regex.search(text) if text else None
            if m:
                groups = {
                    k: (v or "").lower() if rule.lowercase else (v or "")
                    for k, v in m.groupdict().items()
                }
                label = rule.label.format(**groups)
                op_groups = {k: (v or "").lower() for k, v in m.groupdict().items()}
                return (
                    label,
                    rule.id,
                    rule.operation.format(**op_groups) if rule.operation else label,
                )
    label = variant_label(short_name)
    return label, "", label


# What differs between variants of one kernel in a name no work rule knows, each part
# wildcarded as `*` (rules.toml's header says the same): tile and problem shapes (`128x64`,
# `cga1x1x1`), an element type standing as a part of its own (`_f16_`, `_bf16_`: the work
# cast), and numbers standing alone between underscores or at the end (template and knob
# numbers, generated counters: `knob_26`, Triton's `_13`). Digits that belong to a word stay:
# `max_pool2d`, `nll_loss_forward_reduce_cuda_kernel_2d`, `bn_fw_inf_1C11`, `sm90`, `16bits`.
_VARIANT_PARTS = (
    re.compile(r"\d+(?:x\d+)+(?![A-Za-z0-9])"),
    re.compile(
        r"(?<=_)(?:f16|bf16|f32|f64|fp16|bf16|fp32|tf32|fp64|fp8|e4m3|e5m2|half|float|double|i8|s8|u8)(?=_|$)"
    ),
    re.compile(r"(?:(?<=_)|^)\d+(?=_|$)"),
)


def variant_label(short_name: str) -> str:
    """A kernel's short name with what differs between its variants wildcarded (``*``): the
    work of a name no work rule knows. A mangled name (``_Z...``, which no demangler read) has
    every digit wildcarded: its digits are lengths and template numbers, none a word's."""
    if short_name.startswith("_Z"):
        return re.sub(r"\d+", "*", short_name)
    label = short_name
    for part in _VARIANT_PARTS:
        label = part.sub("*", label)
    return label


@dataclass(frozen=True)
class OpRule:
    id: str
    regex: re.Pattern[str]
    family: str
    examples: tuple[str, ...]


@lru_cache(maxsize=65536)
def classify_op(name: str, input_types: str | None) -> Verdict:
    """A CPU operator: precision from its tensor input types, family from the op rules."""
    r = rules()
    family, f_rule = None, ""
    for rule in r.op_rules:
        if rule.regex.search(name):
            family, f_rule = rule.family, rule.id
            break
    types = [t for t in (input_types or "").split(",") if t]
    precision = types_precision(input_types)
    where = f"; family from op rule {f_rule}" if f_rule else ""
    if precision and precision != "int":  # a CPU operator's precision is its floating-point inputs'
        return Verdict(precision, False, family, "dtypes", f"input types {input_types}{where}")
    detail = (
        f"no floating-point tensor inputs ({input_types})"
        if types
        else "no tensor input types recorded"
    )
    return Verdict("unknown", False, family, "none", f"CPU operator: {detail}{where}")


def types_precision(input_types: str | None) -> Precision | None:
    """The precision of an operator's input types (torch.profiler's ``c10::Half,c10::Half``,
    or torch's ``float16,int64``): the floating type's, ``mixed`` for several; else int8 or
    ``int`` (integer and boolean work); None where no tensor type is known."""
    table = rules().torch_types
    mapped = list(dict.fromkeys(table[t] for t in (input_types or "").split(",") if t in table))
    chosen = (
        [p for p in mapped if p not in ("int8", "int")]
        or [p for p in mapped if p == "int8"]
        or mapped
    )
    if not chosen:
        return None
    return chosen[0] if len(chosen) == 1 else "mixed"


@lru_cache(maxsize=65536)
def name_else(name: str) -> tuple[str, str] | None:
    """What the first rule with a ``precision_else`` that matches ``name`` says where the
    launching operator's types are unknown: (a precision, RUN_HALF or RUN_FLOAT; the rule's id)."""
    for rule in rules().name_rules:
        if rule.precision_else is None:
            continue
        m = rule.regex.search(name)
        if m:
            value = rule.else_for(m)
            return (value, rule.id) if value else None
    return None


@lru_cache(maxsize=65536)
def inputs_rule(name: str) -> str | None:
    """The first rule matching ``name`` that takes its precision from the launching operator's
    input types (kernels whose names carry no type: Triton's, cuDNN's SDPA), or None."""
    for rule in rules().name_rules:
        if rule.precision_from_inputs and rule.regex.search(name):
            return str(rule.id)
    return None


def arch_key(compute_capability: str | None) -> str | None:
    """'9.0' -> 'sm_90'."""
    if not compute_capability:
        return None
    m = re.fullmatch(r"(\d+)\.(\d+)", compute_capability.strip())
    return f"sm_{m.group(1)}{m.group(2)}" if m else None


def metric_set(preset_or_list: str | None, compute_capability: str | None) -> tuple[str, list[str]]:
    """Resolve ``--metrics``: a preset name for the chip, or a comma list of metric names.

    Returns (label, metrics). ``gpu__time_duration.sum`` is always included.
    """
    sets = rules().metric_sets
    table = sets.get(arch_key(compute_capability) or "", sets["other"])
    value = (preset_or_list or "default").strip()
    if value == "default":
        value = table["default"]
    if "," not in value and "__" not in value:
        if value not in table:
            presets = ", ".join(k for k in table if k != "default")
            raise UsageError(
                f"no metric preset {value!r} for this GPU ({arch_key(compute_capability) or 'unknown chip'})",
                f"Presets here: {presets}; or give a comma-separated list of ncu metric names.",
            )
        return value, list(table[value])
    metrics = [m.strip() for m in value.split(",") if m.strip()]
    if "gpu__time_duration.sum" not in metrics:
        metrics.insert(0, "gpu__time_duration.sum")
    return "custom", metrics


def per_function_plan(compute_capability: str | None) -> bool:
    """Whether ncu's default on this chip is the per-function plan (``ncu_plans`` in
    rules.toml): counters on each kernel function's first launch, every launch timed."""
    return bool(rules().ncu_plans.get(arch_key(compute_capability) or "") == "per-function")


@lru_cache(maxsize=65536)
def by_name(name: str) -> tuple[Precision | None, bool | None, str | None, str, str]:
    """(precision, tensor_core, family, rule ids for precision, rule id for tensor_core)."""
    precision: Precision | None = None
    tensor: bool | None = None
    family: str | None = None
    p_rule = t_rule = ""
    claimed = False  # a rule whose name has no type claimed the precision for the operator's types
    for rule in rules().name_rules:
        m = rule.regex.search(name)
        if not m:
            continue
        if precision is None and not claimed:
            p = rule.precision_for(m)
            if p is not None:
                precision, p_rule = p, rule.id
            claimed = rule.precision_from_inputs
        if tensor is None and rule.tensor_core is not None:
            tensor, t_rule = rule.tensor_core, rule.id
        if family is None and rule.family is not None:
            family = rule.family
        if precision is not None and tensor is not None and family is not None:
            break
    return precision, tensor, family, p_rule, t_rule


# The float widths rules.toml's [core_counters] sort CUDA-core arithmetic into: "half" counts
# fp16 and bf16 alike (HFMA2 does both), so a name or the operator's types tell which.
CORE_WIDTHS = ("half", "fp32", "fp64")


def from_core_counters(v: Verdict, metrics: dict[str, float]) -> Verdict:
    """A kernel off the tensor cores whose name and launching operator say no precision, judged
    by ncu's CUDA-core arithmetic counters: the float width with the most thread instructions,
    where there are enough to be the kernel's work (rules.toml's ``min_instructions``). Half
    precision counts only with half adds or multiplies: compilers emit HFMA2 with zero operands
    to move constants, so an HFMA count alone is no half arithmetic (a copy kernel of int64
    data counted 270,852). ``half`` is fp16 or bf16 alike; with nothing to tell which, fp16."""
    core = rules().core_counters
    by: dict[str, float] = {}
    plain_half = 0.0
    for m, width in core.items():
        if m in metrics:
            by[width] = by.get(width, 0.0) + float(metrics[m] or 0)
            if width == "half" and "hfma" not in m:
                plain_half += float(metrics[m] or 0)
    if not plain_half:
        by.pop("half", None)
    if not by or max(by.values()) < rules().core_min:
        return v  # none counted, or too few to be the kernel's work
    width = max(by, key=lambda w: by[w])
    counts = ", ".join(f"{w} {by[w]:,.0f}" for w in CORE_WIDTHS if w in by)
    precision: Precision = "fp16" if width == "half" else "fp64" if width == "fp64" else "fp32"
    what = "; half, which is fp16 or bf16 alike" if width == "half" else ""
    return Verdict(
        precision,
        v.tensor_core,
        v.family,
        "metrics",
        f"{v.evidence_detail}; CUDA-core float instructions (threads): {counts}{what}",
    )


def classify_one(name: str, metrics: dict[str, float] | None) -> Verdict:
    precision, tensor, family, p_rule, t_rule = by_name(name)
    counters = rules().counters
    metrics = metrics or {}
    measured = {m: counters[m] for m in metrics if m in counters}
    if measured:
        used = sorted({counters[m] for m, v in metrics.items() if m in counters and v})
        if used:
            detail = "tensor-path ops: " + ", ".join(
                f"{m}={metrics[m]:,.0f}" for m in sorted(measured) if metrics[m]
            )
            return Verdict(
                used[0] if len(used) == 1 else "mixed", True, family or "gemm", "metrics", detail
            )
        types_measured = set(measured.values())
        if tensor and precision and precision not in types_measured:
            # The run did not count this kernel's type (e.g. fp8 with the 'tensor' preset).
            return Verdict(
                precision,
                True,
                family,
                "name",
                f"rule {t_rule}; no {precision} tensor counter was collected",
            )
        detail = f"tensor-path ops = 0 for {', '.join(sorted(types_measured))}"
        if p_rule:  # the counters decided tensor cores (none), a name rule the precision
            return Verdict(
                precision or "unknown",
                False,
                family,
                "name",
                f"{detail}; precision from rule {p_rule}",
            )
        return Verdict("unknown", False, family, "metrics", detail)
    if precision is None and tensor is None:
        return Verdict("unknown", None, family, "none", "no counters and no name rule matched")
    rules_used = ", ".join(dict.fromkeys(r for r in (t_rule, p_rule) if r))
    return Verdict(precision or "unknown", tensor, family, "name", f"rule {rules_used}")


COPY_VERDICT = {
    kind: Verdict("unknown", False, "memory", "name", f"a {kind}: moves or fills memory, no math")
    for kind in ("memcpy", "memset")
}


def classify_row(
    kind: str, name: str, metrics: dict[str, float] | None, input_types: str | None
) -> Verdict:
    if kind == "cpu_op":
        return classify_op(name, input_types)
    if kind in COPY_VERDICT:
        return COPY_VERDICT[kind]
    v = classify_one(name, metrics) if metrics else _by_name_only(name)
    return last_resorts(v, input_types, metrics)


def last_resorts(v: Verdict, input_types: str | None, metrics: dict[str, float] | None) -> Verdict:
    """Where the name and the tensor-path counters gave no precision: the launching operator's
    input types, then ncu's CUDA-core arithmetic counters."""
    if input_types and v.precision == "unknown":
        v = from_inputs(v, input_types)
    if metrics and v.precision == "unknown" and not v.tensor_core:
        v = from_core_counters(v, metrics)
    return v


@lru_cache(maxsize=65536)
def from_inputs(v: Verdict, input_types: str) -> Verdict:
    """A kernel whose name and counters say no precision, judged by the input types of the
    operator that launched it (Triton kernels of torch.compile, cuDNN's SDPA and depthwise
    convolutions, copies of opaque types): evidence ``dtypes``, the detail saying so."""
    precision = types_precision(input_types)
    if not precision:
        return v
    return Verdict(
        precision,
        v.tensor_core,
        v.family,
        "dtypes",
        f"{v.evidence_detail}; precision from the launching operator's input types ({input_types})",
    )


@lru_cache(maxsize=65536)
def _by_name_only(name: str) -> Verdict:
    return classify_one(name, None)


def classify_rows(rows: Iterable[KernelRow]) -> Iterator[ClassifiedRow]:
    """Each row with its verdict (precision, tensor_core, family, evidence, evidence_detail).
    A row that already has one (an importer that judged a function once for all its launches,
    ``parse.ncu_plan``) passes through as it is."""
    for r in rows:
        if "evidence" in r:
            yield cast(ClassifiedRow, r)
            continue
        v = classify_row(r["kind"], r["name"], r["metrics"], r["input_types"])
        out = cast(ClassifiedRow, r)  # the same dict, completed here: millions of rows stream past
        out["precision"] = v.precision
        out["tensor_core"] = v.tensor_core
        out["family"] = v.family
        out["evidence"] = v.evidence
        out["evidence_detail"] = v.evidence_detail
        yield out


def classified(capture: Capture[KernelRow]) -> Capture[ClassifiedRow]:
    """The capture with its rows classified as they are read (ranges, host syncs and notes shared)."""
    return Capture(
        rows=classify_rows(capture.rows),
        tool=capture.tool,
        source_format=capture.source_format,
        tool_version=capture.tool_version,
        gpu_name=capture.gpu_name,
        compute_capability=capture.compute_capability,
        metric_names=capture.metric_names,
        metric_units=capture.metric_units,
        notes=capture.notes,
        ranges=capture.ranges,
        range_paths=capture.range_paths,
        host_syncs=capture.host_syncs,
        bulk=capture.bulk,
    )


def classify(df: pd.DataFrame) -> pd.DataFrame:
    """A kernel table (DataFrame) with the verdict columns added: for notebooks and tests; the
    import path classifies rows as they stream (``classified``)."""
    records = df.astype(object).where(df.notna(), None).to_dict("records")
    for r in records:
        r["metrics"] = r.get("metrics") or {}
        r.setdefault("input_types", None)
    return frame(classify_rows(records), classified=True).set_axis(df.index)  # type: ignore[arg-type]
