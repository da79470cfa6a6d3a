"""How a window of steps is profiled in the profiled process, one class a way, chosen in one
place (:func:`recorder`) for a workload's measured iterations (``profkit.harness``) and a
program's window (``profkit.program``) alike:

- :class:`TorchRecorder`: torch.profiler records the window (CPU operators with their input
  types, and CUDA activity on a GPU), each step in a ``record_function`` range; the Kineto trace
  is written to the job's ``trace_path``.
- :class:`NsysRecorder`: nsys captures between cudaProfilerStart and Stop (``--capture-range
  cudaProfilerApi``): the window only.
- :class:`TimerRecorder`: ncu's per-function plan's timing process: CUPTI's activity records time
  every launch of the window (``kernel_timer``), and say what the last step launched, which the
  counting after it takes (``kernel_counter``).
- :class:`Recorder` itself: the steps' NVTX ranges alone, which ncu's filter selects (the process
  ncu counts in).

Each step is an NVTX start/end range of the process (``nvtx_ranges``), named
``<tag>.iter<N>``. With ``job.attribution`` every operator call of the window is in a range of
its own (``profkit.annotate``); a compiled model's kernels are traced from Inductor's output code
instead (module hooks or a dispatch mode would make Dynamo compile again)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..records import HarnessInfo
from .common import code_environment, error_line, kernel_timer
from .job import HarnessJob, StepLaunches

Backend = Callable[[], tuple[Callable[[str], Any], Callable[[], Any]]]


class Recorder:
    """The window's step ranges under ncu's NVTX filter (the base of the others): ``start()``,
    ``open_step(i)`` / ``close_step(i)`` around each step, ``stop()``, then ``write()``."""

    def __init__(
        self,
        job: HarnessJob,
        info: HarnessInfo,
        cuda: bool,
        compiled: bool,
        optimizer_hooks: bool = True,
    ):
        self.job, self.info, self.cuda, self.compiled = job, info, cuda, compiled
        self.optimizer_hooks = optimizer_hooks
        self.annotator: Any = None
        self._ranges: dict[int, Any] = {}

    # ------------------------------------------------------------------ attribution
    def _attribution(self) -> bool:
        """Whether operator ranges run in the window; says in the info what the run has."""
        from .. import annotate

        job, info = self.job, self.info
        if self.compiled and job.kernel_times_path:  # the timing process of ncu's per-function plan
            info["generated_kernels"] = annotate.generated_kernel_digests()
        if self.compiled:
            # What each generated kernel fused and its element types, from Inductor's output code
            # (read before the window, nothing in it): with or without attribution, the Triton
            # kernels' precision comes from their types (their names carry none).
            info["compiled_kernels"] = annotate.compiled_kernels()
        if job.attribution and self.compiled:
            info["attribution"] = "compiled"
        elif not job.attribution:
            info["attribution"] = "off"
        return job.attribution

    def _annotate(self, backend: Backend) -> None:
        """Enter the operator ranges (a compiled model's own calls where it is one), or say in the
        info why the run has none: a model the annotator cannot follow still runs."""
        from ..annotate import Annotator, CompiledTracer

        try:
            push, pop = backend()
            annotator = (
                CompiledTracer(push, pop)
                if self.compiled
                else Annotator(push, pop, optimizer_hooks=self.optimizer_hooks)
            )
            annotator.__enter__()
        except Exception as exc:  # an older torch without the hooks the annotator needs
            self.info["attribution"] = "off"
            self.info["attribution_note"] = f"operator ranges could not start: {error_line(exc)}"
            return
        self.info["attribution"] = "compiled" if self.compiled else "ranges"
        self.annotator = annotator

    def _leave_annotation(self) -> None:
        if self.annotator is not None:
            annotator, self.annotator = self.annotator, None
            annotator.__exit__(None, None, None)

    # ------------------------------------------------------------------ the window
    def start(self) -> None:
        from .. import annotate

        if self._attribution():
            self._annotate(annotate.nvtx_backend)

    def open_step(self, i: int) -> None:
        import nvtx

        from .. import nvtx_ranges

        # A start/end range: the process's, so the kernels other threads launch in the step
        # (autograd's backward) are in it for ncu's filter and for nsys (see nvtx_ranges).
        self._ranges[i] = nvtx.start_range(
            nvtx_ranges.iteration_range(self.job.tag, i), domain=nvtx_ranges.DOMAIN
        )

    def close_step(self, i: int) -> None:
        import nvtx

        nvtx.end_range(self._ranges.pop(i))

    def stop(self, barrier: Callable[[], None] = lambda: None) -> StepLaunches | None:
        """The window is over: the profiler stopped (once every rank's steps are: ``barrier``).
        Returns what the timer saw launched, where the job counts after the window."""
        self._leave_annotation()
        barrier()
        return None

    def write(self) -> None:
        """The files the profiler's way writes, after the GPU's turn is handed on."""


class Timer(Recorder):
    """No profiler and no ranges: the steps are only timed (``profkit tune``'s trials of a
    program, whose window the program's own clock times)."""

    def start(self) -> None:
        return None

    def open_step(self, i: int) -> None:
        return None

    def close_step(self, i: int) -> None:
        return None


class TorchRecorder(Recorder):
    """torch.profiler, started and stopped in the process; each step also a ``record_function``
    range of its name, which the trace importer takes for the process's."""

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        from .. import annotate

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        self.prof = profile(activities=activities, record_shapes=True)
        self.prof._profkit = (
            True  # profkit's own (profkit.program refuses a program's own profiler)
        )
        self.prof.start()
        # torch.profiler records a compiled model's operators with their input types anyway.
        if self._attribution() and not self.compiled:
            self._annotate(annotate.record_function_backend)
        self._functions: dict[int, Any] = {}

    def open_step(self, i: int) -> None:
        from torch.autograd.profiler import record_function

        from .. import nvtx_ranges

        self._functions[i] = record_function(nvtx_ranges.iteration_range(self.job.tag, i))
        self._functions[i].__enter__()
        super().open_step(i)

    def close_step(self, i: int) -> None:
        super().close_step(i)
        self._functions.pop(i).__exit__(None, None, None)

    def stop(self, barrier: Callable[[], None] = lambda: None) -> StepLaunches | None:
        self._leave_annotation()
        self.prof.stop()
        self.prof.export_chrome_trace(self.job.trace_path)
        return None


class NsysRecorder(Recorder):
    """nsys's capture range: cudaProfilerStart before the window's first step, Stop after its last."""

    def start(self) -> None:
        import torch

        torch.cuda.profiler.start()
        super().start()

    def stop(self, barrier: Callable[[], None] = lambda: None) -> StepLaunches | None:
        import torch

        super().stop(barrier)  # the capture ends once every rank's steps have
        torch.cuda.profiler.stop()
        return None


class TimerRecorder(Recorder):
    """ncu's per-function plan's timing process: every launch of the window timed through CUPTI's
    activity records, each step marked on the timer's clock, the operator ranges kept there
    (``annotate.IntervalLog``) and written with the times."""

    def start(self) -> None:
        from .. import annotate

        self.timer = kernel_timer(self.job, self.info)
        self.log: Any = None
        if self._attribution():
            if self.timer is not None:
                self.log = annotate.IntervalLog(self.timer.now, *annotate.nvtx_backend())
                log = self.log
                self._annotate(lambda: (log.push, log.pop))
            else:
                self._annotate(annotate.nvtx_backend)

    def open_step(self, i: int) -> None:
        if self.timer is not None:
            self.timer.mark(f"iter{i}.start")
        super().open_step(i)

    def close_step(self, i: int) -> None:
        super().close_step(i)
        if self.timer is not None:
            self.timer.mark(f"iter{i}.end")

    def stop(self, barrier: Callable[[], None] = lambda: None) -> StepLaunches | None:
        super().stop(barrier)
        timer = self.timer
        if timer is None:
            return None
        timer.stop()
        self.info["timed_launches"] = len(timer.kernels)
        if not self.job.count_metrics:
            return None
        # The last step's kernels in launch order: the counted step's ranges.
        steps = sum(1 for label, _ in timer.marks if label.endswith(".start"))
        marks = dict(timer.marks)
        lo, hi = marks.get(f"iter{steps - 1}.start", 0), marks.get(f"iter{steps - 1}.end", 0)
        ordered = sorted(timer.kernels, key=lambda k: int(k["correlation"]))
        first = marks.get("iter0.start", 0)
        return StepLaunches(
            [
                (str(k["name"]), math.prod(k["grid"]))
                for k in ordered
                if lo <= int(k["start"]) <= hi
            ],
            {str(k["name"]) for k in ordered if first <= int(k["start"]) <= hi},
        )

    def write(self) -> None:
        job = self.job
        if not job.kernel_times_path:
            return
        code_environment(job, self.info)
        if self.timer is not None:
            self.timer.write(Path(job.kernel_times_path), self.log.to_json() if self.log else None)


def countable(
    job: HarnessJob, info: HarnessInfo, launched: StepLaunches | None, earlier: str, after: str
) -> bool:
    """Whether what the timer saw launched (``TimerRecorder.stop``) can name the counted
    launches' ranges, before counting starts (a workload's one more step, a program's steps
    after its window). Where not: nothing launched writes counts of nothing to the job's
    ``counts_path`` (the parent says so); functions of the ``earlier`` steps missing from the
    last one put why in the info (counting ``after`` it would miss them); no timer leaves the
    timer's own reason (the parent says why)."""
    import json

    from ..files import write_new

    assert job.counts_path
    if info.get("kernel_timer_error") or launched is None:
        return False
    if not launched.last:
        write_new(
            job.counts_path,
            json.dumps({"functions": {}, "passes": 0, "launches": 0, "wall_s": 0.0}),
            replace=True,
        )
        return False
    missed = launched.functions - {name for name, _ in launched.last}
    if missed:
        info["kernel_counter_error"] = (
            f"{len(missed)} kernel functions of the earlier {earlier} are not in the last "
            f"(first: {min(missed)[:80]}): {after} would not count them"
        )
        return False
    return True


def recorder(
    job: HarnessJob, info: HarnessInfo, cuda: bool, compiled: bool, optimizer_hooks: bool = True
) -> Recorder:
    """The way the job's window is profiled: the one place it is chosen."""
    if job.profiler == "bench":
        cls: type[Recorder] = Timer
    elif job.profiler == "torch":
        cls = TorchRecorder
    elif job.profiler == "nsys" and cuda:
        cls = NsysRecorder
    elif job.kernel_times_path:
        cls = TimerRecorder
    else:
        cls = Recorder
    return cls(job, info, cuda, compiled, optimizer_hooks)
