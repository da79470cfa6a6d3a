"""The ``profkit`` command: parse options, call the library (``profkit.api``), hand what it
returns to ``profkit.render``, and turn expected errors into one line and a non-zero exit.
No analysis and no SQL live here, and nothing heavy (torch, pandas) is imported before a
command needs it, so ``profkit --help`` is quick.

The command line is a Typer app, declared through Typer's public API: every command's
arguments and options are its function's parameters, ``Annotated[T, typer.Option(help=...)]``;
the run options are made from their one record (``profkit.options``) into the signatures of
the commands that take them (:func:`run_options`). Typer checks and converts the values, and
draws the help.

Every bad input ends in one line on stderr: the library's errors (their parameter names
become this command's flags) and the usage errors Typer finds (unknown option, bad value),
which :class:`Profkit` prints as one line instead of Typer's panel. A closed pipe (``profkit
kernels RUN | head``) ends quietly. To add a command: a function under ``@command("name")`` and
``@handles_errors``, its parameters declared as the others are (``RunRef``, ``Db``, ``Fmt``, ...),
its name and flags added to tests/test_cli.py's FLAGS.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import inspect
import io
import os
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from .choices import DEFAULT_MATCH, CheckFormat, Format, Match
from .errors import MAX_COUNT, ProfkitError, ProfkitWarning, name_params
from .formatting import shown
from .options import RunOptions, cli_of, default_for, for_command
from .parse.formats import import_help
from .processes import (
    TERMINATING,
    alone,
    leave,
    parent_gone,
    stage,
    stop_on_signals,
    stopped_by,
)

if TYPE_CHECKING:
    from .api import Database


def _err(text: str) -> None:
    """A message on stderr, each of its lines with its control characters shown escaped (an
    error quoting a kernel's or a file's name prints it, never acts on the terminal)."""
    print("\n".join(shown(line) for line in text.split("\n")), file=sys.stderr)


# Where stderr is no terminal: seconds a command runs before it prints its stages. A command
# (or a bad input) that ends sooner prints no progress at all: its error stays one line.
QUIET_S = 10.0


class _Stages:
    """Where a long command says what it is doing, on stderr only (stdout holds its output):
    on a terminal, rich's status line, redrawn; elsewhere (a CI log, a pipe, a file), once the
    command has run for ``QUIET_S``, one line per stage, ``profkit: <stage>`` (the stage then
    under way first), and ncu's kernel count now and then."""

    def __init__(self, err: Any) -> None:
        import threading

        self.err = err
        self.status: Any = None
        self.current = self.printed = ""
        self.lock = threading.Lock()
        self.loud = QUIET_S <= 0
        self.timer = threading.Timer(max(QUIET_S, 0.0), self._speak)
        self.timer.daemon = True

    def __enter__(self) -> _Stages:
        if getattr(self.err, "is_terminal", False):
            self.status = self.err.status("starting")
            self.status.__enter__()
        elif not self.loud:
            self.timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.timer.cancel()
        with self.lock:
            self.loud = False
        if self.status is not None:
            self.status.__exit__(*exc)

    def _speak(self) -> None:
        with self.lock:
            self.loud = True
            self._line(self.current)

    def _line(self, text: str) -> None:
        if self.loud and text and text != self.printed:
            self.printed = text
            _err(f"profkit: {text}")

    def stage(self, text: str) -> None:
        if self.status is not None:
            from .render import Text  # as text, not markup: a kernel's or a file's name

            self.status.update(Text(text))
            return
        with self.lock:
            self.current = text
            self._line(text)

    def output(self, text: str) -> None:
        """A line of the profiled program's own output, as it prints it (above the status line on
        a terminal)."""
        if self.status is not None:
            self.err.print(text, markup=False, highlight=False, soft_wrap=True, emoji=False)
            return
        with self.lock:
            print(text, file=sys.stderr, flush=True)  # the user's own program's: as it printed it

    def kernel(self, index: int, kname: str, passes: Optional[int]) -> None:
        text = f"ncu: profiled {index + 1} kernels ({passes or '?'} passes each)"
        if self.status is not None:
            from .render import Text

            self.status.update(Text(f"{text}: {kname[:60]}"))
        elif index + 1 in (1, 10, 100) or (index + 1) % 1000 == 0:
            self.stage(text)


# The library's parameters (as its messages name them, in backticks) -> this command's flags:
# the run options' from their record, then the other commands' own.
FLAGS = {
    **{f.name: cli_of(f).flags[0] for f in fields(RunOptions)},
    **{
        p: "--" + p.replace("_", "-")
        for p in (
            "db",
            "top",
            "limit",
            "match",
            "modes",
            "precisions",
            "output",
            "vs",
            "workloads",
            "tools",
            "address",
            "workers",
            "tls_ca_file",
            "tls_cert",
            "tls_key",
            "step_range",
            "rounds",
        )
    },
    "threshold_pct": "--threshold",
}


def flag(param: str) -> str | None:
    """The flag for a library parameter; None for any other word."""
    return FLAGS.get(param)


# ---------------------------------------------------------------------------------- the app
class _Stopped(Exception):
    """Ctrl-C or a stop signal while Typer parsed the command line: carried past Typer, which
    would turn it into a silent exit 130 (the signal's own status and line are profkit's)."""

    def __init__(self, interrupt: KeyboardInterrupt) -> None:
        super().__init__(str(interrupt))
        self.interrupt = interrupt


def _usage_error(exc: BaseException) -> bool:
    """Whether ``exc`` is one of the parser's usage errors (Typer's Click's ClickException:
    unknown option, bad value, missing argument), which carry their message and exit status.
    Typer exports no base class of them but BadParameter, so they are told by what they carry."""
    return (
        not isinstance(exc, ProfkitError)
        and callable(getattr(exc, "format_message", None))
        and isinstance(getattr(exc, "exit_code", None), int)
    )


class Profkit(TyperGroup):
    """The ``profkit`` group: its commands in the order they are defined; every error one line
    on stderr (Typer's usage errors too, with the command whose help to see); ``profkit``
    alone prints the help."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)

    def make_context(
        self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any
    ) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt as exc:
            raise _Stopped(exc) from exc

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        # Ctrl-C or a stop signal while the command's options were read
        except KeyboardInterrupt as exc:
            raise _Stopped(exc) from exc

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        extra["windows_expand_args"] = windows_expand_args
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        unusable = _unusable_stdout()
        if unusable:  # said before anything is done: no command then stores what it could not print
            _err(
                f"profkit: error: {unusable}: nothing could be printed. Give it an output (a file, a pipe, "
                "or >/dev/null to discard it)"
            )
            sys.exit(1)
        _printable_output()
        # `profkit` alone: the help
        args = list(sys.argv[1:] if args is None else args) or ["--help"]
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _Stopped as exc:
            sys.exit(_stopped(exc.interrupt))
        except BrokenPipeError:
            _quiet_pipe()
            sys.exit(0)
        except SystemExit as exc:
            # Typer, Rich or Click met a closed pipe themselves (printing the help to `| head -1`):
            # they point stdout at /dev/null (or wrap it) and exit 1; a reader gone is no error here.
            if exc.code == 1 and (
                type(sys.stdout).__name__ == "PacifyFlushWrapper" or _stdout_is_devnull()
            ):
                _quiet_pipe()
                sys.exit(0)
            raise
        except typer.Abort:
            _err("profkit: interrupted")
            sys.exit(130)
        except OSError as exc:  # the help, or a usage error's text, not written (> /dev/full)
            if not _unwritten(exc):
                raise
            sys.exit(1)
        except Exception as exc:
            if _usage_error(exc):
                ctx = getattr(exc, "ctx", None)
                where = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
                # Typer converts values through pydantic, whose messages start "Value error, ".
                text = " ".join(exc.format_message().split()).replace("Value error, ", "")  # type: ignore[attr-defined]
                _err(f"profkit: error: {text}{where}")
                sys.exit(exc.exit_code)  # type: ignore[attr-defined]
            import traceback  # --verbose's traceback, or a bug's: printed as _err prints, names escaped

            _err(traceback.format_exc().rstrip("\n"))
            sys.exit(exc.exit_code if isinstance(exc, ProfkitError) else 1)
        try:
            sys.stdout.flush()  # here, not at exit: a reader gone (`--help | head -1`) ends quietly
        except BrokenPipeError:
            _quiet_pipe()
            code = 0
        except OSError as exc:
            if not _unwritten(exc):
                raise
            code = 1
        sys.exit(code if isinstance(code, int) else 0)


class ProgramCommand(TyperCommand):
    """``profkit run``: everything after ``--`` is a program and its own arguments, as nsys
    and ncu take it (kept in ``ctx.meta["program"]``, never read as profkit's options)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "[-- PROGRAM [ARGS]...]"]

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            ctx.meta["program"] = args[at + 1 :]
            args = args[:at]
        return super().parse_args(ctx, args)


app = typer.Typer(
    name="profkit",
    cls=Profkit,
    help="Profile PyTorch workloads under Nsight Compute, Nsight Systems or torch.profiler and see, "
    "for every kernel, its precision and whether it ran on the tensor cores.",
    # Typer's plain help: it wraps every option's name and text to the terminal and cuts none (its
    # Rich panels cut long flags at 80 columns), and it reads help texts as written (no markup).
    rich_markup_mode=None,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def command(name: str, **settings: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A command of the app (Typer's ``app.command``), its help the function's docstring, each
    paragraph as one line that the help wraps to the terminal (a docstring's line breaks are
    where they fall in the source)."""

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        doc = inspect.getdoc(fn) or ""
        text = "\n\n".join(" ".join(p.split()) for p in doc.split("\n\n"))
        return app.command(name, help=(text), **settings)(fn)

    return decorate


def _exit(code: int) -> NoReturn:
    """End the command with exit status ``code``."""
    raise typer.Exit(code)


_state: dict[str, Any] = {"verbose": False, "db": None}

REPORT_HELP = "Write the HTML report under reports/ and print its path."
DB_HELP = "Database file (default: $PROFKIT_DB, else ./profkit.db)."
RUN_HELP = "Run name or id (see `profkit runs`)."
THRESHOLD_HELP = (
    "Noise threshold: a row whose time moved by less than this percentage of A's (or by under 1 us) and "
    "whose calls are equal is 'same'."
)
WIDE_HELP = "Tables: cut nothing to fit the terminal (every name and column whole)."

# The options several commands share, declared once.
Db = Annotated[Optional[Path], typer.Option(help=DB_HELP, show_default=False)]
Fmt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
Wide = Annotated[bool, typer.Option("--wide", help=WIDE_HELP)]
Threshold = Annotated[float, typer.Option(min=0, max=1000, help=THRESHOLD_HELP)]
Report = Annotated[bool, typer.Option("--report/--no-report", help=REPORT_HELP)]
RunRef = Annotated[str, typer.Argument(metavar="RUN", help=RUN_HELP, show_default=False)]


def _version(value: bool) -> None:
    if value:
        from .version import __version__

        print(f"profkit {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show tracebacks for errors.")
    ] = False,
    # Before the command, `profkit --db X ...` also reads PROFKIT_DB; a command's own --db wins.
    db: Annotated[
        Optional[Path],
        typer.Option(
            envvar="PROFKIT_DB", help="Database file (default ./profkit.db).", show_default=False
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print profkit's version and exit.", callback=_version, is_eager=True
        ),
    ] = False,
) -> None:
    _state["verbose"] = verbose
    _state["db"] = db


def _run_option(command: str, f: Any) -> inspect.Parameter:
    """A run option of ``command`` as a parameter of its function: its type, default, flags
    and help from the record."""
    c = cli_of(f)
    default = default_for(f, command)
    types = {"int": int, "bool": bool, "bool | None": bool, "float | None": float}
    kind: Any = c.choices or types.get(str(f.type), str)
    if c.choices is not None and default is not None:
        default = c.choices(default)
    if default is None:
        kind = Optional[kind]
    info = typer.Option(
        *c.flags, help=(c.help_for(command)), show_default=c.show_default and default is not None
    )
    return inspect.Parameter(
        f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, info]
    )


def run_options(command: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The run options ``command`` takes, from their one record (``profkit.options``), put in
    place of the function's ``options`` parameter. The function receives them together as
    ``options``, keyed by the library's parameter names (``timeout_s`` for --timeout), its
    choices as their values: what ``profkit.api`` takes as keyword arguments."""
    taken = for_command(command)

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        own = inspect.signature(fn, eval_str=True)
        params: list[inspect.Parameter] = []
        for p in own.parameters.values():
            if p.name == "options":
                params += [_run_option(command, f) for f in taken]
            else:
                params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))
        names = {f.name for f in taken}

        def command_fn(**kwargs: Any) -> None:
            given = {
                k: (v.value if isinstance(v, Enum) else v) for k, v in kwargs.items() if k in names
            }
            fn(options=given, **{k: v for k, v in kwargs.items() if k not in names})

        command_fn.__name__, command_fn.__qualname__, command_fn.__doc__ = (
            fn.__name__,
            fn.__qualname__,
            fn.__doc__,
        )
        command_fn.__module__ = fn.__module__
        command_fn.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
        command_fn.__annotations__ = {p.name: p.annotation for p in params}
        return command_fn

    return decorate


def _unwritten(exc: OSError) -> bool:
    """Where ``exc`` says a file or the output could not be written (a full disk, an I/O
    error, a closed descriptor): said in one line, the output sent to /dev/null, True."""
    if exc.errno not in (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG, errno.EBADF):
        return False
    _quiet_pipe()  # Python's own flush at exit would fail again
    what = exc.filename if isinstance(exc.filename, str) else "the output"
    full = "the disk is full: " if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    _err(f"profkit: error: {full}cannot write {what}: {exc.strerror}")
    return True


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
    # not a real file (tests)
    except (
        OSError,
        ValueError,
        AttributeError,
        io.UnsupportedOperation,
    ):
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
    what, code = stopped_by(exc)
    _err(f"profkit: {what}")
    return code


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
        try:
            _handled(fn, *args, **kwargs)
        finally:
            # The databases the command opened are closed when it ends, not when the garbage
            # collector gets to them: a command run in-process (a notebook, a test) leaves the
            # file as a finished process would (its WAL checkpointed), whatever still refers to them.
            while _opened:
                _opened.pop().close()

    return wrapper


# The databases the running command has opened (``_open``), closed as it ends.
_opened: list[Database] = []


def _handled(fn: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """``fn`` with the errors and warnings handled as ``handles_errors`` says."""
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
                        _err(
                            warnings.formatwarning(
                                w.message, w.category, w.filename, w.lineno
                            ).rstrip()
                        )
    except ProfkitError as exc:
        if _state["verbose"]:
            raise
        _err(f"profkit: error: {exc.one_line(flag)}")
        _exit(exc.exit_code)
    except KeyboardInterrupt as exc:  # Ctrl-C, or Terminated (SIGTERM, SIGHUP, SIGQUIT)
        _exit(_stopped(exc))
    except BrokenPipeError:
        _quiet_pipe()
        _exit(0)
    except OSError as exc:
        if not _unwritten(exc):
            raise
        _exit(1)
    except Exception as exc:
        from .store import db_path, is_database_error, read_failure

        if not is_database_error(exc) or _state["verbose"]:
            raise
        # A damaged page (or a full disk, a lock) met while reading, after output may have begun.
        sys.stdout.flush()
        error = read_failure(db_path(kwargs.get("db") or _state["db"]), exc)
        _err(f"profkit: error: {error.one_line(flag)}; what was printed is incomplete")
        _exit(1)


def _noter(err: Any) -> Callable[[str], None]:
    """A progress note on stderr (``err``, a Rich console), its library ``param`` marks made this
    command's flags: one line however long (a terminal wraps it; a log keeps it whole for grep)."""

    def note(text: str) -> None:
        err.print(
            f"profkit: {name_params(text, flag)}", markup=False, highlight=False, soft_wrap=True
        )

    return note


def _open(db: Optional[Path], create: bool = False) -> Database:
    from .api import open_db

    database = open_db(_db(db), create=create)
    _opened.append(database)
    return database


def _db(db: Optional[Path]) -> Optional[Path]:
    """The database a command opens, or hands to the library to open: this process is
    profkit's own, so a new database's schema is made without importing pandas
    (``store.connection.LEAN_IMPORTS``; a second of a first ``profkit run`` on the GPU machine)."""
    from .store import connection

    connection.LEAN_IMPORTS = True
    return db or _state["db"]


def _list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


# ---------------------------------------------------------------------------------- run
@command("run", cls=ProgramCommand)
@handles_errors
@run_options("run")
def run(
    ctx: typer.Context,
    workload: Annotated[
        Optional[str],
        typer.Argument(
            metavar="WORKLOAD",
            help="A built-in workload (see `profkit workloads`) or a .py file defining build(spec). Or, after --, your own "
            "program as it is: profkit run -- python train.py --epochs 1.",
            show_default=False,
        ),
    ] = None,
    options: Any = None,
    report: Report = True,
    db: Db = None,
) -> None:
    """Profile your script as it is (profkit run -- python train.py ARGS: its steps found, a window of them
    profiled, the script stopped after it) or a workload; store its kernels, print a summary and write its
    HTML report."""
    from . import render  # here, not at the top: --help need not pay for it
    from .api import profile
    from .errors import UsageError
    from .launch import Progress

    program = ctx.meta.get("program")
    if program is not None and workload is not None:
        raise UsageError(
            f"give a workload or a program after --, not both ({workload} and {' '.join(program)})"
        )
    if program is None and workload is None:
        raise UsageError(
            "nothing to run",
            "Give your program after --: profkit run -- python train.py [ARGS]; "
            "or a workload: profkit run resnet18.",
        )
    err = render.console(stderr=True)
    with _Stages(err) as stages:
        on_note = _noter(err)

        def on_output(text: str) -> None:  # the program's own output, as under plain python
            stages.output(text)

        done = profile(
            workload,
            program=program,
            db=_db(db),
            **options,
            progress=Progress(
                on_kernel=stages.kernel, on_stage=stages.stage, on_note=on_note, on_output=on_output
            ),
        )
    render.run_done(
        done, done.summary(), done.report_path, str(done.database.path), caveats=done.caveats()
    )
    render.findings(done.findings())
    stage("summary and findings shown")
    if report:
        render.report_written(done.report())
        stage("report written")


# ---------------------------------------------------------------------------------- import
@command("import")
@handles_errors
def import_(
    path: Annotated[
        list[Path],
        typer.Argument(
            metavar="PATH",
            show_default=False,
            help=import_help()
            + " Several torch.profiler traces, one a rank in rank order, make one run of a distributed "
            "job.",
        ),
    ],
    name: Annotated[
        Optional[str],
        typer.Option(help="Run name (default: from the file name).", show_default=False),
    ] = None,
    step_range: Annotated[
        Optional[list[str]],
        typer.Option(
            "--step-range",
            show_default=False,
            help="A range that holds one step (a user's or a framework's NVTX or record_function range; repeat for "
            "more): its work is the step's, on every thread. torch.profiler's ProfilerStep#N ranges are steps "
            "anyway.",
        ),
    ] = None,
    db: Db = None,
) -> None:
    """Import a capture made elsewhere as a new run; prints the run's name last. Several torch.profiler
    traces, one a rank in rank order (each rank profiled on its own inside torchrun or srun), make one
    run with a rank on every row."""
    from . import render  # here, not at the top: --help need not pay for it

    database = _open(db, create=True)
    paths, first, ranges = list(path), path[0], list(step_range or ())
    with _Stages(render.console(stderr=True)) as stages:
        stages.stage(
            f"importing {first}" if len(paths) == 1 else f"importing {len(paths)} ranks' traces"
        )
        # the database file is made when the run is reserved
        done = (
            database.import_file(first, name=name, step_ranges=ranges)
            if len(paths) == 1
            else database.import_ranks(paths, name=name, step_ranges=ranges)
        )
    # The result is printed before the command counts as done: if it cannot be written
    # (a full disk, /dev/full), the import is undone, so that a retry makes no duplicate.
    try:
        render.imported(done, str(first) if len(paths) == 1 else ", ".join(map(str, paths)))
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        database.store.delete_run(done.id)
        from .errors import StoreError

        raise StoreError(
            f"cannot write the output ({exc.strerror or exc}); the import of {first} is undone",
            "Free the output's disk or send it elsewhere, then import again.",
        ) from None


# ---------------------------------------------------------------------------------- runs
@command("runs")
@handles_errors
def runs(fmt: Fmt = Format.table, wide: Wide = False, db: Db = None) -> None:
    """List the runs in the database."""
    from . import render  # here, not at the top: --help need not pay for it

    render.runs(_open(db).list_runs(), fmt.value, wide=wide)


# ---------------------------------------------------------------------------------- rm
@command("rm")
@handles_errors
def rm(run_ref: RunRef, fmt: Fmt = Format.table, db: Db = None) -> None:
    """Delete a run for good: its row, its kernels, ranges and counters, and the folder of raw files
    profkit made for it (a capture imported in place and reports written elsewhere are left)."""
    from . import render  # here, not at the top: --help need not pay for it

    render.removed(_open(db).remove(run_ref), fmt.value)


# ---------------------------------------------------------------------------------- kernels
@command("kernels")
@handles_errors
def kernels(
    run_ref: RunRef,
    fmt: Fmt = Format.table,
    limit: Annotated[
        Optional[int],
        typer.Option(
            min=0,
            max=MAX_COUNT,
            help="Show at most this many launches (table only).",
            show_default=False,
        ),
    ] = None,
    wide: Wide = False,
    db: Db = None,
) -> None:
    """List a run's kernel launches with their precision, tensor-core verdict and evidence."""
    from . import render  # here, not at the top: --help need not pay for it

    r = _open(db).run(run_ref)
    if fmt is Format.json:
        render.json_array(r.iter_kernels_json())  # each row's JSON made by SQLite: millions of rows
        return
    counts = r.count_by_kind() if fmt is Format.table else {}
    render.kernels(
        r,
        r.iter_kernels(),
        fmt.value,
        limit=limit,
        memory_ops=counts.get("memcpy", 0) + counts.get("memset", 0),
        wide=wide,
    )


# ---------------------------------------------------------------------------------- summary
@command("summary")
@handles_errors
def summary(
    run_ref: RunRef,
    fmt: Fmt = Format.table,
    top: Annotated[
        int, typer.Option(min=0, max=MAX_COUNT, help="How many kernels to list by time.")
    ] = 10,
    module_depth: Annotated[
        int,
        typer.Option(
            min=1,
            max=MAX_COUNT,
            help="Levels of the module tree in the by-module table (a list's index counts with its name: "
            "model.layers.0 is 2); deeper modules' time rolls up into them.",
        ),
    ] = 2,
    wide: Wide = False,
    db: Db = None,
) -> None:
    """Summarise a run: launches, GPU time, tensor-core share (of matrix work and of all GPU time), time by precision
    and by module."""
    from . import render  # here, not at the top: --help need not pay for it

    r = _open(db).run(run_ref)
    s = r.summary(top=top, module_depth=module_depth)
    render.summary(r, s, fmt.value, caveats=r.caveats() if fmt is Format.table else None, wide=wide)
    if fmt is Format.table:
        render.findings(r.findings())
        render.best_fix(s.tuning)


# ---------------------------------------------------------------------------------- ranges
@command("ranges")
@handles_errors
def ranges(run_ref: RunRef, fmt: Fmt = Format.table, wide: Wide = False, db: Db = None) -> None:
    """Per NVTX range: kernels launched in it, their GPU time, wall time, other threads' kernels."""
    from . import render  # here, not at the top: --help need not pay for it

    r = _open(db).run(run_ref)
    render.ranges(r, r.range_rows(), fmt.value, wide=wide)


# ---------------------------------------------------------------------------------- diff, compare
MATCH_HELP = (
    "Line up kernels by exact name, by the work they do (family: tile variants, template instances, "
    "generated names), by the PyTorch operator that launched them (op: torch.profiler runs), or by the "
    "module whose code launched them (module: runs with attribution)."
)
Limit = Annotated[
    Optional[int],
    typer.Option(
        min=0, max=MAX_COUNT, help="Show at most this many rows (table only).", show_default=False
    ),
]


@command("diff")
@handles_errors
def diff_(
    run_a: Annotated[
        str,
        typer.Argument(
            metavar="RUN_A", help="The run to compare from (name or id).", show_default=False
        ),
    ],
    run_b: Annotated[
        str, typer.Argument(metavar="RUN_B", help="The run to compare with it.", show_default=False)
    ],
    match: Annotated[Match, typer.Option(help=MATCH_HELP)] = DEFAULT_MATCH,
    fmt: Fmt = Format.table,
    threshold: Threshold = 10.0,
    limit: Limit = None,
    all_rows: Annotated[
        bool, typer.Option("--all", help="Show unchanged rows too (table only).")
    ] = False,
    wide: Wide = False,
    db: Db = None,
) -> None:
    """What changed from RUN_A to RUN_B: kernels added, removed, faster or slower; tensor-core share; fusions."""
    from . import render  # here, not at the top: --help need not pay for it

    d = _open(db).diff(run_a, run_b, match=match.value, threshold_pct=threshold)
    render.diff(d, fmt.value, limit=limit, show_same=all_rows, wide=wide)


@command("compare")
@handles_errors
@run_options("compare")
def compare(
    workload: Annotated[
        str,
        typer.Argument(
            metavar="WORKLOAD",
            show_default=False,
            help="A built-in workload or a .py file defining build(spec).",
        ),
    ],
    modes: Annotated[
        str, typer.Option(help="Comma-separated modes to profile: eager, torchscript, compile.")
    ] = "eager",
    precisions: Annotated[
        str,
        typer.Option(
            "--precisions", "--precision", help="Comma-separated precisions: fp32, fp16, bf16, amp."
        ),
    ] = "fp32",
    match: Annotated[
        Match, typer.Option(help="How the diffs line kernels up (see `profkit diff --help`).")
    ] = DEFAULT_MATCH,
    threshold: Threshold = 10.0,
    options: Any = None,
    fmt: Fmt = Format.table,
    report: Report = True,
    wide: Wide = False,
    db: Db = None,
) -> None:
    """Profile a workload in several modes or precisions, show what changed against the first, and write
    each variant's side-by-side HTML report."""
    from . import render  # here, not at the top: --help need not pay for it
    from .api import compare as do_compare
    from .launch import Progress

    err = render.console(stderr=True)
    with _Stages(err) as stages:
        on_note = _noter(err)

        cmp = do_compare(
            workload,
            modes=_list(modes),
            precisions=_list(precisions),
            match=match.value,
            threshold_pct=threshold,
            db=_db(db),
            **options,
            progress=Progress(on_stage=stages.stage, on_note=on_note),
        )
    render.compare(cmp, fmt.value, wide=wide)
    if report:
        for path in cmp.write_reports():
            render.report_written(path, stderr=fmt is not Format.table)


# ---------------------------------------------------------------------------------- report
@command("report")
@handles_errors
def report_(
    run_ref: Annotated[
        Optional[str],
        typer.Argument(metavar="RUN", help="The run (name or id).", show_default=False),
    ] = None,
    vs: Annotated[
        Optional[str],
        typer.Option(
            metavar="RUN_B",
            show_default=False,
            help="Another run: the two side by side, with their diff.",
        ),
    ] = None,
    output: Annotated[
        Optional[Path],
        typer.Option(
            "--output",
            "-o",
            show_default=False,
            help="Where to write the page (default: reports/RUN.html, reports/vs/RUN+RUN_B.html, or reports/index.html; "
            "a run named index: reports/index+ID.html).",
        ),
    ] = None,
    index: Annotated[
        bool,
        typer.Option(
            "--index",
            help="Write an index of every run in the database, with the run reports it links (written anew "
            "where missing or stale).",
        ),
    ] = False,
    match: Annotated[
        Match,
        typer.Option(help="With --vs: how the diff lines kernels up (see `profkit diff --help`)."),
    ] = DEFAULT_MATCH,
    threshold: Threshold = 10.0,
    db: Db = None,
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
    if vs is None and (match is not DEFAULT_MATCH or threshold != 10.0):
        raise UsageError(
            "--match and --threshold shape the diff of a side-by-side report: give --vs RUN_B too"
        )
    if run_ref is None:
        raise UsageError(
            "give the RUN to report on (or --index for every run)", "profkit runs lists them."
        )
    r = database.run(run_ref)
    other = database.run(vs) if vs is not None else None
    render.report_written(r.report(output, vs=other, match=match.value, threshold_pct=threshold))


# ---------------------------------------------------------------------------------- check
# profkit.analyze.check's parameters, as this command names them
FLAGS.update(
    {
        "min_coverage": "--min-tensor-core-coverage",
        "no_fp32_matrix": "--no-fp32-matrix",
        "max_finding": "--max-finding",
        "max_findings": "--max-finding",
        "baseline": "--baseline",
        "max_slowdown": "--max-slowdown",
        "max_launches": "--max-launches",
    }
)


def _cannot_check(fn: Callable[..., None]) -> Callable[..., None]:
    """check's errors (a run or baseline missing or incomplete, a database it cannot read) exit
    2: nothing was checked, which CI must tell from a FAIL (1)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except ProfkitError as exc:
            exc.exit_code = max(exc.exit_code, 2)
            raise
        except Exception as exc:
            from .store import db_path, is_database_error, read_failure

            if not is_database_error(exc) or _state["verbose"]:
                raise
            error = read_failure(db_path(kwargs.get("db") or _state["db"]), exc)
            error.exit_code = 2
            raise error from exc

    return wrapper


@command("check")
@handles_errors
@_cannot_check
def check(
    run_ref: RunRef,
    config: Annotated[
        Optional[Path],
        typer.Option(
            "--config",
            "-c",
            show_default=False,
            help=(
                "A check file (TOML) of the assertions: [tensor_cores] min_coverage, [precision] no_fp32_matrix, "
                "[findings] ID = PCT, [baseline] run, max_slowdown, noise_pct, [launches] "
                "max_per_iteration, [tune] max_untried_gain_pct. Options given here take "
                "precedence."
            ),
        ),
    ] = None,
    min_coverage: Annotated[
        Optional[float],
        typer.Option(
            "--min-tensor-core-coverage",
            min=0,
            max=100,
            show_default=False,
            help="Fail unless at least this % of the run's GEMM, conv and attention time ran on tensor cores.",
        ),
    ] = None,
    no_fp32_matrix: Annotated[
        bool,
        typer.Option(
            "--no-fp32-matrix",
            help="Fail a half-precision run (fp16, bf16, amp) with GEMM, conv or attention kernels in fp32 or TF32.",
        ),
    ] = False,
    max_finding: Annotated[
        Optional[list[str]],
        typer.Option(
            "--max-finding",
            metavar="ID=PCT",
            show_default=False,
            help=(
                "Fail if the finding ID (rules.toml's [[finding]] ids, or any) takes more than PCT % of GPU time; "
                "repeatable."
            ),
        ),
    ] = None,
    baseline: Annotated[
        Optional[str],
        typer.Option(
            metavar="RUN",
            show_default=False,
            help="A run to compare GPU time per iteration with (name or id); needs --max-slowdown.",
        ),
    ] = None,
    max_slowdown: Annotated[
        Optional[float],
        typer.Option(
            min=0,
            max=1000,
            show_default=False,
            help="Fail if GPU time per iteration is more than this % above the baseline's, in total or in the kernels "
            "that moved beyond the diff's noise threshold.",
        ),
    ] = None,
    max_launches: Annotated[
        Optional[int],
        typer.Option(
            min=1,
            max=MAX_COUNT,
            show_default=False,
            help="Fail if the run makes more kernel launches (CPU operator calls) per measured iteration.",
        ),
    ] = None,
    max_untried_gain_pct: Annotated[
        Optional[float],
        typer.Option(
            min=0,
            max=100,
            show_default=False,
            help="Fail if a fix of the run's latest tuning (profkit tune) was measured to save "
            "more than this % of its step; a run with no tuning cannot be judged (skipped).",
        ),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Fail skipped assertions too (those the run cannot answer: no matrix work, a CPU run, ...).",
        ),
    ] = False,
    fmt: Annotated[
        CheckFormat, typer.Option("--format", "-f", help="Output format.")
    ] = CheckFormat.text,
    junit_xml: Annotated[
        Optional[Path],
        typer.Option(help="Also write the JUnit XML report to this file.", show_default=False),
    ] = None,
    db: Db = None,
) -> None:
    """Assert over a run, for CI: tensor-core coverage of matrix work, no fp32 matrix work in a half run,
    no finding above a share of GPU time, slowdown against a baseline run, launches per iteration,
    the time a known fix (profkit tune) would still save. One line
    per assertion (PASS, FAIL or SKIP, the measured value, the limit); exit 0 if none failed, 1 if any did, 2 if
    it could not check (a bad option or check file, a run or baseline missing or incomplete)."""
    from . import render  # here, not at the top: --help need not pay for it
    from .analyze.check import Checks, load_checks, parse_finding_limit

    # The check file and the options are checked before the database is opened.
    given = Checks(
        min_coverage=min_coverage,
        no_fp32_matrix=no_fp32_matrix,
        max_findings=dict(parse_finding_limit(t) for t in max_finding or ()),
        max_slowdown=max_slowdown,
        max_launches=max_launches,
        max_untried_gain_pct=max_untried_gain_pct,
    )
    checks = (load_checks(config) if config is not None else Checks()).merged(given)
    if baseline is not None and checks.max_slowdown is None:
        from .errors import UsageError

        raise UsageError(
            "--baseline needs a limit: --max-slowdown PCT (or [baseline] max_slowdown in the check file)"
        )
    report = _open(db).run(run_ref).check(checks, baseline=baseline)
    if junit_xml is not None:
        from .files import write_atomic

        write_atomic(
            junit_xml,
            report.to_junit(),
            "Give --junit-xml a file in a folder you can write, with free space.",
        )
    render.check(report, fmt.value)
    if not report.ok or (strict and report.count("skip")):
        _exit(1)


# ---------------------------------------------------------------------------------- bench
@command("bench")
@handles_errors
@run_options("bench")
def bench(
    workload: Annotated[
        Optional[str],
        typer.Argument(
            metavar="WORKLOAD",
            show_default=False,
            help="A built-in workload (see `profkit workloads`) or a .py file defining build(spec).",
        ),
    ] = None,
    precisions: Annotated[
        str,
        typer.Option(
            "--precisions",
            "--precision",
            help="Comma-separated precisions: fp32, fp16, bf16, amp (the grid's columns).",
        ),
    ] = "fp32",
    modes: Annotated[
        str,
        typer.Option(help="Comma-separated modes: eager, torchscript, compile (the grid's rows)."),
    ] = "eager",
    rounds: Annotated[
        int,
        typer.Option(
            "--rounds",
            metavar="N",
            help="Time each combination in N processes, a round of them after another: what changes "
            "between processes (clocks, compiled code, the machine's other work) then counts in every "
            "spread, as profkit tune --rounds times its fixes.",
        ),
    ] = 1,
    options: Any = None,
    fmt: Fmt = Format.table,
    list_: Annotated[
        bool, typer.Option("--list", help="List the stored benchmarks instead of running one.")
    ] = False,
    show: Annotated[
        Optional[int],
        typer.Option(
            metavar="ID",
            min=1,
            help="Print a stored benchmark again.",
            show_default=False,
        ),
    ] = None,
    wide: Wide = False,
    db: Db = None,
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
            raise UsageError(
                "--list and --show read stored benchmarks: give either alone, with no WORKLOAD"
            )
        # what only a new benchmark takes: refused, not ignored
        given = [
            cli_of(f).flags[0]
            for f in for_command("bench")
            if options.get(f.name) != default_for(f, "bench")
        ]
        given += [
            flag
            for flag, value, default in (
                ("--precisions", precisions, "fp32"),
                ("--modes", modes, "eager"),
                ("--rounds", rounds, 1),
            )
            if value != default
        ]
        if given:
            raise UsageError(
                f"--list and --show read stored benchmarks: {', '.join(given)} "
                f"{'is' if len(given) == 1 else 'are'} for a new one"
            )
        database = _open(db)
        if list_:
            render.benches(database.benches(), fmt.value, wide=wide)
        elif show is not None:
            render.bench(database.bench(show), fmt.value, wide=wide)
        return
    if workload is None:
        raise UsageError("give the WORKLOAD to benchmark (see profkit workloads), or --list")
    from .api import bench as do_bench
    from .launch import Progress

    err = render.console(stderr=True)
    with _Stages(err) as stages:
        on_note = _noter(err)

        done = do_bench(
            workload,
            precisions=_list(precisions),
            modes=_list(modes),
            db=_db(db),
            rounds=rounds,
            **options,
            progress=Progress(on_stage=stages.stage, on_note=on_note),
        )
    render.bench(done, fmt.value, wide=wide)
    if not done.ok:
        failed = [r for r in done.rows if r.status != "ok" and not r.reference_only]
        _err(
            f"profkit: error: {len(failed)} of {sum(not r.reference_only for r in done.rows)} combinations failed "
            f"(stored as benchmark {done.id})"
        )
        _exit(1)


# ---------------------------------------------------------------------------------- tune
@command("tune", cls=ProgramCommand)
@handles_errors
@run_options("tune")
def tune(
    ctx: typer.Context,
    workload: Annotated[
        Optional[str],
        typer.Argument(
            metavar="WORKLOAD",
            help="A built-in workload or a .py file defining build(spec), profiled first; or, after --, your "
            "own program as it is (profkit tune -- python train.py ARGS).",
            show_default=False,
        ),
    ] = None,
    from_run: Annotated[
        Optional[str],
        typer.Option(
            "--run",
            metavar="RUN",
            help="Start from this stored run's findings instead of profiling first (a run of a workload "
            "file also needs the file as WORKLOAD).",
            show_default=False,
        ),
    ] = None,
    rounds: Annotated[
        int,
        typer.Option(
            "--rounds",
            metavar="N",
            help="Time the baseline and each fix in N processes, a round of them after another: what "
            "changes between processes (clocks, compiled code, the machine's other work) then counts in "
            "every spread, and no fix is called a gain by one lucky process.",
        ),
    ] = 1,
    options: Any = None,
    fmt: Fmt = Format.table,
    wide: Wide = False,
    db: Db = None,
) -> None:
    """Try the fixes the findings name (TF32, channels-last, cuDNN autotuning, autocast, torch.compile,
    fused optimizers) on your own workload or program, time each against its own setting, check that its
    outputs still agree, and rank them by the time they save.

    Each trial runs in its own process, timed after its warm-up as profkit bench times (CUDA events on a
    GPU); fixes that each gain are tried together too; fixes that need your code (padding a dimension,
    removing a host sync) get an estimate, marked as one. The tuning is stored with the run: summary and
    the report show it, and check --max-untried-gain-pct can fail a build on it."""
    from . import render  # here, not at the top: --help need not pay for it
    from .api import tune as do_tune
    from .errors import UsageError
    from .launch import Progress

    program = ctx.meta.get("program")
    if program is not None and workload is not None and from_run is None:
        raise UsageError(
            f"give a workload or a program after --, not both ({workload} and {' '.join(program)})"
        )
    if program is None and workload is None and from_run is None:
        raise UsageError(
            "nothing to tune",
            "Give your program after --: profkit tune -- python train.py [ARGS]; a workload: profkit tune "
            "resnet50; or a stored run: profkit tune --run RUN.",
        )
    if from_run is not None:
        extra = sorted(
            k
            for k, v in options.items()
            if k not in ("iters", "warmup", "timeout_s") and v != _default(k)
        )
        if program is not None or extra:
            raise UsageError(
                "--run starts from a stored run, profiled already: give no program and no run options but "
                "--iters, --warmup, --timeout and --rounds"
                + (
                    f" (given: {', '.join('--' + k.replace('_', '-') for k in extra)})"
                    if extra
                    else ""
                )
            )
        options = {k: v for k, v in options.items() if k in ("iters", "warmup", "timeout_s")}
    err = render.console(stderr=True)
    with _Stages(err) as stages:
        done = do_tune(
            workload,
            program=program,
            run=from_run,
            db=_db(db),
            rounds=rounds,
            **options,
            progress=Progress(on_kernel=stages.kernel, on_stage=stages.stage, on_note=_noter(err)),
        )
    render.tuning(done, fmt.value, wide=wide)


def _default(option: str) -> Any:
    from .options import TUNE, default_for, for_command

    return next(default_for(f, TUNE) for f in for_command(TUNE) if f.name == option)


# ---------------------------------------------------------------------------------- doctor
@command("doctor")
@handles_errors
def doctor(fmt: Fmt = Format.table, db: Db = None) -> None:
    """Check what this machine can profile: GPU and driver, PyTorch, ncu and counter permission, nsys and its
    importer, the database and disk space. One line each; exit 1 if any check fails."""
    from . import render  # here, not at the top: --help need not pay for it
    from .doctor import FAIL, checks

    found = checks(db or _state["db"])
    render.doctor(found, fmt.value)
    if any(c.status == FAIL for c in found):
        _exit(1)


# ---------------------------------------------------------------------------------- sweep
@command("sweep")
@handles_errors
@run_options("sweep")
def sweep(
    workloads: Annotated[
        str,
        typer.Option(help="Comma-separated built-in workloads or .py files.", show_default=False),
    ],
    precisions: Annotated[
        str, typer.Option(help="Comma-separated precisions: fp32, fp16, bf16, amp.")
    ] = "fp32",
    modes: Annotated[
        str, typer.Option(help="Comma-separated modes: eager, torchscript, compile.")
    ] = "eager",
    tools: Annotated[
        str, typer.Option(help="Comma-separated tools: auto, ncu, nsys, torch.")
    ] = "auto",
    address: Annotated[
        Optional[str],
        typer.Option(
            show_default=False,
            help="A Dask scheduler (tls://host:8786, or tcp://) to hand the jobs to; its workers each see one GPU and "
            "offer the resource GPU=1. Left out: a local cluster, one worker per GPU.",
        ),
    ] = None,
    tls_ca_file: Annotated[
        Optional[str],
        typer.Option(
            show_default=False,
            help="For a tls:// --address: the cluster's CA certificate(s), PEM (default: Dask's "
            "distributed.comm.tls.ca-file).",
        ),
    ] = None,
    tls_cert: Annotated[
        Optional[str],
        typer.Option(
            show_default=False,
            help="For a tls:// --address: this client's certificate, PEM (default: Dask's "
            "distributed.comm.tls.client.cert).",
        ),
    ] = None,
    tls_key: Annotated[
        Optional[str],
        typer.Option(
            show_default=False,
            help="For a tls:// --address: this client's private key, PEM (default: Dask's "
            "distributed.comm.tls.client.key, or in --tls-cert).",
        ),
    ] = None,
    workers: Annotated[
        Optional[int],
        typer.Option(
            help="Local workers (default: one per GPU; 2 with --device cpu).", show_default=False
        ),
    ] = None,
    options: Any = None,
    fmt: Fmt = Format.table,
    db: Db = None,
) -> None:
    """Profile a matrix of workloads x precisions x modes x tools, one profiled run per cell, on
    every local GPU at once (or a Dask cluster); every run lands in one database as it finishes.
    A failed job is stored with its error and logs and the others go on (exit 1 at the end)."""
    from . import render  # here, not at the top: --help need not pay for it
    from .api import sweep as do_sweep

    def on_note(text: str) -> None:
        _err(f"profkit: {name_params(text, flag)}")

    def on_result(res: Any, i: int, total: int) -> None:
        _err(render.sweep_progress(res, i, total, flag))

    result = do_sweep(
        workloads,
        precisions=precisions,
        modes=modes,
        tools=tools,
        address=address,
        workers=workers,
        tls_ca_file=tls_ca_file,
        tls_cert=tls_cert,
        tls_key=tls_key,
        db=_db(db),
        on_result=on_result,
        on_note=on_note,
        **options,
    )
    render.sweep(result, fmt.value, flag)
    if result.failed():
        _exit(1)


# ---------------------------------------------------------------------------------- workloads
@command("workloads")
@handles_errors
def workloads_() -> None:
    """List the built-in workloads, with the precisions and modes each supports."""
    from . import render  # here, not at the top: --help need not pay for it
    from .workloads import catalog

    render.workloads(catalog())


def main() -> None:
    """The ``profkit`` command (``python -m profkit`` too): the app, run as this process's
    program. Once a command has ended, the process ends at once (``processes.leave``): its exit
    handlers run, its SQLite connections are closed and its output is flushed, but Python's
    teardown, which frees everything an import read, is skipped. A program of its own calls ``app`` (as Typer's CliRunner does), or
    the library."""
    try:
        stop_on_signals()
        # started by profkit (a sweep's job): it dies with its starter
        if "PROFKIT_LIFELINE" in os.environ:
            from .tools.runner import watch_lifeline

            watch_lifeline(parent_gone)
        app()
    # before a command's own handling began (start-up), or after it
    except KeyboardInterrupt as exc:
        sys.exit(_stopped(exc))
    except SystemExit as exc:  # how Typer ends every command, its exit status in it
        if isinstance(exc.code, int | None):
            # A stop signal from here on ends the process by that signal, not through
            # profkit's handlers half-way through its end.
            for sig in (signal.SIGINT, *TERMINATING):
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    signal.signal(sig, signal.SIG_DFL)
            # Everything the command writes is written: Python's teardown (freeing what an
            # import read, unloading pandas and Arrow) is skipped, but under a profiler,
            # debugger or coverage's tracer, which write what they found after the program
            # returns.
            if sys.gettrace() is None and sys.getprofile() is None and alone():
                leave(exc.code or 0, exit_handlers=True)
        raise


if __name__ == "__main__":
    main()
