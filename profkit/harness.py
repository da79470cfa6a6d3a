"""The process a profiler launches: build the workload, warm it up outside any measured range,
then run the measured iterations, each inside its own NVTX start/end range (the process's,
not a thread's: see ``nvtx_ranges``), and write what it
learned of the machine (GPU, versions, per-iteration wall times) to a JSON file.

With ``"profiler": "torch"`` in the job, the harness is its own profiler: torch.profiler
records the measured iterations only (CPU operators with their input types, and CUDA
activity on a GPU), each also inside a ``record_function`` range of the same name, and the
Kineto trace is written to the job's ``trace_path``.

With ``"profiler": "bench"`` (``profkit bench``) it times each measured iteration instead
(``_bench``).

Started by torchrun (``profkit run --nproc-per-node N``: the job says ``nproc_per_node``), it is
one rank of a distributed job: it takes the GPU of its LOCAL_RANK, joins the process group
(NCCL on GPUs, gloo on the CPU) before the workload is built, so that the workload can wrap
its model in DistributedDataParallel, and writes its files with ``.rank<RANK>`` in their names
(:func:`rank_file`). The ranks wait for each other (on a CPU-side gloo group: no GPU work)
before the measured iterations and after them, so that each profiler's window holds every
rank's iterations.

Run as ``python -m profkit.harness JOB.json``; the parent (``profkit.launch``) writes the job
file. This module is the only one that imports torch at the top of a profiled process.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator, Literal, NamedTuple, NoReturn, cast

from .files import write_new
from .options import Spec
from .records import HarnessInfo

if TYPE_CHECKING:
    import torch as _torch

    from .kernel_timer import KernelTimer


@dataclass(frozen=True)
class HarnessJob:
    """The job file the parent writes (``launch.harness_job``, ``benchmark``) and
    ``python -m profkit.harness JOB.json`` reads: serialised by :meth:`to_json`, read by
    :meth:`read` (fields left out of the file take their defaults)."""

    spec: Spec                      # what the workload is asked to build
    workload_path: str
    warmup: int
    iters: int
    tag: str                        # the run's tag: its iteration ranges' names (nvtx_ranges)
    info_path: str                  # what the harness learned (JSON), written at the end
    error_path: str | None = None   # a workload error, one line
    nproc_per_node: int = 1         # >1: one rank of a distributed job, started by torchrun
    profiler: Literal["torch", "nsys", "bench"] | None = None  # none: ncu (its plain or per-function plan)
    trace_path: str | None = None   # torch: the Kineto trace
    output_path: str | None = None  # bench: the last iteration's output tensor
    kernel_times_path: str | None = None  # ncu's per-function plan: CUPTI's kernel times
    attribution: bool = False       # operator ranges around the measured iterations (profkit.annotate)
    gpu_lock: str | None = None     # a lock file held from gpu_lock_at until the iterations end
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
    from .tools.runner import watch_lifeline

    # Whatever ends the profkit that started this process (SIGKILL, the OOM killer), this
    # process and its group (the profiler above it, any workers below) end at once with it.
    watch_lifeline(lambda: os.killpg(os.getpgrp(), signal.SIGKILL))
    job = HarnessJob.read(argv[0])
    ranks = _rank_of_job(job)
    if ranks is not None:
        from .tools.runner import die_with_parent

        # torchrun starts each rank in a session of its own: a timeout or Ctrl-C that ends
        # torchrun's process group would not reach a rank waiting in a collective. And when
        # torchrun stops its ranks (SIGINT, SIGTERM), a rank blocked in a collective never gets
        # back to Python to raise KeyboardInterrupt: it ends at once instead.
        die_with_parent(os.getppid(), signal.SIGKILL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        job = _per_rank_job(job, ranks["rank"])
    return job, ranks


def main(argv: list[str] | None = None) -> int:
    started = start(argv, "harness")
    if started is None:
        return 2
    job, ranks = started
    if job.profiler == "bench":  # profkit bench: times iterations; no profiler, no ranges
        return _bench(job)
    # Seconds since the process began its work, at each stage: where a profiled run's time goes.
    began = time.perf_counter()
    stages: dict[str, float] = {}

    def stage(name: str) -> None:
        stages[name] = round(time.perf_counter() - began, 3)

    from .errors import ProfkitError

    try:
        import torch

        stage("torch_imported")
        barrier = _join_process_group(torch, job, ranks) if ranks is not None else (lambda: None)
        spec, step = _build(job)
        stage("built")
    except ProfkitError as exc:
        return _fail(job, exc.one_line(), exc)
    except Exception as exc:  # torch.jit.trace runs the model while it builds
        return _fail(job, f"preparing {Path(job.workload_path).stem} in {job.spec.precision}, {job.spec.mode} failed: "
                          f"{_error_line(exc)}", exc)

    sync = torch.cuda.synchronize if spec.device == "cuda" else (lambda: None)
    info = _machine(torch, spec)
    info["pid"] = os.getpid()
    if ranks is not None:
        info["rank"], info["local_rank"], info["world_size"] = ranks["rank"], ranks["local_rank"], ranks["world_size"]

    _gpu_lock(job, "warmup")
    stage("gpu_turn")
    t0 = time.perf_counter()
    try:
        for _ in range(job.warmup):
            step()  # torch.compile compiles here, on the first call
        sync()
    except Exception as exc:  # the user's model, or the compiler on it
        what = f"torch.compile ({spec.compile_mode}) failed on" if spec.mode == "compile" else "the warm-up failed for"
        return _fail(job, f"{what} {Path(job.workload_path).stem} in {spec.precision}: {_error_line(exc)}", exc)
    info["warmup_s"] = time.perf_counter() - t0
    stage("warmed_up")
    if spec.mode == "compile":
        info["compile_mode"] = spec.compile_mode

    iter_ns: list[int] = []
    scaler = getattr(step, "scaler", None)  # an AMP training step's GradScaler (profkit.steps)
    scale_before = scaler.get_scale() if scaler is not None else None
    barrier()  # every rank starts its measured iterations together
    try:
        launched = _measure(job, spec, step, sync, barrier, info, iter_ns)
    except Exception as exc:  # the user's model in a measured iteration
        hint = " (it ran under profkit's operator ranges for attribution: try --no-attribution)" \
            if info.get("attribution") == "ranges" else ""
        return _fail(job, f"a measured iteration failed for {Path(job.workload_path).stem} in {spec.precision}: "
                          f"{_error_line(exc)}{hint}", exc)
    stage("measured")
    if scaler is not None and scale_before:
        # Each overflow halves the scale (it grows only every 2000 clean steps).
        skipped = round(math.log2(scale_before / scaler.get_scale())) if scaler.get_scale() else len(iter_ns)
        info["amp_skipped_steps"] = max(0, min(skipped, len(iter_ns)))
    # After the measured iterations and their AMP scale: the counted steps change neither.
    if job.counts_path and job.count_metrics and spec.device == "cuda":
        _count(job, step, sync, info, torch, launched)
        stage("counted")
    info["iteration_wall_ns"] = iter_ns
    info["iteration_ranges"] = "process"  # start/end ranges (older runs: push/pop, the main thread's)
    info["stages_s"] = stages
    write_new(job.info_path, json.dumps(info, indent=2), replace=True)
    if ranks is not None:
        barrier()
        import torch.distributed as dist

        dist.destroy_process_group()
    elif job.counting and spec.mode != "compile" and _alone():
        _leave(0)
    return 0


def _alone() -> bool:
    """Whether nothing the workload started is still running: no child process of
    multiprocessing's (a DataLoader's workers) and no thread that Python would wait for."""
    mp = sys.modules.get("multiprocessing")
    if mp is not None and mp.active_children():
        return False
    import threading

    return not any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread())


def _leave(rc: int) -> NoReturn:
    """End the counting process of ncu's per-function plan at once, without Python's and CUDA's
    teardown, which took 0.4-0.8 s of a first run's critical path on the H100 (the counting
    process under ncu ends last). Everything it makes is written by then: ncu has each profiled
    launch's results as it profiles it, and the info file is on disk. It is a second run of the
    workload: the timing process, the run's harness, ends normally (the workload's exit
    handlers run there). Only where the workload left nothing running (``_alone``): a process or
    thread of its own is ended, or waited for, by that teardown. A compiled model's harness
    ends normally too: its compile workers are shut down then, and ncu waits for every process
    of the tree."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or replaced by the workload: nothing to keep
            pass
    os._exit(rc)


def _measure(job: HarnessJob, spec: Spec, step: Callable[[], Any], sync: Callable[[], None], barrier: Callable[[], None],
             info: HarnessInfo, iter_ns: list[int]) -> "StepLaunches | None":
    """The measured iterations, each in its NVTX range, under the job's profiler: torch.profiler
    here (the trace written), or between cudaProfilerStart and Stop for nsys, or timed by
    CUPTI for ncu's per-function plan. With ``job.attribution``, every operator call of an
    eager or TorchScript model is in a range of its own (:mod:`profkit.annotate`); a compiled
    model's kernels are traced from Inductor's output code instead. Returns what the timer saw
    launched, where the job counts (``count_metrics``): the counted step's ranges."""
    import nvtx
    import torch

    from . import annotate, nvtx_ranges

    run_tag = job.tag
    # A compiled model's generated kernels are traced from Inductor's code: a dispatch mode or
    # module hooks in its measured iterations would make Dynamo compile again (seen on torch 2.11).
    # The operators its code calls itself (extern GEMMs, cuDNN attention) get ranges under the
    # Nsight tools; torch.profiler records them with their input types anyway.
    compiled = spec.mode == "compile"
    ranges = job.attribution and not (compiled and job.profiler == "torch")
    if compiled and job.kernel_times_path:  # the timing process of ncu's per-function plan
        info["generated_kernels"] = annotate.generated_kernel_digests()
    if job.attribution and compiled:
        info["compiled_kernels"] = annotate.compiled_kernels()
        info["attribution"] = "compiled"
    elif not job.attribution:
        info["attribution"] = "off"
    if job.profiler == "torch":
        from torch.profiler import ProfilerActivity, profile, record_function

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if spec.device == "cuda" else [])
        with profile(activities=activities, record_shapes=True) as prof:
            with _annotated(info, ranges, annotate.record_function_backend):
                for i in range(job.iters):
                    with record_function(nvtx_ranges.iteration_range(run_tag, i)):
                        _iteration(nvtx, nvtx_ranges, run_tag, i, step, sync, iter_ns)
        prof.export_chrome_trace(job.trace_path)
        return None
    # Under nsys the capture range is cudaProfilerStart..Stop: the measured iterations only.
    bracket = job.profiler == "nsys" and spec.device == "cuda"
    if bracket:
        torch.cuda.profiler.start()
    timer = _kernel_timer(job, info)
    launched: StepLaunches | None = None
    log = annotate.IntervalLog(timer.now, *annotate.nvtx_backend()) if timer and ranges else None
    with _annotated(info, ranges, lambda: (log.push, log.pop) if log else annotate.nvtx_backend(), compiled):
        for i in range(job.iters):
            if timer:
                timer.mark(f"iter{i}.start")
            _iteration(nvtx, nvtx_ranges, run_tag, i, step, sync, iter_ns)
            if timer:
                timer.mark(f"iter{i}.end")
    barrier()  # the capture ends once every rank's iterations have
    if bracket:
        torch.cuda.profiler.stop()
    if timer:
        timer.stop()
        info["timed_launches"] = len(timer.kernels)
        if job.count_metrics:  # the last step's kernels in launch order: the counted step's ranges
            marks = dict(timer.marks)
            lo, hi = marks.get(f"iter{job.iters - 1}.start", 0), marks.get(f"iter{job.iters - 1}.end", 0)
            ordered = sorted(timer.kernels, key=lambda k: int(k["correlation"]))
            first = marks.get("iter0.start", 0)
            launched = StepLaunches([(str(k["name"]), math.prod(k["grid"])) for k in ordered if lo <= int(k["start"]) <= hi],
                                    {str(k["name"]) for k in ordered if first <= int(k["start"]) <= hi})
    _release_gpu_lock()  # the other harness may start its GPU work while this one writes
    if job.kernel_times_path:
        _code_environment(job, info)
    if timer and job.kernel_times_path:
        timer.write(Path(job.kernel_times_path), log.to_json() if log else None)
    return launched


def _code_environment(job: HarnessJob, info: HarnessInfo) -> None:
    """What ncu's counters kept from this run are kept under besides what the parent reads
    (``code_versions``): the native libraries this process mapped and the workload's own
    sources, read once the measured iterations have run (cuDNN's engines and cuBLASLt load on
    first use) and before anything counts here (the counter's libraries are not the workload's)."""
    from . import annotate, code_versions

    info["native_libraries"] = code_versions.native_libraries()
    info["workload_sources"] = code_versions.workload_sources(Path(job.workload_path),
                                                              generated=annotate.output_code_files())


@contextmanager
def _annotated(info: HarnessInfo, on: bool,
               backend: Callable[[], tuple[Callable[[str], Any], Callable[[], Any]]],
               compiled: bool = False) -> Iterator[None]:
    """The block with operator ranges (``on``; of a compiled model's own operator calls where
    ``compiled``), else as it is. A model the annotator cannot follow still runs: the run then
    says why it has no attribution."""
    annotator = _annotator(info, backend, compiled) if on else None
    if annotator is None:
        yield
        return
    try:
        yield
    finally:
        annotator.__exit__(None, None, None)


def _annotator(info: HarnessInfo, backend: Callable[[], tuple[Callable[[str], Any], Callable[[], Any]]],
               compiled: bool, optimizer_hooks: bool = True) -> Any:
    """An entered Annotator (CompiledTracer for a compiled model), or None (and why in ``info``);
    ``optimizer_hooks`` False: the caller tells the Annotator of optimizer steps itself."""
    from .annotate import Annotator, CompiledTracer

    try:
        annotator = CompiledTracer(*backend()) if compiled else Annotator(*backend(), optimizer_hooks=optimizer_hooks)
        annotator.__enter__()
    except Exception as exc:  # an older torch without the hooks the annotator needs
        info["attribution"] = "off"
        info["attribution_note"] = f"operator ranges could not start: {_error_line(exc)}"
        return None
    info["attribution"] = "compiled" if compiled else "ranges"
    return annotator


# ------------------------------------------------------------------------------ distributed jobs
def rank_file(path: str, rank: int) -> str:
    """The file of ``rank`` for one the job names: ``harness.json`` -> ``harness.rank1.json``,
    ``trace.json.gz`` -> ``trace.rank1.json.gz``."""
    p = Path(path)
    stem, dot, rest = p.name.partition(".")
    return str(p.with_name(f"{stem}.rank{rank}{dot}{rest}"))


RANK_FILES: tuple[Literal["info_path", "error_path", "trace_path"], ...] = ("info_path", "error_path", "trace_path")


def _rank_of_job(job: HarnessJob) -> dict[str, int] | None:
    """rank, local_rank and world_size where torchrun started this process for a job of
    several processes; None otherwise."""
    if job.nproc_per_node <= 1 or "RANK" not in os.environ:
        return None
    return {"rank": int(os.environ["RANK"]), "local_rank": int(os.environ.get("LOCAL_RANK", 0)),
            "world_size": int(os.environ.get("WORLD_SIZE", 1))}


def _per_rank_job(job: HarnessJob, rank: int) -> HarnessJob:
    paths: dict[str, Any] = {k: rank_file(v, rank) for k in RANK_FILES if (v := getattr(job, k))}
    return replace(job, **paths)


def _join_process_group(torch: Any, job: HarnessJob, ranks: dict[str, int]) -> Callable[[], None]:
    """Take this rank's GPU and join the default process group (NCCL on GPUs, gloo on the
    CPU) from torchrun's environment; a workload's own ``init_process_group`` then does
    nothing. Return a barrier of every rank that runs on the CPU (a gloo group), so that
    waiting launches no GPU work into a capture."""
    import torch.distributed as dist

    from .errors import ProfkitError

    cuda = job.spec.device == "cuda"
    try:
        if cuda:
            _need_cuda(torch)
            if ranks["local_rank"] >= torch.cuda.device_count():
                raise ProfkitError(f"rank {ranks['rank']} needs GPU {ranks['local_rank']}, but PyTorch sees "
                                   f"{torch.cuda.device_count()}")
            torch.cuda.set_device(ranks["local_rank"])
            dist.init_process_group("nccl", device_id=torch.device("cuda", ranks["local_rank"]))
            group = dist.new_group(backend="gloo")
        else:
            dist.init_process_group("gloo")
            group = None
    except ProfkitError:
        raise
    except Exception as exc:
        raise ProfkitError(f"rank {ranks['rank']} could not join the process group: {_error_line(exc)}") from None

    # A DDP script joins the group itself first thing: in a workload run here, the group is
    # joined already, and its own call does nothing (rather than fail "twice").
    def already_joined(*args: Any, **kwargs: Any) -> None:
        return None

    dist.init_process_group = already_joined
    dist.distributed_c10d.init_process_group = already_joined
    return lambda: dist.barrier(group=group)


def _build(job: HarnessJob, observe: Callable[[Any], None] | None = None) -> tuple[Spec, Callable[[], Any]]:
    """The job's spec and its workload built for it: the GPU checked, the file loaded and held
    to what it declares (``observe`` sees the module first), torch seeded, the step prepared."""
    import torch

    from . import workloads

    spec = job.spec
    if spec.device == "cuda":
        _need_cuda(torch)
    path = Path(job.workload_path)
    module = workloads.load_module(path)
    workloads.check_supported(module, spec, path)
    if observe is not None:
        observe(module)
    _gpu_lock(job, "prepare")
    # The same weights and inputs in every run of a workload, whichever tool (and in every
    # combination of a benchmark): a training step's AMP loss scaler then overflows (and
    # skips the optimizer) in the same steps.
    torch.manual_seed(0)
    return spec, workloads.prepare(module, spec)


def _need_cuda(torch: Any) -> None:
    from .errors import ProfkitError

    if not torch.cuda.is_available():
        raise ProfkitError("no CUDA GPU is visible to PyTorch", "Use `device` cpu, or check the driver.")


def _machine(torch: Any, spec: Spec) -> HarnessInfo:
    """What the process ran on: versions, and the GPU where it used one."""
    info: HarnessInfo = {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device": spec.device,
        "python": sys.version.split()[0],
    }
    if spec.device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        info["gpu_name"] = props.name
        info["compute_capability"] = f"{props.major}.{props.minor}"
    return info


def _iteration(nvtx: Any, nvtx_ranges: ModuleType, run_tag: str, i: int, step: Callable[[], Any],
               sync: Callable[[], None], iter_ns: list[int]) -> None:
    # A start/end range: the process's, so the kernels other threads launch in the step
    # (autograd's backward) are in it for ncu's filter and for nsys (see nvtx_ranges).
    start = time.perf_counter_ns()
    handle = nvtx.start_range(nvtx_ranges.iteration_range(run_tag, i), domain=nvtx_ranges.DOMAIN)
    step()
    sync()
    nvtx.end_range(handle)
    iter_ns.append(time.perf_counter_ns() - start)


def _gpu_lock(job: HarnessJob, stage: str) -> None:
    """With ``gpu_lock`` in the job: wait for that lock file at ``gpu_lock_at`` (``prepare``:
    before the workload is built, which may already run it, as TorchScript's tracing does; or
    ``warmup``), and hold it until the measured iterations are done. ncu's per-function plan
    runs two harnesses at once: one under ncu, counting, and one timing every launch through
    CUPTI, which locks before ``warmup``. Their imports and model building overlap; nothing of
    the counting process runs on the GPU while the timing one warms up and measures, so its
    times are the workload's alone."""
    if not job.gpu_lock or job.gpu_lock_at != stage:
        return
    import fcntl

    handle = open(job.gpu_lock, "a")
    fcntl.flock(handle, fcntl.LOCK_EX)
    _HELD.append(handle)


_HELD: list[IO[str]] = []  # the lock's open file, kept (and so held) until released


def _release_gpu_lock() -> None:
    import fcntl

    while _HELD:
        handle = _HELD.pop()
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


class StepLaunches(NamedTuple):
    """What the kernel timer saw launched: ``last``, the last measured iteration's kernels in
    launch order (mangled name, thread blocks in the grid), which name the counted step's
    ranges; ``functions``, every kernel function of the measured iterations."""

    last: list[tuple[str, int]]
    functions: set[str]


def _count(job: HarnessJob, step: Callable[[], Any], sync: Callable[[], None], info: HarnessInfo, torch: Any,
           launched: StepLaunches | None) -> None:
    """The counters of one more step's launches, counted here (``profkit.kernel_counter``) and
    written to ``job.counts_path``; where CUPTI cannot count it, the reason in ``info`` and no file
    (the parent then counts under ncu)."""
    from .kernel_counter import CounterUnavailable, count_step

    assert job.counts_path and job.count_metrics
    if info.get("kernel_timer_error") or launched is None:
        return  # no timed step to name the counted launches: the parent says why
    if not launched.last:  # nothing launched: nothing to count (the parent says so)
        write_new(job.counts_path, json.dumps({"functions": {}, "passes": 0, "launches": 0, "wall_s": 0.0}),
                  replace=True)
        return
    missed = launched.functions - {name for name, _ in launched.last}
    if missed:
        info["kernel_counter_error"] = (f"{len(missed)} kernel functions of the earlier measured iterations are not in "
                                        f"the last (first: {min(missed)[:80]}): one more step would not count them")
        return
    try:
        counts = count_step(step, sync, job.count_metrics, list(launched.last), torch.cuda.current_device())
    except CounterUnavailable as exc:
        info["kernel_counter_error"] = str(exc)
        return
    except Exception as exc:  # the user's step, run again for each pass
        info["kernel_counter_error"] = f"counting the step failed: {_error_line(exc)}"
        return
    write_new(job.counts_path, json.dumps(counts), replace=True)


def _kernel_timer(job: HarnessJob, info: HarnessInfo) -> KernelTimer | None:
    """With ``kernel_times_path`` in the job (ncu's per-function plan): CUPTI's activity
    records time every kernel of the measured iterations; None, and the reason in ``info``,
    where CUPTI cannot be used."""
    if not job.kernel_times_path:
        return None
    import threading

    from .kernel_timer import CuptiUnavailable, KernelTimer

    # CUPTI names a launching thread by the low 32 bits of its pthread id; the kernel table by
    # its OS thread id.
    info["thread_ids"] = {str(threading.get_ident() & 0xFFFFFFFF): threading.get_native_id()}

    try:
        timer = KernelTimer()
        timer.start()
    except CuptiUnavailable as exc:
        info["kernel_timer_error"] = str(exc)
        return None
    return timer


def _fail(job: HarnessJob, text: str, exc: BaseException | None = None) -> int:
    """Report a workload error to profkit through the job's error file (not through output:
    the workload may print anything) and to the log; exit status 3. With the exception that
    caused it, its whole traceback (the user's own failing line in it) goes to the log and to
    :func:`traceback_file` beside the error file, where profkit picks it up."""
    trace = _traceback_text(exc) if exc is not None else None
    if trace:
        print(trace, file=sys.stderr, end="" if trace.endswith("\n") else "\n")
    print(f"profkit-harness: error: {text}", file=sys.stderr)
    if job.error_path:
        if trace:
            write_new(traceback_file(job.error_path), trace, replace=True)
        write_new(job.error_path, text, replace=True)
    return 3


def traceback_file(error_path: str | Path) -> Path:
    """Where the harness writes the traceback of the error in ``error_path``
    (``harness-error.txt`` -> ``harness-error.traceback.txt``)."""
    p = Path(error_path)
    stem, dot, rest = p.name.partition(".")
    return p.with_name(f"{stem}.traceback{dot}{rest}")


def _traceback_text(exc: BaseException) -> str | None:
    """The traceback of what the workload raised: the error a ProfkitError wraps (the user's
    exception at import or build), else ``exc`` itself; None for a ProfkitError of profkit's
    own making (a file that declares no build(), no GPU), which has no user's line to show."""
    import traceback

    from .errors import ProfkitError

    cause = exc.__cause__ if isinstance(exc, ProfkitError) else exc
    if cause is None:
        return None
    return "".join(traceback.format_exception(cause))


# ------------------------------------------------------------------------------ profkit bench
def _bench(job: HarnessJob) -> int:
    """``"profiler": "bench"``: no profiler, no ranges, no GPU lock. Seed torch before the build
    (every combination of a benchmark gets the same weights and inputs), build, run ``warmup``
    iterations (torch.compile compiles there), then time each of ``iters`` iterations alone:
    CUDA events recorded around it and waited for on a GPU, ``time.perf_counter_ns`` on the CPU.
    Writes to ``info_path`` the times, the peak GPU memory of the measured iterations (the peak
    is reset after the warm-up to what is allocated then, weights included) and whether the
    workload built ``(model, inputs)``; for those, the last iteration's output (its first
    tensor) as an fp32 CPU tensor at ``output_path``, which the parent compares with fp32
    eager's. A step function's return value is its own (a loss, or nothing): not compared."""
    from .errors import ProfkitError

    path = Path(job.workload_path)
    began = time.perf_counter()
    built_model: list[bool] = []
    try:
        import torch

        def observe(module: Any) -> None:  # what prepare() is given tells a model from a step function
            build = module.build

            def observed_build(s: Spec) -> Any:  # whatever the workload's build returns
                built = build(s)
                built_model.append(isinstance(built, tuple) and len(built) == 2
                                   and isinstance(built[0], torch.nn.Module))
                return built

            module.build = observed_build

        spec, step = _build(job, observe)
    except ProfkitError as exc:
        return _fail(job, exc.one_line(), exc)
    except Exception as exc:  # torch.jit.trace runs the model while it builds
        asked = job.spec
        return _fail(job, f"preparing {path.stem} in {asked.precision}, {asked.mode} failed: "
                          f"{_error_line(exc)}", exc)

    cuda = spec.device == "cuda"
    info = _machine(torch, spec)
    info["model"] = bool(built_model and built_model[0])
    iter_ns: list[int] = []
    phase = "warm-up"
    out = None
    try:
        for _ in range(job.warmup):
            out = step()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        info["build_and_warmup_s"] = round(time.perf_counter() - began, 3)
        phase = "measured iterations"
        for _ in range(job.iters):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                out = step()
                end.record()
                end.synchronize()
                iter_ns.append(round(start.elapsed_time(end) * 1e6))  # ms -> ns
            else:
                t0 = time.perf_counter_ns()
                out = step()
                iter_ns.append(time.perf_counter_ns() - t0)
    except Exception as exc:  # the user's model, or the compiler on it
        what = (f"torch.compile ({spec.compile_mode}) failed on" if spec.mode == "compile" and phase == "warm-up"
                else f"the {phase} failed for")
        return _fail(job, f"{what} {path.stem} in {spec.precision}, {spec.mode}: {_error_line(exc)}", exc)
    info["iter_ns"] = iter_ns
    info["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated()) if cuda else None
    output = _first_tensor(out, torch) if info["model"] else None
    if output is not None:
        torch.save(output.detach().to("cpu", torch.float32).clone(), job.output_path)
    info["output_saved"] = output is not None
    write_new(job.info_path, json.dumps(info, indent=2), replace=True)
    return 0


def _first_tensor(value: object, torch: Any) -> _torch.Tensor | None:
    """A model's output tensor: itself, or the first tensor in a tuple, list or dict (logits
    first, as models return them); None if it holds none."""
    if isinstance(value, torch.Tensor):
        return value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    for item in items:
        found = _first_tensor(item, torch)
        if found is not None:
            return found
    return None


def _error_line(exc: BaseException) -> str:
    """An exception as one line: its type and first line, TorchDynamo's "Explanation:" line
    (its errors say what went wrong there, below a generic first line), and the error it wraps
    (the compiler may wrap the model's own: name that one too)."""
    lines = [line.strip() for line in str(exc).strip().splitlines()] or [""]
    text = f"{type(exc).__name__}: {lines[0][:300]}"
    why = next((line for line in lines[1:] if line.startswith("Explanation:")), None)
    if why:
        text += f" ({why[:400]})"
    cause = exc.__cause__
    if cause is not None:
        text += f" ({type(cause).__name__}: {(str(cause).strip().splitlines() or [''])[0][:300]})"
    return text


if __name__ == "__main__":
    sys.exit(main())
