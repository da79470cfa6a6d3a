"""One job of a sweep, in a process of its own: ``python -m profkit.sweep_job JOB.json``.

A sweep's worker (``profkit.cluster.run_job``) writes the job file (the workload, its
:class:`~profkit.options.RunOptions`, the job's own database and where to write the outcome)
and starts this process, which calls the library (``launch.run``) and writes the outcome as
JSON: ``{"status": "ok"}``, or ``failed`` with the error's class, message and hint, read back
by :func:`read_outcome` as typed as it was raised. A process of its own, because a run starts
and stops profilers and its workload's process group, and a job must end (with its profiler)
when the sweep ends, however the sweep ends: this process holds the sweep's lifeline.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import ProfkitError, error_from_json
from .files import write_new
from .options import RunOptions

OUTCOME = "outcome.json"  # in the job's folder


@dataclass(frozen=True)
class JobFile:
    """What the job process is given: the workload, its options, the job's own database and
    where to write the outcome. Written by :meth:`write`, read by :meth:`read`: its one home."""

    workload: str
    options: RunOptions
    db: str
    outcome: str

    def write(self, path: Path) -> None:
        write_new(path, json.dumps({**asdict(self), "options": self.options.to_json()}, indent=2))

    @classmethod
    def read(cls, path: str | Path) -> JobFile:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(data["workload"], RunOptions.from_json(data["options"]), data["db"], data["outcome"])


def write_job(path: Path, workload: str, options: RunOptions, db: Path, outcome: Path) -> None:
    JobFile(workload, options, str(db), str(outcome)).write(path)


def read_outcome(path: Path, returncode: int, tail: list[str]) -> tuple[str, str | None, str | None]:
    """(status, error, error type) of a job whose process ended with ``returncode``: what it
    wrote, else (killed before it could) how it ended and its last line of output."""
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        last = next((line.strip() for line in reversed(tail) if line.strip()), "")
        return "failed", f"the job's process exited {returncode} without an outcome" + (f": {last}" if last else ""), None
    if data.get("status") == "ok":
        return "ok", None, None
    exc = error_from_json(data.get("error") or {})
    return "failed", exc.one_line(), type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m profkit.sweep_job JOB.json", file=sys.stderr)
        return 2
    from .processes import Terminated, parent_gone, stop_on_signals
    from .tools.runner import LIFELINE, watch_lifeline

    stop_on_signals()
    if LIFELINE in os.environ:  # it dies with the sweep's worker that started it
        watch_lifeline(parent_gone)
    job = JobFile.read(argv[0])
    outcome: dict[str, Any] = {"status": "ok"}
    code = 0
    try:
        _run(job)
    except ProfkitError as exc:
        outcome, code = {"status": "failed", "error": exc.to_json()}, exc.exit_code
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Terminated) else 2
        outcome, code = {"status": "failed", "error": {"type": "ProfkitError", "message": "interrupted"}}, 128 + signum
    write_new(job.outcome, json.dumps(outcome), replace=True)
    return code


def _run(job: JobFile) -> None:
    from .launch import Progress, RunRequest, plan, run
    from .store import Store

    checked = plan(RunRequest(job.workload, job.options))
    store = Store(job.db, create=True)
    try:
        run(store, checked, Progress(on_stage=lambda text: print(f"profkit: {text}", flush=True),
                                     on_note=lambda text: print(f"profkit: {text}", flush=True)))
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main())
