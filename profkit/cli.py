"""The ``profkit`` command: parse options, call the library (``profkit.api``), hand what it
returns to ``profkit.render``, and turn expected errors into one line and a non-zero exit.
No analysis and no SQL live here, and nothing heavy (torch, pandas, rich) is imported before a
command needs it, so ``profkit --help`` is instant.

The command line is plain Click, through its public API only: each option's value is
converted by one of the small ParamTypes below (no pydantic, whose import alone took longer
than all the rest of ``profkit summary``), and the help is laid out as Typer's plain help laid
it out before (tests/test_cli_values.py checks the values and messages against what Typer
made of them).

Every bad input ends in one line on stderr: the library's errors (their parameter names
become this command's flags) and the usage errors Click finds (unknown option, bad choice).
A closed pipe (``profkit kernels RUN | head``) ends quietly.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import io
import os
import re
import signal
import sys
import warnings
from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional, Sequence

import click

from .choices import DEFAULT_MATCH, CheckFormat, Format, Match
from .errors import ProfkitError, ProfkitWarning, name_params
from .formatting import shown
from .options import RunOptions, cli_of, default_for, for_command
from .processes import TERMINATING, Terminated, parent_gone, stop_on_signals, stopped_by
from .parse.formats import import_help

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
    **{p: "--" + p.replace("_", "-") for p in ("db", "top", "limit", "match", "modes", "precisions", "output", "vs",
                                              "workloads", "tools", "address", "workers", "tls_ca_file", "tls_cert",
                                              "tls_key", "step_range")},
    "threshold_pct": "--threshold",
}


def flag(param: str) -> str | None:
    """The flag for a library parameter; None for any other word."""
    return FLAGS.get(param)


# ---------------------------------------------------------------------------------- parameter values
# What each kind of value accepts, and the messages for what it does not, are those of the
# Typer (0.29, converting with pydantic) that profkit's command line stood on before: an int is
# digits with an optional sign, single underscores between digits and a zero fraction ("5.0"),
# around spaces; a float is what Python's float() reads, with those underscores; a choice is
# one of its values exactly. tests/test_cli_values.py compares them with Typer's, recorded.
_INT = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.0+)?")
_DIGITS = r"[0-9]+(?:_[0-9]+)*"
_FLOAT = re.compile(rf"[+-]?(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})(?:[eE][+-]?{_DIGITS})?"
                    r"|[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
_SPACE = " \t\n\r\f\v"


if TYPE_CHECKING:  # generic from Click 8.4 on; profkit takes Click 8.2 too, where it is not
    _ParamType = click.ParamType[Any]
else:
    _ParamType = click.ParamType


class Value(_ParamType):
    """A kind of option value: ``label`` is how the help shows it (``<int>``)."""

    label = "str"

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        return value


def _unicode(value: str, kind: Value, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> str:
    """``value``, failing where it holds an undecodable byte (a surrogate escape)."""
    try:
        value.encode()
    except UnicodeEncodeError:
        kind.fail("Input should be a valid string, unable to parse raw data as a unicode string", param, ctx)
    return value


class Number(Value):
    """An int or a float, within ``lo`` and ``hi`` where given."""

    def __init__(self, kind: type, lo: Optional[float] = None, hi: Optional[float] = None) -> None:
        self.kind, self.lo, self.hi = kind, lo, hi
        self.name = kind.__name__
        self.label = self.name + (" range" if lo is not None or hi is not None else "")

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        if isinstance(value, str):
            text = _unicode(value, self, param, ctx).strip(_SPACE)
            if self.kind is int:
                if not _INT.fullmatch(text):
                    self.fail("Input should be a valid integer, unable to parse string as an integer", param, ctx)
                try:
                    value = int(text.partition(".")[0].replace("_", ""))
                except ValueError:  # longer than Python reads (4300 digits)
                    self.fail("Unable to parse input string as an integer, exceeded maximum size", param, ctx)
            else:
                if not _FLOAT.fullmatch(text):
                    self.fail("Input should be a valid number, unable to parse string as a number", param, ctx)
                value = float(text.replace("_", ""))
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(f"Value {value!r} is not a valid {self.name}.", param, ctx)
        else:
            value = self.kind(value)
        if self.hi is not None and not value <= self.hi:  # NaN fails here first, as it did
            self.fail(f"Input should be less than or equal to {self.hi}", param, ctx)
        if self.lo is not None and not value >= self.lo:
            self.fail(f"Input should be greater than or equal to {self.lo}", param, ctx)
        return value


class PathValue(Value):
    label = "path"
    name = "path"

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        if isinstance(value, Path):
            return value
        if "\0" in value:
            self.fail("embedded null byte", param, ctx)
        return Path(value)


class Choice(Value):
    """One of an Enum's values, exactly as written; the member is the option's value."""

    def __init__(self, enum: type[Enum]) -> None:
        self.enum = enum
        self.name = enum.__name__
        self.label = "|".join(str(m.value) for m in enum)

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        if isinstance(value, self.enum):
            return value
        for member in self.enum:
            if value == member.value:
                return member
        choices = ", ".join(repr(m.value) for m in self.enum)
        self.fail(f"{value!r} is not one of {choices}.", param, ctx)


def _value(kind: Any, lo: Optional[float], hi: Optional[float]) -> Value:
    if kind is int or kind is float:
        return Number(kind, lo, hi)
    if kind is Path:
        return PathValue()
    if isinstance(kind, type) and issubclass(kind, Enum):
        return Choice(kind)
    return Value()


def _range(lo: Optional[float], hi: Optional[float]) -> str | None:
    if lo is None and hi is None:
        return None
    return f"x<={hi}" if lo is None else f"x>={lo}" if hi is None else f"{lo}<=x<={hi}"


class Option(click.Option):
    """An option whose help reads ``--top <int range>  How many ...  [default: 10; x>=0]``."""

    def __init__(self, decls: Sequence[str], *, lo: Optional[float] = None, hi: Optional[float] = None,
                 **attrs: Any) -> None:
        super().__init__(decls, **attrs)
        self.lo, self.hi = lo, hi
        self.declared_default = attrs.get("default")  # None where none was given

    def get_error_hint(self, ctx: Optional[click.Context]) -> str:
        hint = " / ".join(f"'{o}'" for o in self.opts)
        return f"{hint} (env var: '{self.envvar}')" if self.envvar else hint

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        def names(opts: Sequence[str]) -> str:
            text = ", ".join(sorted(opts, key=lambda o: len(o) - len(o.lstrip("-"))))
            if self.is_flag:
                return text
            return f"{text} {self.metavar or '<' + getattr(self.type, 'label', 'str') + '>'}"

        extra = []
        if self.envvar:
            extra.append(f"env var: {self.envvar}")
        default = self.declared_default
        if self.show_default and default is not None:
            if isinstance(default, Enum):
                extra.append(f"default: {default.value}")
            elif self.is_flag and self.secondary_opts:
                extra.append(f"default: {(self.opts if default else self.secondary_opts)[0].lstrip('-')}")
            elif not (self.is_flag and not default):
                extra.append(f"default: {default}")
        extra += [r for r in (_range(self.lo, self.hi),) if r]
        if self.required:
            extra.append("required")
        help = self.help or ""
        if extra:
            help = f"{help}  [{'; '.join(extra)}]" if help else f"[{'; '.join(extra)}]"
        return " / ".join(names(o) for o in (self.opts, self.secondary_opts) if o), help


class Argument(click.Argument):
    """An argument with help (``RUN <str>  Run name or id ...  [required]``), shown in usage as
    ``{RUN}`` (required) or ``[RUN]``."""

    def __init__(self, decls: Sequence[str], *, help: str = "", **attrs: Any) -> None:
        super().__init__(decls, **attrs)
        self.help = help

    def display(self) -> str:
        return self.metavar or self.name or ""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str]:
        help = (self.help or "") + ("  [required]" if self.required else "")
        return f"{self.display()} <{getattr(self.type, 'label', 'str')}>", help

    def get_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [f"{{{self.display()}}}" if self.required else f"[{self.display()}]"]

    def get_error_hint(self, ctx: Optional[click.Context]) -> str:
        return f"'{self.display()}'"


def option(*decls: str, type: Any = str, default: Any = None, help: str = "", show_default: bool = True,
           min: Optional[float] = None, max: Optional[float] = None, **attrs: Any) -> Callable[[Any], Any]:
    """An option (``type``: str, int, float, Path or an Enum; ``min`` and ``max`` bound a number)."""
    if default is not None:  # (Click takes an explicit default None for a value: --workloads would not be missed)
        attrs["default"] = default
    return click.option(*decls, cls=Option, type=_value(type, min, max), help=help, show_default=show_default,
                        lo=min, hi=max, **attrs)


def switch(*decls: str, help: str, default: bool = False, **attrs: Any) -> Callable[[Any], Any]:
    """A flag (``--all``), or a pair of them (``--report/--no-report``)."""
    return click.option(*decls, cls=Option, is_flag=True, default=default, help=help, show_default=True, **attrs)


def argument(name: str, help: str, metavar: Optional[str] = None, required: bool = True,
             type: Any = str, nargs: int = 1) -> Callable[[Any], Any]:
    """An argument (a str, or ``type``), ``metavar`` its name in the help (else ``name``);
    ``nargs`` -1: one or more."""
    return click.argument(name, cls=Argument, type=_value(type, None, None), metavar=metavar, required=required,
                          help=help, nargs=nargs)


class Command(click.Command):
    """A profkit command: its help lists its arguments, then its options."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records = [(p.param_type_name, p.get_help_record(ctx)) for p in self.get_params(ctx)]
        for kind, title in (("argument", "Arguments"), ("option", "Options")):
            rows = [r for k, r in records if k == kind and r is not None]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def format_arguments(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Nothing: Click 8.5 lists the arguments in a section of its own (Click 8.4 has no such
        step), and :meth:`format_options` lists them already, before the options."""


class OneLineErrors(click.Group):
    """The parser's usage errors (unknown option, bad value, missing argument) as one line,
    like every other error; ``profkit`` alone prints the help. The command list of its help
    shows each command's first paragraph whole."""

    command_class = Command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
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

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # in the order they are defined, not sorted

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
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
        except click.exceptions.NoArgsIsHelpError:  # `profkit` alone: the help
            return super().main(["--help"], prog_name, complete_var, standalone_mode=True, **extra)
        except click.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            where = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
            _err(f"profkit: error: {' '.join(_usage_message(exc).split())}{where}")
            sys.exit(exc.exit_code)
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
        except click.Abort as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt):  # Ctrl-C or a stop signal while Click parsed
                raise exc.__cause__ from None  # main() says which, with its exit status
            _err("profkit: interrupted")
            sys.exit(130)
        except Exception as exc:  # --verbose's traceback, or a bug's: printed as _err prints, names escaped
            import traceback

            _err(traceback.format_exc().rstrip("\n"))
            sys.exit(exc.exit_code if isinstance(exc, ProfkitError) else 1)
        try:
            sys.stdout.flush()  # here, not at exit: a reader gone (`--help | head -1`) ends quietly
        except BrokenPipeError:
            _quiet_pipe()
            code = 0
        sys.exit(code if isinstance(code, int) else 0)


_EXTRA_ARGUMENTS = re.compile(r"Got unexpected extra arguments? \(")


def _usage_message(exc: click.ClickException) -> str:
    """Click's message for a usage error, worded as profkit's command line (on Typer) has
    always worded it: ``No such option: --to (Possible options: --top)``, ``Got unexpected
    extra argument(s) (a b)``."""
    if isinstance(exc, click.NoSuchOption):
        possible = f" (Possible options: {', '.join(sorted(exc.possibilities))})" if exc.possibilities else ""
        return f"No such option: {exc.option_name}{possible}"
    return _EXTRA_ARGUMENTS.sub("Got unexpected extra argument(s) (", exc.format_message(), count=1)


def _exit(code: int) -> NoReturn:
    """End the command with exit status ``code`` (Click's way, so the status is kept)."""
    click.get_current_context().exit(code)


_state: dict[str, Any] = {"verbose": False, "db": None}

REPORT_HELP = "Write the HTML report under reports/ and print its path."
DB_HELP = "Database file (default: $PROFKIT_DB, else ./profkit.db)."
RUN_HELP = "Run name or id (see `profkit runs`)."
THRESHOLD_HELP = ("Noise threshold: a row whose time moved by less than this percentage of A's (or by under 1 us) and "
                  "whose calls are equal is 'same'.")


def db_option(fn: Any) -> Any:
    return option("--db", type=Path, help=DB_HELP, show_default=False)(fn)


def fmt_option(fn: Any) -> Any:
    return option("--format", "-f", "fmt", type=Format, default=Format.table, help="Output format.")(fn)


def wide_option(fn: Any) -> Any:
    return switch("--wide", help="Tables: cut nothing to fit the terminal (every name and column whole).")(fn)


def threshold_option(fn: Any) -> Any:
    return option("--threshold", type=float, default=10.0, min=0, max=1000, help=THRESHOLD_HELP)(fn)


def run_argument(fn: Any) -> Any:
    return argument("run_ref", RUN_HELP, metavar="RUN")(fn)


def run_options(command: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The run options ``command`` takes, from their one record (``profkit.options``): each
    option's flag, type, default and help there. The command receives them together as
    ``options``, keyed by the library's parameter names (``timeout_s`` for --timeout), its
    choices as their values: what ``profkit.api`` takes as keyword arguments."""
    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        names: dict[str, str] = {}

        @functools.wraps(fn)
        def command_fn(*args: Any, **kwargs: Any) -> None:
            given = {names[k]: (v.value if isinstance(v, Enum) else v) for k, v in kwargs.items() if k in names}
            fn(*args, options=given, **{k: v for k, v in kwargs.items() if k not in names})

        for f in reversed(for_command(command)):
            c = cli_of(f)
            names[c.flags[0].split("/")[0].lstrip("-").replace("-", "_")] = f.name
            default = default_for(f, command)
            if f.type == "bool":
                command_fn = switch(*c.flags, help=c.help_for(command), default=bool(default))(command_fn)
                continue
            if f.type == "bool | None":  # a pair of flags, neither given: the default the library decides
                command_fn = click.option(*c.flags, cls=Option, is_flag=True, default=None,
                                          help=c.help_for(command))(command_fn)
                continue
            kind: Any = c.choices or {"int": int, "float | None": float}.get(str(f.type), str)
            command_fn = option(*c.flags, type=kind, default=kind(default) if c.choices and default is not None
                                else default, help=c.help_for(command),
                                show_default=c.show_default and default is not None)(command_fn)
        return command_fn

    return decorate


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
            _exit(exc.exit_code)
        except KeyboardInterrupt as exc:  # Ctrl-C, or Terminated (SIGTERM, SIGHUP, SIGQUIT)
            _exit(_stopped(exc))
        except BrokenPipeError:
            _quiet_pipe()
            _exit(0)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG, errno.EBADF):
                raise
            _quiet_pipe()  # Python's own flush at exit would fail again
            what = exc.filename if isinstance(exc.filename, str) else "the output"
            full = "the disk is full: " if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
            _err(f"profkit: error: {full}cannot write {what}: {exc.strerror}")
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

    return wrapper

def _version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        from .version import __version__

        print(f"profkit {__version__}")
        ctx.exit(0)


@click.group(
    name="profkit",
    cls=OneLineErrors,
    help="Profile PyTorch workloads under Nsight Compute, Nsight Systems or torch.profiler and see, "
    "for every kernel, its precision and whether it ran on the tensor cores.",
    no_args_is_help=True,
)
@switch("--verbose", "-v", help="Show tracebacks for errors.")
# Before the command, `profkit --db X ...` also reads PROFKIT_DB; a command's own --db wins.
@option("--db", type=Path, envvar="PROFKIT_DB", help="Database file (default ./profkit.db).", show_default=False)
@switch("--version", help="Print profkit's version and exit.", callback=_version, is_eager=True, expose_value=False)
def app(verbose: bool, db: Optional[Path]) -> None:
    _state["verbose"] = verbose
    _state["db"] = db


def _open(db: Optional[Path], create: bool = False) -> Database:
    from .api import open_db
    from .store import connection

    connection.LEAN_IMPORTS = True  # profkit's own process: a new schema need not import pandas
    return open_db(db or _state["db"], create=create)


# ---------------------------------------------------------------------------------- run
class ProgramCommand(Command):
    """``profkit run``: everything after ``--`` is a program and its own arguments, as nsys
    and ncu take it (kept in ``ctx.meta["program"]``, never read as profkit's options)."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "[-- PROGRAM [ARGS]...]"]

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            ctx.meta["program"] = args[at + 1:]
            args = args[:at]
        return super().parse_args(ctx, args)


@app.command("run", cls=ProgramCommand)
@argument("workload", "A built-in workload (see `profkit workloads`) or a .py file defining build(spec). Or, after "
                      "--, your own program as it is: profkit run -- python train.py --epochs 1.", required=False)
@run_options("run")
@switch("--report/--no-report", help=REPORT_HELP, default=True)
@db_option
@handles_errors
def run(workload: Optional[str], options: dict[str, Any], report: bool, db: Optional[Path]) -> None:
    """Profile your script as it is (profkit run -- python train.py ARGS: its steps found, a window of them
    profiled, the script stopped after it) or a workload; store its kernels, print a summary and write its
    HTML report."""
    from . import render  # here, not at the top: --help need not pay for it
    from .api import profile
    from .errors import UsageError
    from .launch import Progress

    program = click.get_current_context().meta.get("program")
    if program is not None and workload is not None:
        raise UsageError(f"give a workload or a program after --, not both ({workload} and {' '.join(program)})")
    if program is None and workload is None:
        raise UsageError("nothing to run", "Give your program after --: profkit run -- python train.py [ARGS]; "
                                           "or a workload: profkit run resnet18.")
    err = render.console(stderr=True)
    with _Stages(err) as stages:
        def on_note(text: str) -> None:
            err.print(f"profkit: {name_params(text, flag)}", markup=False, highlight=False)

        def on_output(text: str) -> None:  # the program's own output, as under plain python
            stages.output(text)

        done = profile(workload, program=program, db=db or _state["db"], **options,
                       progress=Progress(on_kernel=stages.kernel, on_stage=stages.stage, on_note=on_note,
                                         on_output=on_output))
    render.run_done(done, done.summary(), done.report_path, str(done.database.path), caveats=done.caveats())
    render.findings(done.findings())
    if report:
        render.report_written(done.report())


# ---------------------------------------------------------------------------------- import
@app.command("import")
@argument("path", import_help() + " Several torch.profiler traces, one a rank in rank order, make one run of "
                 "a distributed job.", metavar="PATH", type=Path, nargs=-1)
@option("--name", help="Run name (default: from the file name).", show_default=False)
@option("--step-range", "step_range", multiple=True, show_default=False,
        help="A range that holds one step (a user's or a framework's NVTX or record_function range; repeat for "
             "more): its work is the step's, on every thread. torch.profiler's ProfilerStep#N ranges are steps anyway.")
@db_option
@handles_errors
def import_(path: tuple[Path, ...], name: Optional[str], step_range: tuple[str, ...], db: Optional[Path]) -> None:
    """Import a capture made elsewhere as a new run; prints the run's name last. Several torch.profiler
    traces, one a rank in rank order (each rank profiled on its own inside torchrun or srun), make one
    run with a rank on every row."""
    from . import render  # here, not at the top: --help need not pay for it

    database = _open(db, create=True)
    paths, first = list(path), path[0]
    with _Stages(render.console(stderr=True)) as stages:
        stages.stage(f"importing {first}" if len(paths) == 1 else f"importing {len(paths)} ranks' traces")
        # the database file is made when the run is reserved
        done = (database.import_file(first, name=name, step_ranges=list(step_range)) if len(paths) == 1 else
                database.import_ranks(paths, name=name, step_ranges=list(step_range)))
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

        raise StoreError(f"cannot write the output ({exc.strerror or exc}); the import of {first} is undone",
                         "Free the output's disk or send it elsewhere, then import again.") from None


# ---------------------------------------------------------------------------------- runs
@app.command("runs")
@fmt_option
@wide_option
@db_option
@handles_errors
def runs(fmt: Format, wide: bool, db: Optional[Path]) -> None:
    """List the runs in the database."""
    from . import render  # here, not at the top: --help need not pay for it
    render.runs(_open(db).list_runs(), fmt.value, wide=wide)


# ---------------------------------------------------------------------------------- kernels
@app.command("kernels")
@run_argument
@fmt_option
@option("--limit", type=int, min=0, help="Show at most this many launches (table only).", show_default=False)
@wide_option
@db_option
@handles_errors
def kernels(run_ref: str, fmt: Format, limit: Optional[int], wide: bool, db: Optional[Path]) -> None:
    """List a run's kernel launches with their precision, tensor-core verdict and evidence."""
    from . import render  # here, not at the top: --help need not pay for it
    r = _open(db).run(run_ref)
    if fmt is Format.json:
        render.json_array(r.iter_kernels_json())  # each row's JSON made by SQLite: millions of rows
        return
    counts = r.count_by_kind() if fmt is Format.table else {}
    render.kernels(r, r.iter_kernels(), fmt.value, limit=limit,
                   memory_ops=counts.get("memcpy", 0) + counts.get("memset", 0), wide=wide)


# ---------------------------------------------------------------------------------- summary
@app.command("summary")
@run_argument
@fmt_option
@option("--top", type=int, default=10, min=0, help="How many kernels to list by time.")
@option("--module-depth", type=int, default=2, min=1, help="Levels of the module tree in the by-module table (a list's index counts with its name: model.layers.0 is 2); deeper modules' time rolls up into them.")
@wide_option
@db_option
@handles_errors
def summary(run_ref: str, fmt: Format, top: int, module_depth: int, wide: bool, db: Optional[Path]) -> None:
    """Summarise a run: launches, GPU time, tensor-core share (of matrix work and of all GPU time), time by precision and by module."""
    from . import render  # here, not at the top: --help need not pay for it
    r = _open(db).run(run_ref)
    render.summary(r, r.summary(top=top, module_depth=module_depth), fmt.value,
                   caveats=r.caveats() if fmt is Format.table else None, wide=wide)
    if fmt is Format.table:
        render.findings(r.findings())


# ---------------------------------------------------------------------------------- ranges
@app.command("ranges")
@run_argument
@fmt_option
@wide_option
@db_option
@handles_errors
def ranges(run_ref: str, fmt: Format, wide: bool, db: Optional[Path]) -> None:
    """Per NVTX range: kernels launched in it, their GPU time, wall time, other threads' kernels."""
    from . import render  # here, not at the top: --help need not pay for it
    r = _open(db).run(run_ref)
    render.ranges(r, r.range_rows(), fmt.value, wide=wide)


# ---------------------------------------------------------------------------------- diff, compare

@app.command("diff")
@argument("run_a", "The run to compare from (name or id).", metavar="RUN_A")
@argument("run_b", "The run to compare with it.", metavar="RUN_B")
@option("--match", type=Match, default=DEFAULT_MATCH, help="Line up kernels by exact name, by the work they do (family: tile variants, template instances, generated names), by the PyTorch operator that launched them (op: torch.profiler runs), or by the module whose code launched them (module: runs with attribution).")
@fmt_option
@threshold_option
@option("--limit", type=int, min=0, help="Show at most this many rows (table only).", show_default=False)
@switch("--all", "all_rows", help="Show unchanged rows too (table only).")
@wide_option
@db_option
@handles_errors
def diff_(run_a: str, run_b: str, match: Match, fmt: Format, threshold: float, limit: Optional[int], all_rows: bool,
          wide: bool, db: Optional[Path]) -> None:
    """What changed from RUN_A to RUN_B: kernels added, removed, faster or slower; tensor-core share; fusions."""
    from . import render  # here, not at the top: --help need not pay for it

    d = _open(db).diff(run_a, run_b, match=match.value, threshold_pct=threshold)
    render.diff(d, fmt.value, limit=limit, show_same=all_rows, wide=wide)


@app.command("compare")
@argument("workload", "A built-in workload or a .py file defining build(spec).")
@option("--modes", default="eager", help="Comma-separated modes to profile: eager, torchscript, compile.")
@option("--precisions", "--precision", "precisions", default="fp32", help="Comma-separated precisions: fp32, fp16, bf16, amp.")
@option("--match", type=Match, default=DEFAULT_MATCH, help="How the diffs line kernels up (see `profkit diff --help`).")
@threshold_option
@run_options("compare")
@fmt_option
@switch("--report/--no-report", help=REPORT_HELP, default=True)
@wide_option
@db_option
@handles_errors
def compare(workload: str, modes: str, precisions: str, match: Match, threshold: float, options: dict[str, Any],
            fmt: Format, report: bool, wide: bool, db: Optional[Path]) -> None:
    """Profile a workload in several modes or precisions, show what changed against the first, and write
    each variant's side-by-side HTML report."""
    from . import render  # here, not at the top: --help need not pay for it
    from .api import compare as do_compare
    from .launch import Progress

    err = render.console(stderr=True)
    with _Stages(err) as stages:
        def on_note(text: str) -> None:
            err.print(f"profkit: {name_params(text, flag)}", markup=False, highlight=False)

        cmp = do_compare(workload, modes=_list(modes), precisions=_list(precisions), match=match.value,
                         threshold_pct=threshold, db=db or _state["db"], **options,
                         progress=Progress(on_stage=stages.stage, on_note=on_note))
    render.compare(cmp, fmt.value, wide=wide)
    if report:
        for path in cmp.write_reports():
            render.report_written(path, stderr=fmt is not Format.table)


# ---------------------------------------------------------------------------------- report
@app.command("report")
@argument("run_ref", "The run (name or id).", metavar="RUN", required=False)
@option("--vs", metavar="RUN_B", help="Another run: the two side by side, with their diff.", show_default=False)
@option("--output", "-o", type=Path, help="Where to write the page (default: reports/RUN.html, reports/vs/RUN+RUN_B.html, or reports/index.html; a run named index: reports/index+ID.html).", show_default=False)
@switch("--index", help="Write an index of every run in the database, with the run reports it links (written anew where missing or stale).")
@option("--match", type=Match, default=DEFAULT_MATCH, help="With --vs: how the diff lines kernels up (see `profkit diff --help`).")
@threshold_option
@db_option
@handles_errors
def report_(run_ref: Optional[str], vs: Optional[str], output: Optional[Path], index: bool, match: Match,
            threshold: float, db: Optional[Path]) -> None:
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
        raise UsageError("--match and --threshold shape the diff of a side-by-side report: give --vs RUN_B too")
    if run_ref is None:
        raise UsageError("give the RUN to report on (or --index for every run)", "profkit runs lists them.")
    r = database.run(run_ref)
    other = database.run(vs) if vs is not None else None
    render.report_written(r.report(output, vs=other, match=match.value, threshold_pct=threshold))


def _list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


# ---------------------------------------------------------------------------------- check
# profkit.analyze.check's parameters, as this command names them
FLAGS.update({"min_coverage": "--min-tensor-core-coverage", "no_fp32_matrix": "--no-fp32-matrix",
              "max_finding": "--max-finding", "max_findings": "--max-finding", "baseline": "--baseline",
              "max_slowdown": "--max-slowdown", "max_launches": "--max-launches"})


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


@app.command("check")
@run_argument
@option("--config", "-c", type=Path, help="A check file (TOML) of the assertions: [tensor_cores] min_coverage, [precision] no_fp32_matrix, [findings] ID = PCT, [baseline] run, max_slowdown, noise_pct, [launches] max_per_iteration. Options given here take precedence.", show_default=False)
@option("--min-tensor-core-coverage", "min_coverage", type=float, min=0, max=100, help="Fail unless at least this % of the run's GEMM, conv and attention time ran on tensor cores.", show_default=False)
@switch("--no-fp32-matrix", help="Fail a half-precision run (fp16, bf16, amp) with GEMM, conv or attention kernels in fp32 or TF32.")
@option("--max-finding", "max_finding", multiple=True, metavar="ID=PCT", help="Fail if the finding ID (rules.toml's [[finding]] ids, or any) takes more than PCT % of GPU time; repeatable.", show_default=False)
@option("--baseline", metavar="RUN", help="A run to compare GPU time per iteration with (name or id); needs --max-slowdown.", show_default=False)
@option("--max-slowdown", type=float, min=0, max=1000, help="Fail if GPU time per iteration is more than this % above the baseline's, in total or in the kernels that moved beyond the diff's noise threshold.", show_default=False)
@option("--max-launches", type=int, min=1, help="Fail if the run makes more kernel launches (CPU operator calls) per measured iteration.", show_default=False)
@switch("--strict", help="Fail skipped assertions too (those the run cannot answer: no matrix work, a CPU run, ...).")
@option("--format", "-f", "fmt", type=CheckFormat, default=CheckFormat.text, help="Output format.")
@option("--junit-xml", type=Path, help="Also write the JUnit XML report to this file.", show_default=False)
@db_option
@handles_errors
@_cannot_check
def check(run_ref: str, config: Optional[Path], min_coverage: Optional[float], no_fp32_matrix: bool,
          max_finding: tuple[str, ...], baseline: Optional[str], max_slowdown: Optional[float],
          max_launches: Optional[int], strict: bool, fmt: CheckFormat, junit_xml: Optional[Path],
          db: Optional[Path]) -> None:
    """Assert over a run, for CI: tensor-core coverage of matrix work, no fp32 matrix work in a half run,
    no finding above a share of GPU time, slowdown against a baseline run, launches per iteration. One line
    per assertion (PASS, FAIL or SKIP, the measured value, the limit); exit 0 if none failed, 1 if any did, 2 if
    it could not check (a bad option or check file, a run or baseline missing or incomplete)."""
    from . import render  # here, not at the top: --help need not pay for it
    from .analyze.check import Checks, load_checks, parse_finding_limit

    # The check file and the options are checked before the database is opened.
    given = Checks(min_coverage=min_coverage, no_fp32_matrix=no_fp32_matrix,
                   max_findings=dict(parse_finding_limit(t) for t in max_finding), max_slowdown=max_slowdown,
                   max_launches=max_launches)
    checks = (load_checks(config) if config is not None else Checks()).merged(given)
    if baseline is not None and checks.max_slowdown is None:
        from .errors import UsageError

        raise UsageError("--baseline needs a limit: --max-slowdown PCT (or [baseline] max_slowdown in the check file)")
    report = _open(db).run(run_ref).check(checks, baseline=baseline)
    if junit_xml is not None:
        from .files import write_atomic

        write_atomic(junit_xml, report.to_junit(), "Give --junit-xml a file in a folder you can write, with free space.")
    render.check(report, fmt.value)
    if not report.ok or (strict and report.count("skip")):
        _exit(1)


# ---------------------------------------------------------------------------------- bench
@app.command("bench")
@argument("workload", "A built-in workload (see `profkit workloads`) or a .py file defining build(spec).", metavar="WORKLOAD", required=False)
@option("--precisions", "--precision", "precisions", default="fp32", help="Comma-separated precisions: fp32, fp16, bf16, amp (the grid's columns).")
@option("--modes", default="eager", help="Comma-separated modes: eager, torchscript, compile (the grid's rows).")
@run_options("bench")
@fmt_option
@switch("--list", "list_", help="List the stored benchmarks instead of running one.")
@option("--show", type=int, metavar="ID", min=1, help="Print a stored benchmark again.", show_default=False)
@wide_option
@db_option
@handles_errors
def bench(workload: Optional[str], precisions: str, modes: str, options: dict[str, Any], fmt: Format, list_: bool,
          show: Optional[int], wide: bool, db: Optional[Path]) -> None:
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
        def on_note(text: str) -> None:
            err.print(f"profkit: {name_params(text, flag)}", markup=False, highlight=False)

        done = do_bench(workload, precisions=_list(precisions), modes=_list(modes), db=db or _state["db"], **options,
                        progress=Progress(on_stage=stages.stage, on_note=on_note))
    render.bench(done, fmt.value, wide=wide)
    if not done.ok:
        failed = [r for r in done.rows if r.status != "ok" and not r.reference_only]
        _err(f"profkit: error: {len(failed)} of {sum(not r.reference_only for r in done.rows)} combinations failed "
             f"(stored as benchmark {done.id})")
        _exit(1)


# ---------------------------------------------------------------------------------- doctor
@app.command("doctor")
@fmt_option
@db_option
@handles_errors
def doctor(fmt: Format, db: Optional[Path]) -> None:
    """Check what this machine can profile: GPU and driver, PyTorch, ncu and counter permission, nsys and its
    importer, the database and disk space. One line each; exit 1 if any check fails."""
    from . import render  # here, not at the top: --help need not pay for it
    from .doctor import FAIL, checks

    found = checks(db or _state["db"])
    render.doctor(found, fmt.value)
    if any(c.status == FAIL for c in found):
        _exit(1)


# ---------------------------------------------------------------------------------- sweep
@app.command("sweep")
@option("--workloads", required=True, help="Comma-separated built-in workloads or .py files.", show_default=False)
@option("--precisions", default="fp32", help="Comma-separated precisions: fp32, fp16, bf16, amp.")
@option("--modes", default="eager", help="Comma-separated modes: eager, torchscript, compile.")
@option("--tools", default="auto", help="Comma-separated tools: auto, ncu, nsys, torch.")
@option("--address", help="A Dask scheduler (tls://host:8786, or tcp://) to hand the jobs to; its workers each see one GPU and offer the resource GPU=1. Left out: a local cluster, one worker per GPU.", show_default=False)
@option("--tls-ca-file", help="For a tls:// --address: the cluster's CA certificate(s), PEM (default: Dask's distributed.comm.tls.ca-file).", show_default=False)
@option("--tls-cert", help="For a tls:// --address: this client's certificate, PEM (default: Dask's distributed.comm.tls.client.cert).", show_default=False)
@option("--tls-key", help="For a tls:// --address: this client's private key, PEM (default: Dask's distributed.comm.tls.client.key, or in --tls-cert).", show_default=False)
@option("--workers", type=int, help="Local workers (default: one per GPU; 2 with --device cpu).", show_default=False)
@run_options("sweep")
@fmt_option
@db_option
@handles_errors
def sweep(workloads: str, precisions: str, modes: str, tools: str, address: Optional[str], tls_ca_file: Optional[str],
          tls_cert: Optional[str], tls_key: Optional[str], workers: Optional[int], options: dict[str, Any], fmt: Format,
          db: Optional[Path]) -> None:
    """Profile a matrix of workloads x precisions x modes x tools, one profiled run per cell, on
    every local GPU at once (or a Dask cluster); every run lands in one database as it finishes.
    A failed job is stored with its error and logs and the others go on (exit 1 at the end)."""
    from . import render  # here, not at the top: --help need not pay for it
    from .api import sweep as do_sweep

    def on_note(text: str) -> None:
        _err(f"profkit: {name_params(text, flag)}")

    def on_result(res: Any, i: int, total: int) -> None:
        _err(render.sweep_progress(res, i, total, flag))

    result = do_sweep(workloads, precisions=precisions, modes=modes, tools=tools, address=address, workers=workers,
                      tls_ca_file=tls_ca_file, tls_cert=tls_cert, tls_key=tls_key, db=db or _state["db"],
                      on_result=on_result, on_note=on_note, **options)
    render.sweep(result, fmt.value, flag)
    if result.failed():
        _exit(1)


# ---------------------------------------------------------------------------------- workloads
@app.command("workloads")
@handles_errors
def workloads_() -> None:
    """List the built-in workloads, with the precisions and modes each supports."""
    from . import render  # here, not at the top: --help need not pay for it
    from .workloads import catalog

    render.workloads(catalog())


def main() -> None:
    try:
        stop_on_signals()
        if "PROFKIT_LIFELINE" in os.environ:  # started by profkit (a sweep's job): it dies with its starter
            from .tools.runner import watch_lifeline

            watch_lifeline(parent_gone)
        app()
    except KeyboardInterrupt as exc:  # before a command's own handling began (start-up), or after it
        sys.exit(_stopped(exc))


if __name__ == "__main__":
    main()
