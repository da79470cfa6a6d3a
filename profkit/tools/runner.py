"""The only place profkit starts a subprocess: never through a shell, output streamed line by
line to a callback (for progress) and to a log file, with an optional timeout, and Ctrl-C
passed on to the child so that a profiler can write what it has. Every child's environment
has NVLink multicast off (:data:`NO_MULTICAST`).

However profkit ends, nothing it started goes on: every child starts with the default
disposition of SIGINT, SIGTERM, SIGHUP and SIGQUIT (whatever this process ignores), a stop
escalates to SIGKILL of the child's whole process group after :data:`GRACE_S`, and every
child holds the read end of this process's *lifeline*, a pipe whose write end only this
process holds: when it dies, however (SIGKILL, the OOM killer), the pipe reads end-of-file and
the children that watch it (:func:`watch_lifeline`: profkit's harness, its ranks and sweep
jobs) stop at once.

No Python process profkit starts has the current folder on its path (:func:`python_argv`,
:data:`SAFE_PATH`): a ``torch.py`` or ``profkit/`` someone left in the folder profkit runs in is
never imported."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import ToolFailed, ToolNotFound
from ..files import open_new
from ..processes import GRACE_S as GRACE_S  # here for runner.GRACE_S
from ..processes import alive as alive  # here for runner.alive

# In every environment profkit starts (profiled processes, torchrun's ranks, sweep jobs and
# workers): NVLink multicast off. A program that uses it can take a shared host's GPUs out of
# service.
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


# In every environment profkit starts, so that every Python process below it (the harness,
# torchrun and its ranks, a compiler's workers, a sweep's jobs) inherits it: Python puts no
# potentially unsafe folder first on sys.path (the current folder for `-m` and `-c`, a
# script's own folder), so nothing planted in the folder profkit was started in is imported.
SAFE_PATH = {"PYTHONSAFEPATH": "1"}


def python_argv(*args: str) -> list[str]:
    """The command line of a Python child of profkit (``-m profkit.harness JOB``, ``-c CODE``):
    this interpreter, with ``-P`` so that the current folder is not on its path even where
    :data:`SAFE_PATH` does not reach it. Every Python process profkit starts is built here;
    a workload file's own folder is put on the harness's path by the harness, explicitly
    (:func:`profkit.workloads.load_module`)."""
    return [sys.executable, "-P", *args]


REAP_S = 1.0  # after a child ended, how long what of its group holds its output open may go on

# The signals that stop profkit (and that its children must not have inherited as ignored).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# A child, its output read as text or not (stopping one needs neither).
AnyPopen = subprocess.Popen[str] | subprocess.Popen[bytes]


LIFELINE = "PROFKIT_LIFELINE"  # "fd:inode:pid" of the lifeline's read end, in every child's environment (cli.main reads it by name)
_lifeline: list[int] = []  # [read fd, write fd], made once per process


def lifeline() -> tuple[int, str]:
    """This process's lifeline: (its read end, for ``pass_fds``; the value of
    :data:`LIFELINE` that lets a child find it). The write end is never inherited (close on
    exec) and never closed: it closes when this process dies, whatever kills it."""
    if not _lifeline:
        _lifeline.extend(os.pipe())  # both ends close on exec; pass_fds hands the read end on
    fd = _lifeline[0]
    return fd, f"{fd}:{os.fstat(fd).st_ino}:{os.getpid()}"


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A child's environment: this one's, multicast off, this process's lifeline, ``extra``,
    and no current folder on a Python child's path (:data:`SAFE_PATH`, and no empty entry in
    ``PYTHONPATH``: Python reads one as the current folder)."""
    env = {**os.environ, **NO_MULTICAST, LIFELINE: lifeline()[1], **(extra or {}), **SAFE_PATH}
    if "PYTHONPATH" in env:
        kept = [p for p in env["PYTHONPATH"].split(os.pathsep) if p]
        if kept:
            env["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            del env["PYTHONPATH"]
    return env


def watch_lifeline(on_gone: Callable[[], None], poll_s: float = 0.5) -> bool:
    """In a child profkit started: call ``on_gone`` (on a daemon thread) as soon as the profkit
    process that started it has died. It reads the lifeline's pipe where the child still has it
    (any launcher between them, ncu or nsys, may have closed it), else checks that process's pid
    every ``poll_s``. Returns whether there was a parent to watch."""
    value = os.environ.get(LIFELINE, "")
    parts = value.split(":")
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() and len(p) < 19 for p in parts):
        return False
    fd, inode, pid = (int(p) for p in parts)
    try:
        st = os.fstat(fd)
        have_pipe = st.st_ino == inode and stat.S_ISFIFO(st.st_mode)
    except (OSError, OverflowError):
        have_pipe = False
    # Without the pipe, only a profkit that is this process's ancestor is watched: a value
    # inherited by something profkit did not start for this purpose, stale or forged, names
    # no parent of this process and is ignored. (The pipe itself is proof enough: it ends when
    # its profkit does, even one that died before this process got here.)
    if not have_pipe and pid not in _ancestors():
        return False

    def watch() -> None:
        if have_pipe:
            try:
                while os.read(fd, 1):
                    pass  # nobody writes; only end-of-file (the parent gone) ends the read
            except OSError:
                pass
        else:
            while alive(pid):
                time.sleep(poll_s)
        on_gone()

    threading.Thread(target=watch, name="profkit-lifeline", daemon=True).start()
    return True


def _ancestors() -> list[int]:
    """This process's parent, its parent's parent, ... up to init (Linux's /proc; elsewhere
    the parent alone)."""
    out: list[int] = []
    pid = os.getppid()
    while pid > 1 and pid not in out and len(out) < 512:
        out.append(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return out


@contextmanager
def _starting() -> Iterator[int]:
    """Around the start of a child (``subprocess.Popen(argv, env=child_env(env),
    pass_fds=(fd,), ...)``, ``fd`` the lifeline's read end that this yields): the child starts
    with the default disposition of :data:`STOP_SIGNALS`, whatever this process ignores (a
    shell starts background jobs with SIGINT ignored, ``nohup`` SIGHUP): exec keeps an ignored
    signal ignored but resets a handled one, so for the moment of the start an ignored signal
    is handled by a handler that does nothing (it stays ignored here). Signals can be changed
    on the main thread only; elsewhere (a Dask worker's job thread) the process that starts
    children must not ignore them. The child gets the lifeline."""
    fd, _ = lifeline()
    swapped = []
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is signal.SIG_IGN:
                signal.signal(sig, _ignore)
                swapped.append(sig)
    try:
        yield fd
    finally:
        for sig in swapped:
            signal.signal(sig, signal.SIG_IGN)


def _ignore(signum: int, frame: object) -> None:
    """A signal this process ignores, while a child starts (see :func:`_starting`)."""


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
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the call: go now
        os.kill(os.getpid(), sig)


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


def probe(argv: Sequence[str], timeout: float = 60) -> tuple[int, str, str]:
    """Run a short command to its end: (exit status, stdout, stderr). Raises ToolNotFound, or
    ToolFailed when it does not end within ``timeout`` (then its whole group is killed)."""
    try:
        with _starting() as fd:
            proc = subprocess.Popen(
                list(argv),
                env=child_env(None),
                pass_fds=(fd,),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,
            )
    except FileNotFoundError as exc:
        raise ToolNotFound(f"{argv[0]} is not installed or not on PATH") from exc
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        _signal_group(proc, signal.SIGKILL)
        proc.communicate()
        raise ToolFailed(f"{' '.join(argv[:3])} did not answer within {timeout:.0f} s") from exc
    except BaseException:
        _signal_group(proc, signal.SIGKILL)  # Ctrl-C or SIGTERM here: the command goes too
        proc.wait()
        raise
    return proc.returncode, str(out), str(err)


def capture(argv: Sequence[str], timeout: float = 60) -> str:
    """Run a short command and return its stdout; raise ToolFailed on a non-zero exit."""
    rc, out, err_text = probe(argv, timeout)
    if rc != 0:
        err = (err_text or out).strip().splitlines()
        raise ToolFailed(
            f"{' '.join(argv[:3])} failed (exit {rc}): {err[-1] if err else 'no output'}"
        )
    return out


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
    log = (
        open_new(log_path, "w", replace=True, encoding="utf-8", errors="replace")
        if log_path
        else None
    )
    timed_out = threading.Event()
    # While the child runs, a stop signal (Ctrl-C, SIGTERM, SIGHUP, SIGQUIT) does not unwind
    # this process at some random line (a second signal could then skip the cleanup and leave
    # the child running): it stops the child's process group (SIGINT, so a profiler writes what
    # it has; SIGKILL on a second signal, or after GRACE_S whatever the child does with SIGINT),
    # the loop below ends when the child has gone, and the signal is raised again afterwards,
    # through the handler that was there before (KeyboardInterrupt, or the CLI's). A signal
    # this process ignores (SIG_IGN: SIGINT in a background job of a shell, SIGHUP under
    # nohup) stays ignored here; the child starts with the default for each.
    received: list[int] = []
    child: list[subprocess.Popen[str]] = []
    kill_timer: list[threading.Timer] = []

    def on_signal(signum: int, frame: object) -> None:
        if signum in ignored:
            return
        received.append(signum)
        if child:
            _stop_soon(child[0], len(received), kill_timer)

    main_thread = threading.current_thread() is threading.main_thread()
    ignored = (
        {s for s in STOP_SIGNALS if signal.getsignal(s) is signal.SIG_IGN} if main_thread else set()
    )
    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS} if main_thread else {}
    try:
        try:
            with _starting() as fd:
                proc = subprocess.Popen(
                    argv,
                    env=child_env(env),
                    pass_fds=(fd,),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                    bufsize=1,
                    cwd=cwd,
                    start_new_session=True,
                )
        except FileNotFoundError as exc:
            raise ToolNotFound(f"{argv[0]} is not installed or not on PATH") from exc
        child.append(proc)
        if received:  # a signal came while the child was being started
            _stop_soon(proc, 1, kill_timer)

        # The timeout holds even for a child that prints nothing: a timer stops its group.
        def expire() -> None:
            timed_out.set()
            _stop(proc)

        timer = threading.Timer(timeout, expire) if timeout else None
        if timer:
            timer.daemon = True
            timer.start()
        # Once the child has ended, what of its group still holds its output open (a helper the
        # program started in the background) is ended after a moment: the output's end-of-file
        # then comes, and nothing it started goes on.
        read_all = threading.Event()

        def reap() -> None:
            proc.wait()
            if not read_all.wait(REAP_S):
                _signal_group(proc, signal.SIGKILL)

        threading.Thread(target=reap, name="profkit-reap", daemon=True).start()
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
            read_all.set()
            proc.wait()
            # Whatever of its group outlived it (a DataLoader's workers of a program profkit
            # stopped) goes with it.
            _signal_group(proc, signal.SIGKILL)
        except BaseException:
            # Any failure here: the child's whole process group goes too (it runs in a
            # session of its own, so nothing else would stop it).
            _stop(proc)
            raise
        finally:
            if timer:
                timer.cancel()
            for t in kill_timer:
                t.cancel()
        if received:
            _stop(proc)  # whatever of its group outlived it
        if timed_out.is_set():
            raise ToolFailed(
                f"{Path(argv[0]).name} ran past {timeout:.0f} s and was stopped",
                f"Its log is {log_path}." if log_path else None,
            )
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
            with _starting() as fd:
                self.proc = subprocess.Popen(
                    self.argv,
                    env=child_env(env),
                    pass_fds=(fd,),
                    stdout=self._log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except FileNotFoundError as exc:
            self._log.close()
            raise ToolNotFound(f"{self.argv[0]} is not installed or not on PATH") from exc

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            _stop(self.proc)
        self._log.close()

    def kill(self) -> None:
        """End the child's whole group at once (SIGKILL): a child with nothing to save (an
        export whose file is thrown away), where the caller stops on an error or a signal."""
        _signal_group(self.proc, signal.SIGKILL)
        self.proc.wait()

    def wait(self, timeout: float | None = None, keep: int = 40) -> Result:
        """Wait for the child (at most ``timeout`` s, then stop it: ToolFailed)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(self.proc)
            raise ToolFailed(
                f"{Path(self.argv[0]).name} ran past its time and was stopped",
                f"Its log is {self.log_path}.",
            ) from None
        self._log.flush()
        lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        return Result(
            self.argv,
            self.proc.returncode,
            self.log_path,
            lines[-keep:],
            time.monotonic() - self.start,
        )


def _stop_soon(proc: AnyPopen, nth: int, timers: list[threading.Timer]) -> None:
    """The ``nth`` stop signal while ``proc`` runs: SIGINT to its group the first time, with
    SIGKILL to follow after GRACE_S; SIGKILL at once on a second."""
    if nth > 1:
        _signal_group(proc, signal.SIGKILL)
        return
    _signal_group(proc, signal.SIGINT)
    timer = threading.Timer(GRACE_S, _signal_group, (proc, signal.SIGKILL))
    timer.daemon = True
    timer.start()
    timers.append(timer)


def _signal_group(proc: AnyPopen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(proc: AnyPopen) -> None:
    """SIGINT to the child's process group (a profiler then writes what it has), SIGKILL to
    the group if it is not gone in GRACE_S; then make sure nothing of the group is left. (While
    ``stream`` runs, Ctrl-C and SIGTERM reach its own handler, so they cannot cut this short.)"""
    _signal_group(proc, signal.SIGINT)
    try:
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)  # whatever of the group outlived its leader
    proc.wait()
