"""Facts about this machine's processes, shared by the subprocess runner (``tools.runner``)
and the store (whose runs' owners may be gone); and how a profkit process stops on a signal
(the command, and a sweep's job process, alike)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

GRACE_S = 10.0  # a child told to stop (SIGINT) has this long before its group is killed

# Stop profkit as SIGTERM does: a job scheduler or `kill`, the terminal closed (SIGHUP), Ctrl-\.
TERMINATING = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class Terminated(KeyboardInterrupt):
    """SIGTERM, SIGHUP or SIGQUIT: unwound like Ctrl-C, so that the profiler's process group is
    stopped, nothing half-written stays and the run is marked; exit status 128 + the signal's
    number (143 for SIGTERM)."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = signum


def stopped_by(exc: KeyboardInterrupt) -> tuple[str, int]:
    """What stopped a profkit process, in words, and its exit status: ``terminated (SIGTERM)``
    and 128 + the signal's number for a stop signal, ``interrupted`` and 130 for Ctrl-C."""
    if isinstance(exc, Terminated):
        return f"terminated ({signal.Signals(exc.signum).name})", 128 + exc.signum
    return "interrupted", 128 + signal.SIGINT


def how_it_ended(returncode: int) -> str:
    """How a child process ended, from its exit status (a negative one: the signal that killed
    it): ``exited with status 1``, ``was killed by SIGKILL``."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        return f"was killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"was killed by signal {-returncode}"


def _on_terminate(signum: int, frame: object) -> None:
    for sig in TERMINATING:  # once: the unwinding must not be cut short
        signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signum)


def stop_on_signals() -> None:
    """SIGTERM, SIGHUP and SIGQUIT raise :class:`Terminated` in this process (one that
    ``nohup`` started keeps SIGHUP ignored). A process profkit started (a sweep's job) also
    passes :func:`parent_gone` to ``tools.runner.watch_lifeline``."""
    for sig in TERMINATING:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _on_terminate)


def parent_gone() -> None:
    """The profkit process that started this one (a sweep's worker) has died: stop as SIGTERM
    stops (the profiler's group is stopped, the run marked), and for certain soon after."""
    import time

    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(3 * GRACE_S)
    os.kill(os.getpid(), signal.SIGKILL)


def alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine is running (a zombie, ended but not yet reaped,
    is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (not Linux): alive, as kill says
