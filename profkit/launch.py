"""``profkit run``: put a workload under a profiler and turn what it writes into a run.

The workload runs in a child process (``profkit.harness``) so that the profiler sees a
whole process, and so that torch is never imported by the CLI itself. The raw report, its
export, the job file and the profiler's log are kept in the run's folder beside the
database; the database is written only once everything has been read.

Tools: ``ncu`` (per-kernel counters), ``nsys`` (timeline), ``torch`` (torch.profiler, run by
the harness itself: no Nsight install needed, and the only one that sees CPU operators), and
``auto``, which picks the first of those that can work here and says why.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

from . import gpu, nvtx_ranges, workloads
from .errors import (
    EmptyCapture,
    ProfkitError,
    ToolFailed,
    ToolNotFound,
    TorchNotInstalled,
    UsageError,
    WorkloadError,
    WorkloadTraceback,
)
from .files import disk_full, write_new
from .ingest import now, store_capture
from .options import GPU_ONLY, RunOptions
from .parse.compiled import with_compiled_kernels
from .parse.schema import Capture, KernelRow
from .process.job import HarnessJob, harness_info, rank_file, traceback_file
from .processes import how_it_ended, stage
from .program import Program
from .records import HarnessInfo, NcuPlan, RankInfo, RunInfo, RunRecord
from .store import Store
from .store.database import RunFields
from .store.runs import ENDED_WITHOUT_KERNELS
from .tools import ncu, nsys, runner

if TYPE_CHECKING:
    from concurrent.futures import Future

    from . import ncu_counters
    from .parse.ncu_plan import Counted

DRIVER_DIR = Path("/proc/driver/nvidia")  # present wherever the NVIDIA kernel driver is loaded


@dataclass
class Progress:
    """What a front end may show while a profiler works."""

    on_kernel: Callable[[int, str, int | None], None] | None = None
    on_stage: Callable[[str], None] | None = None
    on_line: Callable[[str], None] | None = None
    on_note: Callable[[str], None] | None = None
    on_output: Callable[[str], None] | None = None  # a program's own output, line by line

    def stage(self, text: str) -> None:
        if self.on_stage:
            self.on_stage(text)

    def note(self, text: str) -> None:
        if self.on_note:
            self.on_note(text)


@dataclass(frozen=True)
class RunRequest:
    """What is profiled, a workload or a user's program (``program``: then ``workload`` is
    unused), and the options to profile it with (one record: ``profkit.options``)."""

    workload: str
    options: RunOptions = field(default_factory=RunOptions)
    program: Program | None = None

    @property
    def spec(self) -> workloads.Spec:
        """What the workload is asked to build."""
        return self.options.spec()


@dataclass
class Plan:
    """A checked request: the workload found and the tool chosen (and why)."""

    req: RunRequest
    workload: str
    path: Path
    tool: str
    why: str


def plan(req: RunRequest) -> Plan:
    """Check a request and choose its tool, before anything is written."""
    wname, wpath = check(req)
    require_torch()
    if (
        req.program is not None
        and req.options.tool in ("auto", "torch")
        and req.options.device == "cuda"
        and not DRIVER_DIR.exists()
        and gpu.query() is None
    ):
        # A program runs where it is: on a machine without a GPU, its CPU operators.
        req = replace(req, options=replace(req.options, device="cpu"))
    if req.options.nproc_per_node > 1 and req.options.device == "cuda":
        have = gpu.count()
        visible = gpu.visible(have)
        if visible < req.options.nproc_per_node:
            where = (
                f"this machine has {have}"
                if visible == have
                else f"CUDA_VISIBLE_DEVICES shows {visible} of this machine's {have}"
            )
            raise UsageError(
                f"`nproc_per_node` {req.options.nproc_per_node} runs a rank on each of {req.options.nproc_per_node} GPUs, "
                f"but {where}"
            )
    if req.options.tool == "auto":
        tool, why = choose_tool(req.options.device)
        if req.options.nproc_per_node > 1 and tool == "ncu":
            tool, why = _timeline_tool()
        if req.options.metrics is not None and tool != "ncu":
            raise UsageError(f"`metrics` chooses ncu counters, but `tool` auto chose {tool}: {why}")
        if req.options.fresh_counters and tool != "ncu":
            raise UsageError(
                f"`fresh_counters` counts ncu's counters again, but `tool` auto chose {tool}: {why}"
            )
        if (req.options.cpu_sampling or req.options.context_switches) and tool != "nsys":
            raise UsageError(
                f"`cpu_sampling` and `context_switches` are nsys options, but `tool` auto chose {tool}: {why}"
            )
    else:
        tool, why = req.options.tool, "chosen with `tool`"
        if tool in GPU_ONLY:
            # not installed: say so before anything is written
            {"ncu": ncu, "nsys": nsys}[tool].find()
    return Plan(req, wname, wpath, tool, why)


def require_torch(what: str | None = None) -> None:
    """Refuse, before anything is written, to run a workload or a program where PyTorch is not
    installed (the profiled process imports it): a TorchNotInstalled saying how to get it."""
    import importlib.util

    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # an import hook refusing it, or a broken torch package
        found = False
    if not found:
        raise TorchNotInstalled(*(() if what is None else (what,)))


# What a workload file's build(spec) is asked for: a program runs as its own code says.
WORKLOAD_ONLY = (
    "precision",
    "mode",
    "batch_size",
    "keep_bn_fp32",
    "channels_last",
    "cudnn_benchmark",
    "compile_mode",
)
PROGRAM_ONLY = ("step", "run_to_end")


def check(req: RunRequest) -> tuple[str, Path]:
    """Validate a request's options (``RunOptions.check``) and its workload; return the
    workload's (name, path)."""
    req.options.check()
    default = RunOptions()
    if req.program is not None:
        for key in WORKLOAD_ONLY:
            if getattr(req.options, key) != getattr(default, key):
                raise UsageError(
                    f"`{key}` is asked of a workload file's build(spec); a program runs as its own code "
                    f"says ({req.program.shown()})",
                    "Leave it out, or set it in the script itself.",
                )
        if req.options.mode == "torchscript":
            raise UsageError("`mode` torchscript is a workload option")
        path = Path(req.program.script) if req.program.script else Path.cwd()
        return req.program.name, path
    for key in PROGRAM_ONLY:
        if getattr(req.options, key) != getattr(default, key):
            raise UsageError(
                f"`{key}` concerns a program run as it is (profkit run -- python train.py), "
                f"not workload {req.workload}"
            )
    wname, wpath = workloads.resolve(req.workload)
    workloads.check_declared(wpath, req.spec)
    return wname, wpath


def _timeline_tool() -> tuple[str, str]:
    """``tool`` auto for a job of several ranks, where it would have chosen ncu: nsys, else torch."""
    try:
        exe = nsys.find()
    except ToolNotFound:
        return (
            "torch",
            "several ranks: ncu profiles one process's kernels one by one, and nsys is not installed",
        )
    return (
        "nsys",
        f"several ranks: ncu profiles one process's kernels one by one; Nsight Systems is at {exe}",
    )


def choose_tool(device: str) -> tuple[str, str]:
    """``tool`` auto: ncu where it can read counters, else nsys, else torch. (tool, why)."""
    if device == "cpu":
        return "torch", "`device` cpu: only torch.profiler sees CPU operators"
    if not DRIVER_DIR.exists() and gpu.query() is None:
        raise UsageError(
            "no NVIDIA GPU or driver found here",
            "Profile CPU operators with `device` cpu, or import a capture made elsewhere.",
        )
    try:
        exe = ncu.find()
    except ToolNotFound:
        why_not = "ncu is not installed"
    else:
        ok, why = ncu.counters_readable()
        if ok:
            return "ncu", f"Nsight Compute is at {exe} and {why}"
        why_not = f"ncu is installed but {why}"
    try:
        exe = nsys.find()
    except ToolNotFound:
        return "torch", f"{why_not} and nsys is not installed; torch.profiler needs neither"
    return "nsys", f"{why_not}; Nsight Systems is at {exe}"


# How each tool sees the kernels inside a replayed CUDA graph (torch.compile reduce-overhead).
GRAPH_NOTE = {
    "ncu": "ncu profiles each graph node as its own kernel (--graph-profiling node)",
    "nsys": "nsys traces each graph node as its own kernel (--cuda-graph-trace node)",
    "torch": "torch.profiler (CUPTI) records each kernel a graph launch runs",
}


def uses_graphs(spec: workloads.Spec) -> bool:
    return spec.mode == "compile" and spec.compile_mode == "reduce-overhead"


@dataclass
class _Job:
    """One profiled process: what every tool's driver needs."""

    req: RunRequest
    workload: str
    tag: str
    folder: Path
    job: HarnessJob
    progress: Progress
    store: Store | None = (
        None  # the run's database (ncu's counters kept across runs are read there)
    )
    after: list[Callable[[RunRecord], None]] = field(default_factory=list)  # once the run is stored
    counting_fallback: str | None = None  # why the run's process could not count (ncu's then did)
    ended_at: float = 0.0  # time.time() when the last process it ran ended
    timeline: HarnessInfo | None = (
        None  # the process whose timeline the run keeps, where not the job's own
    )

    def what(self, extra: str = "") -> str:
        """What runs, as progress names it: ``vgg16 (fp16, eager)``, or a program's command line."""
        if self.req.program is not None:
            return f"`{self.req.program.shown()}`" + (f" ({extra.lstrip(', ')})" if extra else "")
        return f"{self.workload} ({self.req.options.precision}, {self.req.options.mode}{extra})"

    @property
    def job_path(self) -> Path:
        return self.folder / "job.json"

    def write(self) -> None:
        write_new(self.job_path, self.job.to_json(), replace=True)

    @property
    def ranks(self) -> int:
        return self.req.options.nproc_per_node

    @property
    def process_module(self) -> str:
        """What runs in the profiled process, chosen here alone: ``profkit.program`` for a user's
        program as it is, ``profkit.harness`` for a workload file."""
        return "profkit.program" if self.job.program is not None else "profkit.harness"

    def harness_argv(self) -> list[str]:
        """The profiled process's command line; for several ranks, torchrun's (one machine, a
        free port: concurrent jobs do not meet) starting it once per rank."""
        if self.ranks > 1:
            return runner.python_argv(
                "-m",
                "profkit.torchrun",
                "--standalone",
                f"--nproc-per-node={self.ranks}",
                "-m",
                self.process_module,
                str(self.job_path),
            )
        return runner.python_argv("-m", self.process_module, str(self.job_path))

    def env(self) -> dict[str, str] | None:
        """What the profiled process's environment adds (runner's adds NVLink multicast off):
        for ranks on the CPU, OMP_NUM_THREADS as this machine's cores shared out among them,
        unless it is set (torchrun would make it 1: every rank on one core)."""
        env: dict[str, str] = {}
        if self.req.program is not None:
            env.update(self.req.program.env)
            if self.req.program.warnings:
                env["PYTHONWARNINGS"] = ",".join(
                    [*self.req.program.warnings, *filter(None, [os.environ.get("PYTHONWARNINGS")])]
                )
        if (
            self.ranks > 1
            and self.req.options.device == "cpu"
            and "OMP_NUM_THREADS" not in os.environ
        ):
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // self.ranks))
        return env or None

    def rank_paths(self, key: str) -> dict[int, Path]:
        """The file each rank wrote for the job's ``key`` (info_path, trace_path...): one, the
        job's own, for a single process."""
        if self.ranks <= 1:
            return {0: Path(getattr(self.job, key))}
        return {r: Path(rank_file(getattr(self.job, key), r)) for r in range(self.ranks)}

    def info(self) -> HarnessInfo:
        """What the harness wrote of the machine and the run; for several ranks, rank 0's, with
        ``ranks``: each rank's pid, GPU, iteration times (and skipped AMP steps)."""
        infos = {r: harness_info(p) for r, p in self.rank_paths("info_path").items() if p.exists()}
        if self.ranks <= 1:
            return infos.get(0, {})
        keep = RankInfo.__annotations__
        out = infos.get(0, HarnessInfo())
        out["ranks"] = [
            cast(RankInfo, {k: v for k, v in i.items() if k in keep})
            for _, i in sorted(infos.items())
        ]
        return out

    def rank_pids(self) -> dict[int, int]:
        """{pid: rank} of the ranks that wrote their info."""
        return {
            int(i["pid"]): int(i["rank"])
            for i in self.info().get("ranks", [])
            if "pid" in i and "rank" in i
        }

    def stream(
        self, argv: list[str], log: Path, on_line: Callable[[str], None] | None = None
    ) -> tuple[runner.Result, float]:
        """Run ``argv``; a workload error the harness reports (in its error file, whatever the
        workload itself prints) becomes a WorkloadError."""
        error_files = list(self.rank_paths("error_path").values())
        for f in error_files:
            f.unlink(missing_ok=True)
            traceback_file(f).unlink(missing_ok=True)

        echo = self.progress.on_output if self.req.program is not None else None

        def line(text: str) -> None:
            if on_line:
                on_line(text)
            if self.progress.on_line:
                self.progress.on_line(text)
            # A program's own output, as under plain python (not ncu's line per kernel, nor the
            # harness's error line, which profkit says itself).
            if (
                echo is not None
                and not text.startswith(("==PROF==", "profkit-harness: error:"))
                and not _KINETO_LOG.match(text)
            ):
                echo(text)

        t0 = time.monotonic()
        result = runner.stream(
            argv, log_path=log, on_line=line, timeout=self.req.options.timeout_s, env=self.env()
        )
        self.ended_at = time.time()
        # Each rank's error, first written first: when one rank fails, the others fail after it
        # in their collectives ("connection closed by peer"), and the first is the cause.
        errors = sorted(
            (
                (f.stat().st_mtime_ns, r, f.read_text(encoding="utf-8", errors="replace").strip())
                for r, f in enumerate(error_files)
                if f.exists()
            )
        )
        if errors:
            # The one line is the message; the workload's whole traceback, in the log and beside
            # the error file, is its cause (shown with --verbose) and the log is named.
            trace = _read_traceback(error_files[errors[0][1]])
            cause = WorkloadTraceback(trace) if trace else None
            where = f"Its log is {log}."
            if self.req.program is not None:
                # A program's own exit status is passed on (1 where it had none: it ended too soon).
                if (
                    (self.info().get("steps") or {}).get("none_found")
                    and not self.job.whole_program
                    and self.ranks <= 1
                ):
                    raise NoSteps(errors[0][2], where)
                error = WorkloadError(
                    errors[0][2] if self.ranks <= 1 else f"rank {errors[0][1]}: {errors[0][2]}",
                    where,
                )
                error.exit_code = result.returncode if 0 < result.returncode < 256 else 1
                raise error from cause
            if self.ranks <= 1:
                raise WorkloadError(errors[0][2], where) from cause
            _, first, text = errors[0]
            texts = {t for _, _, t in errors}
            if len(errors) == self.ranks and len(texts) == 1:
                raise WorkloadError(f"every rank: {text}", where) from cause
            after = sorted(r for _, r, _ in errors[1:])
            # A rank that ended without an error of its own (killed, os._exit) left the others
            # failing in their collectives: say so beside theirs.
            silent = [
                f"rank {r} {how} without an error of its own"
                for r, how in _torchrun_failures(result.tail)
                if all(r != e for _, e, _ in errors)
            ]
            raise WorkloadError(
                f"rank {first}: {text}"
                + "".join(
                    f" ({x})"
                    for x in (
                        [f"then rank {', '.join(map(str, after))} failed too"] if after else []
                    )
                    + silent
                ),
                where,
            ) from cause
        if (
            self.req.program is not None
            and result.returncode != 0
            and not self.info().get("iteration_wall_ns")
        ):
            # It ended without a word of its own (os._exit, a signal) before its window was done.
            error = WorkloadError(
                f"the script {how_it_ended(result.returncode)} before its window was done, without an "
                f"error of its own",
                f"Its log is {log}.",
            )
            error.exit_code = result.returncode if 0 < result.returncode < 256 else 1
            raise error
        if self.ranks > 1 and result.returncode != 0:
            raise ToolFailed(
                f"torchrun's ranks failed (exit {result.returncode}): {_torchrun_cause(result.tail)}",
                f"The log is {log}.",
            )
        return result, time.monotonic() - t0


# Kineto's own log lines (torch.profiler starting and stopping, a GPU-less machine's device
# query): the run's log keeps them; a program's echoed output does not.
_KINETO_LOG = re.compile(
    r"(USDT|STAGE|ERROR|WARNING|INFO):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \w+\.cpp:\d+\]"
)


def launcher_rank() -> int | None:
    """This profkit's rank where a launcher (torchrun, srun) started it as one rank of a job of
    several: ``profkit run -- train.py`` inside torchrun profiles each rank on its own, the run
    named after its rank (``profkit import`` merges the ranks' traces)."""
    for rank, size in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        r, n = os.environ.get(rank, ""), os.environ.get(size, "")
        if r.isdigit() and n.isdigit() and int(n) > 1:
            return int(r)
    return None


class NoSteps(WorkloadError):
    """A program ran to its end without a step boundary profkit could find."""


def _program_said(
    job: _Job, info: HarnessInfo, notes: list[str], progress: Progress
) -> dict[str, object]:
    """What a program's run records of it (its command line, how its steps were found, how it
    ended), said as it ends."""
    req = job.req
    assert req.program is not None
    steps = info.get("steps") or {}
    o = req.options
    if steps.get("whole_program"):
        text = "no step was found: the whole program is one step"
    else:
        first = o.warmup
        text = (
            f"steps: {steps.get('said', '?')}; profiled step{'s' if o.iters > 1 else ''} "
            f"{first + 1}{f'-{first + o.iters}' if o.iters > 1 else ''} after {o.warmup} warm-up step"
            f"{'s' if o.warmup != 1 else ''}"
        )
    notes.append(text)
    progress.note(text)
    ended = (
        "ran to its end"
        if o.run_to_end or steps.get("whole_program")
        else "stopped by profkit after its window (--run-to-end lets it finish)"
    )
    if steps.get("exit_status"):
        ended += f" (exit status {steps['exit_status']} after its window)"
    said: dict[str, object] = {
        "argv": list(req.program.argv),
        "cwd": os.getcwd(),
        "step": o.step,  # as asked (--step): what a re-run of it (profkit tune) asks again
        "steps": dict(steps),
        "ended": ended,
    }
    if "window_done_unix" in info and not o.run_to_end and job.ended_at:
        # How soon the program ended after its window (and the counting after it) was done.
        said["stopped_after_s"] = round(max(0.0, job.ended_at - float(info["window_done_unix"])), 3)
        ended += f", {said['stopped_after_s']:.1f} s after it"
    progress.note(f"the program {ended}")
    said["ended"] = ended
    return said


def _read_traceback(error_file: Path) -> str | None:
    """The traceback the harness wrote beside ``error_file`` (:func:`profkit.process.job.traceback_file`), if any."""
    try:
        return traceback_file(error_file).read_text(encoding="utf-8", errors="replace") or None
    except OSError:
        return None


def _torchrun_failures(tail: list[str]) -> list[tuple[int, str]]:
    """The failed ranks torchrun's summary lists ("rank : N", "exitcode : C" in each entry),
    its root cause (first observed failure) first, each with how it ended."""
    found: list[tuple[int, str]] = []
    rank: int | None = None
    root = next((i for i, line in enumerate(tail) if "Root Cause" in line), len(tail))
    for line in tail[root:] + tail[:root]:
        key, _, value = line.strip().partition(":")
        word = value.strip().split(" ")[0] if value.strip() else ""
        if key.strip() == "rank" and word.isdigit():
            rank = int(word)
        elif key.strip() == "exitcode" and rank is not None and word.lstrip("-").isdigit():
            if all(r != rank for r, _ in found):
                found.append((rank, how_it_ended(int(word))))
            rank = None
    return found


def _torchrun_cause(tail: list[str]) -> str:
    """What torchrun says of its first failed rank: the rank and how it ended; else the last
    line of output."""
    failures = _torchrun_failures(tail)
    if failures:
        rank, how = failures[0]
        return f"rank {rank} {how} (no error of its own: see the log)"
    return next((l.strip() for l in reversed(tail) if l.strip()), "no output")[:300]


def harness_job(
    req: RunRequest,
    workload: str,
    path: Path,
    folder: Path,
    progress: Progress,
    tool: str | None = None,
) -> _Job:
    """The job of one harness process for ``req`` (``workload`` from the file ``path``), with the
    files it writes in ``folder``: what every tool's driver, and ``profkit bench``, starts."""
    precision, mode = run_kind(req)
    tag = nvtx_ranges.tag(workload, precision, mode)
    program = req.program
    return _Job(
        req,
        workload,
        tag,
        folder,
        HarnessJob(
            spec=req.spec,
            workload_path=str(path),
            warmup=req.options.warmup,
            iters=req.options.iters,
            tag=tag,
            info_path=str(folder / "harness.json"),
            error_path=str(folder / "harness-error.txt"),
            nproc_per_node=req.options.nproc_per_node,
            attribution=tool is not None and req.options.attribution_for(tool),
            program=None
            if program is None
            else {
                "argv": list(program.argv),
                "script": program.script,
                "module": program.module,
                "args": list(program.args),
                "safe_path": os.environ.get("PYTHONSAFEPATH"),
            },
            step=req.options.step,
            run_to_end=req.options.run_to_end,
        ),
        progress,
    )


# A program's run in the runs table: it runs in whatever precision and mode its code chose
# (each kernel's precision is in its verdict).
PROGRAM_PRECISION, PROGRAM_MODE = "as-is", "script"


def run_kind(req: RunRequest) -> tuple[str, str]:
    """(precision, mode) a run records: the workload's options, or a program's own."""
    if req.program is not None:
        return PROGRAM_PRECISION, PROGRAM_MODE
    return req.options.precision, req.options.mode


def run(store: Store, request: RunRequest | Plan, progress: Progress | None = None) -> RunRecord:
    """Profile, import, classify and store one run; return it."""
    progress = progress or Progress()
    p = request if isinstance(request, Plan) else plan(request)
    req, wname, wpath, tool, why = p.req, p.workload, p.path, p.tool, p.why
    o = req.options
    if req.options.tool == "auto":
        progress.note(f"tool: {tool} ({why})")
    if uses_graphs(req.spec):
        progress.note(f"compile mode reduce-overhead replays CUDA graphs; {GRAPH_NOTE[tool]}")

    started = now()
    # The name (and so the raw folder) is taken atomically before anything runs: concurrent
    # runs never share a folder or a name.
    precision, mode = run_kind(req)
    base_fields: RunFields = {
        "source": "run",
        "workload": wname,
        "precision": precision,
        "mode": mode,
        "batch_size": req.options.batch_size,
        "iters": req.options.iters,
        "device": req.options.device,
        "tool": tool,
        "started_at": started,
    }
    options = o.switches()
    rank = launcher_rank() if req.program is not None and o.nproc_per_node <= 1 else None
    default_name = (
        o.default_name(wname, tool)
        if req.program is None
        else "-".join(
            [
                wname,
                "cpu" if o.device == "cpu" else tool,
                *([f"{o.nproc_per_node}ranks"] if o.nproc_per_node > 1 else []),
                *([f"rank{rank}"] if rank is not None else []),
            ]
        )
    )
    if (
        req.options.name is not None
        and (prior := store.name_status(req.options.name)) in ENDED_WITHOUT_KERNELS
    ):
        progress.note(
            f"run {req.options.name} {prior} before: this run replaces it (its row and its files)"
        )
    reserved = store.reserve(req.options.name, default_name, base_fields, status="running")
    stage("run planned and its name reserved")
    name = reserved.name
    folder: Path | None = None
    try:
        # made now, for this run alone: nothing of another's is touched
        folder = store.reserve_folder(reserved)
        job = harness_job(req, wname, wpath, folder, progress, tool)
        job.store = store
        if req.program is not None:
            progress.stage(f"launching `{req.program.shown()}` as run {name}")
            try:
                capture, row = DRIVERS[tool](job)
            except NoSteps as exc:
                progress.note(
                    f"warning: {exc.message}; profiling the whole program instead (it runs again)"
                )
                job.job = replace(job.job, whole_program=True)
                capture, row = DRIVERS[tool](job)
        else:
            progress.stage(
                f"launching {wname} ({req.options.precision}, {req.options.mode}, {req.options.device}) "
                f"as run {name}"
            )
            capture, row = DRIVERS[tool](job)
        info = job.info()
        # ncu's per-function plan in two processes: the timing one's iterations
        if job.timeline is not None:
            info.update(
                cast(HarnessInfo, {k: v for k, v in job.timeline.items() if k in TIMELINE_KEYS})
            )
        program_info = (
            _program_said(job, info, capture.notes, progress) if req.program is not None else None
        )
        if info.get("amp_skipped_steps"):
            text = (
                f"the AMP loss scaler found inf/NaN gradients and skipped the optimizer step in "
                f"{info['amp_skipped_steps']} of {req.options.iters} measured iterations: those launched no optimizer "
                "kernels (more warm-up lets the scale settle)"
            )
            progress.note(text)
            capture.notes.append(text)
        if capture.gpu_name is None and req.options.device == "cuda":
            capture.gpu_name = info.get("gpu_name")
            capture.compute_capability = info.get("compute_capability")
        progress.stage("classifying and storing")
        stage("profiled")
        fields: RunFields = {
            **base_fields,
            "name": name,
            **row,
            "info": replace(
                row.get("info") or RunInfo(),
                harness=info,
                tool_choice={"tool": tool, "why": why},
                compile_mode=o.compile_mode if o.mode == "compile" else None,
                options=options or None,
                world_size=o.nproc_per_node if o.nproc_per_node > 1 else None,
                program=program_info,
                cuda_graphs=GRAPH_NOTE[tool] if uses_graphs(req.spec) else None,
            ),
        }
        with_compiled_kernels(capture, info.get("compiled_kernels"))
        try:
            stored = store_capture(store, capture, fields, reserved)
        except EmptyCapture:
            raise ToolFailed(
                f"{tool} recorded no kernels or operators in the measured iterations",
                f"Its files are in {folder}.",
            ) from None
    except BaseException as exc:
        # The run keeps its row (failed or interrupted, with the error) and its raw files. A
        # full disk met writing a file of the run's is said so, naming the file or the folder.
        where = (
            Path(exc.filename)
            if isinstance(exc, OSError) and exc.filename
            else folder or store.path.parent
        )
        full = disk_full(where, exc)
        interrupted = isinstance(exc, (KeyboardInterrupt, SystemExit))
        error = full or exc
        text = (
            "interrupted"
            if interrupted
            else (error.one_line() if isinstance(error, ProfkitError) else repr(exc))
        )
        try:
            store.end_run(reserved.id, "interrupted" if interrupted else "failed", text)
        except Exception:
            pass  # the database's own trouble is the error to report; the run's lock file notes its end
        if full is not None:
            raise full from exc
        raise
    # Once the run is stored and ok: what is kept for later runs (a failure here is noted, and an
    # interruption leaves the run as stored).
    stage("stored")
    for then in job.after:
        then(stored)
    stage("kept for later runs")
    return stored


# ------------------------------------------------------------------------------ drivers
# Each profiles job's process and returns (capture, run-row fields).


def _profile_ncu(
    job: _Job, per_function: bool | None = None
) -> tuple[Capture[KernelRow], RunFields]:
    """ncu with the chip's default plan, or the ``metrics`` asked for on every launch.

    The per-function plan (the default where rules.toml's ``ncu_plans`` names it for the
    chip): each kernel function's counters come from its first launch, and every launch is
    timed through CUPTI (``parse.ncu_plan`` joins them). A first run counts in the timing
    harness itself, with CUPTI's Range Profiler (``_counted_here``); where that cannot count,
    or PROFKIT_NCU_COUNTING=ncu, ncu counts only the first launch of each kernel function while
    a second harness, started at the same time and taking turns with it on the GPU, times
    every launch (CUPTI cannot time launches inside ncu's own process: ncu holds CUPTI's one
    subscriber there). The counters of the functions counted before, in this environment, are
    taken from the database instead (``profkit.ncu_counters``): where an earlier run of the
    same kind completed, the timing harness runs alone and ncu counts only the functions never
    counted, if any. If the timing harness fails, every launch is profiled instead, as
    ``metrics`` full would."""
    from concurrent.futures import ThreadPoolExecutor

    from . import ncu_counters
    from .classify import metric_set, per_function_plan
    from .code_versions import driver_version

    exe = ncu.find()
    with ThreadPoolExecutor(1) as pool:
        # ncu takes a while to say its version: meanwhile the run starts
        asked = pool.submit(ncu.version, exe)
        gpu_info = gpu.query()
        stage("nvidia-smi asked")
        cc = gpu_info[1] if gpu_info else None
        set_label, metrics = metric_set(job.req.options.metrics, cc)
        if per_function is None:
            per_function = job.req.options.metrics is None and per_function_plan(cc)
        counters = None
        if per_function and job.store is not None and gpu_info is not None and job.ranks <= 1:
            # A program's kernels follow its command line too: its arguments are in the signature.
            what = (
                job.workload
                if job.req.program is None
                else f"{job.workload}: {job.req.program.shown()}"
            )
            counters = ncu_counters.plan(
                job.store,
                job.req.options,
                what,
                Path(job.job.workload_path),
                gpu_info,
                driver_version(),
                ncu.identity(exe),
                set_label,
                metrics,
            )
            stage("counters planned")
            # A program counts in its own process, in the steps after its window (a few steps):
            # cheaper than ncu started again for the functions never counted.
            if counters.strategy == ncu_counters.TIMED_FIRST and job.req.program is None:
                return _timed_first(job, exe, asked, gpu_info, set_label, metrics, counters)
            # CUDA graphs (reduce-overhead) replay many kernels in one launch: ncu profiles their nodes.
            # A program's steps after its window are the counting passes (profkit.program.Counting).
            if os.environ.get("PROFKIT_NCU_COUNTING") != "ncu" and not uses_graphs(job.req.spec):
                here = _counted_here(job, asked, gpu_info, set_label, metrics, counters)
                if here is not None:
                    return here
        tool_version = asked.result()
    report = job.folder / "report.ncu-rep"
    times = job.folder / "kernel_times.json"
    timer_job = job.folder / "job-times.json"
    for stale in (times, timer_job):
        stale.unlink(missing_ok=True)
    job.job = replace(job.job, gpu_lock=None, gpu_lock_at="prepare", counting=False)
    if per_function:
        # The counting harness may build its model while the timing one measures, unless
        # building it runs it (TorchScript's tracing): then it waits before that too.
        job.job = replace(
            job.job,
            gpu_lock=str(job.folder / "gpu.lock"),
            gpu_lock_at="warmup"
            if job.req.options.mode == "eager" and job.req.program is None
            else "prepare",
            counting=True,
        )
        write_new(
            timer_job,
            replace(
                job.job,
                kernel_times_path=str(times),
                counting=False,
                info_path=str(job.folder / "harness-times.json"),
                error_path=str(job.folder / "harness-times-error.txt"),
                gpu_lock_at="warmup",
            ).to_json(),
            replace=True,
        )
    job.write()
    nvtx_filter = nvtx_ranges.ncu_include_filter(job.tag)
    argv = ncu.profile_argv(
        exe,
        report,
        nvtx_filter,
        metrics,
        job.harness_argv(),
        extra=ncu.per_function_argv() if per_function else None,
    )
    what = (
        f"{set_label} on the first launch of each kernel function, every launch timed by a second process"
        if per_function
        else set_label
    )
    job.progress.stage(f"profiling {job.what()} under ncu, metrics: {what}")
    timer_log = job.folder / "harness-times.log"
    on_line, seen = _ncu_progress(job)
    if per_function:
        with runner.Background(
            runner.python_argv("-m", job.process_module, str(timer_job)), timer_log
        ) as timer:
            result, _ = job.stream(argv, job.folder / "ncu.log", on_line)
            timer_result = timer.wait(timeout=job.req.options.timeout_s)
        wall = timer_result.wall_s  # both processes: the timer started first and ends last
    else:
        result, wall = job.stream(argv, job.folder / "ncu.log", on_line)
    ncu.check_result(result, report, seen["n"], nvtx_filter)
    raw_files = {"ncu-rep": str(report), "log": str(job.folder / "ncu.log")}
    plan: NcuPlan = {"launches": "every launch in the measured iterations", "durations": "ncu"}

    if per_function:
        timer_info = harness_info(job.folder / "harness-times.json")
        if timer_result.returncode != 0 or not times.exists():
            error = job.folder / "harness-times-error.txt"
            why = (
                error.read_text(errors="replace").strip()
                if error.exists()
                else timer_info.get("kernel_timer_error")
                or next(
                    (l for l in reversed(timer_result.tail) if l.strip()),
                    f"exit {timer_result.returncode}",
                )
            )
            return _every_launch_instead(job, why)

    job.progress.stage("exporting the raw page to CSV")
    exported = time.monotonic()
    if per_function:
        functions, profiled = _export_functions(exe, report, job.folder, raw_files)
        raw_files.update({"kernel-times": str(times), "times-log": str(timer_log)})
        if counters is not None:
            counters.learn(timer_info)
            counters.counted = len(functions)
        capture = _timed_capture(
            job, times, functions, timer_info, (profiled.gpu_name, profiled.compute_capability)
        )
        job.timeline = timer_info
        set_label = f"{set_label} per function"
        plan = {
            "launches": "the first launch of each kernel function (ncu --kernel-id ::regex:.:1, mangled names); "
            "its verdict is every launch's of that function",
            "durations": "cupti",
            "profiled_launches": seen["n"],
            "timed_by": "a second harness process, taking turns with ncu's on the GPU (CUPTI activity records)",
            # Where the time went (s): both processes, ncu's CSV exports and the join.
            "wall_s": {
                "profile": round(wall, 3),
                "export_and_join": round(time.monotonic() - exported, 3),
                "ncu_harness": job.info().get("stages_s"),
                "timing_harness": timer_info.get("stages_s"),
            },
        }
        if job.counting_fallback:
            plan["counting_fallback"] = job.counting_fallback
        if counters is not None:
            _keep_after(job, counters, capture, functions, plan)
    else:
        from .parse.ncu_csv import read_ncu_csv

        csv_path = job.folder / "raw.csv"
        write_new(
            csv_path, runner.capture(ncu.export_csv_argv(exe, report), timeout=900), replace=True
        )
        raw_files["ncu-csv"] = str(csv_path)
        capture = read_ncu_csv(csv_path)
    capture.tool_version = tool_version
    if capture.gpu_name is None and gpu_info:
        capture.gpu_name, capture.compute_capability = gpu_info
    return capture, {
        "metric_set": set_label,
        "metrics": metrics,
        "command": argv,
        "profiled_wall_s": round(wall, 3),
        "raw_files": raw_files,
        "info": RunInfo(report_bytes=report.stat().st_size, ncu_plan=plan),
    }


# What a run keeps of the process whose timeline it has (the iterations' and the bare steps' wall times),
# where another process (ncu's, counting) wrote the job's own info.
TIMELINE_KEYS = ("iteration_wall_ns", "bare_iteration_ns", "iteration_ranges")


def _timed_first(
    job: _Job,
    exe: str,
    asked: Future[str],
    gpu_info: tuple[str, str],
    set_label: str,
    metrics: list[str],
    counters: ncu_counters.CounterPlan,
) -> tuple[Capture[KernelRow], RunFields]:
    """The per-function plan where an earlier run of the same kind was counted in this
    environment: the timing harness alone (it is the run's harness: its info is the run's),
    its functions looked up in the kept counters, and ncu started afterwards only for those
    never counted, on their first launch alone."""
    from .parse.ncu_plan import kernel_times, timed_functions

    times = job.folder / "kernel_times.json"
    times.unlink(missing_ok=True)
    job.job = replace(job.job, gpu_lock=None, gpu_lock_at="prepare", kernel_times_path=str(times))
    job.write()
    job.progress.stage(
        f"timing every launch of {job.what()} with CUPTI; "
        "kernel functions counted by ncu in earlier runs are not profiled again"
    )
    timer_log = job.folder / "harness-times.log"
    timer_argv = job.harness_argv()
    result, wall = job.stream(timer_argv, timer_log)
    stage("timing harness ended")
    info = job.info()
    # CUPTI could not time (a workload's own error raised above)
    if result.returncode != 0 or not times.exists():
        why = info.get("kernel_timer_error") or next(
            (l for l in reversed(result.tail) if l.strip()), f"exit {result.returncode}"
        )
        job.job = replace(job.job, kernel_times_path=None)
        return _every_launch_instead(job, why)
    counters.learn(info)
    timed = timed_functions(kernel_times(times))
    functions = counters.look_up(timed)
    missing = [m for m in timed if m not in functions]
    stage("kept counters looked up")
    raw_files = {"kernel-times": str(times), "times-log": str(timer_log)}
    argv = timer_argv
    profiled = 0
    gpu_pair: tuple[str | None, str | None] = gpu_info
    if missing:
        # The counting harness, alone now, under ncu: its own info and error files.
        report = job.folder / "report.ncu-rep"
        count_job = replace(
            job.job,
            kernel_times_path=None,
            counting=True,
            info_path=str(job.folder / "harness-ncu.json"),
            error_path=str(job.folder / "harness-ncu-error.txt"),
        )
        count_path = job.folder / "job-ncu.json"
        write_new(count_path, count_job.to_json(), replace=True)
        nvtx_filter = nvtx_ranges.ncu_include_filter(job.tag)
        argv = ncu.profile_argv(
            exe,
            report,
            nvtx_filter,
            metrics,
            runner.python_argv("-m", job.process_module, str(count_path)),
            extra=ncu.per_function_argv(missing),
        )
        job.progress.stage(
            f"profiling {len(missing)} kernel functions never counted before under ncu "
            f"({len(functions)} counted in earlier runs), metrics: {set_label}"
        )
        on_line, seen = _ncu_progress(job)
        counted = _Job(job.req, job.workload, job.tag, job.folder, count_job, job.progress)
        ncu_result, ncu_wall = counted.stream(argv, job.folder / "ncu.log", on_line)
        wall += ncu_wall
        profiled = seen["n"]
        raw_files["log"] = str(job.folder / "ncu.log")
        if report.exists():
            raw_files["ncu-rep"] = str(report)
        if profiled or ncu_result.returncode != 0:
            ncu.check_result(ncu_result, report, profiled, nvtx_filter)
            new, export = _export_functions(exe, report, job.folder, raw_files)
            functions.update({m: f for m, f in new.items() if m not in functions})
            counters.counted = len(new)
            gpu_pair = (export.gpu_name or gpu_info[0], export.compute_capability or gpu_info[1])
    capture = _timed_capture(job, times, functions, info, gpu_pair)
    stage("launches joined to their counters")
    capture.tool_version = asked.result()
    stage("ncu's version")
    plan: NcuPlan = {
        "launches": (
            "the first launch of each kernel function not counted in an earlier run (ncu --kernel-id, "
            "mangled names); the others' counters kept from earlier runs"
        ),
        "durations": "cupti",
        "profiled_launches": profiled,
        "timed_by": "the run's harness (CUPTI activity records)",
        "wall_s": {"profile": round(wall, 3), "timing_harness": info.get("stages_s")},
    }
    _keep_after(job, counters, capture, functions, plan)
    return capture, {
        "metric_set": f"{set_label} per function",
        "metrics": metrics,
        "command": argv,
        "profiled_wall_s": round(wall, 3),
        "raw_files": raw_files,
        "info": RunInfo(ncu_plan=plan),
    }


def _counted_here(
    job: _Job,
    asked: Future[str],
    gpu_info: tuple[str, str],
    set_label: str,
    metrics: list[str],
    counters: ncu_counters.CounterPlan,
) -> tuple[Capture[KernelRow], RunFields] | None:
    """The per-function plan's first run without ncu's process: the run's harness times every
    launch of the measured iterations, then counts ``metrics`` on the first launch of each kernel
    function in one more step through CUPTI's Range Profiler (``profkit.kernel_counter``: the
    same counters ncu reads, the step run once per pass); each function's verdict is its first
    launch's there. None where the harness could not count (CUPTI too old, counters not
    permitted, a step that does not repeat): the note says why, and ncu counts in a process of
    its own instead."""
    from .parse.ncu_plan import counted_functions

    times, counts = job.folder / "kernel_times.json", job.folder / "kernel_counts.json"
    for stale in (times, counts):
        stale.unlink(missing_ok=True)
    saved = job.job
    job.job = replace(
        job.job,
        gpu_lock=None,
        gpu_lock_at="prepare",
        kernel_times_path=str(times),
        counting=False,
        count_metrics=list(metrics),
        counts_path=str(counts),
    )
    job.write()
    job.progress.stage(
        f"profiling {job.what()}: every launch timed, then counted "
        f"({set_label}) by CUPTI's Range Profiler in the same process"
    )
    timer_log = job.folder / (
        "harness-counted.log" if job.req.program is not None else "harness-times.log"
    )
    result, wall = job.stream(job.harness_argv(), timer_log)
    info = job.info()
    if result.returncode != 0 or not times.exists() or not counts.exists():
        why = (
            info.get("kernel_timer_error")
            or info.get("kernel_counter_error")
            or next((l for l in reversed(result.tail) if l.strip()), f"exit {result.returncode}")
        )
        job.progress.note(
            f"could not count in the run's process ({why}); ncu counts in a process of its own"
        )
        job.job = saved
        job.counting_fallback = why
        return None
    counted = json.loads(counts.read_text())
    if not counted["launches"] and not info.get("timed_launches"):
        from .errors import NoKernelsProfiled

        if job.req.program is not None:
            raise NoKernelsProfiled(
                f"CUPTI saw no kernel in the program's {job.req.options.iters} profiled steps: "
                f"it ran them on the CPU",
                f"Profile its CPU operators with --device cpu; the log is {timer_log}.",
            )
        raise NoKernelsProfiled(
            "CUPTI profiled no kernels: the measured iterations launched no kernel",
            f"Did the workload run its measured iterations on the GPU? The log is {timer_log}.",
        )
    functions = counted_functions(counted)
    counters.learn(info)
    counters.counted = len(functions)
    capture = _timed_capture(job, times, functions, info, gpu_info)
    capture.tool_version = asked.result()
    every = counted.get("range_mode", "all") == "all"
    plan: NcuPlan = {
        "launches": (
            (
                "every launch of one more step, counted by CUPTI's Range Profiler in the run's process (one "
                "range a launch"
                if every
                else "the first launch of each kernel function in one more step, counted by CUPTI's Range Profiler in "
                "the run's process (one user range a function, no duration counter: the timed duration stands"
            )
            + ", the step run once per pass); a function's verdict is its first launch's"
        ),
        "durations": "cupti",
        "profiled_launches": len(functions),
        "timed_by": "the run's harness (CUPTI activity records)",
        "counted_by": "CUPTI's Range Profiler, in the run's harness",
        "counted_launches": int(counted["launches"]),
        "counted_ranges": int(counted.get("ranges", counted["launches"])),
        "passes": int(counted["passes"]),
        "wall_s": {
            "profile": round(wall, 3),
            "count": float(counted["wall_s"]),
            "timing_harness": info.get("stages_s"),
        },
    }
    if counted.get("ranges_fallback"):
        plan["ranges_fallback"] = str(counted["ranges_fallback"])
    _keep_after(job, counters, capture, functions, plan)
    return capture, {
        "metric_set": f"{set_label} per function",
        "metrics": metrics,
        "command": job.harness_argv(),
        "profiled_wall_s": round(wall, 3),
        "raw_files": {
            "kernel-times": str(times),
            "kernel-counts": str(counts),
            "times-log": str(timer_log),
        },
        "info": RunInfo(ncu_plan=plan),
    }


def _ncu_progress(job: _Job) -> tuple[Callable[[str], None], dict[str, int]]:
    """A line reader for ncu's output that counts the launches it profiled (``seen["n"]``)."""
    seen = {"n": 0}

    def on_line(line: str) -> None:
        p = ncu.parse_progress(line)
        if p:
            index, name, passes = p
            seen["n"] = index + 1 if index is not None else seen["n"] + 1
            if job.progress.on_kernel:
                job.progress.on_kernel(seen["n"] - 1, name, passes)

    return on_line, seen


def _every_launch_instead(job: _Job, why: str) -> tuple[Capture[KernelRow], RunFields]:
    """The per-function plan's timing process could not time (CUPTI): every launch profiled
    under ncu instead, the run saying why."""
    job.progress.note(
        f"the process timing every launch failed ({why[:300]}): profiling every launch under ncu instead"
    )
    capture, row = _profile_ncu(job, per_function=False)
    row["info"] = replace(row.get("info") or RunInfo(), per_function_plan_failed=why)
    return capture, row


def _export_functions(
    exe: str, report: Path, folder: Path, raw_files: dict[str, str]
) -> tuple[dict[str, Counted], Capture[KernelRow]]:
    """ncu's raw page exported twice (names demangled and mangled, listed in ``raw_files``) and
    read as counted functions, with the export's capture (its GPU)."""
    from concurrent.futures import ThreadPoolExecutor

    from .parse.ncu_plan import ncu_functions

    csv_path, mangled = folder / "raw.csv", folder / "raw-mangled.csv"
    # The two exports read the same report: side by side, each an ncu process of its own.
    with ThreadPoolExecutor(2) as pool:
        texts = list(
            pool.map(
                lambda m: runner.capture(ncu.export_csv_argv(exe, report, mangled=m), timeout=900),
                (False, True),
            )
        )
    write_new(csv_path, texts[0], replace=True)
    write_new(mangled, texts[1], replace=True)
    raw_files.update({"ncu-csv": str(csv_path), "ncu-csv-mangled": str(mangled)})
    return ncu_functions(csv_path, mangled)


def _timed_capture(
    job: _Job,
    times: Path,
    functions: dict[str, Counted],
    info: HarnessInfo,
    gpu_pair: tuple[str | None, str | None],
) -> Capture[KernelRow]:
    """The timing harness's launches joined to the functions' counters (``parse.ncu_plan``)."""
    from .parse.ncu_plan import read_timed

    return read_timed(
        times,
        functions,
        job.tag,
        nvtx_ranges.DOMAIN,
        _thread_ids(info),
        info.get("iteration_ranges") == "process",
        gpu_pair,
    )


def _thread_ids(info: HarnessInfo) -> dict[int, int]:
    return {int(k): int(v) for k, v in (info.get("thread_ids") or {}).items()}


def _keep_after(
    job: _Job,
    counters: ncu_counters.CounterPlan,
    capture: Capture[KernelRow],
    functions: dict[str, Counted],
    plan: NcuPlan,
) -> None:
    """Once the run is stored, keep the counters its ncu read; the plan's ``counters`` says
    what the run took and added (filled in as it ends)."""
    counters.kept = len(counters.keepable(capture, functions)) if counters.known else 0
    plan["counters"] = counters.use()

    def keep(run: RunRecord) -> None:
        try:
            counters.keep(run, capture, functions)
        # the database's own trouble: the run is stored, only the cache missed
        except Exception as exc:
            why = exc.one_line() if isinstance(exc, ProfkitError) else str(exc)
            job.progress.note(f"could not keep this run's ncu counters for later runs: {why}")

    job.after.append(keep)


def _profile_torch(job: _Job) -> tuple[Capture[KernelRow], RunFields]:
    from .parse.kineto import read_kineto

    trace = job.folder / "trace.json.gz"
    job.job = replace(job.job, profiler="torch", trace_path=str(trace))
    job.write()
    argv = job.harness_argv()
    spec = job.req.spec
    where = "CPU operators" if spec.device == "cpu" else "CPU operators and CUDA kernels"
    ranks = f", {job.ranks} ranks under torchrun" if job.ranks > 1 else ""
    job.progress.stage(f"profiling {job.what(ranks)} with torch.profiler: {where}")
    log = job.folder / "torch.log"
    # Kineto's own chatter (and a GPU-less machine's "gpuGetDeviceCount failed") goes to the log.
    result, wall = job.stream(argv, log)
    if result.returncode != 0:
        last = next((l for l in reversed(result.tail) if l.strip()), "no output")
        raise ToolFailed(
            f"the profiled process failed (exit {result.returncode}): {last}", f"Its log is {log}."
        )
    traces = job.rank_paths("trace_path")
    for t in traces.values():
        if not t.exists():
            raise ToolFailed(f"torch.profiler wrote no trace at {t}", f"Its log is {log}.")
    job.progress.stage(
        "reading the trace" if job.ranks <= 1 else f"reading the {job.ranks} ranks' traces"
    )
    raw = {"kineto-json": str(traces[0])}
    if job.ranks > 1:
        from .parse.ranks import merge_ranks

        capture = merge_ranks({r: read_kineto(t) for r, t in traces.items()})
        raw.update({f"kineto-json-rank{r}": str(t) for r, t in traces.items()})
    else:
        capture = read_kineto(traces[0])
    info = job.info()
    capture.tool_version = info.get("torch_version")
    return capture, {
        "metric_set": None,
        "command": argv,
        "profiled_wall_s": round(wall, 3),
        "raw_files": {**raw, "log": str(log)},
        "info": RunInfo(report_bytes=sum(t.stat().st_size for t in traces.values())),
    }


def _profile_nsys(job: _Job) -> tuple[Capture[KernelRow], RunFields]:
    from .parse import export_nsys
    from .parse.nsys_sqlite import read_nsys_sqlite

    exe = nsys.find()
    tool_version = nsys.version(exe)
    base = job.folder / "report"
    # The harness brackets the measured iterations with cudaProfilerStart/Stop: the capture
    # holds them (on every thread) and not the warm-up or cuDNN's autotuning.
    job.job = replace(job.job, profiler="nsys")
    job.write()
    argv = nsys.profile_argv(
        exe,
        base,
        job.harness_argv(),
        job.req.options.cpu_sampling,
        job.req.options.context_switches,
    )
    ranks = f", {job.ranks} ranks under torchrun" if job.ranks > 1 else ""
    job.progress.stage(f"profiling {job.what(ranks)} under nsys")
    log = job.folder / "nsys.log"
    result, wall = job.stream(argv, log)
    report = base.with_suffix(".nsys-rep")
    qdstrm = base.with_suffix(".qdstrm")
    if not report.exists() and qdstrm.exists():
        why = next(
            (
                l.strip()
                for l in result.tail
                if "importer" in l.lower() or "importation" in l.lower()
            ),
            "nsys did not convert its raw stream",
        )
        job.progress.note(
            f"nsys left only {qdstrm.name} ({why}); converting it with nsys's importer"
        )
        report = nsys.import_qdstrm(qdstrm, exe)
    if result.returncode != 0 or not report.exists():
        last = next((l for l in reversed(result.tail) if l.strip()), "no output")
        raise ToolFailed(f"nsys failed (exit {result.returncode}): {last}", f"Its log is {log}.")
    job.progress.stage("exporting the report to SQLite")
    sqlite_path = export_nsys(report, job.folder)
    pids = job.rank_pids()
    if job.ranks > 1 and len(pids) < job.ranks:
        raise ToolFailed(
            f"only {len(pids)} of {job.ranks} ranks wrote what they ran", f"The log is {log}."
        )
    capture = read_nsys_sqlite(sqlite_path, ranks=pids)
    capture.tool_version = tool_version
    return capture, {
        "metric_set": None,
        "command": argv,
        "profiled_wall_s": round(wall, 3),
        "raw_files": {"nsys-rep": str(report), "nsys-sqlite": str(sqlite_path), "log": str(log)},
        "info": RunInfo(report_bytes=report.stat().st_size),
    }


DRIVERS: dict[str, Callable[[_Job], tuple[Capture[KernelRow], RunFields]]] = {
    "ncu": _profile_ncu,
    "torch": _profile_torch,
    "nsys": _profile_nsys,
}
