"""``profkit tune``: try the fixes a run's findings and settings call for on the run's own
workload or program, time each against the run's own setting, check that the outputs still
agree, and rank them by the time they save.

The fixes are data (``[[fix]]`` in rules.toml): the findings each answers, the settings that
call for it (``when``), what it needs (``requires``: named checks, :data:`CONDITIONS`), how it is
applied (``how``), the lines of code that apply it and the precision its outputs are held to.

- **Which** (:func:`candidates`): every fix a finding of the run or its settings call for, whose
  requirements hold.
- **How each is timed** (:func:`run`): each trial in a process of its own, as ``profkit bench``
  times a combination (``benchmark.measure``): ``warmup`` steps, then ``iters`` steps timed one
  by one (CUDA events on a GPU for a workload, the step's wall time to a device sync for a
  program, ``perf_counter_ns`` on the CPU), median and spread. The baseline is the run's own
  setting, timed the same way first and again last (how far its two medians are apart counts
  as noise). With ``rounds`` N, the baseline and every measured fix are timed in N processes,
  a round of them after another, their steps pooled (what changes between processes is then
  in each spread). A workload's fix is a run option (``applies``: the same
  setting ``profkit bench`` measures with that option); a program's is applied from outside
  its code (``process.fixes``): TF32, fused optimizers and cuDNN's autotuning in its process,
  channels-last, bf16 autocast and torch.compile on its model (the first module with
  parameters it calls at the top).
- **Outputs**: a workload's model output of its last timed step, a program's model output on
  its first call (run once more the fixed way, in eval mode: ``process.fixes.ModelFixes``),
  each against the baseline's (seeded alike), held to the tolerance of
  the precision the trial computes in (``[tune.tolerance]``).
- **Verdicts** (:func:`judge`): a trial gains where it saves more than both spreads and the
  baseline's drift together and at least
  ``min_gain_pct``, with outputs that agree; fixes that each gain are tried together too. A fix
  that needs the user's code (``how = "code"``) gets an estimate from its finding's time, shown
  as one, never measured.

The tuning is stored with the run (``tune_trials``) in one transaction at the end.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from . import benchmark, workloads
from .analyze.matrix import MATRIX_FAMILIES as MATRIX
from .classify import RULES_PATH
from .errors import ProfkitError, UsageError, WorkloadError, require_int
from .ingest import now
from .launch import Progress, RunRequest
from .options import RunOptions
from .records import RunRecord, TuneTrial, Tuning
from .store import Store

TRIED_HOWS = ("switch", "option")


@dataclass(frozen=True)
class Fix:
    """One ``[[fix]]`` of rules.toml (see the module docstring)."""

    id: str
    title: str
    how: str  # switch, option or code
    code: tuple[str, ...]
    applies: Mapping[str, Any] = field(default_factory=dict)
    findings: tuple[str, ...] = ()
    when: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    program_code: tuple[str, ...] = ()
    cpu_code: tuple[str, ...] = ()
    tolerance: str | None = None  # a [tune.tolerance] key, "half", or None: the run's own
    group: str | None = None
    estimate_share: float | None = None

    def code_for(self, program: bool, device: str) -> list[str]:
        if device == "cpu" and self.cpu_code:
            return list(self.cpu_code)
        return list(self.program_code if program and self.program_code else self.code)


@lru_cache(maxsize=1)
def _rules() -> dict[str, Any]:
    import tomllib

    return tomllib.loads(RULES_PATH.read_text(encoding="utf-8"))


def fix_rules() -> dict[str, Fix]:
    """rules.toml's fixes by id, in its order."""
    out = {}
    for r in _rules().get("fix", []):
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in r.items()}
        out[r["id"]] = Fix(**values)
    return out


def settings() -> dict[str, Any]:
    """rules.toml's ``[tune]``: thresholds, defaults and tolerances."""
    return dict(_rules()["tune"])


# ------------------------------------------------------------------------------ what the run says
@dataclass(frozen=True)
class Signals:
    """What a run says of itself that the fixes' conditions read."""

    device: str
    program: bool
    half: bool  # meant to be half precision (profkit's tag, else most kernel time in fp16/bf16)
    eager: bool
    options: Mapping[str, bool]
    matrix_fp32_pct: float  # matrix work in fp32 or TF32: what autocast would run in half
    conv_pct: float
    optimizer: bool  # an optimizer steps in the run
    fused_optimizer: bool  # ... and it is fused already
    attention_half_pct: float  # fused attention kernels in fp16/bf16: what cuDNN's could run
    cudnn_attention: bool  # ... and cuDNN's attention kernels ran already
    findings: Mapping[str, Any]  # id -> Finding


def signals(store: Store, run: RunRecord) -> Signals:
    """Read a stored run's settings and kernels into the figures the conditions test."""
    from .analyze.findings import HALF, findings

    cfg = settings()
    groups = [g for g in store.kernel_groups(run.id) if g.kind == run.activity]
    total = sum(g.time_ns for g in groups) or 1
    matrix_fp32 = sum(
        g.time_ns for g in groups if g.family in MATRIX and g.precision in ("fp32", "tf32")
    )
    conv = sum(g.time_ns for g in groups if g.family == "conv")
    attention = [g for g in groups if g.family == "attention" and g.precision in HALF]
    program = run.info.program is not None
    if program or not run.precision or run.precision not in (*workloads.PRECISIONS,):
        # A script's own precision: where most of its matrix work is (autocast keeps the rest
        # of a step, elementwise and optimizer work, in fp32 on purpose), else of all its time.
        matrix = [g for g in groups if g.family in MATRIX]
        within = matrix if sum(g.time_ns for g in matrix) else groups
        half_time = sum(g.time_ns for g in within if g.precision in HALF)
        half = half_time >= 0.5 * max(1, sum(g.time_ns for g in within))
    else:
        half = run.precision in (*HALF, "amp")
    texts: list[str] = []
    for g in groups:
        texts += [g.name, g.op or ""]
    if run.activity == "kernel":
        texts += [f"{m.module} {m.phase}" for m in store.module_groups(run.id)]
    joined = "\n".join(texts)
    steps = ((run.info.program or {}).get("steps") or {}) if program else {}
    optimizer = bool(re.search(cfg["optimizer_work"], joined)) or steps.get("by") == "optimizer"
    fused = bool(re.search(cfg["fused_optimizer_work"], joined))
    cudnn_attention = re.compile(cfg["cudnn_attention_work"])
    harness = run.info.harness or {}
    compiled = bool(harness.get("compiled_kernels")) or any(g.family == "fused" for g in groups)
    return Signals(
        device=run.device or "cuda",
        program=program,
        half=half,
        eager=(not compiled) if program else run.mode == "eager",
        options=dict(run.info.options or {}),
        matrix_fp32_pct=100.0 * matrix_fp32 / total,
        conv_pct=100.0 * conv / total,
        optimizer=optimizer,
        fused_optimizer=fused,
        attention_half_pct=100.0 * sum(g.time_ns for g in attention) / total,
        cudnn_attention=any(
            cudnn_attention.search(g.name) or cudnn_attention.search(g.op or "") for g in attention
        ),
        findings={f.id: f for f in findings(store, run)},
    )


# each a condition not_<switch>
RUN_SWITCHES = ("tf32", "channels_last", "cudnn_benchmark", "cudnn_attention", "sdpa_attention")
# the switches a program's run takes
PROGRAM_SWITCHES = ("tf32", "fused_optimizer", "cudnn_attention", "sdpa_attention")


def _switch_off(switch: str) -> Callable[[Signals, Mapping[str, Any]], bool]:
    return lambda s, cfg: not s.options.get(switch, False)


# The named conditions [[fix]]'s `when` and `requires` use: (signals, [tune] settings) -> bool.
_CHECKS: dict[str, Callable[[Signals, Mapping[str, Any]], bool]] = {
    "cuda": lambda s, cfg: s.device == "cuda",
    "cpu": lambda s, cfg: s.device == "cpu",
    "not_half": lambda s, cfg: not s.half,
    "matrix_fp32": lambda s, cfg: s.matrix_fp32_pct >= cfg["min_matrix_fp32_pct"],
    "conv": lambda s, cfg: s.conv_pct >= cfg["min_conv_pct"],
    "eager": lambda s, cfg: s.eager,
    "compiler": lambda s, cfg: benchmark.compiler(s.device) is not None,
    "unfused_optimizer": lambda s, cfg: s.optimizer and not s.fused_optimizer,
    "half_attention": lambda s, cfg: (
        s.attention_half_pct >= cfg["min_attention_pct"] and not s.cudnn_attention
    ),
    **{f"not_{switch}": _switch_off(switch) for switch in RUN_SWITCHES},
}
CONDITIONS = tuple(_CHECKS)


def _cond(s: Signals, name: str) -> bool:
    if name not in _CHECKS:
        raise ValueError(f"rules.toml names a condition {name!r} that tuning.py does not check")
    return _CHECKS[name](s, settings())


@dataclass(frozen=True)
class Candidate:
    """A fix the run calls for, and the findings of the run it answers."""

    fix: Fix
    findings: list[str]


def candidates(s: Signals) -> list[Candidate]:
    """The fixes the run's findings or settings call for and whose requirements hold, in
    rules.toml's order."""
    out = []
    for fix in fix_rules().values():
        answered = [f for f in fix.findings if f in s.findings]
        called = bool(answered) or any(_cond(s, c) for c in fix.when)
        if called and all(_cond(s, c) for c in fix.requires):
            out.append(Candidate(fix, answered))
    return out


# ------------------------------------------------------------------------------ the plan
@dataclass(frozen=True)
class TunePlan:
    """A checked tuning: the run, what it re-runs (a workload's file or a program), the baseline's
    options, and the fixes to try."""

    run: RunRecord
    target: str
    workload: str
    path: Path
    base: RunRequest
    candidates: list[Candidate]
    signals: Signals
    rounds: int = 1  # processes a setting is timed in, round by round

    @property
    def program(self) -> bool:
        return self.base.program is not None


def plan(
    store: Store,
    run: RunRecord,
    *,
    workload: str | None = None,
    iters: int | None = None,
    warmup: int | None = None,
    timeout_s: float | None = None,
    rounds: int = 1,
) -> TunePlan:
    """Check a tuning of a stored run before anything runs: the run (complete, profiled by
    profkit or naming a built-in), what re-runs it, the machine. ``workload``: the file a run
    of a workload file came from (its runs record its name only). ``rounds``: how many
    processes the baseline and each fix are timed in, one round of them after another (1 to
    ``benchmark.MAX_ROUNDS``), so that what changes between processes counts in every spread."""
    from . import launch
    from .program import resolve

    if run.status != "ok":
        raise UsageError(f"run {run.name} is {run.status}: only a complete run can be tuned")
    if run.activity not in ("kernel", "cpu_op") or not run.kernel_count:
        raise UsageError(f"run {run.name} has no kernels or operators to find fixes in")
    device = run.device or "cuda"
    defaults = settings()["defaults"][device]
    iters = defaults[0] if iters is None else iters
    warmup = defaults[1] if warmup is None else warmup
    require_int("iters", iters, 2)
    require_int("warmup", warmup, 1)
    benchmark.check_rounds(rounds)
    program_info = run.info.program
    if program_info is not None:
        argv = program_info.get("argv") or []
        cwd = program_info.get("cwd")
        if cwd and Path(cwd).resolve() != Path.cwd().resolve():
            raise UsageError(
                f"run {run.name}'s program ran in {cwd}: tune it from there (its paths are that folder's)"
            )
        program = resolve(list(argv), Path.cwd())
        if (run.info.world_size or 1) > 1:
            raise UsageError(
                f"run {run.name} ran {run.info.world_size} ranks: tune times one process's steps",
                "Tune the script run as one process (profkit run -- python train.py ...).",
            )
        # The way its steps were asked for (--step), else the way they were found; and the
        # process switches it ran with (--tf32, --fused-optimizer): its own setting.
        by = ((program_info.get("steps") or {}).get("by")) or "auto"
        step = program_info.get("step") or (
            by if by in ("optimizer", "forward", "backward", "marker") else "auto"
        )
        own: dict[str, Any] = {
            k: True for k, on in (run.info.options or {}).items() if on and k in PROGRAM_SWITCHES
        }
        options = RunOptions(
            device=device, iters=iters, warmup=warmup, step=step, timeout_s=timeout_s, **own
        )
        base = RunRequest("", options, program=program)
        name, path = program.name, Path(program.script or Path.cwd())
        target = program.shown()
    else:
        if run.source != "run" or not run.workload or run.precision not in workloads.PRECISIONS:
            raise UsageError(
                f"run {run.name} was imported, not run by profkit: tune re-runs what a run ran",
                "Profile it with profkit run (or give the workload: profkit tune WORKLOAD).",
            )
        ref = workload or run.workload
        try:
            name, path = workloads.resolve(ref)
        except ProfkitError:
            raise UsageError(
                f"run {run.name} is of workload {run.workload}, which is no built-in: give its file",
                f"profkit tune path/to/{run.workload}.py --run {run.name}",
            ) from None
        if name != run.workload:
            raise UsageError(f"run {run.name} is of workload {run.workload}, not {name}")
        switches: dict[str, Any] = {k: True for k, on in (run.info.options or {}).items() if on}
        options = RunOptions(
            precision=run.precision,
            mode=run.mode or "eager",
            batch_size=run.batch_size or 8,
            device=device,
            compile_mode=run.info.compile_mode or "default",
            iters=iters,
            warmup=warmup,
            timeout_s=timeout_s,
            **switches,
        )
        base = RunRequest(str(path) if workloads.looks_like_path(ref) else name, options)
        target = name
    launch.check(base)
    launch.require_torch("tune runs the workload under PyTorch")
    if device == "cuda" and not launch.DRIVER_DIR.exists():
        from . import gpu

        if gpu.query() is None:
            raise UsageError(
                f"run {run.name} ran on a GPU, and no NVIDIA GPU or driver is found here"
            )
    found = signals(store, run)
    called = candidates(found)
    if program_info is not None and any(
        c.fix.applies.get("compile_mode") == "reduce-overhead" for c in called
    ):
        # CUDA graphs record in the program's first calls and replay from the third: those are
        # warm-up steps, in every trial alike (each compares its outputs at the same call).
        base = replace(base, options=replace(base.options, warmup=max(warmup, 3)))
    return TunePlan(run, target, name, path, base, called, found, rounds)


# ------------------------------------------------------------------------------ the trials
def _trial_request(p: TunePlan, fixes: Sequence[Fix]) -> RunRequest | str:
    """The request a trial of ``fixes`` runs, or why it cannot be tried here."""
    o = p.base.options
    if p.program:
        changed: dict[str, Any] = {
            k: v for f in fixes if f.how == "switch" for k, v in f.applies.items()
        }
        return replace(p.base, options=replace(o, **changed))
    changed = {k: v for f in fixes for k, v in f.applies.items()}
    if changed.get("mode") == "compile" and changed.get("compile_mode") == "reduce-overhead":
        changed["warmup"] = max(o.warmup, 3)
    req = replace(p.base, options=replace(o, **changed))
    from . import launch

    try:
        launch.check(req)  # the options, and what the workload's file declares
    except ProfkitError as exc:
        return exc.one_line()
    return req


def _tolerance(p: TunePlan, fixes: Sequence[Fix]) -> float:
    table = settings()["tolerance"]
    device = p.base.options.device
    half = "fp16" if device == "cuda" and not p.program else "bf16"
    names = ["fp32"]
    if p.signals.half:
        own = p.run.precision if p.run.precision in ("fp16", "bf16") else half
        names.append(half if p.program else own)
    if device == "cuda" and (p.signals.conv_pct > 0 or p.signals.options.get("tf32")):
        # cuDNN runs fp32 convolutions in TF32 by default: another algorithm or layout of them
        # differs as TF32 does.
        names.append("tf32")
    for f in fixes:
        if f.tolerance:
            names.append(half if f.tolerance == "half" else f.tolerance)
    return float(max(table.get(n, table["fp32"]) for n in names))


def _measure(
    p: TunePlan,
    req: RunRequest,
    fixes: Sequence[Fix],
    folder: Path,
    progress: Progress,
    save_output: bool = True,
) -> tuple[Any, Any, Path | None]:
    """One setting timed in a process of its own (``benchmark.measure``); ``save_output``: its
    output kept for the comparison (a later timing's is not compared, and not kept)."""
    bench_plan = benchmark.BenchPlan(
        p.workload, p.path, [req.options.precision], [req.options.mode], [req]
    )
    model_fixes = [f.id for f in fixes if f.how == "option"] if p.program else None
    # A program's own output, and bench's note of a failed combination ("fp32 eager failed"):
    # tune says itself what failed, as the trial's row or the baseline's error.
    quiet = replace(progress, on_output=None, on_note=None)
    return benchmark.measure(
        bench_plan, req, folder, quiet, fixes=model_fixes, save_output=save_output
    )


def run(store: Store, tune_plan: TunePlan, progress: Progress | None = None) -> Tuning:
    """Time the baseline and every candidate (then the gaining ones together), compare outputs,
    rank, store the tuning with the run and return it."""
    progress = progress or Progress()
    p = tune_plan
    o = p.base.options
    cfg = settings()
    todo = [c for c in p.candidates if c.fix.how in TRIED_HOWS]
    kept = _trials_folder(store, p.run)
    with (
        contextlib.nullcontext(str(kept))
        if kept is not None
        else tempfile.TemporaryDirectory(prefix="profkit-tune-")
    ) as tmp:
        total = len(todo) + 1
        rounds = p.rounds
        of = f", round 1 of {rounds}" if rounds > 1 else ""
        progress.stage(
            f"{p.target}: the baseline (1 of {total}{of}), {o.warmup} warm-up and {o.iters} timed steps"
        )
        row, info, base_out = _measure(p, p.base, [], Path(tmp) / "baseline", progress)
        if row.status != "ok":
            raise WorkloadError(
                f"the baseline of {p.target} failed, so nothing can be compared with it: {row.error}"
            )
        first = TuneTrial(
            [], "baseline (the run's setting)", "baseline", note=_output_note(info, base_out, p)
        )
        # Each timing of the baseline (its steps), and of every measured trial (by its place in
        # trials): the figures pool them, and the baseline's medians' range is its drift.
        base_runs: list[list[int]] = [row.iter_ns]
        runs: dict[int, list[list[int]]] = {}
        again_for: dict[int, tuple[RunRequest, list[Fix]]] = {}
        trials: list[TuneTrial] = []

        base_failed: list[str] = []  # a later round's baseline that failed

        def baseline_so_far() -> tuple[TuneTrial, float]:
            pooled, drift = _pooled(first, base_runs, rounds == 1)
            if base_failed:
                pooled = replace(
                    pooled, note="; ".join([*filter(None, [pooled.note]), *base_failed])
                )
            return pooled, drift

        def attempt(fixes: list[Fix], answered: list[str], i: int, place: str) -> TuneTrial:
            title = " + ".join(f.title for f in fixes)
            code = [line for f in fixes for line in f.code_for(p.program, o.device)]
            req = _trial_request(p, fixes)
            # Not tried (it cannot be applied here): the share of the run's time the findings
            # it answers cover, as what is at stake.
            shares = [
                p.signals.findings[f].share_pct
                for f in answered
                if p.signals.findings[f].share_pct is not None
            ]
            base_trial = TuneTrial(
                [f.id for f in fixes],
                title,
                "not tried",
                answered,
                code,
                estimate_pct=max(shares) if shares else None,
            )
            if isinstance(req, str):
                return replace(base_trial, note=req)
            progress.stage(f"{p.target}: {title} ({place}{of})")
            folder = Path(tmp) / f"trial{i}"
            r, tinfo, out = _measure(p, req, fixes, folder, progress)
            if r.status != "ok":
                return replace(base_trial, verdict="failed", note=r.error, estimate_pct=None)
            missing = _not_applied(p, fixes, tinfo)
            if missing:
                return replace(base_trial, note=missing)
            runs[len(trials)] = [r.iter_ns]
            again_for[len(trials)] = (req, fixes)
            trial = timed(replace(base_trial, tolerance=_tolerance(p, fixes)), r.iter_ns)
            return judge(
                _agree(trial, out, base_out, p), baseline_so_far()[0], 0.0, cfg["min_gain_pct"]
            )

        timings = itertools.count(2)  # the baseline's timings after its first: their folders

        def more_rounds(which: list[int]) -> None:
            """Rounds 2 and on: the baseline, then each of ``which`` (trials measured in round
            1), each in a process of its own; a trial that fails in one is failed. A trial whose
            outputs disagreed is not timed again: it can never gain."""
            for k in range(2, rounds + 1):
                progress.stage(f"{p.target}: the baseline (round {k} of {rounds})")
                folder = Path(tmp) / f"baseline-{next(timings)}"
                b, _, _ = _measure(p, p.base, [], folder, progress, save_output=False)
                if b.status == "ok":
                    base_runs.append(b.iter_ns)
                else:
                    base_failed.append(f"its timing in round {k} failed: {b.error}")
                for t in which:
                    if trials[t].verdict in ("failed", "outputs disagree"):
                        continue
                    req, fixes = again_for[t]
                    progress.stage(f"{p.target}: {trials[t].title} (round {k} of {rounds})")
                    r, _, _ = _measure(
                        p, req, fixes, Path(tmp) / f"trial{t + 2}-{k}", progress, save_output=False
                    )
                    if r.status != "ok":  # failed, as in round 1: no figure is a measurement now
                        was = trials[t]
                        trials[t] = TuneTrial(
                            was.fixes,
                            was.title,
                            "failed",
                            was.findings,
                            was.code,
                            note=f"round {k}: {r.error}",
                        )
                        continue
                    runs[t].append(r.iter_ns)
            for t in which:
                if trials[t].median_ms is not None and len(runs[t]) > 1:
                    trials[t] = _pooled(trials[t], runs[t])[0]

        def judged() -> None:  # every trial, against the baseline's timings so far and their drift
            base, drift = baseline_so_far()
            for t, trial in enumerate(trials):
                trials[t] = judge(trial, base, drift, cfg["min_gain_pct"])

        try:
            for i, c in enumerate(todo, start=2):
                trials.append(attempt([c.fix], c.findings, i, f"{i} of {total}"))
            singles = [t for t in range(len(trials)) if t in runs]
            more_rounds(singles)
            judged()
            together = _together(p, todo, trials)
            if together:
                fixes = [c.fix for c in together]
                answered = sorted({f for c in together for f in c.findings})
                # one trial more than counted: which fixes gain is known only now
                trials.append(
                    attempt(fixes, answered, total + 1, "the fixes that gained, together")
                )
                if len(trials) - 1 in runs:
                    more_rounds([len(trials) - 1])
            baseline = baseline_so_far()[0]
            if trials:
                # The baseline again, last: what changed between processes over the trials (clocks,
                # other work on the machine) is counted in every trial's noise.
                progress.stage(f"{p.target}: the baseline again, after the trials")
                again, _, _ = _measure(
                    p, p.base, [], Path(tmp) / "baseline-again", progress, save_output=False
                )
                if again.status == "ok":
                    base_runs.append(again.iter_ns)
                baseline = baseline_so_far()[0]
                judged()
                if again.status != "ok":
                    text = (
                        f"its second timing, after the trials, failed ({again.error}): no drift known"
                        if len(base_runs) == 1
                        else f"its last timing, after the trials, failed ({again.error})"
                    )
                    baseline = replace(
                        baseline, note="; ".join(n for n in (baseline.note, text) if n)
                    )
        except KeyboardInterrupt:
            # Ctrl-C, or Terminated (SIGTERM, SIGHUP, SIGQUIT): nothing is stored, so the
            # trials timed so far are said before the stop goes on.
            judged()
            _say_measured(progress, baseline_so_far()[0], trials)
            raise
    trials += _estimates(p, baseline)
    tuning = Tuning(
        run=p.run.name,
        run_id=p.run.id,
        target=p.target,
        device=o.device,
        iters=o.iters,
        warmup=o.warmup,
        created_at=now(),
        baseline=baseline,
        trials=rank(trials),
    )
    progress.stage("storing")
    return store.add_tuning(tuning)


def _say_measured(progress: Progress, baseline: TuneTrial, trials: list[TuneTrial]) -> None:
    """A tuning stopped before its end stores nothing: what it had measured, said as notes so
    that the user keeps it (each trial judged against the baseline's timings so far)."""
    done = [t for t in trials if t.median_ms is not None]
    if not done or baseline.median_ms is None:
        progress.note("tuning stopped before any fix was timed; nothing is stored")
        return
    progress.note(
        f"tuning stopped: nothing is stored; measured so far (baseline {baseline.median_ms:.3g} ms a step):"
    )
    for t in rank(done):
        saves = f", saves {t.saving_pct:.1f}%" if t.saving_pct is not None else ""
        progress.note(f"  {t.title}: {t.median_ms:.3g} ms{saves}, {t.verdict}")


def _trials_folder(store: Store, run: RunRecord) -> Path | None:
    """Where the trials' processes keep their files (job, log, output) for the user to read:
    ``tune-N`` in the run's own folder, or None (a temporary folder) where it has none."""
    try:
        folder = store.run_folder(run)
        if not folder.is_dir():
            return None
        n = 1 + sum(1 for f in folder.iterdir() if f.name.startswith("tune-"))
        while (folder / f"tune-{n}").exists():
            n += 1
        (folder / f"tune-{n}").mkdir()
        return folder / f"tune-{n}"
    except (OSError, ProfkitError):
        return None


def judge(trial: TuneTrial, baseline: TuneTrial, drift_ms: float, min_gain_pct: float) -> TuneTrial:
    """A measured trial's saving against the baseline, and its verdict: outputs that disagree
    beyond its tolerance; a gain where it saves more than both spreads and the baseline's drift
    between its two measurements together, and at least ``min_gain_pct``; else no gain. Trials
    that were not measured keep theirs."""
    if trial.median_ms is None or baseline.median_ms is None:
        return trial
    saving = round(baseline.median_ms - trial.median_ms, 6)
    pct = round(100.0 * saving / baseline.median_ms, 2) if baseline.median_ms else 0.0
    noise = (baseline.spread_ms or 0.0) + (trial.spread_ms or 0.0) + drift_ms
    if trial.agreement == "disagree":
        verdict = "outputs disagree"
    elif saving > noise and pct >= min_gain_pct:
        verdict = "gain"
    else:
        verdict = "no gain"
    return replace(trial, saving_ms=saving, saving_pct=pct, verdict=verdict)


def _pooled(
    first: TuneTrial, each: Sequence[Sequence[int]], first_and_last: bool = False
) -> tuple[TuneTrial, float]:
    """A setting timed in several processes: its figures from all their steps together, a note
    of each process's median, and its drift (how far apart those medians were; 0 for one).
    ``first_and_last``: the baseline's two timings, before and after the trials."""
    medians = [benchmark.stats(steps)["median_ms"] for steps in each]
    merged = timed(first, [t for steps in each for t in steps])
    if len(each) == 1:
        return merged, 0.0
    shown = (" and " if len(medians) == 2 else ", ").join(f"{m:.4g}" for m in medians)
    if first.verdict == "baseline":
        when = "timed first and last" if first_and_last else f"timed {len(each)} times"
        note = f"{when}: {shown} ms a step (the drift counts as noise)"
    else:
        note = f"timed in {len(each)} processes: {shown} ms a step"
    return replace(merged, note="; ".join(n for n in (first.note, note) if n)), round(
        max(medians) - min(medians), 6
    )


def timed(trial: TuneTrial, iter_ns: Sequence[int]) -> TuneTrial:
    """``trial`` with the figures of its timed steps (``benchmark.stats``)."""
    s = benchmark.stats(iter_ns)
    return replace(
        trial,
        median_ms=s["median_ms"],
        spread_ms=s["spread_ms"],
        p25_ms=s["p25_ms"],
        p75_ms=s["p75_ms"],
        iter_ns=list(iter_ns),
    )


def _together(p: TunePlan, todo: list[Candidate], trials: list[TuneTrial]) -> list[Candidate]:
    """The fixes that each gained, one of each group (the one that gained most): tried together
    where there are two or more."""
    gained = {t.fixes[0]: t for t in trials if t.verdict == "gain" and len(t.fixes) == 1}
    chosen: dict[str, Candidate] = {}
    for c in todo:
        t = gained.get(c.fix.id)
        if t is None:
            continue
        key = c.fix.group or c.fix.id
        best = chosen.get(key)
        if best is None or (t.saving_ms or 0) > (gained[best.fix.id].saving_ms or 0):
            chosen[key] = c
    return list(chosen.values()) if len(chosen) > 1 else []


def _not_applied(p: TunePlan, fixes: Sequence[Fix], info: Mapping[str, Any]) -> str | None:
    """Why a trial's fix did nothing (a program with no model to fix, no optimizer made), if so."""
    if p.program and any(f.how == "option" for f in fixes) and not info.get("fixed_model"):
        return "the program called no module with parameters to apply it to"
    for f in fixes:
        if f.id not in _MADE:
            continue
        key, nothing, otherwise = _MADE[f.id]
        made = info.get(key) or []  # "Name", or "Name (not ...: why)"
        if not any("(" not in m for m in made):
            return nothing + (f": {', '.join(made)}" if made else otherwise)
    return None


# The switches that act on what the process makes: the info key listing it, and what a trial
# says where none of it was acted on (then with the list, or with this where the list is empty).
_MADE = {
    "fused_optimizer": (
        "fused_optimizers",
        "no optimizer it can fuse was made",
        " (Adam, AdamW, SGD, Adagrad)",
    ),
    "sdpa_attention": ("sdpa_models", "no Hugging Face model with eager attention was made", ""),
}


def _output_note(info: Mapping[str, Any], out: Path | None, p: TunePlan) -> str | None:
    if out is not None:
        return None
    if not info.get("model"):
        return (
            "no model output to compare: the program called no module with parameters"
            if p.program
            else "no model output to compare: the workload builds its own step"
        )
    return "no model output to compare: it held no tensor"


def _agree(trial: TuneTrial, out: Path | None, base: Path | None, p: TunePlan) -> TuneTrial:
    if out is None or base is None:
        return replace(trial, agreement="n/a: no model output to compare")
    try:
        output, reference = benchmark.load(out), benchmark.load(base)
    except Exception as exc:  # a file the trial's process left unreadable
        return replace(trial, agreement=f"n/a: its output could not be read ({type(exc).__name__})")
    import torch

    if not bool(torch.isfinite(reference).all()):
        return replace(trial, agreement="n/a: the baseline's output holds NaN or infinity")
    if tuple(output.shape) != tuple(reference.shape) or not bool(torch.isfinite(output).all()):
        # The fix changed what the model computes: never a gain, whatever it saves.
        what = (
            f"its output's shape {tuple(output.shape)} is not the baseline's {tuple(reference.shape)}"
            if tuple(output.shape) != tuple(reference.shape)
            else "its output holds NaN or infinity where the baseline's does not"
        )
        return replace(
            trial, agreement="disagree", note="; ".join(n for n in (trial.note, what) if n)
        )
    diff, top1, note = benchmark.agreement(output, reference)
    if diff is None:
        return replace(trial, agreement=(note or "n/a").replace("fp32 eager's", "the baseline's"))
    scale = float(reference.abs().max())
    rel = diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)
    ok = rel <= (trial.tolerance or 0.0)
    return replace(
        trial,
        max_abs_diff=diff,
        rel_diff=float(f"{rel:.3g}") if math.isfinite(rel) else None,
        top1_agreement=top1,
        agreement="agree" if ok else "disagree",
    )


def _estimates(p: TunePlan, baseline: TuneTrial) -> list[TuneTrial]:
    """The fixes that need the user's code, with what the findings say they could save a step:
    their time per profiled step (a timeline finding's shrunk by how much the profiler stretched
    the step: ``findings.stretch``) times the fix's ``estimate_share``, at most the step."""
    from .analyze.findings import TIMELINE, stretch

    out = []
    run = p.run
    iters = max(1, run.iters or 1) * max(1, run.info.world_size or 1)
    stretched = stretch(run)
    ratio = stretched.ratio if stretched is not None and stretched.ratio > 1 else 1.0
    for fix in fix_rules().values():
        answered = [p.signals.findings[f] for f in fix.findings if f in p.signals.findings]
        if fix.how != "code" or not answered:
            continue
        time_ns = sum(f.time_ns / (ratio if f.id in TIMELINE else 1.0) for f in answered)
        per_step_ms = time_ns / iters / 1e6 * (fix.estimate_share or 1.0)
        est = round(min(per_step_ms, baseline.median_ms or per_step_ms), 6)
        pct = round(100.0 * est / baseline.median_ms, 2) if baseline.median_ms else None
        out.append(
            TuneTrial(
                [fix.id],
                fix.title,
                "estimate",
                [f.id for f in answered],
                fix.code_for(p.program, p.base.options.device),
                estimate_ms=est,
                estimate_pct=pct,
                note="needs your code: an estimate from the finding's time, not a measurement",
            )
        )
    return out


_ORDER = {
    "gain": 0,
    "estimate": 1,
    "no gain": 2,
    "outputs disagree": 3,
    "failed": 4,
    "not tried": 5,
}


def rank(trials: Sequence[TuneTrial]) -> list[TuneTrial]:
    """Measured gains by time saved, then estimates by their size, then the rest."""
    return sorted(
        trials,
        key=lambda t: (
            _ORDER.get(t.verdict, 9),
            -((t.saving_ms if t.verdict == "gain" else t.estimate_ms or t.saving_ms) or 0.0),
        ),
    )
