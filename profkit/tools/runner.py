"""The only place profkit starts a subprocess: never through a shell, output streamed line by
line to a callback (for progress) and to a log file, with an optional timeout, and Ctrl-C
passed on to the child so that a profiler can write what it has. Every child's environment
has NVLink multicast off (:data:`NO_MULTICAST`)."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..errors import ToolFailed, ToolNotFound
from ..files import open_new


# In every environment profkit starts (profiled processes, torchrun's ranks, sweep jobs and
# workers): NVLink multicast off. A program that uses it can take a shared host's GPUs out of
# service.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A child's environment: this one's, multicast off, and ``extra``."""
    return {**os.environ, **NO_MULTICAST, **(extra or {})}


@dataclass
class Result:
    argv: list[str]
    returncode: int
    log_path: Path | None
    tail: list[str]
    wall_s: float


def die_with_parent(parent: int, sig: int) -> None:
    """Have Linux send this process ``sig`` when ``parent`` (its parent now) dies
    (PR_SET_PDEATHSIG), and send it now if that parent is already gone; elsewhere nothing. For
    processes that a parent's group kill does not reach (a sweep's jobs, torchrun's ranks,
    each in a session of its own)."""
    import sys

    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the call: go now
        os.kill(os.getpid(), sig)


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


def find_executable(name: str, patterns: Sequence[str] = ()) -> str | None:
    """``name`` on PATH, else the newest match of the install-folder glob ``patterns``."""
    path = shutil.which(name)
    if path:
        return path
    for pattern in patterns:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


def capture(argv: Sequence[str], timeout: float = 60) -> str:
    """Run a short command and return its stdout; raise ToolFailed on a non-zero exit."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=child_env())
    except FileNotFoundError as exc:
        raise ToolNotFound(f"{argv[0]} is not installed or not on PATH") from exc
    except subprocess.TimeoutExpired as exc:
        raise ToolFailed(f"{' '.join(argv[:3])} did not answer within {timeout:.0f} s") from exc
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise ToolFailed(f"{' '.join(argv[:3])} failed (exit {proc.returncode}): {err[-1] if err else 'no output'}")
    return proc.stdout


def stream(
    argv: Sequence[str],
    log_path: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    keep: int = 40,
) -> Result:
    """Run ``argv`` to completion, feeding each output line (stdout and stderr merged) to
    ``on_line`` and to ``log_path``. Returns the exit status and the last ``keep`` lines."""
    argv = [str(a) for a in argv]
    start = time.monotonic()
    tail: list[str] = []
    log = open_new(log_path, "w", replace=True, encoding="utf-8", errors="replace") if log_path else None
    timed_out = threading.Event()
    # While the child runs, Ctrl-C and SIGTERM do not unwind this process at some random line
    # (a second signal could then skip the cleanup and leave the child running): they stop
    # the child's process group (SIGINT, so a profiler writes what it has; SIGKILL on a second
    # signal), the loop below ends when the child has gone, and the signal is raised again
    # afterwards, through the handler that was there before (KeyboardInterrupt, or the CLI's).
    received: list[int] = []
    child: list[subprocess.Popen] = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)
        if child:
            _signal_group(child[0], signal.SIGINT if len(received) == 1 else signal.SIGKILL)

    main_thread = threading.current_thread() is threading.main_thread()
    # A signal this process ignores (SIG_IGN: a background job of a non-interactive shell
    # ignores SIGINT) stays ignored.
    handled = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is not signal.SIG_IGN]
    previous = {s: signal.signal(s, on_signal) for s in handled} if main_thread else {}
    try:
        try:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                bufsize=1, env=child_env(env), cwd=cwd, start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise ToolNotFound(f"{argv[0]} is not installed or not on PATH") from exc
        child.append(proc)
        if received:  # a signal came while the child was being started
            _signal_group(proc, signal.SIGINT)

        # The timeout holds even for a child that prints nothing: a timer stops its group.
        def expire() -> None:
            timed_out.set()
            _stop(proc)

        timer = threading.Timer(timeout, expire) if timeout else None
        if timer:
            timer.daemon = True
            timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if log:
                    log.write(line)
                line = line.rstrip("\n")
                tail.append(line)
                if len(tail) > keep:
                    del tail[0]
                if on_line:
                    on_line(line)
            proc.wait()
        except BaseException:
            # Any failure here: the child's whole process group goes too (it runs in a
            # session of its own, so nothing else would stop it).
            _stop(proc)
            raise
        finally:
            if timer:
                timer.cancel()
        if received:
            _stop(proc)  # whatever of its group outlived it
        if timed_out.is_set():
            raise ToolFailed(f"{Path(argv[0]).name} ran past {timeout:.0f} s and was stopped",
                             f"Its log is {log_path}." if log_path else None)
    finally:
        if log:
            log.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if received:
        signal.raise_signal(received[0])  # now, through the handler this process had before
    return Result(argv, proc.returncode, log_path, tail, time.monotonic() - start)


class Background:
    """A child started beside the one ``stream`` runs (``with Background(argv, log) as b: ...
    stream(...); b.wait()``): output to its log file, its own session, and stopped with its
    whole group if the block is left before it ended (an error, Ctrl-C, a timeout)."""

    def __init__(self, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None):
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self.start = time.monotonic()
        self._log = open_new(log_path, "w", replace=True, encoding="utf-8", errors="replace")
        try:
            self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                         env=child_env(env), start_new_session=True)
        except FileNotFoundError as exc:
            self._log.close()
            raise ToolNotFound(f"{self.argv[0]} is not installed or not on PATH") from exc

    def __enter__(self) -> "Background":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            _stop(self.proc)
        self._log.close()

    def wait(self, timeout: float | None = None, keep: int = 40) -> Result:
        """Wait for the child (at most ``timeout`` s, then stop it: ToolFailed)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(self.proc)
            raise ToolFailed(f"{Path(self.argv[0]).name} ran past its time and was stopped",
                             f"Its log is {self.log_path}.") from None
        self._log.flush()
        lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        return Result(self.argv, self.proc.returncode, self.log_path, lines[-keep:], time.monotonic() - self.start)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT to the child's process group (a profiler then writes what it has), SIGKILL to
    the group if it is not gone in 10 s; then make sure nothing of the group is left. (While
    ``stream`` runs, Ctrl-C and SIGTERM reach its own handler, so they cannot cut this short.)"""
    _signal_group(proc, signal.SIGINT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)  # whatever of the group outlived its leader
    proc.wait()
