"""``profkit bench``: time a workload in each (precision, mode) combination asked for and make
the table people make by hand, modes x precisions, with how each combination's output agrees
with fp32 eager's.

Each combination runs in its own harness process (``profkit.harness`` with ``"profiler":
"bench"``, started through ``tools.runner`` like every profiled run): torch seeded before the
build, so every combination gets the same weights and inputs; ``warmup`` iterations (where
torch.compile compiles), then ``iters`` iterations timed one by one (CUDA events on a GPU,
``time.perf_counter_ns`` on the CPU). Each row gets the median and spread of those times
(:data:`profkit.records.SPREAD`), items per second, seconds per item and peak GPU memory.
For a workload that builds ``(model, inputs)`` the output of the last iteration is compared
with fp32 eager's (run as a reference where it was not asked for): the largest absolute
difference, and the share of positions whose argmax over the last dimension agrees (top-1).
A workload that builds its own step (a training step) has no output to compare.

With ``rounds`` N, every combination is timed in N processes, a round of them after another
(as ``profkit tune --rounds`` times its settings): its figures are those of all its processes'
steps together, so that what changes between processes (clocks, compiled code, the machine's
other work) is in its spread; each process's median is kept in the record's ``info``. A
combination that fails in any round is failed. Outputs are compared on the first round's.

Everything is checked before anything runs; a combination that fails at run time (a compiler
error) is recorded as failed with its one-line error while the others go on. The benchmark is
stored in one transaction at the end, so an interrupted one leaves nothing.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypedDict

from . import gpu, launch, workloads
from .errors import (
    ProfkitError,
    UsageError,
    WorkloadError,
    require_choice,
    require_int,
    require_values,
)
from .ingest import now
from .launch import Progress, RunRequest
from .options import BENCH, BENCH_DEFAULTS, RunOptions, require_command_options
from .records import BenchRecord, BenchRow, HarnessInfo
from .store import Store

REFERENCE = ("fp32", "eager")  # (precision, mode) every output is compared with
# torch.compile needs a compiler where it runs: Inductor builds C++ for the CPU; on a GPU,
# Triton builds its launcher in C. (environment variable, then the commands tried in order)
COMPILERS = {"cpu": ("CXX", ("c++", "g++", "clang++")), "cuda": ("CC", ("cc", "gcc", "clang"))}


@dataclass(frozen=True)
class BenchPlan:
    """A checked benchmark: the workload found, and one request per combination asked for, in
    the order they run and are shown (modes outer, precisions inner)."""

    workload: str
    path: Path
    precisions: list[str]
    modes: list[str]
    requests: list[RunRequest]
    rounds: int = 1  # processes each combination is timed in, round by round

    @property
    def spec(self) -> workloads.Spec:
        return self.requests[0].spec

    @property
    def iters(self) -> int:
        return self.requests[0].options.iters

    @property
    def warmup(self) -> int:
        return self.requests[0].options.warmup


def compiler(device: str) -> str | None:
    """The compiler torch.compile would use on ``device``, or None where there is none."""
    variable, names = COMPILERS[device]
    given = os.environ.get(variable)
    for name in ([given] if given else []) + list(names):
        found = shutil.which(name)
        if found:
            return found
    return None


DEFAULTS = BENCH_DEFAULTS  # (batch size, timed iterations, warm-up) where not given, per device
MAX_ROUNDS = 20  # a benchmark's or a tuning's rounds: each round a process per setting


def check_rounds(rounds: object) -> None:
    """``rounds`` of a benchmark or a tuning: a whole number from 1 to ``MAX_ROUNDS``, or a
    UsageError."""
    if isinstance(rounds, int) and not isinstance(rounds, bool) and rounds > MAX_ROUNDS:
        raise UsageError(f"`rounds` must be at most {MAX_ROUNDS}, not {rounds}")
    require_int("rounds", rounds, 1)


def plan(
    workload: str,
    *,
    precisions: str | Sequence[str] = ("fp32",),
    modes: str | Sequence[str] = ("eager",),
    rounds: int = 1,
    **options: Any,
) -> BenchPlan:
    """Check a benchmark's options, the workload and what it supports, and this machine (a GPU
    for ``device`` cuda, a compiler for torch.compile, PyTorch), before anything runs or is
    written. Raises a ProfkitError that names the first problem. ``options`` are the run
    options ``profkit bench`` takes (``profkit.options``: batch_size, iters, warmup, device,
    timeout_s, keep_bn_fp32, channels_last, cudnn_benchmark); ``batch_size``, ``iters`` and
    ``warmup`` left out (or None) take ``DEFAULTS`` for the device; BatchNorm is kept in fp32
    in the fp16 and bf16 combinations only. ``rounds``: the processes each combination is timed
    in, one round of them after another (1 to ``MAX_ROUNDS``)."""
    require_command_options(BENCH, options)
    check_rounds(rounds)
    device = options.get("device", "cuda")
    require_choice("device", device, workloads.DEVICES)
    for key, default in zip(("batch_size", "iters", "warmup"), DEFAULTS[device]):
        if options.get(key) is None:
            options[key] = default
    base = RunOptions.make(**options)
    precision_list = require_values("precisions", precisions, workloads.PRECISIONS)
    mode_list = require_values("modes", modes, workloads.MODES)
    base.check_values()
    base.check_grid(precision_list, mode_list)
    requests = [RunRequest(workload, base.cell(p, m)) for m in mode_list for p in precision_list]
    name, path = workloads.resolve(workload)
    supported_precisions, supported_modes = workloads.supports(path)
    for what, asked, supported in (
        ("precision", precision_list, supported_precisions),
        ("mode", mode_list, supported_modes),
    ):
        for value in asked:
            if value not in supported:
                raise WorkloadError(
                    f"workload {name} does not support {what} {value!r}",
                    f"It supports {', '.join(supported)}.",
                )
    if "compile" in mode_list and base.warmup < 1:
        raise UsageError(
            "`modes` compile compiles in the warm-up, so that no timed iteration holds the compiler: "
            "`warmup` must be at least 1"
        )
    for req in requests:  # every other rule a profiled run has
        launch.check(req)
    if "compile" in mode_list and compiler(device) is None:
        variable, names = COMPILERS[device]
        what = (
            "a C++ compiler for Inductor's CPU code"
            if device == "cpu"
            else "a C compiler for Triton"
        )
        raise UsageError(
            f"`modes` compile needs {what}, and none was found (${variable}, {', '.join(names)})",
            "Install one, or leave compile out of `modes`.",
        )
    launch.require_torch("a benchmark runs the workload under PyTorch")
    if device == "cuda" and not launch.DRIVER_DIR.exists() and gpu.query() is None:
        raise UsageError(
            "no NVIDIA GPU or driver found here", "Benchmark on the CPU with `device` cpu."
        )
    return BenchPlan(name, path, precision_list, mode_list, requests, rounds)


def run(store: Store, bench_plan: BenchPlan, progress: Progress | None = None) -> BenchRecord:
    """Run every combination of a checked benchmark (and the fp32 eager reference where the
    outputs need one), compare outputs, store the benchmark in one transaction and return it."""
    progress = progress or Progress()
    p = bench_plan
    measured: list[tuple[BenchRow, HarnessInfo, Path | None]] = []
    rounds: list[list[tuple[BenchRow, HarnessInfo, Path | None]]] = [[] for _ in p.requests]
    with tempfile.TemporaryDirectory(prefix="profkit-bench-") as tmp:
        for r in range(p.rounds):
            for i, req in enumerate(p.requests):
                if any(row.status != "ok" for row, _, _ in rounds[i]):
                    continue  # failed in an earlier round: failed whatever the next would say
                which = f", round {r + 1} of {p.rounds}" if p.rounds > 1 else ""
                progress.stage(
                    f"{p.workload} in {req.spec.precision}, {req.spec.mode} ({i + 1} of "
                    f"{len(p.requests)}{which}): building, {p.warmup} warm-up and {p.iters} timed iterations"
                )
                rounds[i].append(
                    measure(p, req, Path(tmp) / f"{i}-{r}", progress, save_output=r == 0)
                )
        measured = [_pooled(req, each, p.rounds) for req, each in zip(p.requests, rounds)]
        medians = {
            f"{req.spec.precision} {req.spec.mode}": each
            for req, each, (row, _, _) in zip(p.requests, rounds, measured)
            if row.status == "ok"
        }
        asked = {(r.precision, r.mode): (r, out) for r, _, out in measured}
        models = [info.get("model") for r, info, _ in measured if r.status == "ok"]
        reference: BenchRow | None = None
        ref_output: Path | None = None
        why_none = None
        if any(models):
            if REFERENCE in asked:
                reference, ref_output = asked[REFERENCE]
            elif all(v in s for v, s in zip(REFERENCE, workloads.supports(p.path))):
                progress.note(
                    f"running {p.workload} in fp32 eager too: the reference the outputs are compared with"
                )
                req = replace(
                    p.requests[0],
                    options=replace(
                        p.requests[0].options,
                        precision="fp32",
                        mode="eager",
                        compile_mode="default",
                        keep_bn_fp32=False,
                    ),
                )
                ref_rounds: list[tuple[BenchRow, HarnessInfo, Path | None]] = []
                for r in range(p.rounds):  # every row's figures are of as many processes
                    which = f", round {r + 1} of {p.rounds}" if p.rounds > 1 else ""
                    progress.stage(f"{p.workload} in fp32, eager (the reference{which})")
                    ref_rounds.append(
                        measure(p, req, Path(tmp) / f"reference-{r}", progress, save_output=r == 0)
                    )
                    if ref_rounds[-1][0].status != "ok":
                        break
                row, ref_info, ref_output = _pooled(req, ref_rounds, p.rounds)
                reference = replace(row, reference_only=True)
                if row.status == "ok":
                    medians["fp32 eager (reference)"] = ref_rounds
                measured.append((reference, ref_info, ref_output))
            else:
                why_none = "n/a: the workload does not support fp32 eager, the reference"
            if reference is not None and reference.status != "ok":
                why_none = "n/a: the fp32 eager reference failed"
        rows = [_agreement(row, info, out, ref_output, why_none) for row, info, out in measured]
    info = next((i for r, i, _ in measured if r.status == "ok"), HarnessInfo())
    record = BenchRecord(
        id=None,
        workload=p.workload,
        batch_size=p.spec.batch_size,
        device=p.spec.device,
        iters=p.iters,
        warmup=p.warmup,
        precisions=p.precisions,
        modes=p.modes,
        created_at=now(),
        rows=rows,
        gpu_name=info.get("gpu_name"),
        torch_version=info.get("torch_version"),
        info={
            "workload_path": str(p.path),
            "python": info.get("python") or sys.version.split()[0],
            "cuda_version": info.get("cuda_version"),
            **(
                {"options": options}
                if (options := {k: True for r in p.requests for k in r.spec.options()})
                else {}
            ),
            **(
                {
                    "rounds": p.rounds,
                    "round_medians_ms": {
                        combination: [row.median_ms for row, _, _ in each if row.median_ms]
                        for combination, each in medians.items()
                    },
                }
                if p.rounds > 1
                else {}
            ),
        },
    )
    progress.stage("storing")
    return store.add_bench(record)


def measure(
    p: BenchPlan,
    req: RunRequest,
    folder: Path,
    progress: Progress,
    fixes: list[str] | None = None,
    save_output: bool = True,
) -> tuple[BenchRow, HarnessInfo, Path | None]:
    """One combination in its own harness process (a program's, where ``req`` names one:
    ``fixes`` are the model fixes profkit tune applies to it): its row (timings; failed with
    the error's one line where it failed), what the process wrote, and its saved output, if any
    (``save_output``: a later round's is not compared, and not saved)."""
    precision, mode = req.spec.precision, req.spec.mode
    folder.mkdir()
    job = launch.harness_job(req, p.workload, p.path, folder, progress)
    output = folder / "output.pt"
    job.job = replace(
        job.job,
        profiler="bench",
        output_path=str(output) if save_output else None,
        fixes=fixes,
    )
    job.write()
    log = folder / "harness.log"

    def failed(error: str) -> tuple[BenchRow, HarnessInfo, None]:
        progress.note(f"{precision} {mode} failed: {error}")
        return BenchRow(precision, mode, "failed", error=error), {}, None

    try:
        result, _ = job.stream(job.harness_argv(), log)
    # the workload's error (from the harness's error file), or the timeout
    except ProfkitError as exc:
        return failed(exc.one_line())
    if result.returncode != 0:
        last = next((line.strip() for line in reversed(result.tail) if line.strip()), "no output")
        return failed(f"the benchmark process failed (exit {result.returncode}): {last[:300]}")
    info = job.info()
    times = info.get("iter_ns")
    if not times or not all(isinstance(t, int) and t >= 0 for t in times):
        return failed("the benchmark process wrote no iteration times")
    row = _timed_row(req, times, info.get("peak_memory_bytes"))
    return row, info, output if info.get("output_saved") and output.exists() else None


def _timed_row(req: RunRequest, times: Sequence[int], peak: int | None) -> BenchRow:
    """A combination's row from its timed iterations (one process's, or every round's)."""
    s = stats(times)
    seconds = s["median_ms"] / 1e3
    batch = req.spec.batch_size
    return BenchRow(
        req.spec.precision,
        req.spec.mode,
        "ok",
        **s,
        items_per_s=_sig(batch / seconds) if seconds > 0 else None,
        s_per_item=_sig(seconds / batch),
        peak_memory_bytes=peak,
        iter_ns=list(times),
    )


def _pooled(
    req: RunRequest, each: Sequence[tuple[BenchRow, HarnessInfo, Path | None]], rounds: int = 1
) -> tuple[BenchRow, HarnessInfo, Path | None]:
    """A combination timed in one process or more (``rounds`` asked for): the first failed
    round's row where one failed (its error saying which round, of more than one); else every
    round's steps together, the largest peak memory, and the first round's process info and
    output (what agreement is judged on)."""
    at = next((k for k, m in enumerate(each) if m[0].status != "ok"), None)
    if at is not None:
        row, info, out = each[at]
        if rounds > 1:
            row = replace(row, error=f"round {at + 1} of {rounds}: {row.error}")
        return row, info, out
    if len(each) == 1:
        return each[0]
    peaks = [row.peak_memory_bytes for row, _, _ in each if row.peak_memory_bytes is not None]
    row = _timed_row(
        req, [t for row, _, _ in each for t in row.iter_ns], max(peaks) if peaks else None
    )
    return row, each[0][1], each[0][2]


class Stats(TypedDict):
    """Iteration times in milliseconds (BenchRow's fields of the same names)."""

    median_ms: float
    spread_ms: float
    p25_ms: float
    p75_ms: float
    min_ms: float
    max_ms: float


def stats(iter_ns: Sequence[int]) -> Stats:
    """Median, quartiles, extremes and spread (half the interquartile range) of the iteration
    times, in milliseconds. Quartiles interpolate linearly between the sorted times (numpy's
    default), so a handful of iterations still give figures."""
    ms = sorted(n / 1e6 for n in iter_ns)

    def quantile(q: float) -> float:
        at = q * (len(ms) - 1)
        lo = math.floor(at)
        hi = min(lo + 1, len(ms) - 1)
        return ms[lo] + (ms[hi] - ms[lo]) * (at - lo)

    p25, p75 = quantile(0.25), quantile(0.75)
    return {
        "median_ms": round(quantile(0.5), 6),
        "spread_ms": round((p75 - p25) / 2, 6),
        "p25_ms": round(p25, 6),
        "p75_ms": round(p75, 6),
        "min_ms": round(ms[0], 6),
        "max_ms": round(ms[-1], 6),
    }


def _sig(x: float) -> float:
    return float(f"{x:.6g}")


def _agreement(
    row: BenchRow,
    info: HarnessInfo,
    output: Path | None,
    reference: Path | None,
    why_none: str | None,
) -> BenchRow:
    """``row`` with its output compared with the reference's, or a note saying why it is not."""
    if row.status != "ok":
        return row
    if not info.get("model"):
        return replace(
            row, note="n/a: the workload builds its own step (no model output to compare)"
        )
    if why_none:
        return replace(row, note=why_none)
    if output is None or reference is None:
        return replace(row, note="n/a: the model's output holds no tensor")
    diff, top1, note = agreement(load(output), load(reference))
    if row.reference_only or (row.precision, row.mode) == REFERENCE:
        note = note or "the reference"
    return replace(row, max_abs_diff=diff, top1_agreement=top1, note=note)


def load(path: Path) -> Any:
    """A saved output tensor."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def agreement(output: Any, reference: Any) -> tuple[float | None, float | None, str | None]:
    """How an output tensor agrees with the reference's (both fp32): the largest absolute
    difference, the share of positions whose argmax over the last dimension is the same
    (top-1; None where the last dimension has one value), and a note where they cannot be
    compared."""
    import torch

    if tuple(output.shape) != tuple(reference.shape):
        return (
            None,
            None,
            f"n/a: output shape {tuple(output.shape)} differs from fp32 eager's {tuple(reference.shape)}",
        )
    if output.numel() == 0:
        return None, None, "n/a: the output is empty"
    for what, t in (("the output", output), ("fp32 eager's output", reference)):
        if not bool(torch.isfinite(t).all()):
            return None, None, f"n/a: {what} holds NaN or infinity"
    diff = float((output - reference).abs().max())
    if output.dim() == 0 or output.shape[-1] < 2:
        return diff, None, None
    top1 = float((output.argmax(-1) == reference.argmax(-1)).double().mean())
    return diff, top1, None
