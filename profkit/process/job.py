"""The files profkit and a profiled process exchange, typed in one place: the job profkit writes
(:class:`HarnessJob`), the info the process writes back (``records.HarnessInfo``, read by
:func:`harness_info`), its error and traceback files (:func:`traceback_file`), each rank's names
for them (:func:`rank_file`), what the timer saw launched (:class:`StepLaunches`), and the
process's start (:func:`start`)."""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple, cast

from ..options import Spec
from ..records import HarnessInfo


@dataclass(frozen=True)
class HarnessJob:
    """The job file the parent writes (``launch.harness_job``, ``benchmark``) and
    ``python -m profkit.harness JOB.json`` reads: serialised by :meth:`to_json`, read by
    :meth:`read` (fields left out of the file take their defaults)."""

    spec: Spec  # what the workload is asked to build
    workload_path: str
    warmup: int
    iters: int
    tag: str  # the run's tag: its iteration ranges' names (nvtx_ranges)
    info_path: str  # what the harness learned (JSON), written at the end
    error_path: str | None = None  # a workload error, one line
    nproc_per_node: int = 1  # >1: one rank of a distributed job, started by torchrun
    profiler: Literal["torch", "nsys", "bench"] | None = (
        None  # none: ncu (its plain or per-function plan)
    )
    trace_path: str | None = None  # torch: the Kineto trace
    output_path: str | None = None  # bench: the last iteration's output tensor
    kernel_times_path: str | None = None  # ncu's per-function plan: CUPTI's kernel times
    attribution: bool = False  # operator ranges around the measured iterations (profkit.annotate)
    gpu_lock: str | None = None  # a lock file held from gpu_lock_at until the iterations end
    gpu_lock_at: Literal["prepare", "warmup"] = "prepare"
    # ncu's per-function plan: the process that only counts, under ncu, beside (or after) the
    # timing one, which is the run's harness: it ends without the interpreter's teardown.
    counting: bool = False
    # The per-function plan's first run: ``count_metrics`` counted on every launch of one more
    # step in this process (``profkit.kernel_counter``), written to ``counts_path``.
    count_metrics: list[str] | None = None
    counts_path: str | None = None
    # A program run as it is (``profkit.program``) instead of a workload file: its resolved
    # command line (argv, script or module, args), how its steps are found (``--step``), whether
    # it runs to its end after the window, and whether the whole of it is the one window (no
    # step was found in a first run).
    program: dict[str, Any] | None = None
    step: str = "auto"
    run_to_end: bool = False
    whole_program: bool = False
    # profkit tune's trial of a program: the model fixes applied to it (process.fixes.MODEL_FIXES)
    fixes: list[str] | None = None

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None}, indent=2)

    @classmethod
    def read(cls, path: str | Path) -> HarnessJob:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(**{**data, "spec": Spec(**data["spec"])})


def harness_info(path: Path) -> HarnessInfo:
    """The info file a harness wrote (see :class:`profkit.records.HarnessInfo`); empty where it
    wrote none or it cannot be read (the harness died first)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return cast(HarnessInfo, data) if isinstance(data, dict) else {}


def start(argv: list[str] | None, module: str) -> tuple[HarnessJob, dict[str, int] | None] | None:
    """A profiled process's start (``python -m profkit.<module> JOB.json``): watch the profkit
    that started it, read the job, and for a rank of a distributed job take its rank's files and
    end with torchrun. None (after the usage line) for a bad command line."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(f"usage: python -m profkit.{module} JOB.json", file=sys.stderr)
        return None
    from ..tools.runner import watch_lifeline

    # Whatever ends the profkit that started this process (SIGKILL, the OOM killer), this
    # process and its group (the profiler above it, any workers below) end at once with it.
    watch_lifeline(lambda: os.killpg(os.getpgrp(), signal.SIGKILL))
    job = HarnessJob.read(argv[0])
    ranks = rank_of_job(job)
    if ranks is not None:
        from ..tools.runner import die_with_parent

        # torchrun starts each rank in a session of its own: a timeout or Ctrl-C that ends
        # torchrun's process group would not reach a rank waiting in a collective. And when
        # torchrun stops its ranks (SIGINT, SIGTERM), a rank blocked in a collective never gets
        # back to Python to raise KeyboardInterrupt: it ends at once instead.
        die_with_parent(os.getppid(), signal.SIGKILL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        job = per_rank_job(job, ranks["rank"])
    return job, ranks


# ------------------------------------------------------------------------------ distributed jobs
def rank_file(path: str, rank: int) -> str:
    """The file of ``rank`` for one the job names: ``harness.json`` -> ``harness.rank1.json``,
    ``trace.json.gz`` -> ``trace.rank1.json.gz``."""
    p = Path(path)
    stem, dot, rest = p.name.partition(".")
    return str(p.with_name(f"{stem}.rank{rank}{dot}{rest}"))


RANK_FILES: tuple[Literal["info_path", "error_path", "trace_path"], ...] = (
    "info_path",
    "error_path",
    "trace_path",
)


def rank_of_job(job: HarnessJob) -> dict[str, int] | None:
    """rank, local_rank and world_size where torchrun started this process for a job of
    several processes; None otherwise."""
    if job.nproc_per_node <= 1 or "RANK" not in os.environ:
        return None
    return {
        "rank": int(os.environ["RANK"]),
        "local_rank": int(os.environ.get("LOCAL_RANK", 0)),
        "world_size": int(os.environ.get("WORLD_SIZE", 1)),
    }


def per_rank_job(job: HarnessJob, rank: int) -> HarnessJob:
    paths: dict[str, Any] = {k: rank_file(v, rank) for k in RANK_FILES if (v := getattr(job, k))}
    return replace(job, **paths)


def traceback_file(error_path: str | Path) -> Path:
    """Where the harness writes the traceback of the error in ``error_path``
    (``harness-error.txt`` -> ``harness-error.traceback.txt``)."""
    p = Path(error_path)
    stem, dot, rest = p.name.partition(".")
    return p.with_name(f"{stem}.traceback{dot}{rest}")


class StepLaunches(NamedTuple):
    """What the kernel timer saw launched: ``last``, the last measured iteration's kernels in
    launch order (mangled name, thread blocks in the grid), which name the counted step's
    ranges; ``functions``, every kernel function of the measured iterations."""

    last: list[tuple[str, int]]
    functions: set[str]
