"""Captures into the database: read an export with the right importer, classify every launch
as it streams past, and store it as a run. Used by ``Database.import_file`` (``profkit
import``) and at the end of a profiled run."""

from __future__ import annotations

import hashlib
import re
import shutil
import warnings
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import nvtx_ranges
from .classify import classified
from .errors import EmptyCapture, ProfkitWarning, UsageError
from .options import check_run_name
from .parse import detect, load
from .parse.formats import run_name
from .parse.schema import Capture, KernelRow
from .processes import stage, stoppable
from .records import RunInfo, RunRecord
from .store import Store
from .store.database import RunFields
from .version import __version__


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def profkit_tag(capture: Capture[KernelRow]) -> dict[str, str]:
    """workload / precision / mode from profkit's own NVTX range names, where present."""
    for path in capture.range_paths:
        if ".iter" not in path:  # most of a capture's ranges, and the search is slow on a long path
            continue
        m = re.search(r"(?:^|/)(?:profkit@)?([^/@]+)\.iter\d+$", path)
        if m:
            parts = m.group(1).split(".")
            if len(parts) == 3:
                return dict(zip(("workload", "precision", "mode"), parts))
    return {}


def store_capture(
    store: Store, capture: Capture[KernelRow], fields: RunFields, reserved: RunRecord
) -> RunRecord:
    """Classify a capture's rows as they are read and write them into the ``reserved`` run,
    with ``fields`` and what the capture says of itself."""
    row: RunFields = {
        "tool": capture.tool,
        "tool_version": capture.tool_version,
        "gpu_name": capture.gpu_name,
        "compute_capability": capture.compute_capability,
        "metrics": capture.metric_names,
        "finished_at": now(),
    }
    row.update({k: v for k, v in fields.items() if v is not None})  # type: ignore[typeddict-item]
    info: dict[str, Any] = {**reserved.info.to_dict(), **(row.get("info") or {})}
    if capture.metric_units:
        info["metric_units"] = capture.metric_units
    info["profkit_version"] = __version__
    row["info"] = RunInfo.from_dict(info)  # the keys in the order merged: the run's first
    with stoppable():  # a stop signal cuts a long statement of the import short
        return store.fill_run(reserved, classified(capture), row)


def import_file(
    store: Store, path: str | Path, name: str | None = None, step_ranges: Sequence[str] = ()
) -> RunRecord:
    """Import one export as a new run. The run's name is reserved first (so that concurrent
    imports never collide); if the import fails or is interrupted nothing of it stays. A file
    imported before makes a new run all the same, with a ProfkitWarning saying so; but under
    the ``name`` of the run it was imported as (the same bytes, the same ``step_ranges``) it
    gives that run back as it is, so that importing is a step one can run again. Ctrl-C or
    a stop signal ends it within moments, even inside a long SQLite statement
    (``processes.stoppable``), with nothing of it stored."""
    _check_step_ranges(step_ranges)
    with stoppable(), nvtx_ranges.step_ranges(step_ranges):  # ranges of these names are steps
        return _import_file(store, Path(path).expanduser(), name, list(step_ranges))


def _check_step_ranges(step_ranges: Sequence[str]) -> None:
    for step in step_ranges:
        if not isinstance(step, str) or not step.strip():
            raise UsageError(f"`step_range` names a range, not {step!r}")


def import_ranks(
    store: Store,
    paths: Sequence[str | Path],
    name: str | None = None,
    step_ranges: Sequence[str] = (),
) -> RunRecord:
    """Import one torch.profiler trace per rank of a distributed job (each rank profiled on its
    own: ``profkit run`` inside torchrun or srun), in rank order, as one run with a rank on every
    row, as ``profkit run --nproc-per-node`` stores one."""
    _check_step_ranges(step_ranges)
    with stoppable(), nvtx_ranges.step_ranges(step_ranges):
        return _import_ranks(store, [Path(p).expanduser() for p in paths], name)


def _import_ranks(store: Store, paths: list[Path], name: str | None) -> RunRecord:
    from .parse.ranks import merge_ranks

    found = [detect(p) for p in paths]  # each refused before anything is written
    other = next(((p, f) for p, f in zip(paths, found) if f.format.name != "kineto"), None)
    if other is not None:
        raise UsageError(
            f"ranks are merged at import from torch.profiler traces, one a rank; {other[0].name} is "
            f"{other[1].format.what}",
            "An nsys capture of several ranks (nsys around torchrun) is one file: import it alone.",
        )
    if len({p.resolve() for p in paths}) < len(paths):
        raise UsageError("the same trace is given twice: one trace a rank")
    if name is not None:
        check_run_name(name)
    digest = hashlib.sha256("".join(sha256(p) for p in paths).encode()).hexdigest()
    fields: RunFields = {
        "source": "import",
        "started_at": now(),
        "source_sha256": digest,
        "info": RunInfo(imported_from=str(paths[0].resolve()), world_size=len(paths)),
    }
    run = store.reserve(
        name, f"{run_name(paths[0].name)}-{len(paths)}ranks", fields, status="importing"
    )
    return _stored(
        store,
        run,
        None,
        lambda workdir: merge_ranks({r: load(p, workdir=workdir) for r, p in enumerate(paths)}),
        lambda c: {f"{c.source_format}-rank{r}": str(p.resolve()) for r, p in enumerate(paths)},
        f"{paths[0].name} and the other ranks",
    )


def _stored(
    store: Store,
    run: RunRecord,
    capture: Capture[KernelRow] | None,
    read: Callable[[Path], Capture[KernelRow]],
    raw_files: Callable[[Capture[KernelRow]], dict[str, str]],
    what: str,
) -> RunRecord:
    """An import's capture stored as its reserved ``run``: read into a folder made for this run
    alone where it is not read yet (decompressed, exported, merged). If anything fails or is
    interrupted, nothing of it stays; an empty capture is named by ``what`` (the store's own
    words know no file)."""
    workdir = None
    try:
        if capture is None:
            workdir = store.reserve_folder(run)
            capture = read(workdir)
        more: RunFields = {"raw_files": raw_files(capture), **profkit_tag(capture)}  # type: ignore[typeddict-item]
        done = store_capture(store, capture, more, reserved=run)
        stage("run stored")
    except BaseException as exc:
        store.delete_run(run.id)
        if workdir is not None:  # made by this import, above
            shutil.rmtree(workdir, ignore_errors=True)
        if isinstance(exc, EmptyCapture):
            raise EmptyCapture(f"{what}: {exc.message}", exc.hint) from None
        raise
    return done


def _imported_already(
    store: Store, name: str | None, digest: str, steps: list[str]
) -> RunRecord | None:
    """The complete run named ``name`` if it was imported from a file of this SHA-256 with the
    same step ranges: importing it again under its name gives it back as it is (a notebook cell
    run twice), where any other file, or the same one split into other steps, is refused as the
    name is taken (RunExists)."""
    if name is None or store.name_status(name) != "ok":
        return None
    run = store.get_run(name)
    if run.source != "import" or run.source_sha256 != digest:
        return None
    return run if sorted(run.info.step_ranges or []) == sorted(set(steps)) else None


def _import_file(store: Store, path: Path, name: str | None, steps: list[str]) -> RunRecord:
    found = detect(path)  # a missing, odd or unknown file is refused before anything is written
    if name is not None:
        check_run_name(name)
    base = run_name(path.name)
    digest = sha256(path)
    stage("sha256")
    if (same := _imported_already(store, name, digest, steps)) is not None:
        return same
    # Exports read in place are read (and refused, if bad) before the run is reserved, so that a
    # bad file never makes a database; those first decompressed or converted need the run's folder.
    capture = load(path) if found.in_place else None
    fields: RunFields = {
        "source": "import",
        "started_at": now(),
        "source_sha256": digest,
        "info": RunInfo(imported_from=str(path.resolve()), step_ranges=sorted(set(steps)) or None),
    }
    earlier = store.runs_of_file(digest)
    run = store.reserve(name, base, fields, status="importing")
    done = _stored(
        store,
        run,
        capture,
        lambda workdir: load(path, workdir=workdir),
        lambda c: {c.source_format: str(path.resolve())},
        path.name,
    )
    if earlier:
        # at the caller of Database.import_file
        warnings.warn(
            f"the same file was imported before as {', '.join(earlier)}; this is a new run",
            ProfkitWarning,
            stacklevel=4,
        )
    return done
