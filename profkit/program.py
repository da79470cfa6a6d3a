"""A user's own program, profiled as it is: ``profkit run -- python train.py --epochs 1``.

The parent (``profkit.launch``) resolves the command line here (:func:`resolve`: a script, a
``.py`` file run with this Python, or ``python -m MODULE``) without running any of it. The
profiled process (``python -m profkit.program JOB.json``) runs it
(:func:`run`): the script in the user's folder with its own ``sys.argv``, as ``__main__``, its
own folder first on ``sys.path``, as plain ``python`` would.

Steps are found without changing the script (:class:`StepClock`):

- **optimizer**: a step ends at each ``step()`` of the first optimizer to step (PyTorch's
  process-wide optimizer step hooks, which every optimizer derived from
  ``torch.optim.Optimizer`` runs, under Lightning, Hugging Face's Trainer and Accelerate as
  well); an optimizer step GradScaler skipped for inf/NaN gradients counts too. Several
  optimizers stepping in one iteration (a GAN) make one step per cycle of the first one.
- **forward**: where no optimizer was made, each top-level call of the model (the first
  module with parameters called outside any other module) begins a step: manual parameter
  updates, inference loops.
- **backward**: where no module is called either, each ``backward()`` ends a step.
- **marker**: ``profkit.step()`` in the script ends a step; the first call wins over the others.

``--step`` names one of them (``optimizer``, ``optimizer:Adam``, ``forward``,
``forward:Generator``, ``backward``, ``marker``). The first ``warmup`` steps run unprofiled; the
next ``iters`` are the window (:class:`Window`), each in a step range as a workload's
iterations are; when the window is done (and, for ncu's per-function plan, the steps after it
have been counted: :class:`Counting`) the profiler's files are written and the script is ended
there with the processes it started (:func:`_stop_now`), or, with ``run_to_end``, left to
finish with the profiler detached.

Importing this module is cheap (the CLI resolves programs with it): torch is imported in
:func:`run` only.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from .errors import ProfkitError, UsageError
from .process.common import error_line, fail, gpu_lock, machine, release_gpu_lock
from .process.fixes import ModelFixes, apply_switches, replaying
from .process.job import HarnessJob, StepLaunches, start
from .process.record import Recorder, countable, recorder

if TYPE_CHECKING:
    from .records import HarnessInfo

PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
# Python's own options a program's command line may give, and how they reach the profiled process.
_PYTHON_ENV = {"-u": ("PYTHONUNBUFFERED", "1"), "-B": ("PYTHONDONTWRITEBYTECODE", "1")}


@dataclass(frozen=True)
class Program:
    """A program's command line, resolved: a script (its absolute path) or a module, its own
    arguments (its ``sys.argv[1:]``), and what Python's options ask of the environment."""

    argv: tuple[str, ...]  # as the user gave it
    script: str | None = None
    module: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()  # -W options

    @property
    def name(self) -> str:
        """What the run is named after: the script's stem, or the module's last part."""
        if self.script is not None:
            return Path(self.script).stem
        parts = (self.module or "program").split(".")
        return parts[-2] if parts[-1] == "__main__" and len(parts) > 1 else parts[-1]

    def shown(self) -> str:
        return " ".join(self.argv)


def resolve(argv: tuple[str, ...] | list[str], cwd: Path | None = None) -> Program:
    """The program a command line after ``--`` names, checked without running any of it."""
    argv = tuple(str(a) for a in argv)
    hint = "Give it as you would run it: profkit run -- python train.py [ARGS]"
    if not argv or not argv[0]:
        raise UsageError("no program after --", hint)
    first, rest = argv[0], list(argv[1:])
    base = Path(first).name
    if PYTHON.fullmatch(base):
        env: dict[str, str] = {}
        warnings: list[str] = []
        while rest and rest[0].startswith("-") and rest[0] != "-":
            flag = rest.pop(0)
            if flag in _PYTHON_ENV:
                key, value = _PYTHON_ENV[flag]
                env[key] = value
            elif flag in ("-W", "-m") or (flag.startswith(("-W", "-m")) and len(flag) > 2):
                value = flag[2:] if len(flag) > 2 else (rest.pop(0) if rest else "")
                if not value:
                    raise UsageError(f"'{first} {flag}' needs a value", hint)
                if flag.startswith("-m"):
                    if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", value):
                        raise UsageError(f"'-m {value}' names no Python module")
                    _check_module(value, cwd)
                    return Program(
                        argv, module=value, args=tuple(rest), env=env, warnings=tuple(warnings)
                    )
                warnings.append(value)
            else:
                raise UsageError(
                    f"'{first} {flag}': profkit runs the program with its own Python ({sys.executable}) "
                    f"and passes on -u, -B, -W and -m only",
                    hint,
                )
        if not rest:
            raise UsageError(f"'{first}' is given no script", hint)
        if rest[0] == "-" or rest[0] == "-c":
            raise UsageError(
                "profkit runs a script file or a module, not code from standard input or -c", hint
            )
        return _script(argv, rest[0], rest[1:], cwd, env, warnings)
    if first.endswith(".py") or _python_file(first, cwd):
        return _script(argv, first, rest, cwd, {}, [])
    where = _in(cwd, first)
    if where.exists() or "/" in first:
        raise UsageError(
            f"{first} is not a Python program (no .py name, no python on its #! line)",
            "profkit runs Python programs: profkit run -- python SCRIPT [ARGS], or -- python -m MODULE.",
        )
    import shutil

    if shutil.which(first):
        extra = (
            " For torchrun, give profkit --nproc-per-node N and the script itself."
            if base in ("torchrun", "torch.distributed.run")
            else ""
        )
        raise UsageError(
            f"'{first}' is not Python: profkit runs a Python script or module in its own process, "
            f"with its steps found there.{extra}",
            hint,
        )
    raise UsageError(f"no program or script named {first}", hint)


def _check_module(name: str, cwd: Path | None) -> None:
    """Refuse ``-m NAME`` whose top-level package is nowhere on the path the program will have
    (its folder first), found without importing anything."""
    import importlib.machinery

    top = name.split(".")[0]
    path = [str(cwd or Path.cwd()), *[p for p in sys.path if p]]
    if (
        top not in sys.builtin_module_names
        and importlib.machinery.PathFinder.find_spec(top, path) is None
    ):
        raise UsageError(
            f"no module named {top} (for -m {name}) in the current folder or on this Python's path",
            "Run profkit from the folder the module is in, or install its package.",
        )


def _in(cwd: Path | None, path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() or cwd is None else cwd / p


def _python_file(path: str, cwd: Path | None) -> bool:
    """A file without a .py name that is Python by its ``#!`` line (an executable script)."""
    p = _in(cwd, path)
    try:
        with open(p, "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def _script(
    argv: tuple[str, ...],
    path: str,
    args: list[str],
    cwd: Path | None,
    env: dict[str, str],
    warnings: list[str],
) -> Program:
    p = _in(cwd, path)
    if not p.exists():
        raise UsageError(
            f"no such script: {path}", "Check the path; it is read from the current folder."
        )
    if not p.is_file():
        raise UsageError(f"{path} is not a file")
    if not os.access(p, os.R_OK):
        raise UsageError(f"cannot read {path}: permission denied")
    return Program(
        argv, script=str(p.resolve()), args=tuple(args), env=env, warnings=tuple(warnings)
    )


# ------------------------------------------------------------------------------ the marker
_ACTIVE: list[StepClock] = []  # the clock of the program profkit runs in this process, if any


def step() -> None:
    """End a step here: a line a user may add to a training loop (``profkit.step()``) where the
    steps profkit finds by itself are not the ones wanted. Outside ``profkit run`` it does nothing."""
    if _ACTIVE:
        _ACTIVE[0].marker()


# ------------------------------------------------------------------------------ the steps
class StepClock:
    """Counts a program's steps as it runs (see the module docstring) and calls ``on_step(n)``
    when the ``n``-th step has ended. ``how`` is ``--step``'s value."""

    def __init__(self, torch: Any, how: str, on_step: Callable[[int], None]):
        self.torch = torch
        source, _, cls = how.partition(":")
        self.asked = source  # auto, or the source --step names
        self.cls = cls or None  # --step optimizer:CLASS / forward:CLASS
        self.by: str | None = None if source == "auto" else source
        self.detail = ""
        self.count = 0
        self.on_step = on_step
        self.pid = os.getpid()
        self.optimizers_made = 0
        self.pacer: int | None = None  # id() of the optimizer whose steps count
        self.model: int | None = None  # id() of the module whose top-level calls count
        # top-level calls of each module with parameters, until one is the model
        self.calls: dict[int, int] = {}
        self.frozen = False  # the window began: the way steps are found no longer changes
        self.annotator: Any = None  # the window's operator ranges (optimizer phase from here)
        self._local = threading.local()
        self._module_handles: list[Any] = []
        self._undo: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ hooks
    def install(self) -> None:
        torch = self.torch
        import torch.optim.optimizer as optim

        handles = [
            optim.register_optimizer_step_pre_hook(self._opt_pre),
            optim.register_optimizer_step_post_hook(self._opt_post),
        ]
        self._undo += [h.remove for h in handles]
        self._patch(torch.optim.Optimizer, "__init__", self._made)
        scaler = getattr(getattr(torch.amp, "grad_scaler", None), "GradScaler", None)
        if scaler is not None:
            self._patch(scaler, "step", self._scaler_step)
        self._patch(torch.autograd, "backward", self._backward)
        if self.by in (None, "forward"):
            mod = torch.nn.modules.module
            self._module_handles = [
                mod.register_module_forward_pre_hook(self._fwd_pre),
                mod.register_module_forward_hook(self._fwd_post, always_call=True),
            ]
        if self.by == "function":
            self._find_function()
        _ACTIVE[:] = [self]

    def uninstall(self) -> None:
        self._drop_module_hooks()
        for undo in reversed(self._undo):
            undo()
        self._undo = []
        _ACTIVE[:] = []

    def _patch(self, owner: Any, name: str, wrapper: Callable[..., Any]) -> None:
        original = getattr(owner, name)

        def patched(*args: Any, **kwargs: Any) -> Any:
            return wrapper(original, *args, **kwargs)

        patched.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(owner, name, patched)
        self._undo.append(lambda: setattr(owner, name, original))

    def _drop_module_hooks(self) -> None:
        # Safe inside a module hook: torch copies the global hooks before calling them.
        for h in self._module_handles:
            h.remove()
        self._module_handles = []

    def _here(self) -> bool:
        """Whether this call is the program's own process (a forked DataLoader worker is not)."""
        return os.getpid() == self.pid

    def _decide(self, by: str, detail: str) -> None:
        self.by, self.detail = by, detail
        if by != "forward":
            self._drop_module_hooks()  # a compiled model must not trace them
            self.calls.clear()

    # ------------------------------------------------------------------ optimizers
    def _made(self, original: Callable[..., Any], opt: Any, *args: Any, **kwargs: Any) -> Any:
        self.optimizers_made += 1
        return original(opt, *args, **kwargs)

    def _opt_pre(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self.annotator is not None:
            self.annotator._opt_pre(opt, args, kwargs)

    def _opt_post(self, opt: Any, args: Any, kwargs: Any) -> None:
        self._local.stepped = opt
        if self.annotator is not None:
            self.annotator._opt_post(opt, args, kwargs)
        self._optimizer_stepped(opt)

    def _scaler_step(
        self, original: Callable[..., Any], scaler: Any, optimizer: Any, *args: Any, **kwargs: Any
    ) -> Any:
        self._local.stepped = None
        out = original(scaler, optimizer, *args, **kwargs)
        if getattr(self._local, "stepped", None) is not optimizer:  # skipped: inf/NaN gradients
            self._optimizer_stepped(optimizer)
        return out

    def _optimizer_stepped(self, opt: Any) -> None:
        if not self._here():
            return
        name = type(opt).__name__
        if self.by is None and not self.frozen:
            self._decide("optimizer", "")
        if self.by != "optimizer":
            return
        if self.pacer is None:
            if self.cls and name != self.cls:
                return
            self.pacer = id(opt)
            self.detail = f"each {name}.step()" + (
                "" if self.cls else " (the first optimizer to step)"
            )
        if id(opt) == self.pacer:
            self._step()

    # ------------------------------------------------------------------ modules
    def _fwd_pre(self, module: Any, args: Any) -> None:
        if (
            self.torch.compiler.is_compiling() or replaying()
        ):  # traced as nothing; not the program's
            return
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        if depth or not self._here():
            return
        if self.by is None and self.optimizers_made and not self.frozen:
            # its steps will count (gradient accumulation: several calls a step)
            self._decide("optimizer", "")
            return
        key = id(module)
        if self.model is None:
            # The model is the first module called a second time at the top (a module with
            # parameters, or the class --step names): not a transform or a loss, nor a backbone
            # called once before the loop.
            if (self.cls is not None and type(module).__name__ != self.cls) or (
                self.cls is None and next(module.parameters(), None) is None
            ):
                return
            self.calls[key] = self.calls.get(key, 0) + 1
            if self.calls[key] < 2:
                return
            self.model = key
            self.calls.clear()
            if self.by is None and not self.frozen:
                self._decide("forward", "")
        if key != self.model:
            return
        if self.by == "forward":
            self.detail = (
                f"each call of the model ({type(module).__name__}), "
                f"{'the module --step names' if self.cls else 'no optimizer being made'}"
            )
            self._step()  # its call begins a step: the one before has ended

    def _fwd_post(self, module: Any, args: Any, output: Any) -> None:
        if self.torch.compiler.is_compiling() or replaying():
            return
        self._local.depth = max(0, getattr(self._local, "depth", 1) - 1)

    # ------------------------------------------------------------------ a function
    def _find_function(self) -> None:
        """``--step function:NAME``: a step ends at each return of that function or method (its
        name, or its qualified name), however the program reaches it. On Python 3.12 and newer
        ``sys.monitoring`` watches that function's code alone (every other function's start
        event is turned off at its first call); before, a profile hook (``sys.setprofile``)
        sees every call, which slows a Python-heavy loop."""
        wanted = self.cls or ""

        def matches(code: Any) -> bool:
            return bool(code.co_qualname == wanted or code.co_name == wanted)

        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None:
            tool = next((t for t in range(5, 0, -1) if monitoring.get_tool(t) is None), None)
            if tool is not None:
                events = monitoring.events
                monitoring.use_tool_id(tool, "profkit")

                def started(code: Any, offset: int) -> Any:
                    if not matches(code):
                        return monitoring.DISABLE
                    monitoring.set_local_events(tool, code, events.PY_RETURN)
                    self.detail = f"each return of {code.co_qualname}()"
                    return monitoring.DISABLE

                def returned(code: Any, offset: int, value: Any) -> Any:
                    if self._here():
                        self._step()
                    return None

                monitoring.register_callback(tool, events.PY_START, started)
                monitoring.register_callback(tool, events.PY_RETURN, returned)
                monitoring.set_events(tool, events.PY_START)

                def stop() -> None:
                    monitoring.set_events(tool, 0)
                    monitoring.register_callback(tool, events.PY_START, None)
                    monitoring.register_callback(tool, events.PY_RETURN, None)
                    monitoring.free_tool_id(tool)

                self._undo.append(stop)
                return
        frames: set[int] = set()  # id() of the frames of its calls under way

        def hook(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                if matches(frame.f_code) and self._here():
                    frames.add(id(frame))
                    self.detail = f"each return of {frame.f_code.co_qualname}()"
            elif event == "return" and id(frame) in frames:
                frames.discard(id(frame))
                self._step()

        sys.setprofile(hook)
        self._undo.append(lambda: sys.setprofile(None))

    # ------------------------------------------------------------------ backward, marker
    def _backward(self, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        if not self._here():
            return out
        if (
            self.by is None
            and not self.frozen
            and not self.calls
            and self.model is None
            and not self.optimizers_made
        ):
            self._decide("backward", "each backward() (no optimizer made, no model called)")
        if self.by == "backward":
            self.detail = self.detail or "each backward()"
            self._step()
        return out

    def marker(self) -> None:
        if (
            not self._here()
            or self.by not in (None, "marker")
            and (self.frozen or self.asked != "auto")
        ):
            return
        if self.by != "marker":  # the script's own marker wins over what was found so far
            self._decide("marker", "each profkit.step() in the script")
            self.count = 0
        self.detail = "each profkit.step() in the script"
        self._step()

    def _step(self) -> None:
        self.count += 1
        self.on_step(self.count)

    def said(self) -> str:
        """How steps were found, for the run and its printout."""
        if self.by is None:
            return "no step boundary found"
        return (
            self.detail
            or {
                "optimizer": "each optimizer step",
                "forward": "each call of the model",
                "backward": "each backward()",
                "marker": "each profkit.step()",
                "function": f"each return of {self.cls}()",
            }[self.by]
        )


# ------------------------------------------------------------------------------ the window
class Window:
    """The profiled steps: started when the warm-up's last step ends (at the start where there is
    no warm-up), each step in its range, and finished (files written) when the last one ends. How
    they are profiled is the job's way (``process.record.recorder``), as for a workload's
    measured iterations."""

    def __init__(self, job: HarnessJob, torch: Any, info: HarnessInfo):
        self.job, self.torch, self.info = job, torch, info
        self.cuda = job.spec.device == "cuda" and torch.cuda.is_available()
        self.started = self.done = False
        self.step_index = -1
        self.iter_ns: list[int] = []
        self.bare_ns: list[int] = []
        self._t0 = self._bare_end = 0
        self.rec: Recorder | None = None
        self.clock: StepClock | None = None
        self.model: ModelFixes | None = None  # profkit tune's trial: the model's fixes
        self.launched: StepLaunches | None = (
            None  # ncu's per-function plan: the last step's launches, to count
        )

    def on_step(self, n: int) -> None:
        """The ``n``-th step (1-based) has ended."""
        if self.done:
            return
        if not self.started:
            self._bare_step(n)
            if n == self.job.warmup:
                self.start()
            return
        self._close_step()
        if self.step_index + 1 >= self.job.iters:
            self.finish()
            return
        self._open_step()

    def _bare_step(self, n: int) -> None:
        """A warm-up step has ended: each one after the first timed from the last one's end to
        its own, both to a device sync (``bare_iteration_ns``: the step with no profiler)."""
        if not self.cuda:
            return
        self._sync()
        now = time.perf_counter_ns()
        if n > 1 and self._bare_end:
            self.bare_ns.append(now - self._bare_end)
        self._bare_end = now

    def start(self) -> None:
        if self.clock is not None and self.job.warmup > 0:
            self.clock.frozen = True  # the steps so far were found one way: the window's are too
        gpu_lock(self.job, "warmup")
        self.started = True
        self._sync()
        # The window opens inside an optimizer's step hooks: the step clock tells the operator
        # ranges of optimizer steps (a hook registered there would change what torch iterates).
        self.rec = recorder(self.job, self.info, self.cuda, _compiled(), optimizer_hooks=False)
        self.rec.start()
        if self.clock is not None and self.rec.annotator is not None and not self.rec.compiled:
            self.clock.annotator = self.rec.annotator
        self._open_step()

    def _sync(self) -> None:
        if self.cuda and self.torch.cuda.is_initialized():
            self.torch.cuda.synchronize()

    def _open_step(self) -> None:
        assert self.rec is not None
        self.step_index += 1
        self.rec.open_step(self.step_index)
        self._t0 = time.perf_counter_ns()

    def _close_step(self) -> None:
        assert self.rec is not None
        self._sync()
        self.iter_ns.append(time.perf_counter_ns() - self._t0)
        self.rec.close_step(self.step_index)

    def finish(self, partial: bool = False) -> None:
        """The window's end: the profiler stopped, its files and the info written."""
        if self.done or not self.started or self.rec is None:
            return
        self.done = True
        if partial:  # the script ended inside the window (a whole-program window ends so)
            self._close_step()
        if self.clock is not None:
            self.clock.annotator = None
        self.launched = self.rec.stop()
        if self.job.run_to_end:  # else the GPU's turn is held to the end: this process stops now
            release_gpu_lock()
        self.rec.write()
        self.info["iteration_wall_ns"] = self.iter_ns
        self.info["bare_iteration_ns"] = self.bare_ns
        self.info["iteration_ranges"] = "process"
        if self.model is not None:
            self._keep_output(self.model)

    def _keep_output(self, model: ModelFixes) -> None:
        """A trial's figures: its steps' times, what was applied to which module, its output."""
        self.info["iter_ns"] = self.iter_ns
        self.info["fixes_applied"] = model.applied
        self.info["fixed_model"] = model.model_name
        self.info["model"] = model.model is not None
        saved = model.output is not None and self.job.output_path is not None
        if saved:
            self.torch.save(model.output, self.job.output_path)
        self.info["output_saved"] = saved


class Counting:
    """ncu's per-function plan's first run in the program's own process: the steps after the
    window are the Range Profiler's passes (``kernel_counter.StepCounter``), each held to the
    window's last step (the same kernels in the same order), and the counters are written to the
    job's ``counts_path``. Where it cannot count, ``info["kernel_counter_error"]`` says why and
    no file is written: the parent counts under ncu in a process of its own instead."""

    def __init__(self, job: HarnessJob, info: HarnessInfo, torch: Any, launched: Any):
        self.job, self.info, self.torch, self.launched = job, info, torch, launched
        self.counter: Any = None
        self.ranges = os.environ.get("PROFKIT_COUNT_RANGES") or "first"
        self.began = time.perf_counter()
        self.fallback: str | None = None

    def begin(self) -> bool:
        """Start counting with the next step; False (and why in the info) where it cannot."""
        from .kernel_counter import MAX_RANGES, CounterUnavailable

        launched = self.launched
        if not countable(self.job, self.info, launched, "profiled steps", "the steps after it"):
            return False
        functions = len({name for name, _ in launched.last})
        if functions > MAX_RANGES or (self.ranges == "all" and len(launched.last) > MAX_RANGES):
            return self._fail(
                f"the step launches {functions} kernel functions, more than the {MAX_RANGES} ranges "
                "counted in the run's process"
            )
        try:
            self._start()
        except CounterUnavailable as exc:
            return self._retry(exc)
        return True

    def _start(self) -> None:
        from .kernel_counter import StepCounter

        self.counter = StepCounter(
            list(self.job.count_metrics or ()),
            list(self.launched.last),
            self.torch.cuda.current_device(),
            self.ranges,
        )
        try:
            self.counter.begin()
            self.counter.start_pass()
        except BaseException:
            self.counter.close()
            self.counter = None
            raise

    def _retry(self, exc: Exception) -> bool:
        """ "first" could not be had or missed launches: every launch a range, from the next step."""
        from .kernel_counter import CounterUnavailable, _LaunchesMissed

        if not isinstance(exc, _LaunchesMissed) or self.ranges == "all":
            return self._fail(str(exc))
        self.ranges, self.fallback = "all", str(exc)
        try:
            self._start()
        except CounterUnavailable as again:
            return self._fail(str(again))
        return True

    def on_step(self) -> bool:
        """A step after the window has ended: its pass is done. Whether counting is over."""
        import json

        from .files import write_new
        from .kernel_counter import CounterUnavailable

        self.torch.cuda.synchronize()
        try:
            if not self.counter.end_pass():
                self.counter.start_pass()
                return False
            counts = self.counter.result()
        except CounterUnavailable as exc:
            self._close()
            return not self._retry(exc)
        except Exception as exc:
            self._close()
            return not self._fail(f"counting failed: {error_line(exc)}")
        self._close()
        counts["wall_s"] = round(time.perf_counter() - self.began, 3)
        if self.fallback:
            counts["ranges_fallback"] = self.fallback
        assert self.job.counts_path
        write_new(self.job.counts_path, json.dumps(counts), replace=True)
        return True

    def ended_early(self) -> None:
        """The script ended before every pass was counted."""
        self._close()
        self._fail("the script ended before its steps after the window were counted")

    def _close(self) -> None:
        if self.counter is not None:
            try:
                self.counter.close()
            finally:
                self.counter = None

    def _fail(self, why: str) -> bool:
        self.info["kernel_counter_error"] = why
        return False


def _compiled() -> bool:
    """Whether the program compiled anything with torch.compile before its window."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is None:
        return False
    try:
        return bool(dynamo.counters["stats"]["unique_graphs"])
    except Exception:
        return False


# ------------------------------------------------------------------------------ the process
def run(job: HarnessJob, ranks: dict[str, int] | None) -> int:
    """Run the job's program with its steps found and its window profiled (see the module
    docstring); the exit status is the script's (0 where profkit stopped it after the window)."""
    import json
    import runpy

    from .files import write_new

    assert job.program is not None
    began = time.perf_counter()
    stages: dict[str, float] = {}
    program = Program(
        tuple(job.program["argv"]),
        job.program.get("script"),
        job.program.get("module"),
        tuple(job.program.get("args", ())),
    )
    import torch

    stages["torch_imported"] = round(time.perf_counter() - began, 3)
    info = (
        machine(torch, job.spec)
        if job.spec.device != "cuda" or torch.cuda.is_available()
        else machine(torch, _cpu(job))
    )
    info["pid"] = os.getpid()
    if ranks is not None:
        info["rank"], info["local_rank"], info["world_size"] = (
            ranks["rank"],
            ranks["local_rank"],
            ranks["world_size"],
        )
    window = Window(job, torch, info)
    clock = StepClock(torch, "auto" if job.whole_program else job.step, window.on_step)
    window.clock = clock
    ended: dict[str, Any] = {}

    def write_info(none_found: bool = False) -> None:
        info["steps"] = {
            "by": clock.by or "none",
            "said": clock.said(),
            "seen": clock.count,
            "warmup": job.warmup,
            "iters": job.iters,
            "whole_program": job.whole_program,
        }
        if none_found:
            info["steps"]["none_found"] = True  # profkit profiles the whole program instead
        if "exit_status" in ended:
            info["steps"]["exit_status"] = ended["exit_status"]
        info["stages_s"] = stages
        write_new(job.info_path, json.dumps(info, indent=2), replace=True)

    counting: list[Counting] = []  # ncu's per-function plan: the steps after the window count

    def end_window() -> None:
        ended["window"] = True
        info["window_done_unix"] = time.time()  # the parent says how soon the script ended after it
        write_info()
        if not job.run_to_end:
            _stop_now()
        clock.uninstall()  # it runs on with nothing of profkit's in it

    def on_window_end(n: int) -> None:
        if not window.done:
            window.on_step(n)
            if not window.done:
                return
            stages["window_done"] = round(time.perf_counter() - began, 3)
            if job.counts_path and job.count_metrics and window.cuda:
                count = Counting(job, info, torch, window.launched)
                if count.begin():
                    counting.append(count)
                    return
            end_window()
        elif counting and "window" not in ended:
            if counting[0].on_step():
                stages["counted"] = round(time.perf_counter() - began, 3)
                end_window()

    clock.on_step = (lambda n: None) if job.whole_program else on_window_end
    if job.profiler == "torch":
        _refuse_own_profiler(job, torch)
    try:
        apply_switches(torch, job.spec, info)  # type: ignore[arg-type]
    except ProfkitError as exc:  # a switch this process cannot apply: one line, no traceback
        return fail(job, exc.one_line(), exc)
    if job.profiler == "bench":  # profkit tune's trial: its model's fixes, its output kept
        model = ModelFixes(torch, list(job.fixes or ()), job.spec.device)
        model.install()
        window.model = model
        _seed(torch)
    gpu_lock(job, "prepare")
    clock.install()
    if job.warmup == 0 or job.whole_program:
        window.start()
    stages["started"] = round(time.perf_counter() - began, 3)
    code = 0
    error: BaseException | None = None
    sys.argv = [program.script or program.module or "", *program.args]
    # The program's environment as plain python would give it: profkit's own processes run with
    # the current folder off their path (tools.runner.SAFE_PATH); the program's children do not.
    if job.program.get("safe_path") is None:
        os.environ.pop("PYTHONSAFEPATH", None)
    else:
        os.environ["PYTHONSAFEPATH"] = str(job.program["safe_path"])
    try:
        if program.script is not None:
            sys.path.insert(0, str(Path(program.script).parent))
            runpy.run_path(program.script, run_name="__main__")
        else:
            sys.path.insert(0, os.getcwd())
            assert program.module is not None
            runpy.run_module(program.module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt as exc:
        code, error = 130, exc
    except BaseException as exc:  # the script's own error: its traceback, as Python shows it
        code, error = 1, exc
        _print_traceback(exc)
    if "window" in ended:  # run to its end after the window: the run is whole, however it ended
        ended["exit_status"] = code
        write_info()
        return 0
    if counting:  # the window is profiled, but the script ended before it was counted
        counting[0].ended_early()
        write_info()
        return code
    reached = clock.count
    if job.whole_program and window.started:
        window.finish(partial=True)
        write_info()
        return code
    # it ended inside the window: the profiler detached quietly
    if window.started and not window.done:
        try:
            window.finish(partial=True)
        except Exception:
            pass
    write_info()
    if error is not None:
        what = (
            "was interrupted"
            if isinstance(error, KeyboardInterrupt)
            else f"raised {error_line(error)}"
        )
    else:
        what = f"ended (exit status {code})"
    if clock.by is None and clock.asked == "auto" and error is None and code == 0:
        write_info(none_found=True)
        fail(
            job,
            "the script ended without a step: no optimizer stepped, no model was called twice, no backward() "
            "ran and no profkit.step() was reached",
        )
        return 1
    need = job.warmup + job.iters
    how = clock.said()
    if clock.count == 0 and clock.asked != "auto":
        text = f"the script {what} and no step was found by `step` {job.step} (it never fired)"
    elif clock.by is None:
        text = f"the script {what} before its first step"
    else:
        text = (
            f"the script {what} after {reached} step{'s' if reached != 1 else ''} ({how}), before the window's "
            f"end: `warmup` {job.warmup} + `iters` {job.iters} needs {need}"
        )
    fail(job, text)
    return code if code not in (0, None) else 1


def main(argv: list[str] | None = None) -> int:
    """``python -m profkit.program JOB.json``: the profiled process of a program's run (what
    ``launch`` starts where the job names a program; ``profkit.harness`` runs workload files)."""
    started = start(argv, "program")
    if started is None:
        return 2
    job, ranks = started
    return run(job, ranks)


def _refuse_own_profiler(job: HarnessJob, torch: Any) -> None:
    """Under ``--tool torch`` profkit's torch.profiler records the window: one the script starts
    itself cannot run beside it (torch refuses it, and the process then dies at exit). The
    script is ended there, saying so."""
    cls = torch.profiler.profile
    original = cls.start

    def start(self: Any) -> Any:
        if not getattr(self, "_profkit", False):
            fail(
                job,
                "the script runs torch.profiler itself, which cannot run beside profkit's: profile it with "
                "`tool` nsys or ncu, or import the trace it writes (profkit import TRACE)",
            )
            _flush()
            os._exit(1)
        return original(self)

    cls.start = start


def _seed(torch: Any) -> None:
    """Every trial of a program starts from the same random state (weights, data order,
    dropout), as each combination of a benchmark does: their outputs can be compared."""
    import random

    random.seed(0)
    torch.manual_seed(0)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(0)


def _cpu(job: HarnessJob) -> Any:
    from dataclasses import replace

    return replace(job.spec, device="cpu")


def _print_traceback(exc: BaseException) -> None:
    """The script's traceback as ``python train.py`` prints it: from the script's own frames
    (runpy's and profkit's left out)."""
    import runpy
    import traceback

    tb = exc.__traceback__
    here = str(Path(__file__).parent)
    while tb is not None and (
        tb.tb_frame.f_code.co_filename.startswith(here)
        or tb.tb_frame.f_code.co_filename in ("<frozen runpy>", runpy.__file__)
    ):
        tb = tb.tb_next
    print("".join(traceback.format_exception(type(exc), exc, tb)), file=sys.stderr, end="")


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _stop_now() -> NoReturn:
    """End the program where its window (and its counting) ended: profkit's files are written.
    Its output is flushed and the processes it started (a DataLoader's workers) are ended with
    it; nothing of its own teardown runs (a DataLoader's shutdown waits seconds on its workers,
    a trainer's teardown may save checkpoints of a run profkit cut short)."""
    _flush()
    mp = sys.modules.get("multiprocessing")
    if mp is not None:
        for child in mp.active_children():
            try:
                child.kill()
            except Exception:
                pass
    os._exit(0)


if __name__ == "__main__":
    # The module's one copy, profkit.program, runs it: profkit.step() in the script finds its clock there.
    from profkit.program import main as _main

    sys.exit(_main())
