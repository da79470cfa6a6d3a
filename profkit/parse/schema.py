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
start_ns            Int64     when it started, on the capture's clock (nsys, torch.profiler,
                              and CUPTI in ncu's per-function plan); None where ncu
                              profiled every launch (it serialises and replays them)
grid_x .. grid_z    Int64     grid dimensions (blocks)
block_x .. block_z  Int64     block dimensions (threads)
stream              Int64     CUDA stream id, where known
device              Int64     device index, where known
rank                Int64     the process's rank in a distributed job (``--nproc-per-node``:
                              torchrun's RANK), None for a single-process run
thread_id           Int64     OS thread that launched it (or ran it), where known
nvtx_range          string    innermost NVTX range open for the launch call when it ran: the
                              launching thread's push/pop (or torch record_function) ranges
                              and its process's start/end ranges (profkit's iterations), no
                              domain
nvtx_path           string    the whole stack, ``domain@outer/domain@inner`` (no ``domain@``
                              for record_function ranges)
input_types         string    tensor input types of the operator, where known: torch's dtype
                              names (``float16,float16``) from profkit's attribution or a
                              compiled kernel's signature, torch.profiler's
                              (``c10::Half,float``) in traces without it
op                  string    the PyTorch operator that launched the kernel, where known:
                              with profkit's attribution the operator the dispatcher ran
                              below autograd (``aten::convolution``,
                              ``aten::convolution_backward``); in a torch.profiler trace
                              without it, the innermost launching operator
                              (``aten::cudnn_convolution``); for a torch.compile kernel, the
                              ATen operators Inductor fused into it, joined by ``+``
module              string    the module whose code ran the operator: its path from the model
                              (``layers.3.mlp.down_proj``; ``""`` the model's own code,
                              ``(CrossEntropyLoss)`` another top-level module,
                              ``(optimizer)`` an optimizer's step); a backward kernel has
                              the module whose forward created its autograd node; None
                              outside any module or where the capture does not say
module_type         string    that module's class (``Linear``), where known
shapes              string    the operator's tensor input shapes, ``[8,512];[512,64]``
phase               string    ``forward``, ``backward`` or ``optimizer``, where known
metrics             object    dict of metric name -> number (profiler counters), or {}
precision           string    fp64 fp32 tf32 fp16 bf16 fp8 int8 int mixed unknown (int:
                              integer or boolean work: indices, masks, counters)
tensor_core         boolean   True / False / <NA> when nothing tells (False for CPU ops)
family              string    gemm conv attention elementwise fused layout pooling norm reduce
                              memory communication other (fused: torch.compile's generated
                              Triton kernels; communication: NCCL kernels, collective
                              operators), or <NA>
evidence            string    ``metrics`` (counters decided), ``name`` (name rules; for a
                              Triton or cuDNN SDPA kernel in a timeline run, the precision
                              from the launching operator's input types, as the detail
                              says), ``dtypes`` (a CPU operator's input types), ``none``
evidence_detail     string    which counters or which named rule gave the verdict
==================  ========  ==========================================================

Importers yield rows with everything up to ``phase`` (:class:`KernelRow`);
``profkit.classify`` adds the last five (:class:`ClassifiedRow`). A :class:`Capture` carries
the rows, what the file says about the run (GPU, tool), the capture's ranges
(:class:`RangeRow`) where the tool recorded them, and its host-blocking runtime calls
(:class:`HostSyncRow`: nsys and torch.profiler record them). :func:`frame` turns rows into the table as a
pandas DataFrame with the dtypes above.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    Literal,
    TypedDict,
    TypeVar,
    get_args,
)

from ..errors import BadExport

if TYPE_CHECKING:
    import pandas as pd

# The values of the table's kind, precision and evidence columns (documented above), as types
# and as the tuples checked against at run time.
Kind = Literal["kernel", "memcpy", "memset", "cpu_op"]
Precision = Literal[
    "fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int", "mixed", "unknown"
]
Evidence = Literal["metrics", "name", "dtypes", "none"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
EVIDENCE: tuple[Evidence, ...] = get_args(Evidence)
KINDS: tuple[Kind, ...] = get_args(Kind)
GPU_KINDS: tuple[Kind, ...] = ("kernel", "memcpy", "memset")

COLUMNS: dict[str, str] = {
    "launch_id": "int64",
    "kind": "string",
    "name": "string",
    "short_name": "string",
    "duration_ns": "Int64",
    "start_ns": "Int64",
    "grid_x": "Int64",
    "grid_y": "Int64",
    "grid_z": "Int64",
    "block_x": "Int64",
    "block_y": "Int64",
    "block_z": "Int64",
    "stream": "Int64",
    "device": "Int64",
    "rank": "Int64",
    "thread_id": "Int64",
    "nvtx_range": "string",
    "nvtx_path": "string",
    "input_types": "string",
    "op": "string",
    "module": "string",
    "module_type": "string",
    "shapes": "string",
    "phase": "string",
    "metrics": "object",
}
CLASSIFIED: dict[str, str] = {
    "precision": "string",
    "tensor_core": "boolean",
    "family": "string",
    "evidence": "string",
    "evidence_detail": "string",
}
# The columns of a stored run's kernel table, in the order `kernels --format json` gives them.
KERNEL_FIELDS: tuple[str, ...] = (*(c for c in COLUMNS if c != "metrics"), *CLASSIFIED, "metrics")


class KernelRow(TypedDict):
    """One row as an importer yields it (see the table above)."""

    launch_id: int
    kind: Kind
    name: str
    short_name: str
    duration_ns: int | None
    start_ns: int | None
    grid_x: int | None
    grid_y: int | None
    grid_z: int | None
    block_x: int | None
    block_y: int | None
    block_z: int | None
    stream: int | None
    device: int | None
    rank: int | None
    thread_id: int | None
    nvtx_range: str | None
    nvtx_path: str | None
    input_types: str | None
    op: str | None
    module: str | None
    module_type: str | None
    shapes: str | None
    phase: str | None
    metrics: dict[str, float]


class ClassifiedRow(KernelRow):
    """A row with its verdict, as the store keeps it and ``Run.iter_kernels()`` yields it."""

    precision: Precision
    tensor_core: bool | None
    family: str | None
    evidence: Evidence
    evidence_detail: str


_COLUMN_SET = frozenset(COLUMNS)


def kernel_row(launch_id: int, kind: Kind, name: str, short_name: str, **known: Any) -> KernelRow:
    """A KernelRow with the fields an importer knows; the others are None (``metrics`` {})."""
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(launch_id=launch_id, kind=kind, name=name, short_name=short_name, metrics={})
    if not known.keys() <= _COLUMN_SET:
        raise TypeError(f"not kernel-table columns: {sorted(known.keys() - _COLUMN_SET)}")
    row.update(known)
    return row  # type: ignore[return-value]  # every key of KernelRow is set above


class RangeRow(TypedDict):
    """One NVTX push/pop or record_function range instance of a capture."""

    range_id: int  # 0-based, in start order
    name: str  # the range's own text, no domain
    domain: str | None  # NVTX domain, or None (default domain, record_function)
    path: str  # enclosing ranges and this one, as in the kernel table's nvtx_path
    depth: int  # 0 for an outermost range
    thread_id: int | None  # the thread that pushed it
    start_ns: int | None  # on the capture's clock
    wall_ns: int | None  # end - start: the range's wall time
    kernels: int  # kernel launches (or CPU operators) attributed to it, nested ranges included
    gpu_ops: int | None  # kernels + memcpy + memset attributed to it (None for CPU captures)
    gpu_time_ns: int  # summed duration of its kernels (CPU self time for CPU captures)
    # kernels other threads of the process launched while it was open
    other_thread_kernels: int | None
    rank: int | None  # the process's rank in a distributed job, None for one process


# The ranges' columns and their SQL/JSON types, in RangeRow's order.
RANGE_COLUMNS: dict[str, str] = {
    "range_id": "int",
    "name": "str",
    "domain": "str",
    "path": "str",
    "depth": "int",
    "thread_id": "int",
    "start_ns": "int",
    "wall_ns": "int",
    "kernels": "int",
    "gpu_ops": "int",
    "gpu_time_ns": "int",
    "other_thread_kernels": "int",
    "rank": "int",
}
# What `profkit ranges` and Run.ranges() give: everything but the stored id.
RANGE_FIELDS: tuple[str, ...] = tuple(c for c in RANGE_COLUMNS if c != "range_id")


class HostSyncRow(TypedDict):
    """One runtime call of a timeline capture that blocked the host until the GPU was done
    (``HOST_SYNC_CALLS``: a stream, event or device synchronisation, a synchronous copy), with
    the GPU work around it in its process: what the host-sync finding reads."""

    sync_id: int  # 0-based, in the calls' start order
    name: str  # the call (cudaStreamSynchronize), without nsys's _vNNNN suffix
    start_ns: int  # the call's start and end, on the capture's clock
    end_ns: int
    thread_id: int | None  # the thread that made it
    rank: int | None  # the process's rank in a distributed job, None for one process
    op: str | None  # what called it, where known: torch.profiler's enclosing operator
    # (aten::_local_scalar_dense), or the innermost NVTX range open on
    # the thread (nsys)
    # the latest end of the GPU operations of its process begun before it returned
    gpu_last_end_ns: int | None
    # the first start of one begun after it returned (None: none followed)
    gpu_next_start_ns: int | None
    # the measured iteration (profkit's <tag>.iterN range) of its process it was
    iteration: str | None
    iteration_end_ns: int | None  # made in, and that range's end; None outside them


# The host-sync table's columns and their SQL/JSON types, in HostSyncRow's order.
HOST_SYNC_COLUMNS: dict[str, str] = {
    "sync_id": "int",
    "name": "str",
    "start_ns": "int",
    "end_ns": "int",
    "thread_id": "int",
    "rank": "int",
    "op": "str",
    "gpu_last_end_ns": "int",
    "gpu_next_start_ns": "int",
    "iteration": "str",
    "iteration_end_ns": "int",
}
# The runtime and driver calls that block the host until the GPU (a stream, an event, the whole
# device) is done, the synchronous copies among them (a cudaMemcpyAsync to pageable host memory
# is followed by a cudaStreamSynchronize, which counts). Names as torch.profiler gives them; nsys
# adds a version suffix (cudaStreamSynchronize_v3020).
HOST_SYNC_CALLS: frozenset[str] = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaThreadSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpy3D",
        "cudaMemcpyFromSymbol",
        "cudaMemcpyToSymbol",
        "cudaMemcpyPeer",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "cuMemcpyDtoH",
        "cuMemcpyHtoD",
        "cuMemcpy",
    }
)


def host_sync_call(name: str) -> str | None:
    """A runtime call's name as ``HOST_SYNC_CALLS`` has it (the _vNNNN suffix dropped), if it is one."""
    base = name.split("_v", 1)[0] if "_v" in name else name
    return base if base in HOST_SYNC_CALLS else None


def gpu_around(spans: Iterable[tuple[int, int]]) -> Callable[[int], tuple[int | None, int | None]]:
    """For a host sync's row: given the GPU operations' (start, end), a function of the instant
    a call returned -> (the latest end of the operations begun by then, the first start of one
    begun after it), None where there is none (one sort, then a binary search per call)."""
    ordered = sorted(spans)
    starts = [a for a, _ in ordered]
    ends_so_far = list(itertools.accumulate((b for _, b in ordered), max))

    def around(t: int) -> tuple[int | None, int | None]:
        k = bisect.bisect_right(starts, t)  # operations begun by t: ordered[:k]
        return (ends_so_far[k - 1] if k else None), (starts[k] if k < len(starts) else None)

    return around


RowT = TypeVar("RowT", KernelRow, ClassifiedRow)


@dataclass
class Capture(Generic[RowT]):
    """An imported capture: its rows, streamed, and the run facts the file holds.

    ``rows`` is read once, in launch order. ``ranges`` and ``notes`` are lists that a streamed
    importer (nsys) completes in place as the last row is read; ``range_paths``, the ranges'
    paths, are known before. Classifying a capture (``profkit.classify.classified``) gives a
    ``Capture[ClassifiedRow]`` sharing those lists.

    ``bulk``, where an importer has one (nsys exports), writes the same rows, classified,
    straight from the file into the store in SQL, without passing each through Python: the
    store calls ``bulk(store, run_id)`` instead of reading ``rows``, and it returns the run's
    (activity, count, summed duration) as the store's own insert does. ``rows`` stays the
    streamed equivalent (tests check that both give the same table).
    """

    rows: Iterator[RowT]
    tool: str
    source_format: str
    tool_version: str | None = None
    gpu_name: str | None = None
    compute_capability: str | None = None
    metric_names: list[str] = field(default_factory=list)  # per-kernel counters the file has
    metric_units: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    ranges: list[RangeRow] = field(default_factory=list)
    range_paths: list[str] = field(default_factory=list)
    # timeline captures' host-blocking calls
    host_syncs: list[HostSyncRow] = field(default_factory=list)
    bulk: Callable[[Any, int], tuple[str, int, int]] | None = None
    # ncu's per-function plan: the launch id whose counters this run's ncu read, per kernel
    # function (mangled name), and that launch's configuration (grid and block), for keeping
    # them across runs (``store.counters``).
    counted_launches: dict[str, int] = field(default_factory=dict)
    counted_configs: dict[str, str] = field(default_factory=dict)


def frame(
    rows: Iterable[KernelRow] | Iterable[ClassifiedRow], classified: bool = False
) -> pd.DataFrame:
    """The kernel table as a DataFrame with the documented dtypes (plus the verdict columns
    when ``classified``), from rows."""
    import pandas as pd

    columns = {c: {**COLUMNS, **CLASSIFIED}[c] for c in (KERNEL_FIELDS if classified else COLUMNS)}
    df = pd.DataFrame(list(rows), columns=list(columns))
    for col, dtype in columns.items():
        if dtype != "object":
            df[col] = df[col].astype(dtype)  # type: ignore[call-overload]  # a dtype name from the table
    if len(df):
        df["metrics"] = df["metrics"].map(lambda m: m if isinstance(m, dict) else {})
    return df


MAX_DURATION_NS = 86_400 * 10**9  # no kernel or operator call lasts a day

# What every importer holds a launch's grid and block sizes to (whole numbers from 0 to 2^31 - 1,
# as CUDA's own limits are), and its stream and device (whole numbers, never negative; the
# largest SQLite stores). None: the capture does not say. Each importer refuses a value outside
# them where it reads it, naming the file and the record (``launch_value_fault``); the store's
# ``check_row`` holds every row to them again.
LAUNCH_DIMS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
LAUNCH_IDS = ("stream", "device")
DIM_LIMIT = 2**31  # a grid or block size is below this
ID_LIMIT = 2**63  # a stream or device id is below this


def launch_value_fault(column: str, value: object) -> str | None:
    """Why ``value`` cannot be a row's ``column`` (of ``LAUNCH_DIMS`` or ``LAUNCH_IDS``), as the
    end of a sentence (``"not a whole number from 0 to 2^31 - 1"``); None where it can."""
    if value is None:
        return None
    limit, limit_text = (DIM_LIMIT, "2^31 - 1") if column in LAUNCH_DIMS else (ID_LIMIT, "2^63 - 1")
    if type(value) is not int or not 0 <= value < limit:
        return f"not a whole number from 0 to {limit_text}"
    return None


def check_row(row: KernelRow) -> None:
    """Raise BadExport for a row no importer should yield (the store checks each one)."""
    if row["kind"] not in KINDS:
        raise BadExport(f"launch {row['launch_id']} has unknown kind {row['kind']!r}")
    duration = row["duration_ns"]
    if duration is not None and duration < 0:
        raise BadExport(f"launch {row['launch_id']} has a negative duration ({duration} ns)")
    if duration is not None and duration > MAX_DURATION_NS:
        raise BadExport(
            f"launch {row['launch_id']} lasts {duration:,} ns, more than a day: not a real duration"
        )
    for column in _LAUNCH_COLUMNS:
        value = row[column]  # type: ignore[literal-required]
        if value is not None and (type(value) is not int or not 0 <= value < _LIMITS[column]):
            raise BadExport(
                f"launch {row['launch_id']} has {column} = {value!r}, "
                f"{launch_value_fault(column, value)}"
            )


_LAUNCH_COLUMNS = (*LAUNCH_DIMS, *LAUNCH_IDS)
_LIMITS = {**dict.fromkeys(LAUNCH_DIMS, DIM_LIMIT), **dict.fromkeys(LAUNCH_IDS, ID_LIMIT)}
