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
file (``process.job``). How the measured iterations are profiled is ``process.record``'s, the
same for a user's program (``profkit.program``); what both kinds of process share is in
``process.common``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .files import write_new
from .options import Spec
from .process.common import (
    error_line,
    fail,
    gpu_lock,
    machine,
    need_cuda,
    release_gpu_lock,
)
from .process.fixes import apply_switches, first_tensor
from .process.job import HarnessJob, start
from .process.job import StepLaunches as StepLaunches  # here for harness.StepLaunches
from .process.record import countable, recorder
from .processes import alone, leave
from .records import HarnessInfo


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

    switched: dict[str, Any] = {}
    try:
        import torch

        stage("torch_imported")
        barrier = _join_process_group(torch, job, ranks) if ranks is not None else (lambda: None)
        spec, step = _build(job, switched)
        stage("built")
    except ProfkitError as exc:
        return fail(job, exc.one_line(), exc)
    except Exception as exc:  # torch.jit.trace runs the model while it builds
        return fail(
            job,
            f"preparing {Path(job.workload_path).stem} in {job.spec.precision}, {job.spec.mode} failed: "
            f"{error_line(exc)}",
            exc,
        )

    sync = torch.cuda.synchronize if spec.device == "cuda" else (lambda: None)
    info = machine(torch, spec)
    info.update(switched)  # type: ignore[typeddict-item]
    info["pid"] = os.getpid()
    if ranks is not None:
        info["rank"], info["local_rank"], info["world_size"] = (
            ranks["rank"],
            ranks["local_rank"],
            ranks["world_size"],
        )

    gpu_lock(job, "warmup")
    stage("gpu_turn")
    t0 = time.perf_counter()
    # the warm-up steps after the first, each to a sync: the unprofiled step's wall time
    bare: list[int] = []
    try:
        for i in range(job.warmup):
            step_began = time.perf_counter_ns()
            step()  # torch.compile compiles here, on the first call
            sync()
            if i:
                bare.append(time.perf_counter_ns() - step_began)
    except Exception as exc:  # the user's model, or the compiler on it
        what = (
            f"torch.compile ({spec.compile_mode}) failed on"
            if spec.mode == "compile"
            else "the warm-up failed for"
        )
        return fail(
            job,
            f"{what} {Path(job.workload_path).stem} in {spec.precision}: {error_line(exc)}",
            exc,
        )
    info["warmup_s"] = time.perf_counter() - t0
    info["bare_iteration_ns"] = bare
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
        hint = (
            " (it ran under profkit's operator ranges for attribution: try --no-attribution)"
            if info.get("attribution") == "ranges"
            else ""
        )
        return fail(
            job,
            f"a measured iteration failed for {Path(job.workload_path).stem} in {spec.precision}: "
            f"{error_line(exc)}{hint}",
            exc,
        )
    stage("measured")
    if scaler is not None and scale_before:
        # Each overflow halves the scale (it grows only every 2000 clean steps).
        skipped = (
            round(math.log2(scale_before / scaler.get_scale()))
            if scaler.get_scale()
            else len(iter_ns)
        )
        info["amp_skipped_steps"] = max(0, min(skipped, len(iter_ns)))
    # After the measured iterations and their AMP scale: the counted steps change neither.
    if job.counts_path and job.count_metrics and spec.device == "cuda":
        _count(job, step, sync, info, torch, launched)
        stage("counted")
    info["iteration_wall_ns"] = iter_ns
    info["iteration_ranges"] = (
        "process"  # start/end ranges (older runs: push/pop, the main thread's)
    )
    info["stages_s"] = stages
    write_new(job.info_path, json.dumps(info, indent=2), replace=True)
    if ranks is not None:
        barrier()
        import torch.distributed as dist

        dist.destroy_process_group()
    elif (job.counting or job.kernel_times_path) and spec.mode != "compile" and alone():
        # ncu's counting process, or the per-function plan's timing one (no profiler outside
        # it: nothing waits for its exit but profkit)
        leave(0, exit_handlers=not job.counting)
    return 0


def _measure(
    job: HarnessJob,
    spec: Spec,
    step: Callable[[], Any],
    sync: Callable[[], None],
    barrier: Callable[[], None],
    info: HarnessInfo,
    iter_ns: list[int],
) -> StepLaunches | None:
    """The measured iterations, each in its step range, under the job's profiler (the way
    ``process.record.recorder`` chooses: torch.profiler here, nsys's capture range, CUPTI's
    timer for ncu's per-function plan, or ncu's NVTX filter). Returns what the timer saw
    launched, where the job counts (``count_metrics``): the counted step's ranges."""
    rec = recorder(job, info, cuda=spec.device == "cuda", compiled=spec.mode == "compile")
    rec.start()
    for i in range(job.iters):
        rec.open_step(i)
        start = time.perf_counter_ns()
        step()
        sync()
        iter_ns.append(time.perf_counter_ns() - start)
        rec.close_step(i)
    # The capture ends once every rank's iterations have (torch.profiler's needs no wait).
    launched = rec.stop(barrier if job.profiler != "torch" else lambda: None)
    release_gpu_lock()  # the other harness may start its GPU work while this one writes
    rec.write()
    return launched


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
            need_cuda(torch)
            if ranks["local_rank"] >= torch.cuda.device_count():
                raise ProfkitError(
                    f"rank {ranks['rank']} needs GPU {ranks['local_rank']}, but PyTorch sees "
                    f"{torch.cuda.device_count()}"
                )
            torch.cuda.set_device(ranks["local_rank"])
            dist.init_process_group("nccl", device_id=torch.device("cuda", ranks["local_rank"]))
            group = dist.new_group(backend="gloo")
        else:
            dist.init_process_group("gloo")
            group = None
    except ProfkitError:
        raise
    except Exception as exc:
        raise ProfkitError(
            f"rank {ranks['rank']} could not join the process group: {error_line(exc)}"
        ) from None

    # A DDP script joins the group itself first thing: in a workload run here, the group is
    # joined already, and its own call does nothing (rather than fail "twice").
    def already_joined(*args: Any, **kwargs: Any) -> None:
        return None

    dist.init_process_group = already_joined
    dist.distributed_c10d.init_process_group = already_joined
    return lambda: dist.barrier(group=group)


def _build(
    job: HarnessJob, switched: dict[str, Any], observe: Callable[[Any], None] | None = None
) -> tuple[Spec, Callable[[], Any]]:
    """The job's spec and its workload built for it: the GPU checked, the file loaded and held
    to what it declares (``observe`` sees the module first), the process switches applied (what
    they did in ``switched``), torch seeded, the step prepared."""
    import torch

    from . import workloads

    spec = job.spec
    if spec.device == "cuda":
        need_cuda(torch)
    path = Path(job.workload_path)
    module = workloads.load_module(path)
    workloads.check_supported(module, spec, path)
    if observe is not None:
        observe(module)
    gpu_lock(job, "prepare")
    apply_switches(torch, spec, switched)
    # The same weights and inputs in every run of a workload, whichever tool (and in every
    # combination of a benchmark): a training step's AMP loss scaler then overflows (and
    # skips the optimizer) in the same steps.
    torch.manual_seed(0)
    return spec, workloads.prepare(module, spec)


def _count(
    job: HarnessJob,
    step: Callable[[], Any],
    sync: Callable[[], None],
    info: HarnessInfo,
    torch: Any,
    launched: StepLaunches | None,
) -> None:
    """The counters of one more step's launches, counted here (``profkit.kernel_counter``) and
    written to ``job.counts_path``; where CUPTI cannot count it, the reason in ``info`` and no file
    (the parent then counts under ncu)."""
    from .kernel_counter import CounterUnavailable, count_step

    assert job.counts_path and job.count_metrics
    if not countable(job, info, launched, "measured iterations", "one more step"):
        return
    assert launched is not None
    try:
        counts = count_step(
            step, sync, job.count_metrics, list(launched.last), torch.cuda.current_device()
        )
    except CounterUnavailable as exc:
        info["kernel_counter_error"] = str(exc)
        return
    except Exception as exc:  # the user's step, run again for each pass
        info["kernel_counter_error"] = f"counting the step failed: {error_line(exc)}"
        return
    write_new(job.counts_path, json.dumps(counts), replace=True)


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
    switched: dict[str, Any] = {}
    try:
        import torch

        # what prepare() is given tells a model from a step function
        def observe(
            module: Any,
        ) -> None:
            build = module.build

            def observed_build(s: Spec) -> Any:  # whatever the workload's build returns
                built = build(s)
                built_model.append(
                    isinstance(built, tuple)
                    and len(built) == 2
                    and isinstance(built[0], torch.nn.Module)
                )
                return built

            module.build = observed_build

        spec, step = _build(job, switched, observe)
    except ProfkitError as exc:
        return fail(job, exc.one_line(), exc)
    except Exception as exc:  # torch.jit.trace runs the model while it builds
        asked = job.spec
        return fail(
            job,
            f"preparing {path.stem} in {asked.precision}, {asked.mode} failed: {error_line(exc)}",
            exc,
        )

    cuda = spec.device == "cuda"
    info = machine(torch, spec)
    info.update(switched)  # type: ignore[typeddict-item]
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
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
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
        what = (
            f"torch.compile ({spec.compile_mode}) failed on"
            if spec.mode == "compile" and phase == "warm-up"
            else f"the {phase} failed for"
        )
        return fail(
            job, f"{what} {path.stem} in {spec.precision}, {spec.mode}: {error_line(exc)}", exc
        )
    info["iter_ns"] = iter_ns
    info["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated()) if cuda else None
    output = first_tensor(out, torch) if info["model"] and job.output_path else None
    if output is not None:
        torch.save(output.detach().to("cpu", torch.float32).clone(), job.output_path)
    info["output_saved"] = output is not None
    write_new(job.info_path, json.dumps(info, indent=2), replace=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
