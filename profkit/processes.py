"""Facts about this machine's processes, shared by the subprocess runner (``tools.runner``)
and the store (whose runs' owners may be gone); how a profkit process stops on a signal
(the command, and a sweep's job process, alike), a long SQLite statement included
(:func:`stoppable`); where its time goes, with PROFKIT_TIMINGS set (:func:`stage`); and its
end without Python's teardown once all it makes is written (:func:`leave`: a harness's, and a
command's)."""

from __future__ import annotations

import atexit
import io
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

_last = [time.monotonic(), time.process_time()]


def stage(label: str) -> None:
    """With PROFKIT_TIMINGS set, the wall and CPU seconds since this process's last stage, on
    stderr: what the benchmarks break an import's or a run's time down by
    (benchmarks/nsys_scale.py, benchmarks/repeat_run_probe.sh)."""
    if os.environ.get("PROFKIT_TIMINGS"):
        now = [time.monotonic(), time.process_time()]
        print(
            f"profkit: {label}: {now[0] - _last[0]:.2f} s ({now[1] - _last[1]:.2f} s CPU)",
            file=sys.stderr,
        )
        _last[:] = now


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


# SQLite calls a watched connection's progress handler every this many steps of its virtual
# machine (well under a millisecond of work): Python code runs then, and with it the handler
# of any signal that came meanwhile.
PROGRESS_STEPS = 20_000


class Progressing(Protocol):
    """A SQLite connection (``sqlite3.Connection``), as :func:`watch` uses it."""

    def set_progress_handler(self, handler: Callable[[], int] | None, n: int, /) -> None: ...


# The SQLite connections whose statements a stop signal may cut short (:func:`watch`), by their
# owner (an export's reader, the store's connection): an entry goes with its owner.
_watched: weakref.WeakKeyDictionary[object, Progressing] = weakref.WeakKeyDictionary()
# What a stop signal's handler raised while :func:`stoppable` was in force, and its depth.
_stops: list[BaseException] = []
_depth = [0]


def _tick() -> int:
    """The progress handler: a pending signal's handler runs as this Python function starts,
    and an exception it raises (a stop) makes SQLite abandon the statement (its transaction
    rolled back). SQLite's error for that then gives way to the stop (:func:`stoppable`)."""
    return 0


def _set_progress(con: Progressing, on: bool) -> None:
    try:
        con.set_progress_handler(_tick if on else None, PROGRESS_STEPS)
    except Exception:  # sqlite3.ProgrammingError: closed, or of another thread
        pass


def watch(owner: object, con: Progressing) -> None:
    """Let a stop signal cut short ``con``'s statements while :func:`stoppable` is in force
    (for as long as ``owner`` lives)."""
    _watched[owner] = con
    if _depth[0]:
        _set_progress(con, True)


def _recording(handler: Callable[[int, Any], Any]) -> Callable[[int, Any], Any]:
    """``handler``, with what it raises kept in ``_stops`` (SQLite drops an exception raised
    inside its progress handler)."""

    def on_signal(signum: int, frame: Any) -> None:
        try:
            handler(signum, frame)
        except BaseException as exc:
            _stops.append(exc)
            raise

    on_signal.recording = True  # type: ignore[attr-defined]
    return on_signal


@contextmanager
def stoppable() -> Iterator[None]:
    """Inside, Ctrl-C and the stop signals (SIGTERM, SIGHUP, SIGQUIT) reach a running SQLite
    statement of a :func:`watch`ed connection within milliseconds: their handler runs in its
    progress handler, the statement is abandoned, and what the handler raised (KeyboardInterrupt,
    :class:`Terminated`) comes out of the block in place of whatever SQLite's error became
    on the way (it does also where the block swallowed it and went on). Without it a signal
    waits for the statement to end, however long that is. Signals are the main thread's: in
    another thread this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wrapped: dict[signal.Signals, tuple[Any, Any]] = {}
    for sig in (signal.SIGINT, *TERMINATING):
        handler = signal.getsignal(sig)
        if callable(handler) and not getattr(handler, "recording", False):
            wrapped[sig] = (handler, _recording(handler))
            signal.signal(sig, wrapped[sig][1])
    _depth[0] += 1
    if _depth[0] == 1:
        _stops.clear()
        for con in list(_watched.values()):
            _set_progress(con, True)
    try:
        yield
    except BaseException as exc:
        if _stops and _stops[0] is not exc:
            raise _stops[0] from None
        raise
    else:
        if _stops:
            raise _stops[0]
    finally:
        _depth[0] -= 1
        if not _depth[0]:
            for con in list(_watched.values()):
                _set_progress(con, False)
            _stops.clear()
        for sig, (handler, recorder) in wrapped.items():
            if signal.getsignal(sig) is recorder:  # not replaced since (a stop sets SIG_IGN)
                signal.signal(sig, handler)


def alone() -> bool:
    """Whether nothing this process started is still running: no child process of
    multiprocessing's (a DataLoader's workers) and no thread that Python would wait for."""
    mp = sys.modules.get("multiprocessing")
    if mp is not None and mp.active_children():
        return False
    return not any(
        t.is_alive() and not t.daemon
        for t in threading.enumerate()
        if t is not threading.main_thread()
    )


def leave(rc: int, exit_handlers: bool = False) -> None:
    """End this process at once with exit status ``rc``, without Python's teardown (every
    object freed, every module unloaded), once all it makes is written: 0.15-0.3 s of a
    large import's command (the data it read, pandas and Arrow), and 0.4-0.8 s of a first
    run's critical path on the H100 in a harness of ncu's per-function plan (CUDA's teardown
    too). ``exit_handlers``: the exit handlers run first (a command's, a workload's, logging's
    flush; a harness's counting process, a second run of the workload, runs none). Then what
    the teardown would write is written: the SQLite connections still open are closed (closing
    the last one to a WAL database checkpoints it into the file and removes its ``-wal`` and
    ``-shm``), every plain file still open for writing is flushed (:func:`left_open`),
    standard output and error, and the C library's buffered output (a
    library's printf into a pipe). Objects still alive are not finalised: a ``__del__`` does
    not run.

    Returns, for the caller to end normally, where a file is open for writing that closing would
    write more to than a flush (a gzip file's trailer: :func:`left_open`), and otherwise never.
    Only where nothing else of the process's is running (``alone``, the caller's check): a
    child process or a thread is ended, or waited for, by that teardown."""
    found = left_open()
    if found is None:
        return
    files, databases = found
    if exit_handlers:
        atexit._run_exitfuncs()  # each handler's error is printed, as at a normal exit
    for con in databases:  # closed as their teardown would (the last one checkpoints a WAL)
        try:
            con.close()
        except Exception:  # already unusable: nothing of it to keep
            pass
    for f in files:  # those a handler closed say so (ValueError), ignored
        try:
            f.flush()
        except Exception:  # a full disk, a pipe gone, a wrapped stream's own error: as teardown
            pass
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # closed or replaced by the workload: nothing to keep
            pass
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)  # every C stdio stream (NULL: all of them)
    except Exception:  # no C library to ask (not Linux)
        pass
    os._exit(rc)


# Python's file objects whose flush writes out all that closing them would; and those that hold
# nothing to write out (in memory).
_PLAIN_FILES = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom, io.FileIO)
_MEMORY_FILES = (io.BytesIO, io.StringIO)


def left_open() -> tuple[list[Any], list[Any]] | None:
    """The Python file objects open for writing, and the SQLite connections (closed or not),
    found among the objects the garbage collector tracks (0.08 s for the 335,000 of a process
    with torch and a torchvision model, on the 2-core machine): every file a plain one
    (:data:`_PLAIN_FILES`, what a flush writes out whole). None where another kind is open for
    writing (a gzip, bz2 or lzma file, a subclass of a file type): closing it writes more than
    a flush does, so the process must end normally."""
    import _io  # the C base of every io class (io.IOBase is an ABC: isinstance through it is slow)
    import gc

    sqlite3 = sys.modules.get("sqlite3")
    connection: Any = sqlite3.Connection if sqlite3 is not None else ()
    plain, memory = set(_PLAIN_FILES), set(_MEMORY_FILES)
    found: list[Any] = []
    databases: list[Any] = []
    for obj in gc.get_objects():
        # by its type: isinstance reads a proxy's __class__ (torch's deprecated objects warn then)
        kind = type(obj)
        if issubclass(kind, connection):
            databases.append(obj)
            continue
        if not issubclass(kind, _io._IOBase) or kind in memory:
            continue
        try:
            if obj.closed or not obj.writable():
                continue
        except Exception:  # a half-made or broken object: nothing of it to write
            continue
        if kind not in plain:
            return None
        found.append(obj)
    return found, databases
