"""``profkit sweep`` (the engine behind it): a matrix of profiled runs (workloads x precisions x modes x tools), each a
``profkit run``, handed to Dask (``distributed``) with one GPU per task.

Why Dask: its scheduler and workers are plain Python packages (pure-Python wheels plus a few
common compiled ones), so they install from carried wheels on a machine without network, start
in seconds, and the same code runs on a local cluster (one worker process per GPU, each seeing
only its GPU through ``CUDA_VISIBLE_DEVICES``) or on any cluster whose scheduler address is
given. Ray would bring a far larger runtime for no gain here: a sweep's tasks are a few dozen
independent processes, not a data pipeline.

Every job runs where a worker is, into a database and raw folder of its own (a temporary
folder), and comes back as one archive; this process is the only writer of the sweep's
database, storing each run (or, for a job that failed, a failed run with its error and its
logs) as its result arrives. Without Dask installed, the jobs run one after another here.
"""

from __future__ import annotations

import fcntl
import io
import logging
import os
import shutil
import signal
import socket
import stat
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from . import gpu, launch, workloads
from .errors import StoreError, UsageError, WorkloadError, require_values
from .options import SWEEP, TOOLS, RunOptions, for_command, require_command_options
from .records import RunRecord
from .store import Store
from .store.database import RunFields
from .sweep_job import OUTCOME, JobFile, read_outcome
from .tools import runner

if TYPE_CHECKING:
    from distributed.security import Security

INSTALL_HINT = "pip install 'profkit[cluster]'"
# In the environment of every Python process a sweep starts (runner.SAFE_PATH): the current folder
# is not put on its path, so a `torch.py`, `msgpack.py` or `profkit/` there is never imported.
SAFE_PATH = runner.SAFE_PATH


@dataclass(frozen=True)
class Job:
    """One cell of the matrix: ``profkit run WORKLOAD --precision P --mode M --tool T``."""

    workload: str
    precision: str
    mode: str
    tool: str

    def label(self) -> str:
        return f"{self.workload} {self.precision} {self.mode} {self.tool}"


@dataclass
class JobResult:
    """What became of a job: its run in the sweep's database (ok or failed), or why it was
    skipped; where it ran and how long it took."""

    job: Job
    status: str  # ok, failed, skipped
    run: str | None = None  # the run's name in the database
    error: str | None = None  # one line, the library's words (`parameters` in backticks)
    error_type: str | None = None  # the error's ProfkitError class (ToolFailed, WorkloadError...)
    worker: str | None = None  # host, and GPU where one was assigned
    wall_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self.job), **{k: v for k, v in asdict(self).items() if k != "job"}}


@dataclass
class SweepPlan:
    """A checked matrix: the jobs to run (with their requests) and the ones skipped, with why."""

    jobs: list[tuple[Job, launch.RunRequest, Path]]  # with the workload's file
    skipped: list[JobResult]
    device: str


@dataclass
class SweepResult:
    results: list[JobResult] = field(default_factory=list)
    engine: str = "in turn"  # "dask (local, N workers)", "dask (ADDRESS)" or "in turn"
    wall_s: float = 0.0

    def failed(self) -> list[JobResult]:
        return [r for r in self.results if r.status == "failed"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "wall_s": round(self.wall_s, 3),
            "jobs": [r.to_dict() for r in self.results],
        }


def plan(
    workload_list: str | Sequence[str],
    precisions: str | Sequence[str] = ("fp32",),
    modes: str | Sequence[str] = ("eager",),
    tools: str | Sequence[str] = ("auto",),
    options: Mapping[str, Any] | None = None,
) -> SweepPlan:
    """Check a sweep before anything runs: every value, every workload (found, and parsed), and
    each cell's options as ``profkit run`` checks them. ``options`` are every job's (a run's
    options but precision, mode, tool and name, which the matrix and the sweep set); torch.compile's
    mode goes to the compile cells, BatchNorm in fp32 to the fp16 and bf16 cells, ncu's metrics
    to the ncu cells and nsys's switches to the nsys cells. A cell its workload says it does not
    support is skipped (with the workload's own reason), not an error: a matrix over several
    workloads rarely fits all of them."""
    for what in SET_BY_SWEEP:
        if what in (options or {}):
            raise UsageError(
                f"`{what}` concerns a program run as it is; a sweep runs workloads"
                if what in ("step", "run_to_end")
                else f"a sweep sets each job's `{what}` itself"
                if what != "nproc_per_node"
                else "`nproc_per_node`: a sweep's job is one process on one GPU",
                "Give `precisions`, `modes` and `tools`."
                if what in ("precision", "mode", "tool")
                else None,
            )
    require_command_options(SWEEP, options or {})
    base = RunOptions.make(**(options or {}))
    names = require_values("workloads", workload_list, blanks=False)
    precision_list = require_values("precisions", precisions, workloads.PRECISIONS, blanks=False)
    mode_list = require_values("modes", modes, workloads.MODES, blanks=False)
    tool_list = require_values("tools", tools, TOOLS, blanks=False)
    base.check_values()
    base.check_grid(precision_list, mode_list, tool_list)
    jobs, skipped = [], []
    for name in names:
        for p in precision_list:
            for m in mode_list:
                for t in tool_list:
                    req = launch.RunRequest(name, base.cell(p, m, t))
                    try:
                        wname, path = launch.check(req)
                    except WorkloadError as exc:
                        if "does not support" not in exc.message:
                            raise
                        skipped.append(
                            JobResult(
                                Job(workloads.resolve(name)[0], p, m, t),
                                "skipped",
                                error=exc.one_line(),
                            )
                        )
                        continue
                    jobs.append((Job(wname, p, m, t), req, path))
    if not jobs:
        raise UsageError(
            "no cell of the sweep's matrix can run: "
            + "; ".join(r.error or "" for r in skipped[:3])
        )
    return SweepPlan(jobs, skipped, base.device)


# A run's options a sweep sets itself (the matrix, its names), or that no job of it can take
# (nproc_per_node): those the record does not give the sweep.
SET_BY_SWEEP = tuple(f.name for f in fields(RunOptions) if f not in for_command(SWEEP))


def skip_auto_twins(sweep: SweepPlan, chosen: list[str]) -> None:
    """Skip the ``auto`` cells whose tool ``chosen`` here (one per job, in order) is one the sweep
    also names for the same workload, precision and mode: the same run twice."""
    named = {
        (job.workload, job.precision, job.mode, job.tool)
        for job, _, _ in sweep.jobs
        if job.tool != "auto"
    }
    keep = []
    for (job, req, path), tool in zip(sweep.jobs, chosen):
        if job.tool == "auto" and (job.workload, job.precision, job.mode, tool) in named:
            sweep.skipped.append(
                JobResult(
                    job,
                    "skipped",
                    error=f"auto chooses {tool} here, which the sweep runs already for this cell",
                )
            )
            continue
        keep.append((job, req, path))
    sweep.jobs[:] = keep


# ---------------------------------------------------------------------------------- workers
@dataclass(frozen=True)
class JobRequest:
    """What a worker needs to run a job: the workload (a user's file by its resolved path: a
    worker elsewhere has another current folder; a built-in by its name), the job's options,
    and the sweep's scratch folder on this machine (None on a cluster's)."""

    workload: str
    options: RunOptions
    scratch: str | None = None


@dataclass(frozen=True)
class JobOutcome:
    """What a worker sends back: the job's status and error (typed: its ProfkitError's class
    name), its database and raw folder as one gzipped tar archive, where it ran and how long."""

    status: str  # ok or failed
    archive: bytes
    error: str | None = None
    error_type: str | None = None
    worker: str | None = None
    wall_s: float | None = None


def run_job(request: JobRequest) -> JobOutcome:
    """Run one job where this process is (a Dask worker, or here): the library's run
    (``profkit.sweep_job``) in a child process (which dies with this one: an interrupted sweep
    leaves no job running) into a temporary database and raw folder, returned as one archive
    with the outcome. Never raises for the job's own failure: that is the result."""
    started = time.perf_counter()
    if request.scratch:
        Path(request.scratch).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="profkit-sweep-", dir=request.scratch))
    try:
        job_file = folder / "job.json"
        JobFile(
            request.workload, request.options, str(folder / "job.db"), str(folder / OUTCOME)
        ).write(job_file)
        # The current folder (the worker's, the sweep's) is on the path of no process of the job:
        # `-P` for this one, PYTHONSAFEPATH (runner.child_env) for all it starts.
        argv = runner.python_argv("-m", "profkit.sweep_job", str(job_file))
        with runner.Background(argv, folder / "job.log") as child:  # it dies with this process
            # for a sweep that ends first to wait on
            (folder / JOB_PID).write_text(str(child.proc.pid))
            done = child.wait()
        status, error, kind = read_outcome(folder / OUTCOME, done.returncode, done.tail)
        for f in (job_file, folder / OUTCOME, folder / JOB_PID):
            f.unlink(missing_ok=True)
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w:gz") as tar:
            tar.add(folder, arcname="job")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return JobOutcome(
            status,
            archive.getvalue(),
            error,
            kind,
            socket.gethostname() + (f" GPU {visible}" if visible not in (None, "") else ""),
            round(time.perf_counter() - started, 3),
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _request(req: launch.RunRequest, path: Path, scratch: Path | None) -> JobRequest:
    workload = (
        str(path)
        if path.parent != (workloads.builtin_dir() or Path("/nonexistent"))
        else req.workload
    )
    return JobRequest(workload, req.options, str(scratch) if scratch else None)


# ----------------------------------------------------------------------------- the one writer
def store_result(store: Store, job: Job, outcome: JobOutcome) -> JobResult:
    """Put a job's outcome into the sweep's database: its run, with its raw folder moved beside
    the database (rows and ranges copied as they were classified), or a failed run with the
    error and the job's logs. Returns the job's result."""
    result = JobResult(
        job,
        outcome.status,
        error=outcome.error,
        error_type=outcome.error_type,
        worker=outcome.worker,
        wall_s=outcome.wall_s,
    )
    with tempfile.TemporaryDirectory(prefix="profkit-sweep-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(outcome.archive), mode="r:gz") as tar:
            tar.extractall(tmp, filter="data")
        folder = Path(tmp) / "job"
        job_db = folder / "job.db"
        source = Store(job_db, create=False) if job_db.exists() else None
        try:
            runs = source.runs() if source is not None else []
            done = next((r for r in runs if r.status == "ok"), None)
            old = source.run_folder(runs[0]) if source is not None and runs else folder / "no-run"
            if not old.is_dir():  # in this temporary folder
                old.mkdir()
            if (folder / "job.log").exists():  # the job's own output: its log, with the run's
                shutil.move(str(folder / "job.log"), old / "sweep-job.log")
            dest: Path | None = None
            if outcome.status == "ok" and done is not None and source is not None:
                copied, dest = _copy_run(store, source, done)
                result.run = copied.name
            else:
                result.status = "failed"
                copied = _failed_run(
                    store, job, runs[0] if runs else None, result.error or "failed"
                )
                result.run = copied.name
            try:  # into the run's folder, made for it (empty): nothing else is overwritten
                dest = dest or store.reserve_folder(copied)
                for entry in sorted(old.iterdir()):
                    shutil.move(str(entry), dest / entry.name)
            except (OSError, StoreError) as exc:
                store.set_raw_files(copied.id, {})
                where = dest or f"its folder beside {store.path}"
                raise StoreError(
                    f"run {copied.name} is stored, but its files could not be put in {where} ({exc})",
                    "Make that folder writable; the sweep stopped here.",
                ) from None
            if result.status == "failed" and dest is not None:  # its logs, for the failed run
                store.set_raw_files(
                    copied.id, {f.name: str(f) for f in sorted(dest.iterdir()) if f.is_file()}
                )
        finally:
            if source is not None:
                source.close()
    return result


def _copy_run(store: Store, source: Store, run: RunRecord) -> tuple[RunRecord, Path]:
    """A job's run copied into the sweep's database, and the raw folder made for it there."""
    from .parse.schema import Capture

    fields: RunFields = {
        k: v
        for k, v in run.to_dict().items()  # type: ignore[assignment]
        if k not in ("id", "name", "status", "kernel_count", "gpu_time_ns", "activity", "folder")
    }
    fields["info"] = run.info  # the record, not its JSON
    reserved = store.reserve(None, run.name, fields, status="importing")
    try:
        dest = store.reserve_folder(reserved)
        fields["raw_files"] = _moved(
            run.raw_files or {}, source.path, source.run_folder(run).name, dest
        )
        capture: Capture[Any] = Capture(
            rows=source.iter_kernels(run.id),
            tool=run.tool or "",
            source_format="profkit",
            metric_names=list(run.metrics),
            notes=list(run.info.notes or []),
            ranges=source.ranges(run.id),
            host_syncs=source.host_syncs(run.id),
        )
        return store.fill_run(reserved, capture, fields), dest
    except BaseException:
        store.delete_run(reserved.id)
        raise


def _moved(files: dict[str, str], job_db: Path, folder_name: str, dest: Path) -> dict[str, str]:
    """A job's kept-file paths (made in the worker's temporary folder, wherever that was, in
    its run's folder ``folder_name``) as they are once its raw folder is ``dest``."""
    marker = f"{job_db.stem}-runs{os.sep}{folder_name}{os.sep}"
    return {k: str(dest / v.split(marker, 1)[1]) if marker in v else v for k, v in files.items()}


def _failed_run(store: Store, job: Job, run: RunRecord | None, error: str) -> RunRecord:
    fields: RunFields = {
        "source": "run",
        "workload": job.workload,
        "precision": job.precision,
        "mode": job.mode,
        "tool": job.tool,
    }
    if run is not None:
        fields.update(
            {
                k: v
                for k, v in run.to_dict().items()  # type: ignore[typeddict-item]
                if k in ("batch_size", "iters", "device", "started_at", "command", "tool")
            }
        )
    base = (
        run.name if run is not None else "-".join([job.workload, job.precision, job.mode, job.tool])
    )
    reserved = store.reserve(None, base, fields, status="running")
    store.end_run(reserved.id, "failed", error)
    return store.get_run(reserved.id)


# ---------------------------------------------------------------------------------- engines
def _dask() -> Any | None:
    try:
        import distributed
    except ImportError:
        return None
    return distributed


def run(
    store: Store,
    sweep: SweepPlan,
    *,
    address: str | None = None,
    workers: int | None = None,
    security: Security | None = None,
    on_result: Callable[[JobResult, int, int], None] | None = None,
    on_note: Callable[[str], None] | None = None,
) -> SweepResult:
    """Run a checked sweep and store every job's outcome as it arrives. ``address``: a Dask
    scheduler to hand the jobs to (its workers must each see one GPU and offer the resource
    ``GPU=1``), reached with ``security`` (:func:`tls_security`); without it a local cluster with
    one worker per GPU (``workers`` for the CPU, default 2). Without Dask installed the jobs run
    one after another here. Jobs run here keep their temporary folders (and the local cluster its
    scratch) in a folder of this sweep's own beside the database, removed at the end whatever
    happens; one a killed sweep left is removed by the next sweep (:func:`remove_dead_scratch`)."""
    note = on_note or (lambda text: None)
    started = time.perf_counter()
    out = SweepResult(results=list(sweep.skipped))
    total = len(sweep.jobs)
    scratch, held = None, -1
    try:
        remove_dead_scratch(store.runs_base())
        # this sweep's own folder (a second sweep beside the same database has another)
        if not address:
            scratch, held = own_scratch(store.runs_base())
        dask = _dask()
        if dask is None:
            if address:
                raise UsageError(
                    "`address` hands the jobs to a Dask scheduler, and Dask is not installed",
                    f"Install it: {INSTALL_HINT}",
                )
            note(
                f"Dask is not installed: running the {total} jobs one after another ({INSTALL_HINT} runs them "
                "on every local GPU at once)"
            )
            out.engine = "in turn"
            for i, (job, req, path) in enumerate(sweep.jobs, start=1):
                res = store_result(store, job, run_job(_request(req, path, scratch)))
                out.results.append(res)
                if on_result:
                    on_result(res, i, total)
            return out
        with _client(dask, address, workers, sweep.device, scratch, security) as (
            client,
            engine,
            per_gpu,
        ):
            out.engine = engine
            futures = {
                client.submit(
                    run_job,
                    _request(req, path, scratch),
                    pure=False,
                    key=f"profkit-{i}-{job.label().replace(' ', '-').replace('/', '_')}",
                    resources={"GPU": 1} if per_gpu else None,
                ): job
                for i, (job, req, path) in enumerate(sweep.jobs)
            }
            try:
                for i, future in enumerate(dask.as_completed(list(futures)), start=1):
                    job = futures.pop(future)  # and the archive goes with the future, once stored
                    try:
                        outcome = future.result()
                    except Exception as exc:  # the worker died under the job
                        res = JobResult(
                            job,
                            "failed",
                            error=f"the worker running it failed: {type(exc).__name__}: {exc}",
                        )
                        res.run = _failed_run(store, job, None, res.error or "failed").name
                    else:
                        res = store_result(store, job, outcome)
                    future.release()
                    out.results.append(res)
                    if on_result:
                        on_result(res, i, total)
            finally:
                if futures:  # interrupted: the jobs still running stop with their workers
                    client.cancel(list(futures), force=True)
        return out
    finally:
        out.wall_s = time.perf_counter() - started
        if scratch is not None:
            _wait_for_jobs(scratch)
            shutil.rmtree(scratch, ignore_errors=True)
            os.close(held)  # its lock, once the folder is gone


JOB_PID = "job.pid"  # in a local job's folder: its job process (profkit.sweep_job)
JOB_END_S = (
    15  # how long an interrupted sweep waits for its jobs to stop their profilers (then kills them)
)
SCRATCH = ".sweep-"  # a sweep's own folder beside the database: <db stem>-runs/.sweep-XXXXXXXX/


def own_scratch(base: Path) -> tuple[Path, int]:
    """A folder of this sweep's own in ``base`` (``.sweep-*``, mode 0700, made now) and its lock:
    an open descriptor of the folder, locked (``flock``) until this process closes it or dies,
    which tells every other sweep that the folder is in use. A folder that another sweep's
    :func:`remove_dead_scratch` took in the instant between its making and its locking is not
    used: another is made."""
    for _ in range(100):
        try:
            path = Path(tempfile.mkdtemp(prefix=SCRATCH, dir=base))
        except OSError as exc:
            raise StoreError(
                f"cannot make the sweep's folder in {base}: {exc.strerror or exc}",
                "Check the folder's permissions and the free disk space.",
            ) from None
        held = _lock_scratch(path)
        if held is not None:
            return path, held
    raise StoreError(
        f"cannot lock a folder of the sweep's own in {base}",
        "Check what else removes folders there.",
    )


def _lock_scratch(path: Path) -> int | None:
    """``path``'s lock taken (an open descriptor of the folder), or None: it is not a folder of
    this user's (a link, a file, another user's), it is locked (its sweep is alive), or it was
    removed or replaced meanwhile (the descriptor's folder is no longer the one at ``path``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held, now = os.fstat(fd), os.lstat(path)
        if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino) and held.st_uid == os.geteuid():
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def remove_dead_scratch(base: Path) -> list[Path]:
    """Remove the folders that sweeps killed beside this database left in ``base`` (SIGKILL, the
    OOM killer: they could not remove them), and return them. Only a sweep's folder proven dead
    goes: a ``.sweep-*`` folder (not a link) of this user's whose lock this process can take (no
    live sweep holds it) and whose jobs are gone (a job of a killed sweep still stopping keeps it
    until the next sweep); never on a pid check alone."""
    removed: list[Path] = []
    try:
        entries = [e for e in os.scandir(base) if e.name.startswith(SCRATCH)]
    except OSError:
        return removed
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        path = Path(entry.path)
        held = _lock_scratch(path)
        if held is None:
            continue
        try:
            if not _job_pids(path, alive=True):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        finally:
            os.close(held)
    return removed


def _job_pids(scratch: Path, alive: bool = False) -> list[int]:
    """The job processes recorded in a sweep's folder (those still running, with ``alive``)."""
    pids = []
    for f in scratch.glob(f"*/{JOB_PID}"):
        try:
            pid = int(f.read_text())
        except (OSError, ValueError):
            continue
        if 0 < pid < 2**31:
            pids.append(pid)
    return [p for p in pids if runner.alive(p)] if alive else pids


def _wait_for_jobs(scratch: Path) -> None:
    """Wait until the jobs this machine ran have ended. An interrupted sweep closes its cluster,
    and each job, told by SIGTERM as its worker goes (its lifeline), stops its profiler and
    ends within seconds (SIGKILL for its profiler's group after runner.GRACE_S); one still
    there after JOB_END_S is killed. The sweep ends after them, so it leaves nothing running
    and never removes a folder a job still writes in."""
    pids = _job_pids(scratch)
    deadline = time.monotonic() + JOB_END_S
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if runner.alive(p)]
        if pids:
            time.sleep(0.1)
    # still there: each job leads its own process group (and its profiler dies with it)
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    while any(runner.alive(p) for p in pids):
        time.sleep(0.1)


# Dask's own log lines stay off the sweep's stderr up to ERROR: a job's failure comes back as the
# job's result and the sweep says it in one line, and a stop races the workers' heartbeats with the
# scheduler's close (an ERROR with a traceback from a worker that is about to die with the sweep).
QUIET = logging.CRITICAL


def dask_setup(server: Any) -> None:
    """Dask's preload hook, run in the local cluster's scheduler (in this process) and in each
    worker process once it has started. No HTTP server: Dask starts one on every scheduler and
    worker whatever ``dashboard`` says (health and metrics routes; the routes are emptied in
    :class:`_client`), and nothing of a sweep is served over HTTP. In a worker: a terminal's
    Ctrl-C goes to every process of its group, the workers included, and the sweep process
    stops the cluster (and its jobs) itself, so the worker drops SIGINT (a handler that does
    nothing, not SIG_IGN: its jobs must start with the default); and the worker dies with the
    sweep, however the sweep ends (its lifeline); and it keeps Dask's log lines to itself (QUIET)."""
    import signal
    import threading

    http = getattr(server, "http_server", None)
    if http is not None:
        http.stop()
    if type(server).__name__ == "Scheduler":
        return
    logging.getLogger("distributed").setLevel(QUIET)  # see QUIET
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _drop)
    runner.watch_lifeline(lambda: os.kill(os.getpid(), signal.SIGKILL))


def _drop(signum: int, frame: object) -> None:
    """SIGINT in a local worker: the sweep stops the cluster (see :func:`dask_setup`)."""


CONNECT_S = 10  # how long a scheduler has to answer
TLS_CONFIG = "distributed.comm.tls"  # Dask's own settings of a client's TLS files (ca-file, client.cert, client.key)
TLS_FILE_MAX = 1 << 20  # a PEM file of a CA bundle, a certificate or a key is far smaller


def tls_security(
    address: str | None,
    tls_ca_file: str | os.PathLike[str] | None = None,
    tls_cert: str | os.PathLike[str] | None = None,
    tls_key: str | os.PathLike[str] | None = None,
) -> Security | None:
    """What reaches the scheduler at a ``tls://`` ``address``: the CA file, certificate and key
    given (the files of ``dask worker``'s ``--tls-ca-file``, ``--tls-cert`` and ``--tls-key``),
    each one not given read from Dask's own configuration (``distributed.comm.tls.ca-file``,
    ``.client.cert``, ``.client.key``: ~/.config/dask, DASK_* variables), as every Dask client
    reads them. Checked now, before anything runs: a TLS address with no CA or certificate, a
    file that cannot be read or is not PEM, a certificate without its key, or TLS files with an
    address that is not TLS, is one line. None where Dask's defaults apply (a plain address, or
    a TLS one with Dask's ``distributed.client.security-loader`` and no files given)."""
    given = {
        k: os.fspath(v)
        for k, v in (("tls_ca_file", tls_ca_file), ("tls_cert", tls_cert), ("tls_key", tls_key))
        if v is not None
    }
    tls = bool(address) and str(address).startswith("tls://")
    if given and not tls:
        first = next(iter(given))
        raise UsageError(
            f"`{first}` is for a scheduler `address` tls://...; "
            + (
                f"`address` is {address}"
                if address
                else "the local cluster makes its own certificates"
            ),
            "Give a tls:// `address`, or leave out the TLS files.",
        )
    if not tls:
        return None
    from dask import config as dask_config
    from distributed.security import Security

    if not given and dask_config.get("distributed.client.security-loader", None):
        return None  # Dask's own loader gives the client its settings
    # (distributed leaves Security unannotated: Any here)
    dask_names = {
        "tls_ca_file": "tls_ca_file",
        "tls_cert": "tls_client_cert",
        "tls_key": "tls_client_key",
    }
    # the others: Dask's config
    security: Any = cast(Any, Security)(**{dask_names[k]: v for k, v in given.items()})
    config_keys = {
        "tls_ca_file": f"{TLS_CONFIG}.ca-file",
        "tls_cert": f"{TLS_CONFIG}.client.cert",
        "tls_key": f"{TLS_CONFIG}.client.key",
    }
    hint = (
        f"Give `tls_ca_file`, `tls_cert` and `tls_key` (the cluster's CA, and a certificate and key it signed, "
        f"as dask worker takes them), or set Dask's {', '.join(config_keys.values())}."
    )
    values: dict[str, str | None] = {
        "tls_ca_file": security.tls_ca_file,
        "tls_cert": security.tls_client_cert,
        "tls_key": security.tls_client_key,
    }
    if not values["tls_ca_file"] or not values["tls_cert"]:
        raise UsageError(
            f"`address` {address} is a TLS scheduler, and no CA file or certificate was given", hint
        )
    hint = "Give the cluster's CA, and a certificate and key it signed, as PEM files."

    def named(what: str) -> str:
        return (
            f"`{what}` {values[what]}"
            if what in given
            else f"{values[what]} (Dask's {config_keys[what]})"
        )

    # Each file read here first, so that a missing, unreadable or wrong one is named (the ssl
    # module's own errors name no file); Dask's configuration may hold the PEM text itself.
    texts = {
        what: value if "\n" in value else _pem_file(value, named(what), hint)
        for what, value in values.items()
        if value is not None
    }
    if "-----BEGIN CERTIFICATE-----" not in texts["tls_ca_file"]:
        raise UsageError(f"the TLS CA file {named('tls_ca_file')} holds no PEM certificate", hint)
    if "-----BEGIN CERTIFICATE-----" not in texts["tls_cert"]:
        raise UsageError(f"the TLS certificate {named('tls_cert')} is not a PEM certificate", hint)
    if values["tls_key"] is None and "PRIVATE KEY-----" not in texts["tls_cert"]:
        raise UsageError(
            f"the TLS certificate {named('tls_cert')} holds no private key, and no `tls_key` was given",
            hint,
        )
    if values["tls_key"] is not None and "PRIVATE KEY-----" not in texts["tls_key"]:
        raise UsageError(f"the TLS key {named('tls_key')} is not a PEM private key", hint)
    try:
        security.get_connection_args("client")  # the files read as Dask reads them
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        if "KEY_VALUES_MISMATCH" in str(exc):
            raise UsageError(
                f"the TLS key {named('tls_key' if values['tls_key'] else 'tls_cert')} is not the key of "
                f"the certificate {named('tls_cert')}",
                hint,
            ) from None
        raise UsageError(f"the TLS files do not make a client's settings ({exc})", hint) from None
    return cast(Security, security)


def _pem_file(path: str, named: str, hint: str) -> str:
    """The text of the PEM file at ``path``: a regular file (never a pipe or a device, which
    could block or never end) that can be read, of at most TLS_FILE_MAX bytes; else one line
    naming it (``named``)."""
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise UsageError(f"the TLS file {named} is not a file", hint)
            data = f.read(TLS_FILE_MAX + 1)
    except OSError as exc:
        raise UsageError(f"cannot read the TLS file {named}: {exc.strerror or exc}", hint) from None
    if len(data) > TLS_FILE_MAX:
        raise UsageError(
            f"the TLS file {named} is larger than a PEM file ({TLS_FILE_MAX >> 20} MiB)", hint
        )
    return data.decode("ascii", errors="replace")


def _connect(dask: Any, address: str, security: Security | None = None) -> Any:
    """A client of the Dask scheduler at ``address``, or one line saying it did not answer. The
    connection is made on a thread of its own and waited for: a service at that address that
    takes the connection but never speaks Dask's protocol would hold Dask's handshake (and its
    own timeout) forever."""
    import threading

    box: dict[str, Any] = {}

    def connect() -> None:
        try:
            box["client"] = dask.Client(address, timeout=f"{CONNECT_S}s", security=security)
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc

    thread = threading.Thread(target=connect, name="profkit-dask-connect", daemon=True)
    thread.start()
    thread.join(CONNECT_S + 5)
    hint = "Check the address, or leave out `address` to use this machine's GPUs."
    if address.startswith("tls://"):
        hint = "Check the address, and that the scheduler trusts the CA that signed the certificate given."
    if thread.is_alive():
        raise UsageError(
            f"nothing at {address} answered as a Dask scheduler within {CONNECT_S + 5} s", hint
        )
    error = box.get("error")
    if isinstance(error, (OSError, ValueError, TypeError)):
        raise UsageError(f"no Dask scheduler answered at {address} ({error})", hint)
    if error is not None:
        raise error
    return box["client"]


class _client:
    """A Dask client: to ``address`` (with ``security``), or to a local cluster of one
    single-threaded worker process per GPU (each seeing only its own), or ``workers`` of them
    for the CPU, its scratch in a folder of its own made in ``scratch`` (the sweep's folder;
    None: the temporary folder)."""

    def __init__(
        self,
        dask: Any,
        address: str | None,
        workers: int | None,
        device: str,
        scratch: Path | None = None,
        security: Security | None = None,
    ):
        self.dask, self.address, self.workers, self.device = dask, address, workers, device
        self.scratch, self.security = scratch, security
        self.cluster: Any = None
        self.client: Any = None
        self._config: Any = None
        self._local: Path | None = None
        self._safe_path: str | None = None

    def __enter__(self) -> tuple[Any, str, bool]:
        dask = self.dask
        if self.address:
            self.client = _connect(dask, self.address, self.security)
            per_gpu = self.device == "cuda"
            workers = self.client.scheduler_info().get("workers", {}).values()
            if per_gpu and not any((w.get("resources") or {}).get("GPU") for w in workers):
                self.client.close()
                raise UsageError(
                    f"no worker of the Dask scheduler at {self.address} offers the resource GPU, so "
                    "no job could start",
                    "Start one dask worker per GPU there, with its GPU visible and: --nthreads 1 --resources GPU=1.",
                )
            return self.client, f"dask ({self.address})", per_gpu
        gpus = gpu.count() if self.device == "cuda" else 0
        if self.device == "cuda" and not gpus:
            raise UsageError(
                "`device` cuda, but this machine shows no GPU (nvidia-smi -L)",
                "Use `device` cpu, or give a scheduler `address`.",
            )
        count = self.workers or (gpus if gpus else 2)
        if gpus and count > gpus:
            raise UsageError(
                f"`workers` {count}, but this machine has {gpus} GPUs: one worker per GPU"
            )
        # A local cluster runs any code it is sent, so only this process may send it: mutual
        # TLS with a key made now and held in memory only (another user of this machine can
        # reach 127.0.0.1, but has no certificate the scheduler accepts), bound to this host,
        # and no HTTP server (dask_setup).
        security = self._security()
        from dask import config as dask_config

        # Dask puts a server's scratch folder first on its path (the scheduler's in this process,
        # the nannies' here too, each worker's in its own) and, given none, uses
        # <tmp>/dask-scratch-space, or dask-scratch-space-<uid>, wherever it can write: a folder
        # another user of the machine may have made, with Python in it. The cluster's scratch
        # is a folder of its own (mode 0700, made now), for every server and for what reads
        # Dask's temporary-directory. Its workers start (Dask runs `python -c ...`) with the
        # current folder off their path: PYTHONSAFEPATH, which Dask sets in this process's
        # environment before it starts each worker (given back in __exit__).
        try:
            self._local = Path(tempfile.mkdtemp(prefix="dask-scratch-space-", dir=self.scratch))
        except OSError as exc:
            raise StoreError(
                f"cannot make the local cluster's scratch folder: {exc.strerror or exc}",
                "Check the free disk space.",
            ) from None
        self._safe_path = os.environ.get("PYTHONSAFEPATH")
        os.environ.update(SAFE_PATH)
        self._config = dask_config.set(
            {
                "distributed.scheduler.http.routes": [],
                "distributed.worker.http.routes": [],
                "temporary-directory": str(self._local),
                **{f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in SAFE_PATH.items()},
            }
        )
        self._config.__enter__()
        common: dict[str, Any] = {
            "host": "127.0.0.1",
            "protocol": "tls://",
            "security": security,
            "dashboard": False,
            "preload": [__name__],  # dask_setup above
            "local_directory": str(self._local),
        }
        specs = {}
        for i in range(count):
            # The Nanny's worker process (Dask starts it): multicast off, and the sweep's lifeline.
            env = {**runner.NO_MULTICAST, runner.LIFELINE: runner.lifeline()[1]}
            options: dict[str, Any] = {**common, "nthreads": 1, "env": env, "silence_logs": QUIET}
            if gpus:
                env["CUDA_VISIBLE_DEVICES"] = str(i)
                options["resources"] = {"GPU": 1}
            specs[f"worker-{i}"] = {"cls": dask.Nanny, "options": options}
        try:
            self.cluster = dask.SpecCluster(
                workers=specs,
                scheduler={"cls": dask.Scheduler, "options": {**common, "dashboard_address": None}},
                silence_logs=QUIET,
                security=security,
            )
            self.client = dask.Client(self.cluster, security=security)
        except BaseException:  # no `with` block runs to undo the config set above: undone here
            self.__exit__(None, None, None)
            raise
        what = f"{count} GPUs" if gpus else f"{count} CPU workers"
        return self.client, f"dask (local, {what})", bool(gpus)

    @staticmethod
    def _security() -> Security:
        from distributed.security import Security

        # distributed leaves Security.temporary unannotated.
        temporary = cast(Callable[[], Security], Security.temporary)
        try:
            return temporary()
        except ImportError:
            raise UsageError(
                "a local sweep secures its Dask cluster with TLS, and the cryptography package is "
                "not installed",
                f"Install it: {INSTALL_HINT}",
            ) from None

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.client is not None:
                self.client.close()
            if self.cluster is not None:
                self.cluster.close()
        finally:
            if self._config is not None:
                self._config.__exit__(None, None, None)
            if self._local is not None:  # its folders off this process's path, and gone
                local = str(self._local)
                sys.path[:] = [
                    p for p in sys.path if p != local and not p.startswith(local + os.sep)
                ]
                shutil.rmtree(local, ignore_errors=True)
                if self._safe_path is None:
                    os.environ.pop("PYTHONSAFEPATH", None)
                else:
                    os.environ["PYTHONSAFEPATH"] = self._safe_path


def iter_rows(result: SweepResult) -> Iterator[dict[str, Any]]:
    yield from (r.to_dict() for r in result.results)
