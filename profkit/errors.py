"""The one exception hierarchy. Every expected failure is a ProfkitError whose message says
what happened, to which file or tool, and what to try; the CLI prints it as one line and exits
non-zero. Anything else is a bug and keeps its traceback.

Library messages name the library's own parameters, in backticks (`` `iters` must be at least
1``), never command-line flags: a notebook user passes ``iters=``. The CLI renders the same
error with its flags (``--iters must be at least 1``) through :meth:`ProfkitError.one_line`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

_PARAM = re.compile(r"`([a-z][a-z0-9_]*)`")


def name_params(text: str, option: Callable[[str], str | None] | None) -> str:
    """Library text with its `parameters` named as ``option`` names them (the CLI: flags).
    A word ``option`` does not know (a user's own text in backticks) is left as it is."""
    if option is None:
        return text
    return _PARAM.sub(lambda m: option(m.group(1)) or m.group(0), text)


# The largest count (iterations, a batch, rows to show) profkit takes: larger ones are a typo,
# and would not fit the database's integers or Python's slices.
MAX_COUNT = 2**31 - 1


def require_int(param: str, value: object, minimum: int) -> None:
    """A whole number (not a bool, not a float) of at least ``minimum`` and at most ``MAX_COUNT``,
    or a UsageError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"`{param}` must be a whole number, not {value!r}")
    if value < minimum:
        raise UsageError(f"`{param}` must be at least {minimum}, not {value}")
    if value > MAX_COUNT:
        raise UsageError(f"`{param}` must be at most {MAX_COUNT}, not {value}")


def require_choice(param: str, value: object, choices: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in choices:
        raise UsageError(f"unknown `{param}` {value!r}", f"Choose one of {', '.join(choices)}.")


def require_values(
    param: str, given: object, choices: tuple[str, ...] | None = None, *, blanks: bool = True
) -> list[str]:
    """A comma-separated string or a sequence of names -> the names, stripped, each once, in
    the order given; each one of ``choices`` where there are choices. Blank items are skipped,
    or (``blanks=False``) refused; none left is a UsageError."""
    items = given.split(",") if isinstance(given, str) else list(given)  # type: ignore[call-overload]
    if not blanks and (not items or any(not isinstance(x, str) or not x.strip() for x in items)):
        raise UsageError(f"`{param}` needs one or more comma-separated values, not {given!r}")
    for item in items:
        if not isinstance(item, str):
            raise UsageError(f"`{param}` must be names, not {item!r}")
    out = list(dict.fromkeys(i.strip() for i in items if i.strip()))
    if not out:
        raise UsageError(
            f"`{param}` needs at least one value",
            f"Choose from {', '.join(choices)}." if choices else None,
        )
    for item in out:
        if choices is not None:
            require_choice(param, item, choices)
    return out


def did_you_mean(given: object, names: list[str], rest: str | None = None) -> str | None:
    """A hint for a mistyped name: ``Did you mean 'x'?`` (the names closest to ``given``, by
    ``difflib``'s ratio, as ``get_close_matches``) before ``rest``; ``rest`` alone where none is close."""
    import difflib

    scored = (
        sorted(
            ((difflib.SequenceMatcher(None, given, n).ratio(), n) for n in dict.fromkeys(names)),
            key=lambda x: -x[0],
        )
        if isinstance(given, str)
        else []
    )
    # The closest, and any as close as it (run names share long suffixes: -fp16-eager-ncu).
    close = [n for r, n in scored[:3] if r >= 0.6 and r >= scored[0][0] - 0.05]
    if not close:
        return rest
    said = f"Did you mean {' or '.join(repr(c) for c in close)}?"
    return f"{said} {rest}" if rest else said


class ProfkitError(Exception):
    """Base of every error profkit expects. ``exit_code`` is what the CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self, option: Callable[[str], str | None] | None = None) -> str:
        """The message and hint on one line. ``option`` maps a parameter named in backticks to
        what the caller calls it (the CLI: its flag); without it the backticks stay."""
        text = self.message.rstrip(".")
        if self.hint:
            text += f". {self.hint}"
        return name_params(" ".join(text.split()), option)

    def __str__(self) -> str:
        return self.one_line()

    def to_json(self) -> dict[str, str | None]:
        """The error as JSON (a sweep's job process hands it back so): :func:`error_from_json`."""
        return {"type": type(self).__name__, "message": self.message, "hint": self.hint}


class UsageError(ProfkitError):
    """A bad option value or combination."""

    exit_code = 2


class WorkloadError(ProfkitError):
    """A workload name or file that cannot be found, loaded or built."""


class WorkloadTraceback(Exception):
    """The traceback a workload raised in the process that ran it (``profkit.harness``), carried
    as the ``__cause__`` of the WorkloadError raised here, as ``concurrent.futures`` carries a
    worker's: a traceback shown (``--verbose``, a notebook) holds the user's own failing line
    above profkit's frames. Never raised alone; no ProfkitError."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return (
            f"the workload's own traceback, from the process that ran it:\n\n{self.text.rstrip()}"
        )


class ToolNotFound(ProfkitError):
    """A profiler (ncu, nsys, nvidia-smi) is not installed or not on PATH."""


class TorchNotInstalled(ToolNotFound):
    """PyTorch, which every profiled run and benchmark runs, is not installed here."""

    def __init__(self, what: str = "profiling runs the workload or program under PyTorch"):
        super().__init__(f"PyTorch is not installed: {what}", TORCH_INSTALL_HINT)


# How to get PyTorch: the CPU-only build is a tenth of the size of the default (CUDA) one.
TORCH_INSTALL_HINT = (
    "Install it: pip install torch torchvision (CPU-only build: pip install torch torchvision "
    "--index-url https://download.pytorch.org/whl/cpu)."
)


class ToolFailed(ProfkitError):
    """A profiler ran and failed; the message carries its ==ERROR== lines and the log path."""


class NoKernelsProfiled(ToolFailed):
    """The profiler exited cleanly but profiled nothing (e.g. an NVTX filter matched no range)."""


class BadExport(ProfkitError):
    """A file to import is missing, of an unknown kind, or not laid out as expected."""


class EmptyCapture(BadExport):
    """A capture that holds no kernel launches and no CPU operator calls."""


class RunNotFound(ProfkitError):
    """No run in the database has that name or id."""


class RunIncomplete(RunNotFound):
    """The run exists but was never stored complete: it failed, was interrupted, or is still
    being written."""


class RunExists(ProfkitError):
    """A run with that name is already in the database."""


class ProfkitWarning(UserWarning):
    """Something worth telling the caller that is no failure (a file imported twice, ...).
    Library calls issue it with ``warnings.warn``; the CLI prints it as a note."""


class StoreError(ProfkitError):
    """The database cannot be opened or is not a profkit database."""


class BenchNotFound(ProfkitError):
    """No stored benchmark (``profkit bench``) has that id."""


def error_from_json(data: Mapping[str, object]) -> ProfkitError:
    """The error :meth:`ProfkitError.to_json` wrote, of its class where this module has one
    (else a ProfkitError with the same words)."""
    cls = globals().get(str(data.get("type")))
    if not (isinstance(cls, type) and issubclass(cls, ProfkitError)):
        cls = ProfkitError
    hint = data.get("hint")
    return cls(str(data.get("message") or "failed"), hint if isinstance(hint, str) else None)
