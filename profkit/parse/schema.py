"""The one kernel table every importer produces and every analysis reads.

One row per activity, in launch order: a GPU kernel launch, memcpy or memset (``kind``), or,
for runs on the CPU (``--device cpu`` under torch.profiler), one CPU operator call. A run's
rows are all GPU activities or all CPU operators, never both. Columns:

==================  ========  ==========================================================
column              dtype     meaning
==================  ========  ==========================================================
launch_id           int64     0-based position in the capture's launch order
kind                string    ``kernel``, ``memcpy``, ``memset`` (GPU), or ``cpu_op`` (CPU)
name                string    the kernel's name as the tool reported it (demangled), or
                              the operator's (``aten::addmm``)
short_name          string    the function's own name: no namespace, template or params;
                              the same across tools, so runs imported different ways match
duration_ns         Int64     GPU duration in nanoseconds; for a CPU operator its self time
                              (its span less the spans of operators it called)
grid_x .. grid_z    Int64     grid dimensions (blocks)
block_x .. block_z  Int64     block dimensions (threads)
stream              Int64     CUDA stream id, where known
device              Int64     device index, where known
thread_id           Int64     OS thread that launched it (or ran it), where known
nvtx_range          string    innermost NVTX push/pop (or torch record_function) range open
                              on the launching thread when the launch call ran, no domain
nvtx_path           string    the whole stack, ``domain@outer/domain@inner`` (no ``domain@``
                              for record_function ranges)
input_types         string    tensor input types of the operator (torch.profiler with
                              shapes: ``c10::Half,float``), where known
metrics             object    dict of metric name -> number (profiler counters), or {}
precision           string    fp64 fp32 tf32 fp16 bf16 fp8 int8 mixed unknown
tensor_core         boolean   True / False / <NA> when nothing tells (False for CPU ops)
family              string    gemm conv elementwise layout pooling norm reduce memory other,
                              or <NA>
evidence            string    ``metrics`` (counters decided), ``name`` (name rules),
                              ``dtypes`` (a CPU operator's input types), ``none``
evidence_detail     string    which counters or which named rule gave the verdict
==================  ========  ==========================================================

Importers fill everything up to ``input_types``; ``profkit.classify`` adds the last five.
A :class:`Capture` carries the table plus what the file says about the run (GPU, tool), and
the capture's ranges (see ``RANGE_COLUMNS``) where the tool recorded them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import BadExport

PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "mixed", "unknown")
EVIDENCE = ("metrics", "name", "dtypes", "none")
KINDS = ("kernel", "memcpy", "memset", "cpu_op")
GPU_KINDS = ("kernel", "memcpy", "memset")

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
    "input_types": "string",
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

    kernels: Any  # pandas.DataFrame with COLUMNS, or None when the capture is streamed (rows)
    tool: str
    tool_version: str | None = None
    gpu_name: str | None = None
    compute_capability: str | None = None
    source_format: str = ""
    metric_units: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    ranges: list[dict] = field(default_factory=list)  # rows with RANGE_COLUMNS
    # A streamed capture (too big for a DataFrame): a callable yielding kernel-table row dicts
    # in launch order; ``ranges`` and ``notes`` are complete once it is exhausted.
    rows: Any = None

    @property
    def activity(self) -> str:
        """``cpu_op`` for a capture of CPU operators, else ``kernel``."""
        return "kernel" if self.kernels is None else activity_of(self.kernels)


def activity_of(df) -> str:
    """What a kernel table's rows are: ``cpu_op`` (CPU operators) or ``kernel`` (GPU work)."""
    kinds = set(df["kind"].dropna()) if len(df) else set()
    return "cpu_op" if kinds and kinds <= {"cpu_op"} else "kernel"


# The ranges of a capture: one row per NVTX push/pop or record_function range instance.
RANGE_COLUMNS: dict[str, str] = {
    "range_id": "int",      # 0-based, in start order
    "name": "str",          # the range's own text, no domain
    "domain": "str",        # NVTX domain, or None (default domain, record_function)
    "path": "str",          # enclosing ranges and this one, as in the kernel table's nvtx_path
    "depth": "int",         # 0 for an outermost range
    "thread_id": "int",     # the thread that pushed it
    "start_ns": "int",      # on the capture's clock
    "wall_ns": "int",       # end - start: the range's wall time
    "kernels": "int",       # kernel launches (or CPU operators) attributed to it, nested ranges included
    "gpu_ops": "int",       # kernels + memcpy + memset attributed to it (None for CPU captures)
    "gpu_time_ns": "int",   # summed duration of its kernels (CPU self time for CPU captures)
    "other_thread_kernels": "int",  # kernels other threads of the process launched while it was open
}


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
    kinds = set(df["kind"].dropna())
    if kinds - set(KINDS):
        raise BadExport(f"kernel table has unknown kinds: {sorted(kinds - set(KINDS))}")
    if "cpu_op" in kinds and kinds & set(GPU_KINDS):
        raise BadExport("kernel table mixes CPU operators and GPU activities")
    if (df["duration_ns"].dropna() < 0).any():
        raise BadExport("kernel table has negative durations")
    if classified:
        bad = set(df["precision"].dropna()) - set(PRECISIONS)
        if bad:
            raise BadExport(f"kernel table has unknown precisions: {sorted(bad)}")
        bad = set(df["evidence"].dropna()) - set(EVIDENCE)
        if bad:
            raise BadExport(f"kernel table has unknown evidence values: {sorted(bad)}")
