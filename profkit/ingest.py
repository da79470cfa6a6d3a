"""Exports into the database: read a capture with the right importer, classify every launch,
and store it as a run. Used by ``profkit import`` and at the end of ``profkit run``."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import __version__
from .classify import classify, classify_row
from .parse import load
from .parse.schema import Capture, validate
from .store import Store, raw_dir


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def profkit_tag(capture: Capture) -> dict[str, str]:
    """workload / precision / mode from profkit's own NVTX range names, where present."""
    if capture.ranges:
        paths = [r["path"] for r in capture.ranges]
    elif capture.kernels is not None:
        paths = list(capture.kernels["nvtx_path"].dropna().head(1))
    else:
        paths = []
    for path in paths:
        m = re.search(r"(?:^|/)(?:profkit@)?([^/@]+)\.iter\d+$", path)
        if m:
            parts = m.group(1).split(".")
            if len(parts) == 3:
                return dict(zip(("workload", "precision", "mode"), parts))
    return {}


def _classified(rows):
    for r in rows:
        v = classify_row(r["kind"], r["name"], r["metrics"], r.get("input_types"))
        r.update(precision=v.precision, tensor_core=v.tensor_core, family=v.family, evidence=v.evidence,
                 evidence_detail=v.evidence_detail)
        yield r


def store_capture(store: Store, capture: Capture, run: dict[str, Any]) -> dict[str, Any]:
    if capture.kernels is None:
        kernels = _classified(capture.rows())
        ranges = lambda: capture.ranges  # noqa: E731  (complete once the rows are read)
    else:
        kernels = classify(capture.kernels)
        validate(kernels, classified=True)
        ranges = capture.ranges
    row = {
        "tool": capture.tool,
        "tool_version": capture.tool_version,
        "gpu_name": capture.gpu_name,
        "compute_capability": capture.compute_capability,
        "finished_at": now(),
        **{k: v for k, v in run.items() if v is not None},
    }
    info = dict(row.get("info") or {})
    if capture.metric_units:
        info["metric_units"] = capture.metric_units
    info["notes"] = capture.notes  # the same list: a streamed capture adds to it while read
    info["profkit_version"] = __version__
    row["info"] = info
    if capture.activity == "cpu_op":
        row.setdefault("device", "cpu")
    return store.add_run(row, kernels, ranges, late=lambda: {"info": info})


def import_file(store: Store, path: str | Path, name: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """Import one export as a new run. Returns (run row, notes for the user)."""
    path = Path(path).expanduser()
    if name is not None:
        store.check_name_free(name)
    base = path.name
    for suffix in (".gz", ".csv", ".json", ".sqlite", ".nsys-rep", ".qdstrm", ".ncu-rep", ".raw"):
        base = base[: -len(suffix)] if base.endswith(suffix) else base
    name = name or store.unique_name(base)
    capture = load(path, workdir=raw_dir(store.path, name))
    digest = sha256(path)
    notes = []
    earlier = [r["name"] for r in store.db.query("select name from runs where source_sha256 = ?", [digest])]
    if earlier:
        notes.append(f"the same file was imported before as {', '.join(earlier)}; this is a new run")
    tag = profkit_tag(capture)
    run = {
        "name": name,
        "source": "import",
        "started_at": now(),
        "raw_files": {capture.source_format: str(path.resolve())},
        "source_sha256": digest,
        "metrics": sorted({m for ms in capture.kernels["metrics"] for m in ms}) if capture.kernels is not None else [],
        "info": {"imported_from": str(path.resolve())},
        **tag,
    }
    return store_capture(store, capture, run), notes
