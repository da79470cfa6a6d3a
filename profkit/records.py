"""The typed records that pass between the store, the analyses and their callers: a stored
run (:class:`RunRecord`) and a run's summary (:class:`Summary`). Kernel rows and range rows
are typed where the kernel table is documented, in ``profkit.parse.schema``.

Plain data with no behaviour beyond ``to_dict()``: the JSON the CLI prints is ``to_dict()``
of these, so the library and the command cannot disagree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class RunRecord:
    """One run: a profiled workload or an imported capture. JSON columns come decoded."""

    id: int
    name: str
    source: str | None = None               # "run" (profkit launched it) or "import"
    status: str | None = None               # ok; running / importing (being written); failed / interrupted
    workload: str | None = None
    precision: str | None = None
    mode: str | None = None
    batch_size: int | None = None
    iters: int | None = None
    device: str | None = None               # cuda or cpu
    tool: str | None = None                 # ncu, nsys or torch
    tool_version: str | None = None
    metric_set: str | None = None           # ncu preset, "custom", or None
    metrics: list[str] = field(default_factory=list)       # counters the capture has per kernel
    gpu_name: str | None = None
    compute_capability: str | None = None
    command: list[str] = field(default_factory=list)       # the profiler command line
    started_at: str | None = None
    finished_at: str | None = None
    raw_files: dict[str, str] = field(default_factory=dict)  # {kind: path} of the kept captures
    source_sha256: str | None = None
    activity: str = "kernel"                # "kernel" (GPU work) or "cpu_op" (CPU operators)
    kernel_count: int = 0                   # kernel launches, or CPU operator calls for cpu_op
    gpu_time_ns: int = 0                    # their summed duration (CPU self time for cpu_op)
    profiled_wall_s: float | None = None
    info: dict[str, Any] = field(default_factory=dict)     # versions, iteration times, notes

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(RunRecord)}


def ncu_timed(run: RunRecord) -> bool:
    """Whether a run's durations are ncu's own (each kernel replayed alone, clocks locked to
    base) rather than times as the kernels ran (nsys, torch.profiler, and CUPTI in ncu's
    per-function plan)."""
    return run.tool == "ncu" and (run.info.get("ncu_plan") or {}).get("durations") != "cupti"


# What `profkit runs --format json` lists of each run.
RUN_LIST_FIELDS = ("id", "name", "status", "source", "workload", "precision", "mode", "batch_size", "iters", "device",
                   "tool", "tool_version", "metric_set", "gpu_name", "compute_capability", "activity",
                   "kernel_count", "gpu_time_ns", "finished_at")


@dataclass(frozen=True)
class TopKernel:
    """One kernel name (in one precision) among a run's most expensive."""

    name: str
    launches: int
    total_ns: int
    pct: float                  # of the run's GPU time (CPU self time for CPU runs)
    precision: str | None
    tensor_core: bool | None
    evidence: str | None


@dataclass(frozen=True)
class MemoryOps:
    """memcpy or memset operations of a timeline capture: how many, and their GPU time."""

    count: int
    time_ns: int


@dataclass(frozen=True)
class Summary:
    """A run's summary; ``to_dict()`` is what ``profkit summary RUN --format json`` prints.

    For a run of CPU operators (``activity`` cpu_op), ``kernels`` counts operator calls and
    the times are CPU self time. Times are integer nanoseconds.
    """

    run: str
    activity: str
    kernels: int
    gpu_time_ns: int
    tensor_core_kernels: int
    tensor_core_time_ns: int
    tensor_core_time_pct: float
    unclassified_time_ns: int                   # kernels whose tensor-core use nothing told
    time_by_precision_ns: dict[str, int]        # largest first
    kernels_by_precision: dict[str, int]        # most first
    time_by_family_ns: dict[str, int]
    evidence: dict[str, int]                    # launches per kind of evidence
    top_kernels: list[TopKernel]
    memory_ops: dict[str, MemoryOps]            # memcpy / memset, apart from the kernels

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
