"""The ``profkit`` command: parse options, call the library (``profkit.api``), hand what it
returns to ``profkit.render``, and turn expected errors into one line and a non-zero exit.
No analysis and no SQL live here, and nothing heavy (torch, pandas) is imported before a
command needs it, so ``profkit --help`` is instant.

Every bad input ends in one line on stderr: the library's errors (their parameter names
become this command's flags) and the usage errors Click finds (unknown option, bad choice).
A closed pipe (``profkit kernels RUN | head``) ends quietly.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import inspect
import io
import os
import re
import signal
import sys
import warnings
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional, Sequence

import typer
from typer.core import TyperCommand, TyperGroup

from .choices import CompileMode, Device, Format, Mode, Precision, Tool
from .errors import ProfkitError, ProfkitWarning, name_params

if TYPE_CHECKING:
    from .api import Database

def _err(text: str) -> None:
    print(text, file=sys.stderr)


# The library's parameters (as its messages name them, in backticks) -> this command's flags.
FLAGS = {
    **{p: "--" + p.replace("_", "-") for p in ("tool", "precision", "mode", "batch_size", "iters", "warmup", "device",
                                              "metrics", "name", "cpu_sampling", "context_switches", "db", "top",
                                              "limit", "compile_mode", "match", "modes", "precisions", "output", "vs",
                                              "keep_bn_fp32", "channels_last", "cudnn_benchmark", "workloads",
                                              "tools", "address", "workers", "nproc_per_node")},
    "threshold_pct": "--threshold",
    "timeout_s": "--timeout",
}


def flag(param: str) -> str | None:
    """The flag for a library parameter; None for any other word."""
    return FLAGS.get(param)


def _parser_errors() -> tuple[type[Exception], ...]:
    """The base classes of the usage errors Typer's parser raises: its own (Typer 0.2x ships
    its own copy of Click) and, for older Typer, Click's."""
    found: list[type[Exception]] = []
    if hasattr(typer, "TyperException"):
        found.append(typer.TyperException)
    try:
        import click
    except ImportError:
        pass
    else:
        found.append(click.ClickException)
    return tuple(found)


class OneLineErrors(TyperGroup):
    """The parser's usage errors (unknown option, bad value, missing argument) as one line,
    like every other error; ``profkit`` alone prints the help. Its parameters' values are
    converted as ProfkitCommand's are, and the command list of its help shows each command's
    first paragraph whole."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        quick_values(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        quick_values([option])
        return option

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        # Click's plain help cuts a command's summary to the rest of a line, or at its first
        # full stop; Typer's rich help, which profkit showed before, printed the whole first
        # paragraph of the docstring. So does this, wrapped by Click's formatter.
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            text = cmd.short_help or (cmd.help or "").split("\n\n")[0]
            rows.append((name, " ".join(text.split())))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        unusable = _unusable_stdout()
        if unusable:  # said before anything is done: no command then stores what it could not print
            _err(f"profkit: error: {unusable}: nothing could be printed. Give it an output (a file, a pipe, "
                 "or >/dev/null to discard it)")
            sys.exit(1)
        _printable_output()
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _parser_errors() as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # `profkit` alone: the help, as Typer shows it
                return super().main(["--help"], prog_name, complete_var, standalone_mode=True, **extra)
            ctx = getattr(exc, "ctx", None)
            where = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
            message = exc.format_message().replace("Value error, ", "")  # type: ignore[attr-defined]
            _err(f"profkit: error: {' '.join(message.split())}{where}")
            sys.exit(getattr(exc, "exit_code", 2))
        except BrokenPipeError:
            _quiet_pipe()
            sys.exit(0)
        except SystemExit as exc:
            # Rich or Click met a closed pipe themselves (printing the help to `| head -1`): they
            # point stdout at /dev/null (or wrap it) and exit 1; a reader gone is no error here.
            if exc.code == 1 and (type(sys.stdout).__name__ == "PacifyFlushWrapper" or _stdout_is_devnull()):
                _quiet_pipe()
                sys.exit(0)
            raise
        except Exception as exc:
            if type(exc).__name__ != "Abort":
                raise
            _err("profkit: interrupted")
            sys.exit(130)
        try:
            sys.stdout.flush()  # here, not at exit: a reader gone (`--help | head -1`) ends quietly
        except BrokenPipeError:
            _quiet_pipe()
            code = 0
        sys.exit(code if isinstance(code, int) else 0)


# ---------------------------------------------------------------------------------- parameter values
# Typer 0.29 converts each parameter's value (its default, an environment variable, what the
# command line gave) through a pydantic TypeAdapter, and importing pydantic takes ~0.2 s, more
# than all the rest of `profkit summary`. Every parameter profkit has is a bool, str, int,
# float, Path or Enum (Optional or not). For those, Typer's converter is put behind a quick one
# that takes the ordinary spellings (any str; digits; a plain decimal; a path passing Typer's
# own checks; a choice Typer's own matcher knows) to what Typer makes of them, and hands
# anything else (an out-of-range number, "1e3", "+5", an unknown choice, a path failing a
# check) to Typer's converter, so its results and its messages stay Typer's.
# tests/test_cli_values.py compares the two on many values. Where Typer's internals are not as
# in 0.29 (Typer before 0.29 converted with Click's types, without pydantic), nothing changes.
_ASK_TYPER = object()
_DIGITS = re.compile(r"[0-9]{1,18}")
_DECIMAL = re.compile(r"[0-9]{1,15}(?:\.[0-9]{0,15})?|\.[0-9]{1,15}")


class QuickValue:
    """Typer's runtime converter for one parameter (what its ``get_runtime_param`` returns; only
    ``coerce`` is called): ``quick`` converts a value or returns ``_ASK_TYPER`` (or fails), and
    then Typer's own converter, built on first need, converts it instead."""

    def __init__(self, quick: Callable[[Any, Any, Any], Any], build_typers: Callable[[], Any]) -> None:
        self.quick = quick
        self.build_typers = build_typers
        self.typers: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:  # as Typer's RuntimeParam.coerce does for a single value
            return None
        try:
            out = self.quick(value, param, ctx)
        except Exception:  # a check failed: Typer's converter says how, in its own words
            out = _ASK_TYPER
        if out is not _ASK_TYPER:
            return out
        if self.typers is None:
            self.typers = self.build_typers()
        return self.typers.coerce(value, param=param, ctx=ctx)


@functools.cache
def _typer_internals() -> tuple[Any, Any, Any, Any] | None:
    """The parts of Typer quick_values uses, or None where this Typer has not got them as 0.29
    has them."""
    try:
        from typer._coercion import RuntimeParam, build_runtime_param
        from typer._param_types import coerce_cli_choice, coerce_cli_path
        from typer.core import _TyperParameter
    except ImportError:
        return None
    if (not callable(getattr(_TyperParameter, "get_runtime_param", None))
            or list(inspect.signature(RuntimeParam.coerce).parameters) != ["self", "value", "param", "ctx"]):
        return None
    return _TyperParameter, build_runtime_param, coerce_cli_choice, coerce_cli_path


def _quick(desc: Any, coerce_cli_choice: Any, coerce_cli_path: Any) -> Callable[[Any, Any, Any], Any] | None:
    """The quick conversion for a parameter of Typer's type ``desc``, or None for another type."""
    t, info = desc.annotation, desc.parameter_info
    if info.parser is not None or desc.file_annotation is not None:
        return None
    if t is bool:
        # Typer passes a flag's bool on itself; an unset --help (None) and a str (from an
        # environment variable) come here, the str for Typer's converter.
        return lambda v, p, c: v if type(v) is bool else _ASK_TYPER
    if t is str:
        return lambda v, p, c: v if type(v) is str else _ASK_TYPER
    if (t is int or t is float) and not info.clamp:
        pattern = _DIGITS if t is int else _DECIMAL
        lo, hi = info.min, info.max

        def number(v: Any, p: Any, c: Any) -> Any:
            if (type(v) is str and pattern.fullmatch(v)) or type(v) is t or (t is float and type(v) is int):
                n = t(v)
                if (lo is None or n >= lo) and (hi is None or n <= hi):
                    return n
            return _ASK_TYPER
        return number
    if t is Path and info.path_type is None:
        # Typer makes the str a Path (with pydantic), then checks it with coerce_cli_path.
        return lambda v, p, c: (coerce_cli_path(Path(v), info, path_type=Path, param=p, ctx=c)
                                if type(v) is str and v and "\0" not in v else _ASK_TYPER)
    if isinstance(t, type) and issubclass(t, Enum):
        # What Typer's pydantic validator for a choice calls.
        choices, case_sensitive = tuple(t), info.case_sensitive
        return lambda v, p, c: coerce_cli_choice(v, choices=choices, case_sensitive=case_sensitive, ctx=c)
    return None


def quick_values(params: Sequence[Any]) -> None:
    """Put a QuickValue in front of the converter of each bool, str, int, float, Path and Enum
    parameter in ``params``; any other parameter keeps Typer's converter alone."""
    internals = _typer_internals()
    if internals is None:
        return
    typer_parameter, build_runtime_param, coerce_cli_choice, coerce_cli_path = internals
    for param in params:
        desc = getattr(param, "type_descriptor", None)
        if (not isinstance(param, typer_parameter) or desc is None or getattr(param, "_runtime_param", 0) is not None
                or param.multiple or param.nargs != 1):
            continue
        quick = _quick(desc, coerce_cli_choice, coerce_cli_path)
        if quick is not None:
            setattr(param, "_runtime_param", QuickValue(quick, functools.partial(build_runtime_param, desc)))


class ProfkitCommand(TyperCommand):
    """Every profkit command (set below, after the last one): its parameters' values, and its
    --help option's, are converted by ``quick_values``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        quick_values(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        quick_values([option])
        return option


app = typer.Typer(
    name="profkit",
    cls=OneLineErrors,
    help="Profile PyTorch workloads under Nsight Compute, Nsight Systems or torch.profiler and see, "
    "for every kernel, its precision and whether it ran on the tensor cores.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's plain help, not Rich's panels: typer.rich_utils imports rich's markdown, syntax
    # and traceback modules, ~0.2 s of every `--help`. The help says the same words
    # (OneLineErrors.format_commands keeps each command's summary whole).
    rich_markup_mode=None,
)

_state: dict[str, Any] = {"verbose": False, "db": None}

ReportOpt = Annotated[bool, typer.Option("--report/--no-report", help="Write the HTML report under reports/ and print its path.")]
DbOpt = Annotated[
    Optional[Path],
    typer.Option("--db", help="Database file (default: $PROFKIT_DB, else ./profkit.db).", show_default=False),
]
# Before the command, `profkit --db X ...` also reads PROFKIT_DB; a command's own --db wins.
GlobalDbOpt = Annotated[
    Optional[Path],
    typer.Option("--db", envvar="PROFKIT_DB", help="Database file (default ./profkit.db).", show_default=False),
]
FmtOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
KeepBnOpt = Annotated[bool, typer.Option("--keep-bn-fp32", help="With --precision fp16 or bf16: put BatchNorm layers back in fp32 after the cast (as .half() users do by hand).")]
ChannelsLastOpt = Annotated[bool, typer.Option("--channels-last", help="Lay the model and its 4-D image inputs out in torch.channels_last.")]
CudnnBenchOpt = Annotated[bool, typer.Option("--cudnn-benchmark", help="Set torch.backends.cudnn.benchmark: cuDNN times its algorithms in the warm-up and keeps the fastest.")]
RunArg = Annotated[str, typer.Argument(metavar="RUN", help="Run name or id (see `profkit runs`).", show_default=False)]


def _quiet_pipe() -> None:
    """Output's reader went away (``| head``): send what is left to /dev/null, so that
    Python's own flush at exit does not complain either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (tests)
        pass


def _unusable_stdout() -> str | None:
    """Why standard output cannot be written (``profkit runs >&-``: closed, Python's
    ``sys.stdout`` is None; ``1</dev/null``: open for reading only), or None."""
    if sys.stdout is None:
        return "standard output is closed"
    try:
        flags = fcntl.fcntl(sys.stdout.fileno(), fcntl.F_GETFL)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):  # not a real file (tests)
        return None
    if flags & os.O_ACCMODE == os.O_RDONLY:
        return "standard output is open for reading only"
    return None


def _printable_output() -> None:
    """A path whose bytes are not UTF-8 (a surrogate escape in Python's str) prints with an
    escape (``\\udcff``), as on stderr, instead of failing to encode."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        try:
            reconfigure(errors="backslashreplace")
        except (ValueError, io.UnsupportedOperation):
            pass


def _ignore_signals() -> None:
    """Cleanup is done and the exit status chosen: a further stop signal changes neither."""
    for sig in (signal.SIGINT, *TERMINATING):
        signal.signal(sig, signal.SIG_IGN)


def _stopped(exc: KeyboardInterrupt) -> int:
    """Ctrl-C or a stop signal ended the command: say so in one line; the exit status (130, or
    128 + the signal's number)."""
    _ignore_signals()
    if isinstance(exc, Terminated):
        _err(f"profkit: terminated ({signal.Signals(exc.signum).name})")
        return 128 + exc.signum
    _err("profkit: interrupted")
    return 130


def _stdout_is_devnull() -> bool:
    try:
        out, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
    except (OSError, ValueError, AttributeError):
        return False
    return (out.st_dev, out.st_ino) == (null.st_dev, null.st_ino)


def handles_errors(fn: Callable[..., None]) -> Callable[..., None]:
    """ProfkitError -> 'profkit: error: ...' (flags named as flags) and its exit code; library
    warnings -> 'profkit: note: ...'; tracebacks only with --verbose."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        caught: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ProfkitWarning)
                try:
                    fn(*args, **kwargs)
                finally:
                    # A copy: inside catch_warnings(record=True) showwarning appends to `caught`
                    # itself, so looping over the live list would never end.
                    for w in list(caught):
                        if issubclass(w.category, ProfkitWarning):
                            _err(f"profkit: note: {name_params(str(w.message), flag)}")
                        else:
                            _err(warnings.formatwarning(w.message, w.category, w.filename, w.lineno).rstrip())
        except ProfkitError as exc:
            if _state["verbose"]:
                raise
            _err(f"profkit: error: {exc.one_line(flag)}")
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt as exc:  # Ctrl-C, or Terminated (SIGTERM, SIGHUP, SIGQUIT)
            raise typer.Exit(_stopped(exc)) from None
        except BrokenPipeError:
            _quiet_pipe()
            raise typer.Exit(0) from None
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG, errno.EBADF):
                raise
            _quiet_pipe()  # Python's own flush at exit would fail again
            _err(f"profkit: error: cannot write the output: {exc.strerror}")
            raise typer.Exit(1) from None
        except Exception as exc:
            from .store import is_database_error

            if not is_database_error(exc) or _state["verbose"]:
                raise
            # A damaged page met while reading, after output may have begun.
            sys.stdout.flush()
            _err(f"profkit: error: the database is damaged or unreadable ({exc}); what was printed is incomplete")
            raise typer.Exit(1) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        from .version import __version__

        print(f"profkit {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks for errors.")] = False,
    db: GlobalDbOpt = None,
    version: Annotated[bool, typer.Option("--version", help="Print profkit's version and exit.", callback=_version,
                                          is_eager=True)] = False,
) -> None:
    _state["verbose"] = verbose
    _state["db"] = db


def _open(db: Optional[Path], create: bool = False) -> Database:
    from .api import open_db

    return open_db(db or _state["db"], create=create)


# ---------------------------------------------------------------------------------- run
@app.command()
@handles_errors
def run(
    workload: Annotated[str, typer.Argument(help="A built-in workload (see `profkit workloads`) or a .py file defining build(spec).", show_default=False)],
    tool: Annotated[Tool, typer.Option(help="auto (ncu where it can read counters, else nsys, else torch), ncu, nsys or torch (torch.profiler).")] = Tool.auto,
    precision: Annotated[Precision, typer.Option(help="Precision the workload runs in (amp: torch.autocast).")] = Precision.fp32,
    mode: Annotated[Mode, typer.Option(help="eager, torchscript (torch.jit.trace) or compile (torch.compile, compiled in the warm-up).")] = Mode.eager,
    compile_mode: Annotated[CompileMode, typer.Option(help="torch.compile mode, with --mode compile (reduce-overhead replays CUDA graphs; their kernels are traced one by one).")] = CompileMode.default,
    batch_size: Annotated[int, typer.Option(help="Batch size passed to the workload.")] = 8,
    iters: Annotated[int, typer.Option(help="Measured iterations, each in its own NVTX range.")] = 1,
    warmup: Annotated[int, typer.Option(help="Unprofiled iterations before the measured ones.")] = 3,
    device: Annotated[Device, typer.Option(help="cuda, or cpu to profile CPU operators with torch.profiler.")] = Device.cuda,
    keep_bn_fp32: KeepBnOpt = False,
    channels_last: ChannelsLastOpt = False,
    cudnn_benchmark: CudnnBenchOpt = False,
    metrics: Annotated[Optional[str], typer.Option(help="ncu metric preset for this GPU (time, tensor, full) or a comma-separated list of metric names, profiled on every launch. Left out: the chip's default; on Hopper, the tensor counters on the first launch of each kernel function and every launch timed by CUPTI.", show_default=False)] = None,
    name: Annotated[Optional[str], typer.Option(help="Run name (default: workload-precision-mode-tool).", show_default=False)] = None,
    timeout: Annotated[Optional[float], typer.Option(help="Stop the profiler after this many seconds.", show_default=False)] = None,
    cpu_sampling: Annotated[bool, typer.Option("--cpu-sampling", help="nsys: sample CPU call stacks too (large captures).")] = False,
    context_switches: Annotated[bool, typer.Option("--context-switches", help="nsys: trace the process's CPU context switches.")] = False,
    nproc_per_node: Annotated[int, typer.Option(help="Ranks of a distributed job on this machine (one GPU each), started by torchrun and profiled together as one run (nsys or torch), with a rank on every kernel.")] = 1,
    report: ReportOpt = True,
    db: DbOpt = None,
) -> None:
    """Run a workload under a profiler, store its kernels, print a summary and write its HTML report."""
    from . import render  # here, not at the top: --help need not pay for it
    from .api import profile
    from .launch import Progress

    err = render.console(stderr=True)
    with err.status("starting") as status:
        def on_kernel(index: int, kname: str, passes: Optional[int]) -> None:
            status.update(f"ncu: profiled {index + 1} kernels ({passes or '?'} passes each): {kname[:60]}")

        def on_note(text: str) -> None:
            err.print(f"profkit: {name_params(text, flag)}", markup=False, highlight=False)

        done = profile(workload, tool=tool.value, precision=precision.value, mode=mode.value,
                       compile_mode=compile_mode.value, keep_bn_fp32=keep_bn_fp32, channels_last=channels_last,
                       cudnn_benchmark=cudnn_benchmark, batch_size=batch_size,
                       iters=iters, warmup=warmup, device=device.value, metrics=metrics, name=name, timeout_s=timeout,
                       cpu_sampling=cpu_sampling, context_switches=context_switches, nproc_per_node=nproc_per_node,
                       db=db or _state["db"],
                       progress=Progress(on_kernel=on_kernel, on_stage=status.update, on_note=on_note))
    render.run_done(done, done.summary(), done.report_path, str(done.database.path))
    render.findings(done.findings())
    if report:
        render.report_written(done.report())


# ---------------------------------------------------------------------------------- import
@app.command("import")
@handles_errors
def import_(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="A .ncu-rep report or ncu raw-page CSV (.csv, .csv.gz), a torch.profiler trace (.json, .json.gz), or an Nsight Systems report (.nsys-rep, .qdstrm) or its SQLite export (.sqlite).", show_default=False)],
    name: Annotated[Optional[str], typer.Option(help="Run name (default: from the file name).", show_default=False)] = None,
    db: DbOpt = None,
) -> None:
    """Import a capture made elsewhere as a new run; prints the run's name last."""
    from . import render  # here, not at the top: --help need not pay for it

    database = _open(db, create=True)
    done = database.import_file(path, name=name)  # the database file is made when the run is reserved
    # The result is printed before the command counts as done: if it cannot be written
    # (a full disk, /dev/full), the import is undone, so that a retry makes no duplicate.
    try:
        render.imported(done, str(path))
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        database.store.delete_run(done.id)
        from .errors import StoreError

        raise StoreError(f"cannot write the output ({exc.strerror or exc}); the import of {path} is undone",
                         "Free the output's disk or send it elsewhere, then import again.") from None


# ---------------------------------------------------------------------------------- runs
@app.command()
@handles_errors
def runs(fmt: FmtOpt = Format.table, db: DbOpt = None) -> None:
    """List the runs in the database."""
    from . import render  # here, not at the top: --help need not pay for it
    render.runs(_open(db).list_runs(), fmt.value)


# ---------------------------------------------------------------------------------- kernels
@app.command()
@handles_errors
def kernels(
    run_ref: RunArg,
    fmt: FmtOpt = Format.table,
    limit: Annotated[Optional[int], typer.Option(min=0, help="Show at most this many launches (table only).", show_default=False)] = None,
    db: DbOpt = None,
) -> None:
    """List a run's kernel launches with their precision, tensor-core verdict and evidence."""
    from . import render  # here, not at the top: --help need not pay for it
    r = _open(db).run(run_ref)
    if fmt is Format.json:
        render.json_array(r.iter_kernels_json())  # each row's JSON made by SQLite: millions of rows
        return
    counts = r.count_by_kind() if fmt is Format.table else {}
    render.kernels(r, r.iter_kernels(), fmt.value, limit=limit,
                   memory_ops=counts.get("memcpy", 0) + counts.get("memset", 0))


# ---------------------------------------------------------------------------------- summary
@app.command()
@handles_errors
def summary(
    run_ref: RunArg,
    fmt: FmtOpt = Format.table,
    top: Annotated[int, typer.Option(min=0, help="How many kernels to list by time.")] = 10,
    db: DbOpt = None,
) -> None:
    """Summarise a run: launches, GPU time, tensor-core share, time by precision."""
    from . import render  # here, not at the top: --help need not pay for it
    r = _open(db).run(run_ref)
    render.summary(r, r.summary(top=top), fmt.value)
    if fmt is Format.table:
        render.findings(r.findings())


# ---------------------------------------------------------------------------------- ranges
@app.command()
@handles_errors
def ranges(run_ref: RunArg, fmt: FmtOpt = Format.table, db: DbOpt = None) -> None:
    """Per NVTX range: kernels launched in it, their GPU time, wall time, other threads' kernels."""
    from . import render  # here, not at the top: --help need not pay for it
    r = _open(db).run(run_ref)
    render.ranges(r, r.range_rows(), fmt.value)


# ---------------------------------------------------------------------------------- diff, compare
class Match(str, Enum):
    exact = "exact"
    family = "family"
    op = "op"


ThresholdOpt = Annotated[float, typer.Option("--threshold", min=0, max=1000, help="Noise threshold: a row whose time moved by less than this percentage of A's (or by under 1 us) and whose calls are equal is 'same'.")]


@app.command("diff")
@handles_errors
def diff_(
    run_a: Annotated[str, typer.Argument(metavar="RUN_A", help="The run to compare from (name or id).", show_default=False)],
    run_b: Annotated[str, typer.Argument(metavar="RUN_B", help="The run to compare with it.", show_default=False)],
    match: Annotated[Match, typer.Option(help="Line up kernels by exact name, by the work they do (family: tile variants, template instances, generated names), or by the PyTorch operator that launched them (op: torch.profiler runs).")] = Match.exact,
    fmt: FmtOpt = Format.table,
    threshold: ThresholdOpt = 10.0,
    limit: Annotated[Optional[int], typer.Option(min=0, help="Show at most this many rows (table only).", show_default=False)] = None,
    all_rows: Annotated[bool, typer.Option("--all", help="Show unchanged rows too (table only).")] = False,
    db: DbOpt = None,
) -> None:
    """What changed from RUN_A to RUN_B: kernels added, removed, faster or slower; tensor-core share; fusions."""
    from . import render  # here, not at the top: --help need not pay for it

    d = _open(db).diff(run_a, run_b, match=match.value, threshold_pct=threshold)
    render.diff(d, fmt.value, limit=limit, show_same=all_rows)


@app.command()
@handles_errors
def compare(
    workload: Annotated[str, typer.Argument(help="A built-in workload or a .py file defining build(spec).", show_default=False)],
    modes: Annotated[str, typer.Option(help="Comma-separated modes to profile: eager, torchscript, compile.")] = "eager",
    precisions: Annotated[str, typer.Option("--precisions", "--precision", help="Comma-separated precisions: fp32, fp16, bf16, amp.")] = "fp32",
    tool: Annotated[Tool, typer.Option(help="Profiler for every variant (auto: ncu where it can read counters, else nsys, else torch).")] = Tool.auto,
    match: Annotated[Match, typer.Option(help="How the diffs line kernels up (see `profkit diff --help`).")] = Match.family,
    threshold: ThresholdOpt = 10.0,
    batch_size: Annotated[int, typer.Option(help="Batch size passed to the workload.")] = 8,
    device: Annotated[Device, typer.Option(help="cuda, or cpu to compare CPU operators with torch.profiler.")] = Device.cuda,
    iters: Annotated[int, typer.Option(help="Measured iterations per variant.")] = 1,
    warmup: Annotated[int, typer.Option(help="Unprofiled iterations before the measured ones (compilation happens here).")] = 3,
    compile_mode: Annotated[CompileMode, typer.Option(help="torch.compile mode for the compile variant.")] = CompileMode.default,
    keep_bn_fp32: KeepBnOpt = False,
    channels_last: ChannelsLastOpt = False,
    cudnn_benchmark: CudnnBenchOpt = False,
    metrics: Annotated[Optional[str], typer.Option(help="ncu metric preset or list (as for run).", show_default=False)] = None,
    fmt: FmtOpt = Format.table,
    report: ReportOpt = True,
    db: DbOpt = None,
) -> None:
    """Profile a workload in several modes or precisions, show what changed against the first, and write
    each variant's side-by-side HTML report."""
    from . import render  # here, not at the top: --help need not pay for it
    from .api import compare as do_compare
    from .launch import Progress

    err = render.console(stderr=True)
    with err.status("starting") as status:
        def on_note(text: str) -> None:
            err.print(f"profkit: {name_params(text, flag)}", markup=False, highlight=False)

        cmp = do_compare(workload, modes=_list(modes), precisions=_list(precisions), match=match.value,
                         threshold_pct=threshold, db=db or _state["db"], tool=tool.value, batch_size=batch_size,
                         device=device.value,
                         iters=iters, warmup=warmup, compile_mode=compile_mode.value, metrics=metrics,
                         keep_bn_fp32=keep_bn_fp32, channels_last=channels_last, cudnn_benchmark=cudnn_benchmark,
                         progress=Progress(on_stage=status.update, on_note=on_note))
    render.compare(cmp, fmt.value)
    if report:
        for path in cmp.write_reports():
            render.report_written(path, stderr=fmt is not Format.table)


# ---------------------------------------------------------------------------------- report
@app.command("report")
@handles_errors
def report_(
    run_ref: Annotated[Optional[str], typer.Argument(metavar="RUN", help="The run (name or id).", show_default=False)] = None,
    vs: Annotated[Optional[str], typer.Option("--vs", metavar="RUN_B", help="Another run: the two side by side, with their diff.", show_default=False)] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Where to write the page (default: reports/RUN.html, reports/vs/RUN+RUN_B.html, or reports/index.html; a run named index: reports/index+ID.html).", show_default=False)] = None,
    index: Annotated[bool, typer.Option("--index", help="Write an index of every run in the database, with the run reports it links (written anew where missing or stale).")] = False,
    match: Annotated[Match, typer.Option(help="With --vs: how the diff lines kernels up (see `profkit diff --help`).")] = Match.exact,
    threshold: ThresholdOpt = 10.0,
    db: DbOpt = None,
) -> None:
    """Write a self-contained HTML kernel report: charts, findings, a sortable table; opens offline."""
    from . import render  # here, not at the top: --help need not pay for it
    from .errors import UsageError

    database = _open(db)
    if index:
        if run_ref is not None or vs is not None:
            raise UsageError("--index writes the index of every run: give it no RUN and no --vs")
        render.report_written(database.write_index(output))
        return
    if vs is None and (match is not Match.exact or threshold != 10.0):
        raise UsageError("--match and --threshold shape the diff of a side-by-side report: give --vs RUN_B too")
    if run_ref is None:
        raise UsageError("give the RUN to report on (or --index for every run)", "profkit runs lists them.")
    r = database.run(run_ref)
    other = database.run(vs) if vs is not None else None
    render.report_written(r.report(output, vs=other, match=match.value, threshold_pct=threshold))


def _list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


# ---------------------------------------------------------------------------------- bench
@app.command()
@handles_errors
def bench(
    workload: Annotated[Optional[str], typer.Argument(metavar="WORKLOAD", help="A built-in workload (see `profkit workloads`) or a .py file defining build(spec).", show_default=False)] = None,
    precisions: Annotated[str, typer.Option("--precisions", "--precision", help="Comma-separated precisions: fp32, fp16, bf16, amp (the grid's columns).")] = "fp32",
    modes: Annotated[str, typer.Option(help="Comma-separated modes: eager, torchscript, compile (the grid's rows).")] = "eager",
    batch_size: Annotated[Optional[int], typer.Option(help="Batch size passed to the workload (items per iteration). Default: 8 on a GPU, 1 on the CPU.", show_default=False)] = None,
    iters: Annotated[Optional[int], typer.Option(help="Timed iterations per combination, after the warm-up. Default: 20 on a GPU, 3 on the CPU.", show_default=False)] = None,
    warmup: Annotated[Optional[int], typer.Option(help="Untimed iterations first (torch.compile compiles here). Default: 5 on a GPU, 1 on the CPU.", show_default=False)] = None,
    device: Annotated[Device, typer.Option(help="cuda (timed with CUDA events), or cpu (with small defaults).")] = Device.cuda,
    keep_bn_fp32: KeepBnOpt = False,
    channels_last: ChannelsLastOpt = False,
    cudnn_benchmark: CudnnBenchOpt = False,
    fmt: FmtOpt = Format.table,
    list_: Annotated[bool, typer.Option("--list", help="List the stored benchmarks instead of running one.")] = False,
    show: Annotated[Optional[int], typer.Option("--show", metavar="ID", min=1, help="Print a stored benchmark again.", show_default=False)] = None,
    db: DbOpt = None,
) -> None:
    """Time a workload in each precision and mode, and print the grid of modes x precisions: median time
    per iteration and its spread, items/s, peak GPU memory, agreement with fp32 eager.

    Each combination runs in its own process, timed after its warm-up (CUDA events on a GPU). The
    benchmark is stored (--list, --show ID); a combination that fails is a row with its error, and the
    command then exits 1."""
    from . import render  # here, not at the top: --help need not pay for it
    from .errors import UsageError

    if list_ or show is not None:
        if workload is not None or (list_ and show is not None):
            raise UsageError("--list and --show read stored benchmarks: give either alone, with no WORKLOAD")
        database = _open(db)
        if list_:
            render.benches(database.benches(), fmt.value)
        elif show is not None:
            render.bench(database.bench(show), fmt.value)
        return
    if workload is None:
        raise UsageError("give the WORKLOAD to benchmark (see profkit workloads), or --list")
    from .api import bench as do_bench
    from .launch import Progress

    err = render.console(stderr=True)
    with err.status("starting") as status:
        def on_note(text: str) -> None:
            err.print(f"profkit: {name_params(text, flag)}", markup=False, highlight=False)

        done = do_bench(workload, precisions=_list(precisions), modes=_list(modes), batch_size=batch_size,
                        iters=iters, warmup=warmup, device=device.value, keep_bn_fp32=keep_bn_fp32,
                        channels_last=channels_last, cudnn_benchmark=cudnn_benchmark, db=db or _state["db"],
                        progress=Progress(on_stage=status.update, on_note=on_note))
    render.bench(done, fmt.value)
    if not done.ok:
        failed = [r for r in done.rows if r.status != "ok" and not r.reference_only]
        _err(f"profkit: error: {len(failed)} of {sum(not r.reference_only for r in done.rows)} combinations failed "
             f"(stored as benchmark {done.id})")
        raise typer.Exit(1)


# ---------------------------------------------------------------------------------- doctor
@app.command()
@handles_errors
def doctor(fmt: FmtOpt = Format.table, db: DbOpt = None) -> None:
    """Check what this machine can profile: GPU and driver, PyTorch, ncu and counter permission, nsys and its
    importer, the database and disk space. One line each; exit 1 if any check fails."""
    from . import render  # here, not at the top: --help need not pay for it
    from .doctor import FAIL, checks

    found = checks(db or _state["db"])
    render.doctor(found, fmt.value)
    if any(c.status == FAIL for c in found):
        raise typer.Exit(1)


# ---------------------------------------------------------------------------------- sweep
@app.command()
@handles_errors
def sweep(
    workloads: Annotated[str, typer.Option(help="Comma-separated built-in workloads or .py files.", show_default=False)],
    precisions: Annotated[str, typer.Option(help="Comma-separated precisions: fp32, fp16, bf16, amp.")] = "fp32",
    modes: Annotated[str, typer.Option(help="Comma-separated modes: eager, torchscript, compile.")] = "eager",
    tools: Annotated[str, typer.Option(help="Comma-separated tools: auto, ncu, nsys, torch.")] = "auto",
    address: Annotated[Optional[str], typer.Option(help="A Dask scheduler (tcp://host:8786) to hand the jobs to; its workers each see one GPU and offer the resource GPU=1. Left out: a local cluster, one worker per GPU.", show_default=False)] = None,
    workers: Annotated[Optional[int], typer.Option(help="Local workers (default: one per GPU; 2 with --device cpu).", show_default=False)] = None,
    batch_size: Annotated[int, typer.Option(help="Batch size passed to the workloads.")] = 8,
    iters: Annotated[int, typer.Option(help="Measured iterations per run.")] = 1,
    warmup: Annotated[int, typer.Option(help="Unprofiled iterations before the measured ones.")] = 3,
    device: Annotated[Device, typer.Option(help="cuda, or cpu (torch.profiler runs).")] = Device.cuda,
    timeout: Annotated[Optional[float], typer.Option(help="Stop each job's profiler after this many seconds.", show_default=False)] = None,
    fmt: FmtOpt = Format.table,
    db: DbOpt = None,
) -> None:
    """Profile a matrix of workloads x precisions x modes x tools, one `profkit run` per cell, on
    every local GPU at once (or a Dask cluster); every run lands in one database as it finishes.
    A failed job is stored with its error and logs and the others go on (exit 1 at the end)."""
    from . import render  # here, not at the top: --help need not pay for it
    from .api import sweep as do_sweep

    def on_note(text: str) -> None:
        _err(f"profkit: {name_params(text, flag)}")

    def on_result(res: Any, i: int, total: int) -> None:
        _err(render.sweep_progress(res, i, total))

    result = do_sweep(workloads, precisions=precisions, modes=modes, tools=tools, address=address, workers=workers,
                      batch_size=batch_size, iters=iters, warmup=warmup, device=device.value, timeout_s=timeout,
                      db=db or _state["db"], on_result=on_result, on_note=on_note)
    render.sweep(result, fmt.value)
    if result.failed():
        raise typer.Exit(1)


# ---------------------------------------------------------------------------------- workloads
@app.command("workloads")
@handles_errors
def workloads_() -> None:
    """List the built-in workloads, with the precisions and modes each supports."""
    from . import render  # here, not at the top: --help need not pay for it
    from .workloads import catalog

    render.workloads(catalog())


# Every command is a ProfkitCommand; set here once, so that a command added later is one too
# (`app.command()` records Typer's own class where it is given none).
for _info in app.registered_commands:
    if _info.cls is None or _info.cls is TyperCommand:
        _info.cls = ProfkitCommand


# Stop profkit as SIGTERM does: a job scheduler or `kill`, the terminal closed (SIGHUP), Ctrl-\.
TERMINATING = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class Terminated(KeyboardInterrupt):
    """SIGTERM, SIGHUP or SIGQUIT: unwound like Ctrl-C, so that the profiler's process group is
    stopped, nothing half-written stays and the run is marked; exit status 128 + the signal's
    number (143 for SIGTERM)."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = signum


def _on_terminate(signum: int, frame: object) -> None:
    for sig in TERMINATING:  # once: the unwinding must not be cut short
        signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signum)


def _parent_gone() -> None:
    """The profkit process that started this one (a sweep's worker) has died: stop as SIGTERM
    stops (the profiler's group is stopped, the run marked), and for certain soon after."""
    import time

    from .tools.runner import GRACE_S

    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(3 * GRACE_S)
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    try:
        for sig in TERMINATING:
            if signal.getsignal(sig) is not signal.SIG_IGN:  # `nohup profkit ...` keeps SIGHUP ignored
                signal.signal(sig, _on_terminate)
        if "PROFKIT_LIFELINE" in os.environ:  # started by profkit (a sweep's job): it dies with its starter
            from .tools.runner import watch_lifeline

            watch_lifeline(_parent_gone)
        app()
    except KeyboardInterrupt as exc:  # before a command's own handling began (start-up), or after it
        sys.exit(_stopped(exc))


if __name__ == "__main__":
    main()
