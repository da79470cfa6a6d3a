"""What both kinds of profiled process share (a workload file's harness and a user's program):
the machine's description, the GPU's turn when two processes take turns, the CUPTI timer's
start and the code it ran, and the error a process reports to profkit (its quick end is
``processes.leave``, which a command's process shares)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..files import write_new
from ..options import Spec
from ..records import HarnessInfo
from .job import HarnessJob, traceback_file

if TYPE_CHECKING:
    from ..kernel_timer import KernelTimer


def need_cuda(torch: Any) -> None:
    from ..errors import ProfkitError

    if not torch.cuda.is_available():
        raise ProfkitError(
            "no CUDA GPU is visible to PyTorch", "Use `device` cpu, or check the driver."
        )


def machine(torch: Any, spec: Spec) -> HarnessInfo:
    """What the process ran on: versions, and the GPU where it used one."""
    info: HarnessInfo = {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version()
        if torch.backends.cudnn.is_available()
        else None,
        "device": spec.device,
        "python": sys.version.split()[0],
    }
    if spec.device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        info["gpu_name"] = props.name
        info["compute_capability"] = f"{props.major}.{props.minor}"
    return info


def gpu_lock(job: HarnessJob, stage: str) -> None:
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


def release_gpu_lock() -> None:
    import fcntl

    while _HELD:
        handle = _HELD.pop()
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def kernel_timer(job: HarnessJob, info: HarnessInfo) -> KernelTimer | None:
    """With ``kernel_times_path`` in the job (ncu's per-function plan): CUPTI's activity
    records time every kernel of the measured iterations; None, and the reason in ``info``,
    where CUPTI cannot be used."""
    if not job.kernel_times_path:
        return None
    import threading

    from ..kernel_timer import CuptiUnavailable, KernelTimer

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


def code_environment(job: HarnessJob, info: HarnessInfo) -> None:
    """What ncu's counters kept from this run are kept under besides what the parent reads
    (``code_versions``): the native libraries this process mapped and the workload's own
    sources, read once the measured iterations have run (cuDNN's engines and cuBLASLt load on
    first use) and before anything counts here (the counter's libraries are not the workload's)."""
    from .. import annotate, code_versions

    info["native_libraries"] = code_versions.native_libraries()
    info["workload_sources"] = code_versions.workload_sources(
        Path(job.workload_path), generated=annotate.output_code_files()
    )


def fail(job: HarnessJob, text: str, exc: BaseException | None = None) -> int:
    """Report a workload error to profkit through the job's error file (not through output:
    the workload may print anything) and to the log; exit status 3. With the exception that
    caused it, its whole traceback (the user's own failing line in it) goes to the log and to
    :func:`traceback_file` beside the error file, where profkit picks it up."""
    trace = traceback_text(exc) if exc is not None else None
    if trace:
        print(trace, file=sys.stderr, end="" if trace.endswith("\n") else "\n")
    print(f"profkit-harness: error: {text}", file=sys.stderr)
    if job.error_path:
        if trace:
            write_new(traceback_file(job.error_path), trace, replace=True)
        write_new(job.error_path, text, replace=True)
    return 3


def traceback_text(exc: BaseException) -> str | None:
    """The traceback of what the workload raised: the error a ProfkitError wraps (the user's
    exception at import or build), else ``exc`` itself; None for a ProfkitError of profkit's
    own making (a file that declares no build(), no GPU), which has no user's line to show."""
    import traceback

    from ..errors import ProfkitError

    cause = exc.__cause__ if isinstance(exc, ProfkitError) else exc
    if cause is None:
        return None
    return "".join(traceback.format_exception(cause))


def error_line(exc: BaseException) -> str:
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
