"""The one exception hierarchy. Every expected failure is a ProfkitError whose message says
what happened, to which file or tool, and what to try; the CLI prints it as one line and exits
non-zero. Anything else is a bug and keeps its traceback."""

from __future__ import annotations


class ProfkitError(Exception):
    """Base of every error profkit expects. ``exit_code`` is what the CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = self.message.rstrip(".")
        if self.hint:
            text += f". {self.hint}"
        return " ".join(text.split())


class UsageError(ProfkitError):
    """A bad option value or combination."""

    exit_code = 2


class WorkloadError(ProfkitError):
    """A workload name or file that cannot be found, loaded or built."""


class ToolNotFound(ProfkitError):
    """A profiler (ncu, nsys, nvidia-smi) is not installed or not on PATH."""


class ToolFailed(ProfkitError):
    """A profiler ran and failed; the message carries its ==ERROR== lines and the log path."""


class NoKernelsProfiled(ToolFailed):
    """The profiler exited cleanly but profiled nothing (e.g. an NVTX filter matched no range)."""


class BadExport(ProfkitError):
    """A file to import is missing, of an unknown kind, or not laid out as expected."""


class RunNotFound(ProfkitError):
    """No run in the database has that name or id."""


class RunExists(ProfkitError):
    """A run with that name is already in the database."""


class StoreError(ProfkitError):
    """The database cannot be opened or is not a profkit database."""
