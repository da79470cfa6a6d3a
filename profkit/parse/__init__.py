"""Importers: one module per export format, each producing the canonical kernel table
(``profkit.parse.schema``). ``load(path)`` picks the importer from the file itself."""

from __future__ import annotations

from pathlib import Path

from ..errors import BadExport
from .schema import Capture

__all__ = ["Capture", "detect", "load"]

def detect(path: Path) -> str:
    """Which importer reads ``path``, by its suffix; each importer then checks the content."""
    if not path.exists():
        raise BadExport(f"no such file: {path}")
    if path.is_dir():
        raise BadExport(f"{path} is a folder, not a profiler export")
    name = path.name.lower()
    if name.endswith(".ncu-rep"):
        return "ncu-rep"
    if name.endswith((".csv", ".csv.gz")):
        return "ncu-csv"
    if name.endswith((".json", ".json.gz")):
        return "kineto"
    raise BadExport(
        f"don't know how to import {path.name}",
        "profkit imports .ncu-rep reports, ncu raw-page CSV exports (.csv, .csv.gz) and "
        "torch.profiler traces (.json, .json.gz).",
    )


def load(path: str | Path) -> Capture:
    path = Path(path)
    kind = detect(path)
    if kind == "ncu-rep":
        from .ncu_rep import read_ncu_rep

        return read_ncu_rep(path)
    if kind == "kineto":
        from .kineto import read_kineto

        return read_kineto(path)
    from .ncu_csv import read_ncu_csv

    return read_ncu_csv(path)
