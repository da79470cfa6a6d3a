"""The typed records that pass between the store, the analyses and their callers: a stored
run (:class:`RunRecord`) and a run's summary (:class:`Summary`). Kernel rows and range rows
are typed where the kernel table is documented, in ``profkit.parse.schema``.

Plain data with no behaviour beyond ``to_dict()``: the JSON the CLI prints is ``to_dict()``
of these, so the library and the command cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypedDict

from .parse.schema import Evidence, Precision


class ToolChoice(TypedDict):
    """Which tool profiled a run of ``--tool auto`` (or the one asked for), and why."""

    tool: str
    why: str


class NcuPlan(TypedDict, total=False):
    """How an ncu run was profiled: ``durations`` "ncu" (each kernel replayed alone, clocks
    locked) or "cupti" (the per-function plan: times as the kernels ran, from a second
    process); ``launches`` which launches ncu profiled, in words; the per-function plan also
    ``profiled_launches``, ``timed_by`` and ``wall_s`` (seconds per stage)."""

    launches: str
    durations: str
    profiled_launches: int
    timed_by: str
    counted_by: str  # who counted: ncu's process, or CUPTI's Range Profiler in the run's
    counted_launches: int  # the launches of the step counted in the run's process (one more step)
    counted_ranges: int  # of them, those the Range Profiler counted (the first of each function)
    ranges_fallback: str  # why every launch was a range (the launch callbacks could not be had)
    passes: int  # the counter set's passes (steps run again) in the run's process
    counting_fallback: str  # why counting in the run's process failed (ncu counted instead)
    # profile, export_and_join (s); each harness's stages_s
    wall_s: dict[str, float | dict[str, float] | None]
    counters: CounterUse  # the counters kept across runs: what this run took and added


class CounterUse(TypedDict, total=False):
    """What an ncu run of the per-function plan did with the counters kept across runs
    (``store.counters``): ``environment`` what keys them (GPU, driver, CUDA, PyTorch, the
    installed packages' digest, ncu, and the native libraries and workload sources the run's
    process reported), ``strategy`` how the run went ("counted": ncu beside the timing process
    as on a first run; "timed first": the timing process alone, then ncu only for the functions
    not counted before, if any; "fresh": ``--fresh-counters``), ``cached`` the functions whose
    counters came from earlier runs, ``counted`` those ncu counted in this run, ``kept`` those
    it added to the cache."""

    environment: dict[str, str]
    environment_key: str  # the digest of environment (the counters table's key)
    machine_key: str  # the digest of its parts known before the run (what picks the strategy)
    signature: str  # what decides which functions the run launches, and their shapes (a digest)
    strategy: str
    cached: int
    counted: int
    kept: int


@dataclass(frozen=True)
class CountedFunction:
    """ncu's counters of one kernel function, kept across runs: its ``mangled`` name (what
    CUPTI reports), ``scope`` ("" but for a kernel generated at run time: its source's
    digest), ``config`` the launch configuration of the launch counted ("grid 8x1x1 block
    256x1x1"), the names ncu gave it, the counters, and the launch of which run they were read
    from."""

    mangled: str
    scope: str
    config: str
    name: str
    short_name: str
    metrics: dict[str, Any]
    metric_units: dict[str, str]
    run_id: int
    run_name: str
    launch_id: int


class RankInfo(TypedDict, total=False):
    """One rank of a distributed run, as its harness saw it (``HarnessInfo.ranks``)."""

    rank: int
    local_rank: int
    pid: int
    iteration_wall_ns: list[int]
    amp_skipped_steps: int
    gpu_name: str
    warmup_s: float


class CompiledKernel(TypedDict):
    """A kernel torch.compile generated (Inductor's output code): the ATen operators it fused
    and its pointer arguments' element types, as its compiled signature gives them."""

    ops: list[str]  # "aten::convolution", in Inductor's order
    input_types: str  # "float16,float16" (torch dtype names), "" when none


class ProgramSteps(TypedDict, total=False):
    """How a program's steps were found and how far it got (``HarnessInfo.steps``)."""

    by: str  # optimizer, forward, backward, marker; none
    said: str  # "each AdamW.step() (the first optimizer to step)"
    seen: int  # steps that ended while profkit watched
    warmup: int
    iters: int
    whole_program: bool  # no step found: the whole program was the window
    none_found: bool  # the script ended without a step (profkit then profiles it whole)
    exit_status: int  # run to its end after the window (--run-to-end): how it ended


class HarnessInfo(TypedDict, total=False):
    """The file the harness writes at the end (its ``info_path``): what it ran on and how the
    iterations went. Stored whole with a profiled run (``RunInfo.harness``); ``profkit bench``
    reads its timings from it. Times are seconds (``_s``) or nanoseconds (``_ns``)."""

    # the machine (every harness)
    torch_version: str
    cuda_version: str | None
    cudnn_version: int | None
    device: str
    python: str
    gpu_name: str  # device cuda
    compute_capability: str  # "9.0"
    pid: int
    # a rank of a distributed job (torchrun)
    rank: int
    local_rank: int
    world_size: int
    ranks: list[RankInfo]  # rank 0's file as the parent keeps it: every rank's figures
    # a profiled run
    warmup_s: float
    compile_mode: str
    amp_skipped_steps: int  # measured iterations whose AMP loss scaler skipped the optimizer step
    iteration_wall_ns: list[int]
    # warm-up steps after the first, each timed to a device sync: no profiler,
    # no ranges (the timeline findings' unstretched figure)
    bare_iteration_ns: list[int]
    iteration_ranges: str  # "process": start/end ranges (older runs: push/pop, the main thread's)
    stages_s: dict[str, float]  # seconds since start at each stage (torch_imported, built, ...)
    thread_ids: dict[str, int]  # ncu's per-function plan: Python thread ident -> native id
    kernel_timer_error: str  # ncu's per-function plan: why CUPTI's timer could not start
    timed_launches: int  # ncu's per-function plan: kernels CUPTI timed in the measured iterations
    kernel_counter_error: str  # its first run: why the launches could not be counted in the process
    attribution: (
        str  # "ranges": operator ranges (profkit.annotate); "compiled": Inductor's kernels; "off"
    )
    attribution_note: str  # why a run has none (a compiled model's, a failure to start)
    # torch.compile: generated kernel name -> what it fused
    compiled_kernels: dict[str, CompiledKernel]
    # ncu's timing process, torch.compile: kernel name -> source digest
    generated_kernels: dict[str, str]
    native_libraries: str  # ncu's timing process: the native libraries it mapped (code_versions)
    workload_sources: str  # ncu's timing process: the workload's own sources (code_versions)
    # a program run as it is (profkit.program)
    steps: ProgramSteps
    window_done_unix: float  # when the window (and its counting) ended: time.time()
    # profkit bench
    model: bool  # the workload built (model, inputs): its output can be compared
    build_and_warmup_s: float
    iter_ns: list[int]
    peak_memory_bytes: int | None
    output_saved: bool
    # --fused-optimizer: each optimizer made, "AdamW" fused or "AdamW (not fused: why)"
    fused_optimizers: list[str]
    # --cudnn-attention: SDPA's backends in the order set ("cudnn_attention" first)
    attention_backends: list[str]
    # --sdpa-attention: each Hugging Face model switched, "BertModel" or "Name (not switched: why)"
    sdpa_models: list[str]
    # profkit tune's trial of a program: the model fixes applied, to which module
    fixes_applied: list[str]
    fixed_model: str | None


_INFO_INTERNAL = ("extra", "present")


@dataclass(frozen=True)
class RunInfo(Mapping[str, Any]):
    """A run's ``info``: what profkit knows of it beyond the columns. Each key profkit writes
    is a field (None where the run has none); keys it does not know (an older or newer
    profkit's, a caller's own) are kept in ``extra``. ``to_dict()`` is the JSON stored in the
    runs table, keys in the order they were read; the record also reads as that mapping
    (``info["notes"]``, ``{**info, ...}``), so the store merges it as JSON."""

    # imported runs (profkit.ingest)
    imported_from: str | None = (
        None  # the imported file's absolute path (its sha256: RunRecord.source_sha256)
    )
    metric_units: dict[str, str] | None = None  # counter -> the unit ncu's CSV gave it
    step_ranges: list[str] | None = (
        None  # the ranges named as steps at import (``step_ranges``), if any
    )
    # every stored run
    profkit_version: str | None = None  # the profkit that stored it
    notes: list[str] | None = None  # what the parser or the store noticed, one line each
    error: str | None = None  # why a failed / interrupted run did not finish
    # runs profkit profiled (profkit.launch)
    harness: HarnessInfo | None = (
        None  # the harness's own info file: machine, versions, iteration times
    )
    tool_choice: ToolChoice | None = None
    report_bytes: int | None = None  # size of the tool's raw report(s), bytes
    ncu_plan: NcuPlan | None = None
    per_function_plan_failed: str | None = (
        None  # why ncu's per-function plan fell back to every launch
    )
    compile_mode: str | None = None  # torch.compile's mode, for mode compile
    options: dict[str, bool] | None = None  # workload options asked for (channels_last, ...)
    world_size: int | None = None  # ranks, for --nproc-per-node above 1
    cuda_graphs: str | None = (
        None  # how the tool saw CUDA graph launches, where the workload used them
    )
    program: dict[str, Any] | None = (
        None  # a program run as it is: its command line, its steps, how it ended
    )
    extra: dict[str, Any] = field(default_factory=dict)  # keys profkit does not write, kept as read
    # the keys read, in order
    present: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> RunInfo:
        """The record of a stored ``info`` (decoded JSON); unknown keys go to ``extra``."""
        data = dict(data or {})
        known = {f.name for f in fields(cls)} - set(_INFO_INTERNAL)
        return cls(
            **{k: v for k, v in data.items() if k in known},
            extra={k: v for k, v in data.items() if k not in known},
            present=tuple(data),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: the keys read, in their order (a null read stays null), then the
        fields set since, in field order, then ``extra``'s new keys."""
        values = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in _INFO_INTERNAL
            and (getattr(self, f.name) is not None or f.name in self.present)
        }
        values.update(self.extra)
        order = {k: i for i, k in enumerate(self.present)}
        return dict(sorted(values.items(), key=lambda kv: order.get(kv[0], len(order))))

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


@dataclass(frozen=True)
class RunRecord:
    """One run: a profiled workload or an imported capture. JSON columns come decoded."""

    id: int
    name: str
    source: str | None = None  # "run" (profkit launched it) or "import"
    status: str | None = None  # ok; running / importing (being written); failed / interrupted
    workload: str | None = None
    precision: str | None = None
    mode: str | None = None
    batch_size: int | None = None
    iters: int | None = None
    device: str | None = None  # cuda or cpu
    tool: str | None = None  # ncu, nsys or torch
    tool_version: str | None = None
    metric_set: str | None = None  # ncu preset, "custom", or None
    metrics: list[str] = field(default_factory=list)  # counters the capture has per kernel
    gpu_name: str | None = None
    compute_capability: str | None = None
    command: list[str] = field(default_factory=list)  # the profiler command line
    started_at: str | None = None
    finished_at: str | None = None
    raw_files: dict[str, str] = field(default_factory=dict)  # {kind: path} of the kept captures
    source_sha256: str | None = None
    activity: str = "kernel"  # "kernel" (GPU work) or "cpu_op" (CPU operators)
    kernel_count: int = 0  # kernel launches, or CPU operator calls for cpu_op
    gpu_time_ns: int = 0  # their summed duration (CPU self time for cpu_op)
    profiled_wall_s: float | None = None
    info: RunInfo = field(default_factory=RunInfo)  # versions, iteration times, notes (see RunInfo)
    folder: str | None = None  # its raw folder in <db stem>-runs/ (None: its name, or none made)

    def __post_init__(self) -> None:
        if not isinstance(self.info, RunInfo):  # the store's decoded JSON column
            object.__setattr__(self, "info", RunInfo.from_dict(self.info))

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-able values (``info`` as its JSON object)."""
        out = {f.name: getattr(self, f.name) for f in fields(RunRecord)}
        out["info"] = self.info.to_dict()
        return out


@dataclass(frozen=True)
class RemovedRun:
    """What deleting a run removed (``Database.remove``): the run as it was, and its raw folder
    (None where it had none of its own: a capture imported in place is the user's file, left)."""

    run: RunRecord
    folder: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.run.id,
            "name": self.run.name,
            "status": self.run.status,
            "folder": self.folder,
        }


def ncu_timed(run: RunRecord) -> bool:
    """Whether a run's durations are ncu's own (each kernel replayed alone, clocks locked to
    base) rather than times as the kernels ran (nsys, torch.profiler, and CUPTI in ncu's
    per-function plan)."""
    return run.tool == "ncu" and (run.info.ncu_plan or {}).get("durations") != "cupti"


# What `profkit runs --format json` lists of each run.
RUN_LIST_FIELDS = (
    "id",
    "name",
    "status",
    "source",
    "workload",
    "precision",
    "mode",
    "batch_size",
    "iters",
    "device",
    "tool",
    "tool_version",
    "metric_set",
    "gpu_name",
    "compute_capability",
    "activity",
    "kernel_count",
    "gpu_time_ns",
    "finished_at",
)


@dataclass(frozen=True)
class TopKernel:
    """One kernel name (in one precision) among a run's most expensive."""

    name: str
    launches: int
    total_ns: int
    pct: float  # of the run's GPU time (CPU self time for CPU runs)
    precision: Precision | None
    tensor_core: bool | None
    evidence: Evidence | None  # its first launch's


@dataclass(frozen=True)
class MemoryOps:
    """memcpy or memset operations of a timeline capture: how many, and their GPU time."""

    count: int
    time_ns: int


@dataclass(frozen=True)
class MatrixWork:
    """Tensor-core coverage of a run's matrix work: the time of its GEMM, convolution and
    attention kernels (``family`` gemm, conv or attention; ``analyze.matrix.MATRIX_FAMILIES``)
    and how much of it ran on tensor cores. Launches whose tensor-core use nothing told are
    ``undecided``: in the time, not in the tensor-core time. Times are nanoseconds (floats per
    iteration in a diff whose runs' iteration counts differ); shares are percentages, 2 places.
    Made by ``analyze.matrix.matrix_work`` alone."""

    time_ns: float  # the matrix kernels' summed duration
    tensor_core_time_ns: float  # of it, on tensor cores
    undecided_time_ns: float  # of it, tensor-core use unknown (counted out of tensor_core_time_ns)
    tensor_core_pct: float | None  # tensor_core_time_ns over time_ns; None without matrix work
    gpu_time_pct: float  # time_ns over all the run's GPU time (0.0 without GPU time)


@dataclass(frozen=True)
class ModuleRow:
    """One module of a run's by-module view (``analyze.modules``): its kernels and those of
    every module below it, at the view's depth of the module tree. Times are integer
    nanoseconds (floats per iteration in a diff whose runs' iteration counts differ)."""

    module: str  # its path from the model ("" the model's own code), or
    #                                 "(optimizer)", "(outside modules)", "(CrossEntropyLoss)"
    #                                 (another top-level module), "(not attributed)"
    module_type: str | None  # its class (Linear), where a kernel of its own says so
    launches: float
    time_ns: float  # GPU time of its kernels and its submodules'
    time_pct: float  # of the run's kernel time (2 places)
    time_by_precision_ns: dict[str, float]  # precision -> time, largest first
    time_by_phase_ns: dict[str, float]  # forward / backward / optimizer (/ unknown) -> time
    matrix_time_ns: float  # of it, GEMM, conv and attention kernels (analyze.matrix)
    # the share of that on tensor cores; None without matrix work
    matrix_tensor_core_pct: float | None


@dataclass(frozen=True)
class ModuleView:
    """A run's GPU time by module (``Run.modules``, the summary's ``modules``): one row per
    module at ``depth`` levels of the module tree, most time first; the rows' times add up to
    the run's kernel time."""

    depth: int | None  # levels shown (a list's index counts with its name); None: whole paths
    rows: list[ModuleRow]


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
    unclassified_time_ns: int  # kernels whose tensor-core use nothing told
    time_by_precision_ns: dict[Precision, int]  # largest first
    kernels_by_precision: dict[Precision, int]  # most first
    time_by_family_ns: dict[str, int]
    evidence: dict[Evidence, int]  # launches per kind of evidence
    # time whose precision each kind of evidence decided, most first
    time_by_evidence_ns: dict[Evidence, int]
    top_kernels: list[TopKernel]
    memory_ops: dict[str, MemoryOps]  # memcpy / memset, apart from the kernels
    # tensor-core coverage of the GEMM, conv and attention kernels' time (the headline's
    # figure beside tensor_core_time_pct); None for a run of CPU operators (no tensor cores)
    matrix_work: MatrixWork | None = None
    ranks: RankReport | None = None  # a distributed job's per-rank figures; None for one process
    # GPU time by module (analyze.modules); None where the capture has no module attribution
    modules: ModuleView | None = None
    tuning: Tuning | None = None  # the run's latest tuning (profkit tune); None where none

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["tuning"] = self.tuning.to_dict() if self.tuning is not None else None
        return out

    # ---- in a notebook: a line, or a card with the headline figures and the top kernels
    def _cpu(self) -> bool:
        return self.activity == "cpu_op"

    def headline(self) -> list[tuple[str, str]]:
        """The headline figures as (label, text) pairs, in CPU words for a run of CPU operators
        (calls, CPU self time, no tensor-core figures)."""
        from .formatting import fmt_ns, pct

        total = self.gpu_time_ns
        shares = ", ".join(
            f"{p} {100 * t / total:.1f}%"
            for p, t in self.time_by_precision_ns.items()
            if total and t
        )
        if self._cpu():
            return [
                ("operator calls", f"{self.kernels:,}"),
                ("CPU self time", fmt_ns(total)),
                ("time by precision", shares or "-"),
            ]
        facts = [
            ("kernel launches", f"{self.kernels:,}"),
            ("GPU time", fmt_ns(total)),
            ("time by precision", shares or "-"),
        ]
        mw = self.matrix_work
        if mw is not None:
            facts.append(
                (
                    "tensor cores, of matrix work",
                    "no GEMM, conv or attention kernels"
                    if mw.tensor_core_pct is None
                    else f"{pct(mw.tensor_core_pct)} of {fmt_ns(mw.time_ns)} (GEMM, conv, attention)",
                )
            )
        facts.append(("tensor cores, of all GPU time", pct(self.tensor_core_time_pct)))
        return facts

    def __repr__(self) -> str:
        from .formatting import fmt_ns, pct

        if self._cpu():
            figures = (
                f"{self.kernels:,} CPU operator calls, {fmt_ns(self.gpu_time_ns)} CPU self time"
            )
        else:
            figures = f"{self.kernels:,} kernel launches, {fmt_ns(self.gpu_time_ns)} GPU time"
            if self.matrix_work is not None and self.matrix_work.tensor_core_pct is not None:
                figures += f", tensor cores {pct(self.matrix_work.tensor_core_pct)} of matrix work"
        top = next(iter(self.time_by_precision_ns.items()), None)
        if top and self.gpu_time_ns:
            figures += f", mostly {top[0]} ({100 * top[1] / self.gpu_time_ns:.0f}%)"
        return f"<Summary of run {self.run!r}: {figures}>"

    def _repr_html_(self) -> str:
        from .formatting import html_card

        return html_card("Summary of run", self.run, self.headline(), **self.top_table())

    def top_table(self) -> dict[str, Any]:
        """The top kernels (operators) as :func:`profkit.formatting.html_card`'s table."""
        from .formatting import fmt_ns

        cpu = self._cpu()
        columns = (
            ["operator" if cpu else "kernel", "precision"]
            + ([] if cpu else ["tensor cores"])
            + ["calls" if cpu else "launches", "time", "share"]
        )
        rows = [
            [k.name, k.precision or "-"]
            + ([] if cpu else ["?" if k.tensor_core is None else "yes" if k.tensor_core else "no"])
            + [f"{k.launches:,}", fmt_ns(k.total_ns), f"{k.pct:.1f}%"]
            for k in self.top_kernels
        ]
        n = len(columns)
        return {
            "columns": columns,
            "rows": rows,
            "numeric": {n - 3, n - 2, n - 1},
            "caption": f"top {'operators' if cpu else 'kernels'} by {'CPU self' if cpu else 'GPU'} time",
        }


# ---------------------------------------------------------------------------------- ranks
@dataclass(frozen=True)
class RankFigures:
    """One rank of a distributed run (``--nproc-per-node``). Communication is the kernels of
    ``family`` communication (NCCL) on GPUs; on the CPU, gloo's collective ranges
    (``gloo:all_reduce``: gloo does the work on threads of its own, the c10d operators only
    hand it over), their count and wall time. Times are integer nanoseconds."""

    rank: int
    devices: list[int]  # the GPUs its kernels ran on
    kernels: int  # launches (CPU operator calls)
    gpu_time_ns: int  # their summed duration (CPU self time)
    comm_kernels: int
    comm_time_ns: int
    compute_time_ns: int  # gpu_time_ns less the communication kernels' (operators') time
    # Of comm_time_ns, how long a compute kernel of the same rank ran on the same GPU at the
    # same time (both as unions of intervals: concurrent kernels count once). None where the
    # run has no kernel start times, or for CPU operators.
    comm_overlap_ns: int | None
    comm_overlap_pct: float | None


@dataclass(frozen=True)
class RankIteration:
    """One rank's part of one measured iteration."""

    rank: int
    start_ns: int | None  # its iteration range's start, on the capture's clock
    wall_ns: int | None
    kernels: int  # launched inside it (any thread of the rank's process)
    gpu_time_ns: int
    comm_time_ns: int


@dataclass(frozen=True)
class IterationSkew:
    """One measured iteration across the ranks. In data-parallel training every rank meets
    the others in the gradient all-reduce: a rank that gets there first waits inside the NCCL
    kernels, so its communication time grows by the wait. The rank with the least
    communication time in an iteration is the one the others waited for (``waited_for``),
    and ``wait_ns`` is how much longer the most-waiting rank spent in communication."""

    iteration: str  # the iteration range's name (<tag>.iterN)
    start_skew_ns: int | None  # latest rank's start less the earliest's
    end_skew_ns: int | None  # latest rank's end less the earliest's
    waited_for: int | None
    wait_ns: int | None
    ranks: list[RankIteration]


@dataclass(frozen=True, slots=True)
class LaunchCountDifference:
    """A (name, precision) pair one rank launched a different number of times than the other."""

    name: str
    precision: str
    launches: int  # this rank's (0: none)
    vs_launches: int  # the other rank's (0: none)


@dataclass(frozen=True, slots=True)
class PrecisionDifference:
    """A kernel name one rank ran in other precisions than the other."""

    name: str
    precisions: list[str]  # this rank's, sorted
    vs_precisions: list[str]  # the other rank's, sorted


@dataclass(frozen=True)
class RankDifference:
    """How one rank's kernels differ from rank 0's: ``kernels`` lists (name, precision) pairs
    launched a different number of times (0 where one side has none), ``precisions`` the
    kernel names run in other precisions than rank 0's."""

    rank: int
    vs: int
    kernels: list[LaunchCountDifference]
    precisions: list[PrecisionDifference]


@dataclass(frozen=True)
class RankReport:
    """A distributed run's ranks side by side: what ``summary``, ``ranges`` and the report show."""

    world_size: int
    activity: str
    ranks: list[RankFigures]
    iterations: list[IterationSkew]
    differences: list[RankDifference]  # ranks whose kernels differ from rank 0's
    same_kernels: bool  # every rank launched the same kernels, as often, in the same precisions
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------- benchmarks
# What ``spread_ms`` is, as the tables and the JSON say it.
SPREAD = "semi-interquartile range: (p75_ms - p25_ms) / 2 of the per-iteration times"


@dataclass(frozen=True)
class BenchRow:
    """One (precision, mode) combination of a benchmark (``profkit bench``). Times are the
    measured iterations' (after the warm-up) in milliseconds: CUDA events on a GPU,
    ``time.perf_counter_ns`` on the CPU. None where the combination failed or a figure does
    not apply (peak memory on the CPU; agreement for step functions and the reference itself)."""

    precision: str
    mode: str
    status: str  # ok, or failed (``error`` says why, in one line)
    reference_only: bool = False  # fp32 eager, run only as the reference for agreement
    error: str | None = None
    median_ms: float | None = None
    spread_ms: float | None = None  # see SPREAD
    p25_ms: float | None = None
    p75_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    items_per_s: float | None = None  # batch_size / median seconds
    s_per_item: float | None = None  # median seconds / batch_size
    peak_memory_bytes: int | None = (
        None  # torch.cuda.max_memory_allocated over the measured iterations
    )
    max_abs_diff: float | None = None  # largest |output - fp32 eager output|, inference workloads
    top1_agreement: float | None = None  # share of positions whose argmax over the last dim agrees
    note: str | None = None  # why agreement is n/a, where it is
    iter_ns: list[int] = field(default_factory=list)  # each measured iteration's time

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class BenchInfo(TypedDict, total=False):
    """A benchmark's ``info``: where the workload came from and what it ran with."""

    workload_path: str
    python: str
    cuda_version: str | None
    options: dict[str, bool]  # the layout and library options that were on (channels_last, ...)
    rounds: int  # with --rounds N (N > 1): the processes each combination was timed in
    round_medians_ms: dict[str, list[float]]  # "fp16 eager": each process's median, in round order


@dataclass(frozen=True)
class BenchRecord:
    """A benchmark of one workload over precisions x modes; ``to_dict()`` is what
    ``profkit bench --format json`` prints. ``id`` is None until it is stored."""

    id: int | None
    workload: str
    batch_size: int
    device: str
    iters: int
    warmup: int
    precisions: list[str]
    modes: list[str]
    created_at: str
    rows: list[BenchRow]  # modes outer, precisions inner; the reference last
    gpu_name: str | None = None
    torch_version: str | None = None
    # workload file, python and CUDA versions
    info: BenchInfo = field(default_factory=lambda: BenchInfo())

    @property
    def ok(self) -> bool:
        """Whether every combination asked for ran (the reference's failure only makes agreement n/a)."""
        return all(r.status == "ok" for r in self.rows if not r.reference_only)

    def row(self, precision: str, mode: str) -> BenchRow | None:
        return next((r for r in self.rows if r.precision == precision and r.mode == mode), None)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "rows"}
        return {**out, "spread": SPREAD, "rows": [r.to_dict() for r in self.rows]}


# ------------------------------------------------------------------------------ profkit tune
@dataclass(frozen=True)
class TuneTrial:
    """One line of a tuning (``profkit tune``): a fix (or fixes together) tried on the run's own
    workload or program and timed against the run's setting (the baseline, ``fixes`` empty), or
    a fix profkit cannot apply itself, with its estimate. Times are milliseconds a step, as
    ``BenchRow``'s (median and spread of the timed steps); savings are the baseline's median
    less this one's.

    ``verdict``: ``baseline``; ``gain`` (it saves more than both spreads and the baseline's drift together, and outputs
    agree); ``no gain``; ``outputs disagree`` (beyond ``tolerance``); ``failed`` (``note`` says
    why); ``not tried`` (it cannot be applied here: ``note`` says why); ``estimate`` (it needs
    the user's code: ``estimate_ms`` is an estimate, never a measurement)."""

    fixes: list[str]  # fix ids (rules.toml [[fix]]); [] for the baseline
    title: str
    verdict: str
    findings: list[str] = field(default_factory=list)  # the findings it answers
    code: list[str] = field(default_factory=list)  # the lines that apply it
    median_ms: float | None = None
    spread_ms: float | None = None
    p25_ms: float | None = None
    p75_ms: float | None = None
    saving_ms: float | None = None
    saving_pct: float | None = None  # of the baseline's median
    estimate_ms: float | None = None  # verdict estimate: at most this much a step
    estimate_pct: float | None = None
    max_abs_diff: float | None = None  # largest |output - baseline output|
    rel_diff: float | None = None  # max_abs_diff over the baseline output's largest magnitude
    top1_agreement: float | None = None
    tolerance: float | None = None  # rel_diff allowed for its precision
    agreement: str | None = None  # "agree", "disagree", or "n/a: why"
    note: str | None = None
    iter_ns: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def measured(self) -> bool:
        return self.median_ms is not None


@dataclass(frozen=True)
class Tuning:
    """``profkit tune``'s answer for a run: its baseline and every fix tried or estimated,
    ranked (measured gains by saving, then estimates, then the rest); stored with the run
    (``tune_trials``)."""

    run: str
    run_id: int
    target: str  # the workload's name, or the program's command line
    device: str
    iters: int
    warmup: int
    created_at: str
    baseline: TuneTrial
    trials: list[TuneTrial]

    @property
    def best(self) -> TuneTrial | None:
        """The measured fix that saves most, with outputs that agree; None where none gains."""
        gains = [t for t in self.trials if t.verdict == "gain"]
        return gains[0] if gains else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        best = self.best
        out["best"] = None if best is None else best.to_dict()
        return out
