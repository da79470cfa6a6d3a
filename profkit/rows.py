"""The typed rows profkit's store queries return (``profkit.store.queries.Queries``) and the
analyses, the report pages and the command read: one frozen record per query, its fields the
query's columns. Times are integer nanoseconds (``*_ns``); ``calls``, ``launches`` and
``kernels`` count launches (CPU operator calls for a run of CPU operators).

Aggregates, not the kernel table itself: a kernel row is ``parse.schema.ClassifiedRow``.
None of these is printed as it is: the analyses' records (``profkit.records``) are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .parse.schema import Evidence, Kind, Precision


@dataclass(frozen=True, slots=True)
class KindTotals:
    """A run's rows of one kind, summed (``Queries.totals``)."""

    count: int  # launches
    time_ns: int  # their summed duration
    tensor_core_count: int  # launches on tensor cores
    tensor_core_time_ns: int  # and their time
    unknown_time_ns: int  # time of launches whose tensor-core use nothing told


@dataclass(frozen=True, slots=True)
class FamilyTotals:
    """A run's rows of one kind and family, summed (``Queries.family_totals``): what the
    tensor-core coverage of matrix work is computed from (``analyze.matrix``)."""

    family: str | None  # gemm, conv, attention, norm, ...; None where no rule named one
    count: int  # launches
    time_ns: int  # their summed duration
    tensor_core_time_ns: int  # of it, launches on tensor cores
    undecided_time_ns: int  # of it, launches whose tensor-core use nothing told


@dataclass(frozen=True, slots=True)
class NameTotal:
    """One (name, precision) pair among a run's most expensive (``Queries.top_names``)."""

    name: str
    launches: int
    total_ns: int  # summed duration
    precision: Precision | None
    tensor_core: bool | None  # the first launch's verdict
    evidence: Evidence | None  # and what told it


@dataclass(frozen=True, slots=True)
class KernelGroup:
    """A run's rows of one (kind, name, launching operator, precision) (``Queries.kernel_groups``):
    what a diff aligns and the findings read."""

    kind: Kind
    name: str
    op: str | None  # the PyTorch operator that launched them (torch.profiler runs)
    short_name: str | None  # the least of the group's
    family: str | None  # the least of the group's
    calls: int
    time_ns: int
    tc_time_ns: int  # time of the launches on tensor cores
    precision: Precision  # "unknown" where the row has none


@dataclass(frozen=True, slots=True)
class ModuleGroup:
    """A run's kernels of one (module, phase, precision, family, tensor-core verdict)
    (``Queries.module_groups``): what the by-module views sum up, level by level of the
    module tree."""

    module: str | None  # the module path ("" the model itself; None: not known)
    module_type: str | None  # the least of the group's module classes
    phase: str | None  # forward, backward, optimizer, or None where not known
    precision: Precision  # "unknown" where the row has none
    family: str | None
    tensor_core: bool | None
    launches: int
    time_ns: int
    ops: int  # distinct launching operators among them


@dataclass(frozen=True, slots=True)
class ShapeGroup:
    """A run's kernels of one (name, operator, input shapes, module, precision)
    (``Queries.shape_groups``): what the shape findings read."""

    name: str
    short_name: str | None
    op: str | None
    shapes: str | None
    input_types: str | None
    module: str | None
    precision: Precision
    family: str | None
    tensor_core: bool | None
    launches: int
    time_ns: int


@dataclass(frozen=True, slots=True)
class NameGroup:
    """A run's rows of one kind and (name, precision), with their spread and verdicts
    (``Queries.name_groups``): a row of the report's kernel table."""

    name: str
    precision: Precision | None
    short_name: str | None
    family: str | None
    calls: int
    time_ns: int
    min_ns: int | None  # shortest launch
    max_ns: int | None  # longest launch
    tc_calls: int  # launches on tensor cores
    cuda_calls: int  # launches off them (CUDA cores)
    evidences: list[str]  # the distinct kinds of evidence behind the verdicts
    details: list[str]  # the distinct evidence details (non-empty)
    op: str | None  # the least launching operator
    first: int  # the group's first launch_id


@dataclass(frozen=True, slots=True)
class Launch:
    """One launch, where and how it ran, no counters (``Queries.first_launches``)."""

    launch_id: int
    name: str
    precision: Precision | None
    duration_ns: int | None
    start_ns: int | None  # on the capture's clock
    grid_x: int | None
    grid_y: int | None
    grid_z: int | None
    block_x: int | None
    block_y: int | None
    block_z: int | None
    stream: int | None
    thread_id: int | None
    nvtx_range: str | None
    tensor_core: bool | None
    evidence_detail: str | None


@dataclass(frozen=True, slots=True)
class MetricSums:
    """One kernel (name, precision) with counters: launches, the summed duration of the
    launches that have them, and each counter's sum (``Queries.metric_sums``)."""

    name: str
    precision: Precision | None
    short_name: str | None
    calls: int
    time_ns: int
    metrics: dict[str, float] = field(default_factory=dict)  # counter -> sum, non-zero only


@dataclass(frozen=True, slots=True)
class TimelineOp:
    """One GPU operation (kernel, memcpy, memset) on the timeline (``Queries.timeline``)."""

    launch_id: int
    kind: Kind
    name: str
    short_name: str | None
    stream: int | None
    device: int | None
    rank: int | None
    start_ns: int  # on the capture's clock
    duration_ns: int | None
    precision: Precision | None
    tensor_core: bool | None
    family: str | None = None  # gemm, conv, attention, norm, ...


@dataclass(frozen=True, slots=True)
class PathTotals:
    """The launches made in one NVTX stack (``Queries.kernel_paths``)."""

    nvtx_path: str  # the stack, outermost range first
    name: str | None  # its innermost range's name
    thread_id: int | None  # the launching thread
    kernels: int  # kernels (or CPU operators)
    gpu_ops: int  # kernels, memcpy and memset
    gpu_time_ns: int  # the kernels' summed duration (CPU self time)


@dataclass(frozen=True, slots=True)
class RankTotals:
    """One rank's rows of one kind (``Queries.rank_totals``); ``family_*`` are those of the
    family asked for (communication)."""

    rank: int
    kernels: int
    time_ns: int
    family_kernels: int
    family_ns: int
    devices: list[int]  # the GPUs its rows ran on, in order


@dataclass(frozen=True, slots=True)
class RankPathTime:
    """One rank's rows of one kind in one NVTX stack (``Queries.rank_path_times``)."""

    rank: int
    nvtx_path: str | None
    kernels: int
    time_ns: int
    family_ns: int  # the time of the family asked for (communication)
