"""Exports into the database: read a capture with the right importer, classify every launch,
and store it as a run. Used by ``profkit import`` and at the end of ``profkit run``."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import __version__
from .classify import classify
from .parse import load
from .parse.schema import Capture, validate
from .store import Store


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def profkit_tag(kernels) -> dict[str, str]:
    """workload / precision / mode from profkit's own NVTX range names, where present."""
    paths = kernels["nvtx_path"].dropna()
    for path in paths.head(1):
        m = re.search(r"(?:^|/)(?:profkit@)?([^/@]+)\.iter\d+$", path)
        if m:
            parts = m.group(1).split(".")
            if len(parts) == 3:
                return dict(zip(("workload", "precision", "mode"), parts))
    return {}


def store_capture(store: Store, capture: Capture, run: dict[str, Any]) -> dict[str, Any]:
    kernels = classify(capture.kernels)
    validate(kernels, classified=True)
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
    if capture.notes:
        info["notes"] = capture.notes
    info["profkit_version"] = __version__
    row["info"] = info
    if capture.activity == "cpu_op":
        row.setdefault("device", "cpu")
    return store.add_run(row, kernels, capture.ranges)


def import_file(store: Store, path: str | Path, name: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """Import one export as a new run. Returns (run row, notes for the user)."""
    path = Path(path).expanduser()
    if name is not None:
        store.check_name_free(name)
    capture = load(path)
    digest = sha256(path)
    notes = []
    earlier = [r["name"] for r in store.db.query("select name from runs where source_sha256 = ?", [digest])]
    if earlier:
        notes.append(f"the same file was imported before as {', '.join(earlier)}; this is a new run")
    base = path.name
    for suffix in (".gz", ".csv", ".json", ".ncu-rep", ".raw"):
        base = base[: -len(suffix)] if base.endswith(suffix) else base
    tag = profkit_tag(capture.kernels)
    run = {
        "name": name or store.unique_name(base),
        "source": "import",
        "started_at": now(),
        "raw_files": {capture.source_format: str(path.resolve())},
        "source_sha256": digest,
        "metrics": sorted({m for ms in capture.kernels["metrics"] for m in ms}),
        "info": {"imported_from": str(path.resolve())},
        **tag,
    }
    return store_capture(store, capture, run), notes
