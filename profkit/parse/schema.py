"""The one kernel table every importer produces and every analysis reads.

One row per GPU activity (for now: one kernel launch), in launch order. Columns:

==================  ========  ==========================================================
column              dtype     meaning
==================  ========  ==========================================================
launch_id           int64     0-based position in the capture's launch order
kind                string    ``kernel`` (``memcpy``/``memset`` where a timeline has them)
name                string    the kernel's name as the tool reported it (demangled)
short_name          string    the function's own name: no namespace, template or params;
                              the same across tools, so runs imported different ways match
duration_ns         Int64     GPU duration in nanoseconds
grid_x .. grid_z    Int64     grid dimensions (blocks)
block_x .. block_z  Int64     block dimensions (threads)
stream              Int64     CUDA stream id, where known
device              Int64     device index, where known
thread_id           Int64     OS thread that launched it, where known
nvtx_range          string    innermost NVTX push/pop range open at launch, no domain
nvtx_path           string    the whole push/pop stack, ``domain@outer/domain@inner``
metrics             object    dict of metric name -> number (profiler counters), or {}
precision           string    fp64 fp32 tf32 fp16 bf16 fp8 int8 mixed unknown
tensor_core         boolean   True / False / <NA> when nothing tells
family              string    gemm conv elementwise layout pooling norm reduce other, or <NA>
evidence            string    ``metrics`` (counters decided), ``name`` (name rules), ``none``
evidence_detail     string    which counters or which named rule gave the verdict
==================  ========  ==========================================================

Importers fill everything up to ``metrics``; ``profkit.classify`` adds the last five.
A :class:`Capture` carries the table plus what the file says about the run (GPU, tool).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import BadExport

PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "mixed", "unknown")
EVIDENCE = ("metrics", "name", "none")
KINDS = ("kernel", "memcpy", "memset")

COLUMNS: dict[str, str] = {
    "launch_id": "int64",
    "kind": "string",
    "name": "string",
    "short_name": "string",
    "duration_ns": "Int64",
    "grid_x": "Int64",
    "grid_y": "Int64",
    "grid_z": "Int64",
    "block_x": "Int64",
    "block_y": "Int64",
    "block_z": "Int64",
    "stream": "Int64",
    "device": "Int64",
    "thread_id": "Int64",
    "nvtx_range": "string",
    "nvtx_path": "string",
    "metrics": "object",
}
CLASSIFIED: dict[str, str] = {
    "precision": "string",
    "tensor_core": "boolean",
    "family": "string",
    "evidence": "string",
    "evidence_detail": "string",
}


@dataclass
class Capture:
    """An imported capture: the kernel table and the run facts the file holds."""

    kernels: Any  # pandas.DataFrame with COLUMNS
    tool: str
    tool_version: str | None = None
    gpu_name: str | None = None
    compute_capability: str | None = None
    source_format: str = ""
    metric_units: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def frame(rows: list[dict]):
    """Build a kernel table with the canonical columns and dtypes from row dicts."""
    import pandas as pd

    df = pd.DataFrame(rows, columns=list(COLUMNS))
    for col, dtype in COLUMNS.items():
        if dtype != "object":
            df[col] = df[col].astype(dtype)
    if len(df):
        df["metrics"] = df["metrics"].map(lambda m: m if isinstance(m, dict) else {})
    return df


def validate(df, classified: bool = False) -> None:
    """Raise BadExport if ``df`` is not a kernel table."""
    wanted = dict(COLUMNS, **(CLASSIFIED if classified else {}))
    missing = [c for c in wanted if c not in df.columns]
    if missing:
        raise BadExport(f"kernel table lacks columns: {', '.join(missing)}")
    if df["launch_id"].duplicated().any():
        raise BadExport("kernel table has duplicate launch ids")
    bad_kind = set(df["kind"].dropna()) - set(KINDS)
    if bad_kind:
        raise BadExport(f"kernel table has unknown kinds: {sorted(bad_kind)}")
    if (df["duration_ns"].dropna() < 0).any():
        raise BadExport("kernel table has negative durations")
    if classified:
        bad = set(df["precision"].dropna()) - set(PRECISIONS)
        if bad:
            raise BadExport(f"kernel table has unknown precisions: {sorted(bad)}")
        bad = set(df["evidence"].dropna()) - set(EVIDENCE)
        if bad:
            raise BadExport(f"kernel table has unknown evidence values: {sorted(bad)}")
