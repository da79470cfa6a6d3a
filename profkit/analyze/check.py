"""``profkit check``: assertions over a stored run (or a run against a baseline run) that a CI
job can gate on, each evaluated from the analyses that already exist:

* ``tensor_core_coverage``: the tensor-core coverage of the run's matrix work
  (``analyze.matrix``, the summary's figure) is at least ``min_coverage`` %;
* ``no_fp32_matrix``: a half-precision run (fp16, bf16 or amp, decided as the findings decide
  it) has no GEMM, convolution or attention kernel in fp32 or TF32 (the families and
  precisions of rules.toml's ``fp32_matrix_outside_autocast`` finding);
* ``finding:<id>`` / ``finding:any``: no finding (``analyze.findings``, ids as rules.toml's
  ``[[finding]]``) above a share of GPU time;
* ``slowdown``: GPU time per iteration at most ``max_slowdown`` % above a baseline run's, on
  the total and on the kernels that moved beyond the diff's noise (``analyze.diff``: those
  whose time moved by more than ``noise_pct`` % of the baseline's and 1 us, or whose calls
  changed): either over the limit fails. The total catches a slowdown spread over every
  kernel, each within the noise (a slower clock, a driver); the kernels beyond the noise
  catch one that regressed while others got faster. A baseline of another workload or other
  options (precision, mode, batch size, tool, device, GPU) is warned about in the report;
* ``launches_per_iteration``: kernel launches (CPU operator calls) per measured iteration at
  most ``max_per_iteration``;
* ``untried_gain``: no fix of the run's latest tuning (``profkit tune``) measured to save more
  than ``max_untried_gain_pct`` % of its step (a gain: beyond the steps' spread, with outputs
  that agree); estimates of fixes that need the user's code are not measurements and do not
  count. A run with no tuning cannot be judged: skipped.

Each yields a :class:`CheckResult`: pass, fail or **skip**. An assertion that cannot be
evaluated on a run (coverage of a run with no matrix work, tensor cores of a CPU run, fp32
matrix work of an fp32 run, launches per iteration of a capture with no iteration ranges,
times that do not compare) is skipped with its reason, never passed: CI sees it was not
checked. :class:`CheckReport` gathers them, and its warnings, and renders text, JSON and
JUnit XML.

The checks come from a small TOML file (:func:`load_checks`, refused in one line naming the
key) and/or keyword arguments (:class:`Checks`).
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..errors import UsageError
from ..files import load_toml
from ..formatting import cut_middle, fmt_ns, shown
from ..records import RunRecord, ncu_timed
from .diff import DEFAULT_THRESHOLD_PCT, diff, iterations
from .findings import finding_rules, findings, half_precision_run
from .matrix import MATRIX_FAMILIES, WHAT, of_run
from .tuned import best_fix_line, gains_over, ms_number, when
from .tuned import latest as latest_tuning

if TYPE_CHECKING:
    from ..rows import KernelGroup
    from ..store import Store

Status = Literal["pass", "fail", "skip"]
ANY = "any"  # the findings key that means every finding with a share of GPU time
# The finding whose families and precisions decide what "fp32 matrix work" is.
FP32_MATRIX = "fp32_matrix_outside_autocast"


@dataclass(frozen=True)
class Checks:
    """What to assert. None (or empty) leaves an assertion out. Percentages are 0-100
    (``max_slowdown`` and ``noise_pct`` 0-1000); ``max_findings`` maps finding ids (or
    ``"any"``) to the largest share of GPU time allowed; ``baseline`` is a run's name or id."""

    min_coverage: float | None = None
    no_fp32_matrix: bool = False
    max_findings: Mapping[str, float] = field(default_factory=dict)
    baseline: str | None = None
    max_slowdown: float | None = None
    noise_pct: float = DEFAULT_THRESHOLD_PCT
    max_launches: int | None = None
    max_untried_gain_pct: float | None = None

    def merged(self, over: Checks) -> Checks:
        """These checks with ``over``'s set values in their place (the command line over a file)."""
        return Checks(
            min_coverage=over.min_coverage if over.min_coverage is not None else self.min_coverage,
            no_fp32_matrix=over.no_fp32_matrix or self.no_fp32_matrix,
            max_findings={**self.max_findings, **over.max_findings},
            baseline=over.baseline if over.baseline is not None else self.baseline,
            max_slowdown=over.max_slowdown if over.max_slowdown is not None else self.max_slowdown,
            noise_pct=over.noise_pct if over.noise_pct != DEFAULT_THRESHOLD_PCT else self.noise_pct,
            max_launches=over.max_launches if over.max_launches is not None else self.max_launches,
            max_untried_gain_pct=over.max_untried_gain_pct
            if over.max_untried_gain_pct is not None
            else self.max_untried_gain_pct,
        )

    def empty(self) -> bool:
        return (
            self.min_coverage is None
            and not self.no_fp32_matrix
            and not self.max_findings
            and self.max_slowdown is None
            and self.max_launches is None
            and self.max_untried_gain_pct is None
        )

    def check(self) -> Checks:
        """These checks, or a UsageError naming the parameter that is wrong."""
        _percent("min_coverage", self.min_coverage, 100)
        if not isinstance(self.no_fp32_matrix, bool):
            raise UsageError(f"`no_fp32_matrix` must be True or False, not {self.no_fp32_matrix!r}")
        for key, pct in self.max_findings.items():
            finding_id(key, "`max_findings`")
            _percent(f"max_findings[{key!r}]", pct, 100, quoted=False)
        _percent("max_slowdown", self.max_slowdown, 1000)
        _percent("noise_pct", self.noise_pct, 1000)
        _percent("max_untried_gain_pct", self.max_untried_gain_pct, 100)
        if self.max_launches is not None and (
            isinstance(self.max_launches, bool)
            or not isinstance(self.max_launches, int)
            or self.max_launches < 1
        ):
            raise UsageError(
                f"`max_launches` must be a whole number of at least 1, not {self.max_launches!r}"
            )
        if self.baseline is not None and self.max_slowdown is None:
            raise UsageError(
                "a `baseline` run is compared against a limit: give `max_slowdown` too"
            )
        return self


def _percent(name: str, value: object, top: float, quoted: bool = True) -> None:
    if value is None:
        return
    shown = f"`{name}`" if quoted else name
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 <= value <= top
    ):
        raise UsageError(f"{shown} must be a number from 0 to {top:g}, not {value!r}")


def finding_id(key: str, where: str) -> str:
    """``key`` if it is a finding's id (rules.toml) or ``any``, else a UsageError saying so
    (with the nearest id)."""
    ids = [*finding_rules(), ANY]
    if key in ids:
        return key
    near = difflib.get_close_matches(key, ids, n=1)
    hint = f"Did you mean {near[0]}? " if near else ""
    raise UsageError(
        f"{where} names an unknown finding {key!r}",
        f"{hint}The ids are rules.toml's [[finding]] ids: {', '.join(ids)}",
    )


def parse_finding_limit(text: str) -> tuple[str, float]:
    """``ID=PCT`` (``--max-finding fusable_kernels=60``) -> (id, pct)."""
    key, eq, value = text.partition("=")
    key = key.strip()
    if not eq or not key:
        raise UsageError(
            f"`max_finding` takes ID=PCT (fusable_kernels=60, or any=50), not {text!r}"
        )
    finding_id(key, "`max_finding`")
    try:
        pct = float(value)
    except ValueError:
        pct = math.nan
    if not math.isfinite(pct) or not 0 <= pct <= 100:
        raise UsageError(
            f"`max_finding` {key}=... must be a percentage from 0 to 100, not {value.strip()!r}"
        )
    return key, pct


# ---------------------------------------------------------------------------------- the check file
# table -> key -> (Checks field, kind, top of its range); kinds: pct (a number 0..top), bool, int, run
_FILE: dict[str, dict[str, tuple[str, str, float]]] = {
    "tensor_cores": {"min_coverage": ("min_coverage", "pct", 100)},
    "precision": {"no_fp32_matrix": ("no_fp32_matrix", "bool", 0)},
    "baseline": {
        "run": ("baseline", "run", 0),
        "max_slowdown": ("max_slowdown", "pct", 1000),
        "noise_pct": ("noise_pct", "pct", 1000),
    },
    "launches": {"max_per_iteration": ("max_launches", "int", 0)},
    "tune": {"max_untried_gain_pct": ("max_untried_gain_pct", "pct", 100)},
}
_TABLES = (*_FILE, "findings")


def _near(word: str, choices: list[str]) -> str:
    near = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {near[0]}?)" if near else ""


def _shown(value: object) -> str:
    """A TOML value as the user wrote it, near enough: strings quoted, booleans lower-case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return str(value)


def load_checks(path: str | os.PathLike[str]) -> Checks:
    """A check file (TOML) -> :class:`Checks`; anything wrong in it (unreadable, no regular
    file, larger than 64 KiB, not TOML, nested too deep, an unknown table or key, a value
    of the wrong type or out of range, an unknown finding id) is a UsageError naming the file
    and the key, in one line (``files.load_toml``). See docs/guide/check.md."""
    name = str(path)
    data = load_toml(path, "check file")
    values: dict[str, Any] = {}
    for table, content in data.items():
        if table not in _TABLES:
            raise UsageError(
                f"{name}: unknown table [{table}]{_near(table, list(_TABLES))}; the tables are "
                + ", ".join(f"[{t}]" for t in _TABLES)
            )
        if not isinstance(content, dict):
            raise UsageError(f"{name}: {table} must be a table ([{table}]), not {_shown(content)}")
        if table == "findings":
            limits: dict[str, float] = {}
            for key, value in content.items():
                ids = [*finding_rules(), ANY]
                if key not in ids:
                    raise UsageError(
                        f"{name}: [findings] {key} is no finding id{_near(key, ids)}; the ids are "
                        f"rules.toml's [[finding]] ids and any: {', '.join(ids)}"
                    )
                _file_pct(name, f"[findings] {key}", value, 100)
                limits[key] = float(value)
            values["max_findings"] = limits
            continue
        keys = _FILE[table]
        for key, value in content.items():
            if key not in keys:
                raise UsageError(
                    f"{name}: [{table}] has no key {key}{_near(key, list(keys))}; its keys are "
                    + ", ".join(keys)
                )
            target, kind, top = keys[key]
            where = f"[{table}] {key}"
            if kind == "pct":
                _file_pct(name, where, value, top)
                value = float(value)
            elif kind == "bool" and not isinstance(value, bool):
                raise UsageError(f"{name}: {where} must be true or false, not {_shown(value)}")
            elif kind == "int" and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise UsageError(
                    f"{name}: {where} must be a whole number of at least 1, not {_shown(value)}"
                )
            elif kind == "run" and (
                not isinstance(value, (str, int)) or isinstance(value, bool) or value == ""
            ):
                raise UsageError(f"{name}: {where} must be a run's name or id, not {_shown(value)}")
            values[target] = str(value) if kind == "run" else value
    checks = Checks(**values)
    if checks.baseline is not None and checks.max_slowdown is None:
        raise UsageError(
            f"{name}: [baseline] run needs max_slowdown (the largest slowdown allowed, %)"
        )
    return checks


def _file_pct(name: str, where: str, value: object, top: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 <= value <= top
    ):
        raise UsageError(f"{name}: {where} must be a number from 0 to {top:g}, not {_shown(value)}")


# ---------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class CheckResult:
    """One assertion's outcome. ``measured`` and ``limit`` are numbers in ``unit`` (None where
    nothing could be measured); ``measured_text`` and ``limit_text`` say them in words;
    ``explanation`` is one line: what was measured, or why it was skipped."""

    name: str
    title: str
    status: Status
    measured: float | None
    limit: float
    unit: str
    measured_text: str
    limit_text: str
    explanation: str

    def line(self) -> str:
        """``FAIL  tensor-core coverage of matrix work: 82.6% (limit at least 95%): ...``"""
        return f"{self.status.upper()}  {self.title}: {self.measured_text} (limit {self.limit_text}): {self.explanation}"


@dataclass(frozen=True)
class CheckReport:
    """Every assertion's result over one run (and its baseline). ``ok``: none failed (skips do
    not fail; ``strict`` ones do). ``warnings``: what makes a result doubtful without failing
    it (a baseline of another workload or other options), one line each. ``to_dict()`` is
    ``profkit check --format json``."""

    run: str
    baseline: str | None
    results: list[CheckResult]
    warnings: list[str] = field(default_factory=list)

    def count(self, status: Status) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def ok(self) -> bool:
        return not self.count("fail")

    def headline(self) -> str:
        """``profkit check r50: 3 passed, 1 failed, 1 skipped``"""
        against = f" against {self.baseline}" if self.baseline else ""
        warned = (
            f", {len(self.warnings)} warning{'s' if len(self.warnings) != 1 else ''}"
            if self.warnings
            else ""
        )
        return (
            f"profkit check {self.run}{against}: {self.count('pass')} passed, {self.count('fail')} failed, "
            f"{self.count('skip')} skipped{warned}"
        )

    def lines(self) -> list[str]:
        return (
            [r.line() for r in self.results]
            + [f"WARN  {w}" for w in self.warnings]
            + [self.headline()]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "baseline": self.baseline,
            "ok": self.ok,
            "passed": self.count("pass"),
            "failed": self.count("fail"),
            "skipped": self.count("skip"),
            "warnings": list(self.warnings),
            "results": [asdict(r) for r in self.results],
        }

    def to_junit(self) -> str:
        """JUnit XML: one testsuite, one testcase per assertion; a failure or a skip carries the
        result's line as its message. Every text in it (run and kernel names) has its control
        characters written as visible escapes (``formatting.shown``: ``\\x1b``), which also
        keeps out every character XML 1.0 forbids: the file is always well-formed."""
        import xml.etree.ElementTree as ET

        run = shown(self.run)
        counts = {
            "tests": str(len(self.results)),
            "failures": str(self.count("fail")),
            "errors": "0",
            "skipped": str(self.count("skip")),
        }
        root = ET.Element("testsuites", {"name": "profkit check", **counts})
        suite = ET.SubElement(
            root, "testsuite", {"name": f"profkit check {run}", **counts, "time": "0"}
        )
        if self.baseline or self.warnings:
            props = ET.SubElement(suite, "properties")
            if self.baseline:
                ET.SubElement(
                    props, "property", {"name": "baseline", "value": shown(self.baseline)}
                )
            for w in self.warnings:
                ET.SubElement(props, "property", {"name": "warning", "value": shown(w)})
        for r in self.results:
            case = ET.SubElement(
                suite,
                "testcase",
                {"name": shown(r.name), "classname": f"profkit.check.{run}", "time": "0"},
            )
            message = shown(f"{r.title}: {r.measured_text} (limit {r.limit_text}): {r.explanation}")
            if r.status == "fail":
                ET.SubElement(
                    case, "failure", {"message": message, "type": "CheckFailed"}
                ).text = message
            elif r.status == "skip":
                ET.SubElement(case, "skipped", {"message": message})
            else:
                ET.SubElement(case, "system-out").text = message
        ET.indent(root)
        return (
            '<?xml version="1.0" encoding="utf-8"?>\n'
            + ET.tostring(root, encoding="unicode")
            + "\n"
        )


def _pct(x: float) -> str:
    return f"{x:.1f}%"


def _result(
    name: str,
    title: str,
    status: Status,
    measured: float | None,
    limit: float,
    unit: str,
    measured_text: str,
    limit_text: str,
    explanation: str,
) -> CheckResult:
    return CheckResult(
        name, title, status, measured, limit, unit, measured_text, limit_text, explanation
    )


def _skip(name: str, title: str, limit: float, unit: str, limit_text: str, why: str) -> CheckResult:
    return _result(name, title, "skip", None, limit, unit, "not measured", limit_text, why)


# ---------------------------------------------------------------------------------- the assertions
def run_checks(
    store: Store, run: RunRecord, checks: Checks, baseline: RunRecord | None = None
) -> CheckReport:
    """Evaluate ``checks`` over a stored run (``baseline``: the run the slowdown is measured
    against, required when ``checks.max_slowdown`` is set, else the slowdown is skipped)."""
    checks.check()
    if checks.empty():
        raise UsageError(
            "nothing to check",
            "Give a check file or at least one limit (see profkit check --help).",
        )
    out: list[CheckResult] = []
    groups = [g for g in store.kernel_groups(run.id) if g.kind == run.activity]
    if checks.min_coverage is not None:
        out.append(_coverage(store, run, groups, checks.min_coverage))
    if checks.no_fp32_matrix:
        out.append(_fp32_matrix(run, groups))
    if checks.max_findings:
        found = findings(store, run)
        for key, pct in checks.max_findings.items():
            out.append(_finding(run, found, key, pct))
    warned: list[str] = []
    if checks.max_slowdown is not None:
        out.append(_slowdown(store, run, baseline, checks.max_slowdown, checks.noise_pct))
        if baseline is not None:
            warned += baseline_differences(run, baseline)
    if checks.max_launches is not None:
        out.append(_launches(store, run, checks.max_launches))
    if checks.max_untried_gain_pct is not None:
        out.append(_untried_gain(store, run, checks.max_untried_gain_pct))
    return CheckReport(run.name, baseline.name if baseline is not None else None, out, warned)


# What a run and its baseline should share for their times to compare: (what, the value of a run).
_SAME: list[tuple[str, Callable[[RunRecord], object]]] = [
    ("workload", lambda r: r.workload),
    ("precision", lambda r: r.precision),
    ("mode", lambda r: r.mode),
    ("compile mode", lambda r: r.info.compile_mode),
    ("batch size", lambda r: r.batch_size),
    ("device", lambda r: r.device),
    ("tool", lambda r: r.tool),
    ("GPU", lambda r: r.gpu_name),
    ("activity", lambda r: r.activity),
    ("ranks", lambda r: r.info.world_size),
    (
        "options",
        lambda r: ", ".join(sorted(k for k, on in (r.info.options or {}).items() if on)) or None,
    ),
]


def baseline_differences(run: RunRecord, baseline: RunRecord) -> list[str]:
    """A warning (one line, or none) naming what ``baseline`` ran differently from ``run``:
    another workload, precision, mode, batch size, device, tool, GPU, ranks or options. Only
    what both runs record is compared (an import may not know its batch size)."""
    if baseline.id == run.id:
        return []
    differ = []
    for what, value in _SAME:
        a, b = value(baseline), value(run)
        if a is not None and b is not None and a != b:
            differ.append(f"{what} {a} (this run: {b})")
    if not differ:
        return []
    return [
        f"the baseline {baseline.name} is not the same configuration: {'; '.join(differ)}; the slowdown "
        "compares different work"
    ]


def _cpu(run: RunRecord) -> bool:
    return run.activity == "cpu_op"


def _off_tensor_cores(groups: list[KernelGroup], total: int, limit: int = 2) -> str:
    """The matrix kernels that ran most time off the tensor cores: ``implicit_convolve_sgemm
    (fp16, 4.2% of GPU time)``."""
    off: dict[str, list[Any]] = {}
    for g in groups:
        if g.family in MATRIX_FAMILIES and g.time_ns > g.tc_time_ns:
            entry = off.setdefault(_shown_name(g), [0, g.precision])
            entry[0] += g.time_ns - g.tc_time_ns
    top = sorted(off.items(), key=lambda x: -x[1][0])[:limit]
    shown = ", ".join(
        f"{cut_middle(n, 70)} ({p}, {_pct(100 * t / total)} of GPU time)" for n, (t, p) in top
    )
    more = f", {len(off) - limit} more" if len(off) > limit else ""
    return shown + more


_GENERIC = re.compile(r"(?:Kernel|kernel)\d*")


def _shown_name(g: KernelGroup) -> str:
    """A kernel's name as a line can show it: its short name, or, where that says nothing
    (CUTLASS's ``Kernel2<cutlass_80_simt_sgemm_...>``), the name less ``void`` and its
    parameters."""
    short = g.short_name or g.name
    if not _GENERIC.fullmatch(short):
        return short
    name = g.name.removeprefix("void ")
    depth = 0
    for i, ch in enumerate(name):  # cut at the parameters' "(", outside any template's <...>
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0 and i:
            return name[:i]
    return name


def _coverage(store: Store, run: RunRecord, groups: list[KernelGroup], limit: float) -> CheckResult:
    name, title, limit_text = (
        "tensor_core_coverage",
        "tensor-core coverage of matrix work",
        f"at least {limit:g}%",
    )
    mw = of_run(store, run)
    if mw is None:
        return _skip(
            name, title, limit, "%", limit_text, "a CPU run (operators): no tensor cores to cover"
        )
    if mw.tensor_core_pct is None:
        return _skip(
            name, title, limit, "%", limit_text, f"no {WHAT} kernels in this run: nothing to cover"
        )
    total = sum(g.time_ns for g in groups)
    what = (
        f"{fmt_ns(mw.tensor_core_time_ns)} of {fmt_ns(mw.time_ns)} of {WHAT} time on tensor cores"
    )
    if mw.undecided_time_ns:
        what += f", {fmt_ns(mw.undecided_time_ns)} undecided (counted as off)"
    ok = mw.tensor_core_pct >= limit
    if not ok and total:
        what += "; most off them: " + _off_tensor_cores(groups, total)
    return _result(
        name,
        title,
        "pass" if ok else "fail",
        mw.tensor_core_pct,
        limit,
        "%",
        _pct(mw.tensor_core_pct),
        limit_text,
        what,
    )


def _launches_text(n: int, which: str) -> str:
    return f"{n} {which} GEMM/conv/attention launch{'es' if n != 1 else ''}"


def _a(word: str) -> str:
    """``an fp32``, ``an amp``, ``a bf16``: the article as the word is read aloud."""
    return f"{'an' if word[:1] in 'aefhilmnorsx' else 'a'} {word}"


def _fp32_matrix(run: RunRecord, groups: list[KernelGroup]) -> CheckResult:
    name, title, limit_text = "no_fp32_matrix", "fp32 matrix work in a half-precision run", "none"
    if _cpu(run):
        return _skip(
            name,
            title,
            0,
            "%",
            limit_text,
            "a CPU run (operators): the check is of GPU matrix kernels",
        )
    total = sum(g.time_ns for g in groups)
    if not total:
        return _skip(name, title, 0, "%", limit_text, "the run has no kernel time")
    if not half_precision_run(run, groups):
        tag = (
            f"{_a(run.precision)} run"
            if run.precision
            else "a run mostly in fp32 (no precision tag)"
        )
        return _skip(
            name, title, 0, "%", limit_text, f"{tag}: the check applies to fp16, bf16 and amp runs"
        )
    rule = finding_rules()[FP32_MATRIX]
    families, precisions = set(rule.names("families")), set(rule.names("precisions"))
    chosen = [g for g in groups if g.family in families and g.precision in precisions]
    time = sum(g.time_ns for g in chosen)
    share = round(100 * time / total, 2)
    which = "/".join(sorted(precisions))
    if not chosen:
        return _result(
            name,
            title,
            "pass",
            0.0,
            0,
            "%",
            "none",
            limit_text,
            f"no {'/'.join(rule.names('families'))} kernel in {which} ({run.precision or 'half'} run)",
        )
    kernels: dict[str, int] = {}
    for g in chosen:
        kernels[_shown_name(g)] = kernels.get(_shown_name(g), 0) + g.time_ns
    top = sorted(kernels.items(), key=lambda x: -x[1])
    shown = ", ".join(cut_middle(n, 70) for n, _ in top[:2]) + (
        f", {len(top) - 2} more" if len(top) > 2 else ""
    )
    return _result(
        name,
        title,
        "fail",
        share,
        0,
        "%",
        f"{_pct(share)} of GPU time",
        limit_text,
        f"{_launches_text(sum(g.calls for g in chosen), which)} ({fmt_ns(time)}) in "
        f"{_a(run.precision or 'half-precision')} run: {shown}",
    )


def _finding(run: RunRecord, found: list[Any], key: str, limit: float) -> CheckResult:
    name, limit_text = f"finding:{key}", f"at most {limit:g}% of GPU time"
    rules = finding_rules()
    title = "any finding" if key == ANY else f"finding {key}"
    if _cpu(run):
        return _skip(
            name,
            title,
            limit,
            "%",
            limit_text,
            "a CPU run (operators): the findings are of GPU kernels",
        )
    if key == ANY:
        shared = [f for f in found if f.share_pct is not None]
        if not shared:
            return _result(
                name,
                title,
                "pass",
                0.0,
                limit,
                "%",
                "none",
                limit_text,
                "no finding with a share of GPU time (timeline findings are checked only by id)",
            )
        worst = max(shared, key=lambda f: f.share_pct or 0.0)
        share = worst.share_pct or 0.0
        over = [f for f in shared if (f.share_pct or 0.0) > limit]
        status: Status = "fail" if over else "pass"
        listed = ", ".join(f"{f.id} {_pct(f.share_pct or 0.0)}" for f in (over or [worst]))
        return _result(
            name,
            title,
            status,
            share,
            limit,
            "%",
            f"{_pct(share)} ({worst.id})",
            limit_text,
            (f"over the limit: {listed}" if over else f"the largest: {listed}"),
        )
    rule = rules[key]
    hit = next((f for f in found if f.id == key), None)
    if hit is None:
        floor = rule.settings.get("min_share_pct")
        below = (
            f" (it is raised from {floor:g}% of GPU time, rules.toml)"
            if isinstance(floor, (int, float)) and not isinstance(floor, bool)
            else ""
        )
        return _result(
            name,
            title,
            "pass",
            0.0,
            limit,
            "%",
            "not found",
            limit_text,
            f"{rule.title}: not found in this run{below}",
        )
    if hit.share_pct is None:  # a timeline finding: idle time, not a share of kernel time
        return _result(
            name,
            title,
            "fail",
            None,
            limit,
            "%",
            "found",
            limit_text,
            f"{hit.title}: {hit.detail} (not measured as a share of GPU time: found at all fails)",
        )
    status = "fail" if hit.share_pct > limit else "pass"
    return _result(
        name,
        title,
        status,
        hit.share_pct,
        limit,
        "%",
        _pct(hit.share_pct),
        limit_text,
        f"{hit.title}: {hit.detail}",
    )


def _slowdown(
    store: Store, run: RunRecord, baseline: RunRecord | None, limit: float, noise_pct: float
) -> CheckResult:
    name, title = "slowdown", "GPU time per iteration against the baseline"
    limit_text = f"at most {limit:g}% above the baseline's"
    if _cpu(run):
        title = "CPU self time per iteration against the baseline"
    if baseline is None:
        return _skip(name, title, limit, "%", limit_text, "no baseline run given (--baseline RUN)")
    if ncu_timed(run) != ncu_timed(baseline):
        replayed = run if ncu_timed(run) else baseline
        return _skip(
            name,
            title,
            limit,
            "%",
            limit_text,
            f"{replayed.name}'s times are ncu's (each kernel replayed alone, clocks locked): they do not "
            "compare with times as kernels ran; profile both runs with the same tool",
        )
    d = diff(store, baseline, run, match="family", threshold_pct=noise_pct)
    t = d.totals
    iters_a, iters_b = t.iterations_a or 1, t.iterations_b or 1
    # the totals are per iteration already where the counts differ
    a = t.gpu_time_a_ns / (1 if t.per_iteration else iters_a)
    b = t.gpu_time_b_ns / (1 if t.per_iteration else iters_b)
    if not a:
        return _skip(
            name,
            title,
            limit,
            "%",
            limit_text,
            f"the baseline {baseline.name} has no time to compare with",
        )
    slowdown = round(100 * (b - a) / a, 2)
    scale = 1 if t.per_iteration else iters_a
    moved = (
        sum(r.delta_time_ns for r in d.rows if r.kind == run.activity and r.status != "same")
        / scale
    )
    beyond = round(100 * moved / a, 2)
    # Either fails alone: the total (a slowdown spread over every kernel, each within the
    # noise, is still a slowdown) and the kernels beyond the noise (one that regressed while
    # others got faster).
    status: Status = "fail" if slowdown > limit or beyond > limit else "pass"
    per = (
        "per iteration" if t.iterations_a and t.iterations_b else "per capture (iterations unknown)"
    )
    rows = "operators" if _cpu(run) else "kernels"
    noise = (
        f"{_signed(beyond)} beyond noise ({rows} whose time moved by more than {noise_pct:g}% and 1 us, or "
        "whose calls changed: the diff's threshold)"
    )
    why = f"{fmt_ns(a)} -> {fmt_ns(b)} {per} against {baseline.name}; {noise}"
    if beyond > limit >= slowdown:
        why += f": over the limit, though the total is not (other {rows} got faster)"
    elif slowdown > limit >= beyond:
        why += (
            f": the total is over the limit, most of it in {rows} that each moved within the noise"
        )
    return _result(name, title, status, slowdown, limit, "%", _signed(slowdown), limit_text, why)


def _signed(pct: float) -> str:
    return f"{pct:+.1f}%"


def _launches(store: Store, run: RunRecord, limit: int) -> CheckResult:
    what = "operator calls" if _cpu(run) else "kernel launches"
    name, title, limit_text = "launches_per_iteration", f"{what} per iteration", f"at most {limit}"
    iters, outside = iterations(store, run)
    if not iters:
        return _skip(
            name,
            title,
            limit,
            "launches",
            limit_text,
            "the capture has no measured iterations (profkit's <tag>.iterN ranges): launches per "
            "iteration are unknown",
        )
    calls = sum(
        g.calls
        for g in store.kernel_groups(run.id, in_iterations=outside)
        if g.kind == run.activity
    )
    per = round(calls / iters, 2)
    status: Status = "fail" if per > limit else "pass"
    inside = " (the capture's launches outside them, a warm-up, are left out)" if outside else ""
    return _result(
        name,
        title,
        status,
        per,
        limit,
        "launches",
        f"{per:g}",
        limit_text,
        f"{calls} {what} in {iters} measured iteration{'s' if iters != 1 else ''}{inside}",
    )


def _untried_gain(store: Store, run: RunRecord, limit: float) -> CheckResult:
    name, title = "untried_gain", "time a known fix would still save"
    limit_text = f"at most {limit:g}% of a step"
    tuning = latest_tuning(store, run)
    if tuning is None:
        return _skip(
            name,
            title,
            limit,
            "%",
            limit_text,
            "cannot be judged: the run has no tuning (profkit tune --run RUN tries the fixes its "
            "findings name and stores one)",
        )
    best = tuning.best
    made = f"tuning of {when(tuning)}"
    if best is None or best.saving_pct is None:
        return _result(
            name,
            title,
            "pass",
            0.0,
            limit,
            "%",
            "no gain",
            limit_text,
            best_fix_line(tuning),
        )
    over = gains_over(tuning, limit)
    if not over:
        return _result(
            name,
            title,
            "pass",
            best.saving_pct,
            limit,
            "%",
            _pct(best.saving_pct),
            limit_text,
            f"{best_fix_line(tuning)} ({made})",
        )
    top = over[0]
    steps = (
        f" ({ms_number(tuning.baseline.median_ms)} -> {ms_number(top.median_ms)} ms a step)"
        if tuning.baseline.median_ms is not None and top.median_ms is not None
        else ""
    )
    why = f"a known fix would still gain {top.saving_pct:.0f}%: {top.title}{steps}, {made}"
    if top.code:
        why += "; apply it: " + " | ".join(line.strip() for line in top.code)
    if len(over) > 1:
        why += "; also over the limit: " + ", ".join(
            f"{t.title} {t.saving_pct:.0f}%" for t in over[1:]
        )
    return _result(
        name,
        title,
        "fail",
        top.saving_pct,
        limit,
        "%",
        _pct(top.saving_pct or 0.0),
        limit_text,
        why,
    )
