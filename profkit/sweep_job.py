"""One job of a sweep, in a process of its own: ``python -P -m profkit.sweep_job JOB.json``.

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
from .processes import how_it_ended

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
        return cls(
            data["workload"], RunOptions.from_json(data["options"]), data["db"], data["outcome"]
        )


def read_outcome(
    path: Path, returncode: int, tail: list[str]
) -> tuple[str, str | None, str | None]:
    """(status, error, error type) of a job whose process ended with ``returncode``: what it
    wrote, else (killed before it could) how it ended, with its last line of output unless
    that is one of its own progress lines."""
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        last = next((line.strip() for line in reversed(tail) if line.strip()), "")
        said = f": {last[:300]}" if last and not last.startswith("profkit: ") else ""
        return (
            "failed",
            f"the job's process {how_it_ended(returncode)} before it said how its run ended{said}",
            None,
        )
    if data.get("status") == "ok":
        return "ok", None, None
    exc = error_from_json(data.get("error") or {})
    return "failed", exc.one_line(), type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m profkit.sweep_job JOB.json", file=sys.stderr)
        return 2
    from .processes import parent_gone, stop_on_signals, stopped_by
    from .tools.runner import LIFELINE, watch_lifeline

    stop_on_signals()
    if LIFELINE in os.environ:  # it dies with the sweep's worker that started it
        watch_lifeline(parent_gone)
    try:
        job = JobFile.read(argv[0])
    except (OSError, ValueError, KeyError, TypeError, ProfkitError) as exc:
        print(
            f"profkit: error: {argv[0]} is not a sweep job's file ({type(exc).__name__}: {exc})",
            file=sys.stderr,
        )
        return 2
    try:
        _run(job)
    except ProfkitError as exc:
        _outcome(job, exc.to_json())
        return exc.exit_code
    except KeyboardInterrupt as exc:  # the sweep stopped (its lifeline, SIGTERM) or Ctrl-C
        what, code = stopped_by(exc)
        _outcome(job, {"type": "ProfkitError", "message": what})
        return code
    except BaseException as exc:  # a bug: said in the outcome, its traceback in the job's log
        _outcome(job, {"type": "ProfkitError", "message": f"{type(exc).__name__}: {exc}"})
        raise
    _outcome(job, None)
    return 0


def _outcome(job: JobFile, error: dict[str, Any] | None) -> None:
    """The job's outcome, for :func:`read_outcome`: ok, or failed with its error."""
    write_new(
        job.outcome,
        json.dumps({"status": "ok"} if error is None else {"status": "failed", "error": error}),
        replace=True,
    )


def _run(job: JobFile) -> None:
    from .launch import Progress, RunRequest, plan, run
    from .store import Store

    checked = plan(RunRequest(job.workload, job.options))
    store = Store(job.db, create=True)
    try:
        run(
            store,
            checked,
            Progress(
                on_stage=lambda text: print(f"profkit: {text}", flush=True),
                on_note=lambda text: print(f"profkit: {text}", flush=True),
            ),
        )
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main())
