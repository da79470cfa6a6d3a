"""A run's options: the one record of them. What a workload is asked to build (:class:`Spec`)
and how it is profiled (:class:`RunOptions`), each option once, with its default, its check,
its flag and help on the command line, and which commands take it.

From this record come: ``profkit run``'s, ``compare``'s, ``bench``'s and ``sweep``'s options
(``profkit.cli.run_options``), the library's parameters (``profkit.profile(**options)`` builds
a RunOptions), their validation (:meth:`RunOptions.check`), a run's default name
(:meth:`RunOptions.default_name`), what a sweep's job carries to its process
(:meth:`RunOptions.to_json`), and the spec the harness hands to ``build(spec)``.
Cheap to import (the CLI reads it for ``--help``): nothing but dataclasses, enums and re.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, Field, asdict, dataclass, field, fields, replace
from enum import Enum
from typing import Any

from .choices import CompileMode, Device, Mode, Precision, Tool, values
from .errors import UsageError, require_choice, require_int

PRECISIONS = values(Precision)
MODES = values(Mode)
DEVICES = values(Device)
COMPILE_MODES = values(CompileMode)
TOOLS = values(Tool)

MAX_RANKS = 64
# The longest `timeout_s` (30 days): any longer one is refused, never silently not applied (a
# timer of 1e308 s overflows the wait it is made of).
MAX_TIMEOUT_S = 30 * 24 * 3600
MAX_NAME = 120  # characters in a run name (it names a folder)
GPU_ONLY = ("ncu", "nsys")
# How a program's steps are found (``--step``; ``profkit.program``).
STEP_SOURCES = ("auto", "optimizer", "forward", "backward", "marker", "function")

# The commands that take run options. A sweep takes every option that applies to one job; it
# names its runs itself, and each of its jobs is one process on one GPU (no `nproc_per_node`).
# profkit tune profiles the target first (a run), then times its fixes: `iters` and `warmup` are
# its trials' timed and warm-up steps.
RUN, COMPARE, BENCH, SWEEP, TUNE = "run", "compare", "bench", "sweep", "tune"
ALL = frozenset({RUN, COMPARE, BENCH, SWEEP, TUNE})
PROFILED = frozenset({RUN, COMPARE, SWEEP, TUNE})  # the commands that profile (bench times)


@dataclass(frozen=True)
class Cli:
    """How an option reads on the command line: its flag, help, and the commands that take it
    (``helps``/``defaults``: what one command says or takes differently)."""

    flags: tuple[str, ...]
    help: str
    commands: frozenset[str]
    choices: type[Enum] | None = None
    helps: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    show_default: bool = True

    def help_for(self, command: str) -> str:
        return self.helps.get(command, self.help)


def _opt(default: Any, *flags: str, help: str, commands: frozenset[str] = ALL, **cli: Any) -> Any:
    return field(default=default, metadata={"cli": Cli(flags, help, commands, **cli)})


def cli_of(f: Field[Any]) -> Cli:
    return f.metadata["cli"]  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Spec:
    """What a workload is asked to build: ``build(spec)`` receives one (batch size, precision,
    mode, device, and the layout and library options)."""

    batch_size: int = 8
    precision: str = "fp32"
    mode: str = "eager"
    device: str = "cuda"
    compile_mode: str = "default"  # torch.compile's mode, for mode "compile"
    keep_bn_fp32: bool = (
        False  # fp16/bf16: BatchNorm layers keep fp32 weights (cuDNN takes mixed inputs)
    )
    channels_last: bool = False  # model and 4-D inputs in torch.channels_last memory format
    cudnn_benchmark: bool = (
        False  # torch.backends.cudnn.benchmark: cuDNN times its algorithms first
    )
    tf32: bool = (
        False  # torch.set_float32_matmul_precision("high"): fp32 matmuls on TF32 tensor cores
    )
    fused_optimizer: bool = False  # optimizers the workload makes take fused=True where they can
    cudnn_attention: bool = False  # scaled_dot_product_attention tries cuDNN's kernels first
    sdpa_attention: bool = False  # Hugging Face models made with eager attention run SDPA

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def options(self) -> dict[str, bool]:
        """The layout and library options that are on (what a run records beside precision and mode)."""
        return {k: True for k in SWITCHES if getattr(self, k)}


# The options beyond precision and mode, with how runs and tables show them, and how a run's
# default name shows them (after its precision).
SWITCHES = {
    "keep_bn_fp32": "BatchNorm fp32",
    "channels_last": "channels-last",
    "cudnn_benchmark": "cuDNN benchmark",
    "tf32": "TF32 matmuls",
    "fused_optimizer": "fused optimizer",
    "cudnn_attention": "cuDNN attention",
    "sdpa_attention": "SDPA attention",
}
NAME_PARTS = {
    "keep_bn_fp32": "bnfp32",
    "channels_last": "cl",
    "cudnn_benchmark": "cudnnbench",
    "tf32": "tf32",
    "fused_optimizer": "fusedopt",
    "cudnn_attention": "cudnnattn",
    "sdpa_attention": "sdpa",
}

# profkit bench, where the batch size, timed iterations or warm-up are not given: what suits a GPU,
# and small enough on the CPU that a 3 x 3 grid of a torchvision model takes minutes, not hours.
# (batch size, timed iterations, warm-up iterations)
BENCH_DEFAULTS = {
    "cuda": (8, 20, 5),
    "cpu": (1, 3, 1),
}


def _bench_default(i: int) -> str:
    return f"Default: {BENCH_DEFAULTS['cuda'][i]} on a GPU, {BENCH_DEFAULTS['cpu'][i]} on the CPU."


KEEP_BN_HELP = "With --precision fp16 or bf16: put BatchNorm layers back in fp32 after the cast (as .half() users do by hand)."
CHANNELS_LAST_HELP = "Lay the model and its 4-D image inputs out in torch.channels_last."
CUDNN_BENCH_HELP = "Set torch.backends.cudnn.benchmark: cuDNN times its algorithms in the warm-up and keeps the fastest."
TF32_HELP = 'Run fp32 matmuls on TF32 tensor cores: torch.set_float32_matmul_precision("high").'
FUSED_OPT_HELP = (
    "Make the optimizers the workload creates (Adam, AdamW, SGD, Adagrad) with fused=True, on "
    "the GPU: one kernel a step instead of one per parameter group."
)
CUDNN_ATTN_HELP = (
    "Let scaled_dot_product_attention try cuDNN's fused attention first, as recent PyTorch "
    "does by itself on Hopper and later GPUs only (elsewhere it tries it last); a call cuDNN "
    "does not take falls back to flash or memory-efficient attention as before. Needs torch 2.6+."
)
SDPA_ATTN_HELP = (
    "Make the Hugging Face models the workload or script creates with their eager attention "
    "(matmul, softmax, matmul) run PyTorch's fused scaled_dot_product_attention instead: "
    'model.set_attn_implementation("sdpa") as each is made.'
)


@dataclass(frozen=True)
class RunOptions:
    """Every option of a profiled run (``profkit run``), in the order ``--help`` lists them."""

    tool: str = _opt(
        "auto",
        "--tool",
        choices=Tool,
        commands=frozenset({RUN, COMPARE, TUNE}),
        help="auto (ncu where it can read counters, else nsys, else torch), ncu, nsys or torch "
        "(torch.profiler).",
        helps={
            COMPARE: "Profiler for every variant (auto: ncu where it can read counters, else nsys, "
            "else torch)."
        },
    )
    precision: str = _opt(
        Spec.precision,
        "--precision",
        choices=Precision,
        commands=frozenset({RUN, TUNE}),
        help="Precision the workload runs in (amp: torch.autocast).",
    )
    mode: str = _opt(
        Spec.mode,
        "--mode",
        choices=Mode,
        commands=frozenset({RUN, TUNE}),
        help="eager, torchscript (torch.jit.trace) or compile (torch.compile, compiled in the warm-up).",
    )
    compile_mode: str = _opt(
        Spec.compile_mode,
        "--compile-mode",
        choices=CompileMode,
        commands=PROFILED | {BENCH},
        help="torch.compile mode, with --mode compile (reduce-overhead replays CUDA graphs; their "
        "kernels are traced one by one).",
        helps={
            COMPARE: "torch.compile mode for the compile variant.",
            BENCH: "torch.compile mode for the compile combinations.",
            SWEEP: "torch.compile mode for the compile cells.",
        },
    )
    batch_size: int = _opt(
        Spec.batch_size,
        "--batch-size",
        help="Batch size passed to the workload.",
        helps={
            BENCH: "Batch size passed to the workload (items per iteration). " + _bench_default(0),
            SWEEP: "Batch size passed to the workloads.",
        },
        defaults={BENCH: None},
    )
    iters: int = _opt(
        1,
        "--iters",
        help="Measured iterations, each in its own NVTX range.",
        helps={
            COMPARE: "Measured iterations per variant.",
            SWEEP: "Measured iterations per run.",
            BENCH: "Timed iterations per combination, after the warm-up. " + _bench_default(1),
            TUNE: "Timed steps per trial, after the warm-up (the first profile takes run's "
            "default). Default: 20 on a GPU, 5 on the CPU.",
        },
        defaults={BENCH: None, TUNE: None},
    )
    warmup: int = _opt(
        3,
        "--warmup",
        help="Unprofiled iterations before the measured ones.",
        helps={
            COMPARE: "Unprofiled iterations before the measured ones (compilation happens here).",
            BENCH: "Untimed iterations first (torch.compile compiles here). " + _bench_default(2),
            TUNE: "Untimed steps before each trial's timed ones (torch.compile compiles here). "
            "Default: 5 on a GPU, 2 on the CPU.",
        },
        defaults={BENCH: None, TUNE: None},
    )
    device: str = _opt(
        Spec.device,
        "--device",
        choices=Device,
        help="cuda, or cpu to profile CPU operators with torch.profiler.",
        helps={
            COMPARE: "cuda, or cpu to compare CPU operators with torch.profiler.",
            BENCH: "cuda (timed with CUDA events), or cpu (with small defaults).",
            SWEEP: "cuda, or cpu (torch.profiler runs).",
        },
    )
    keep_bn_fp32: bool = _opt(
        Spec.keep_bn_fp32,
        "--keep-bn-fp32",
        help=KEEP_BN_HELP,
        helps={
            c: KEEP_BN_HELP.replace(
                "With --precision fp16 or bf16",
                "In the fp16 and bf16 "
                + ("variants" if c == COMPARE else "combinations" if c == BENCH else "cells"),
            )
            for c in (COMPARE, BENCH, SWEEP)
        },
    )
    channels_last: bool = _opt(Spec.channels_last, "--channels-last", help=CHANNELS_LAST_HELP)
    cudnn_benchmark: bool = _opt(Spec.cudnn_benchmark, "--cudnn-benchmark", help=CUDNN_BENCH_HELP)
    tf32: bool = _opt(Spec.tf32, "--tf32", help=TF32_HELP)
    fused_optimizer: bool = _opt(Spec.fused_optimizer, "--fused-optimizer", help=FUSED_OPT_HELP)
    cudnn_attention: bool = _opt(Spec.cudnn_attention, "--cudnn-attention", help=CUDNN_ATTN_HELP)
    sdpa_attention: bool = _opt(Spec.sdpa_attention, "--sdpa-attention", help=SDPA_ATTN_HELP)
    metrics: str | None = _opt(
        None,
        "--metrics",
        commands=PROFILED,
        show_default=False,
        help="ncu metric preset for this GPU (time, tensor, full) or a comma-separated list of "
        "metric names, profiled on every launch. Left out: the chip's default; on Hopper, "
        "the tensor counters on the first launch of each kernel function and every launch "
        "timed by CUPTI.",
        helps={
            COMPARE: "ncu metric preset or list (as for run).",
            SWEEP: "ncu metric preset or list (as for run), for the ncu cells.",
        },
    )
    fresh_counters: bool = _opt(
        False,
        "--fresh-counters",
        commands=PROFILED,
        help="ncu: count every kernel function again, instead of taking the counters kept from "
        "earlier runs on this GPU with the same driver, CUDA, PyTorch and packages.",
    )
    name: str | None = _opt(
        None,
        "--name",
        commands=frozenset({RUN}),
        show_default=False,
        help="Run name (default: workload-precision-mode-tool).",
    )
    timeout_s: float | None = _opt(
        None,
        "--timeout",
        show_default=False,
        help="Stop the profiler after this many seconds.",
        helps={
            SWEEP: "Stop each job's profiler after this many seconds.",
            COMPARE: "Stop each variant's profiler after this many seconds.",
            BENCH: "Stop a combination's process after this many seconds.",
            TUNE: "Stop the profiler, and each trial's process, after this many seconds.",
        },
    )
    cpu_sampling: bool = _opt(
        False,
        "--cpu-sampling",
        commands=PROFILED,
        help="nsys: sample CPU call stacks too (large captures).",
    )
    context_switches: bool = _opt(
        False,
        "--context-switches",
        commands=PROFILED,
        help="nsys: trace the process's CPU context switches.",
    )
    attribution: bool | None = _opt(
        None,
        "--attribution/--no-attribution",
        commands=PROFILED,
        show_default=False,
        help="Trace each kernel to the module, operator and input shapes that launched it. "
        "Default: on under ncu (its kernels are measured one by one, so the operator "
        "ranges cost nothing there) and for tune's profile, off under nsys and torch, whose "
        "timelines the ranges' host cost would stretch (4-5x per iteration on ResNet-50, "
        "H100). A compiled model's kernels are traced from Inductor's code.",
    )
    nproc_per_node: int = _opt(
        1,
        "--nproc-per-node",
        commands=frozenset({RUN}),
        help="Ranks of a distributed job on this machine (one GPU each), started by torchrun "
        "and profiled together as one run (nsys or torch), with a rank on every kernel.",
    )
    step: str = _opt(
        "auto",
        "--step",
        commands=frozenset({RUN, TUNE}),
        help="A program's steps (after --): auto (each optimizer step, else each call of the model, else "
        "each backward), optimizer, optimizer:CLASS, forward, forward:CLASS, backward, marker "
        "(profkit.step() in the script), or function:NAME (each return of that function or method).",
    )
    run_to_end: bool = _opt(
        False,
        "--run-to-end",
        commands=frozenset({RUN}),
        help="A program (after --) runs to its end with the profiler detached after the window, "
        "instead of being stopped there.",
    )

    # ------------------------------------------------------------------ from the caller
    @classmethod
    def make(cls, **given: Any) -> RunOptions:
        """The options from keyword arguments (the library's parameters); an unknown one is a
        UsageError naming it (a typo must not be silently dropped)."""
        for key in given:
            _refuse_unknown(key)
        return cls(**given)

    def to_json(self) -> dict[str, Any]:
        """The options as JSON values (a sweep's job file)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunOptions:
        return cls.make(**data)

    def spec(self) -> Spec:
        """What the workload is asked to build."""
        return Spec(**{f.name: getattr(self, f.name) for f in fields(Spec)})

    def attribution_for(self, tool: str) -> bool:
        """Whether a run under ``tool`` (ncu, nsys, torch: the one chosen) records attribution."""
        return self.attribution if self.attribution is not None else tool == "ncu"

    def switches(self) -> dict[str, bool]:
        """The layout and library options that are on (see :data:`SWITCHES`)."""
        return self.spec().options()

    # ------------------------------------------------------------------ checks
    def check(self) -> None:
        """Every value, and every combination of options, that a run refuses before anything
        runs (the workload itself is checked where it is found: ``launch.check``)."""
        self.check_values()
        if self.keep_bn_fp32 and self.precision not in ("fp16", "bf16"):
            raise UsageError(
                f"`keep_bn_fp32` keeps BatchNorm in fp32 in a model cast to fp16 or bf16, not in {self.precision}",
                "With amp, autocast already runs BatchNorm in fp32; use it with precision fp16 or bf16.",
            )
        if self.cudnn_benchmark and self.device != "cuda":
            raise UsageError(
                "`cudnn_benchmark` chooses cuDNN's algorithms, and cuDNN runs only on `device` cuda"
            )
        if self.tf32 and self.device != "cuda":
            raise UsageError(
                "`tf32` runs fp32 matmuls on a GPU's TF32 tensor cores: it needs `device` cuda"
            )
        if self.fused_optimizer and self.device != "cuda":
            raise UsageError(
                "`fused_optimizer` makes optimizers with fused=True, which PyTorch runs on a GPU: it "
                "needs `device` cuda"
            )
        if self.cudnn_attention and self.device != "cuda":
            raise UsageError(
                "`cudnn_attention` chooses cuDNN's attention kernels, and cuDNN runs only on "
                "`device` cuda"
            )
        self._check_compile()
        if self.device == "cpu" and self.tool in GPU_ONLY:
            raise UsageError(
                f"{self.tool} profiles GPU work; `device` cpu needs `tool` torch (or auto)"
            )
        if self.metrics is not None and self.tool not in ("ncu", "auto"):
            raise UsageError(f"`metrics` chooses ncu counters; `tool` {self.tool} collects none")
        if (self.cpu_sampling or self.context_switches) and self.tool not in ("nsys", "auto"):
            raise UsageError(
                f"`cpu_sampling` and `context_switches` are nsys options, not {self.tool}'s"
            )
        if self.fresh_counters and self.tool not in ("ncu", "auto"):
            raise UsageError(
                f"`fresh_counters` counts ncu's counters again; `tool` {self.tool} collects none"
            )
        if self.fresh_counters and self.metrics is not None:
            raise UsageError(
                "`fresh_counters` concerns ncu's default plan, which keeps counters across runs; with "
                "`metrics` every launch is profiled and nothing is kept",
                "Leave out one of them.",
            )
        if self.nproc_per_node > 1:
            if self.tool == "ncu" or self.metrics is not None:
                raise UsageError(
                    "`nproc_per_node` starts several ranks at once; ncu profiles one process's kernels "
                    "one by one, serialised and replayed",
                    "Use `tool` nsys (or torch) for a distributed job.",
                )
            if self.mode == "torchscript":
                raise UsageError(
                    "`nproc_per_node`: TorchScript cannot trace a DistributedDataParallel model",
                    "Use `mode` eager or compile.",
                )

    def check_values(self) -> None:
        """Each option's own value: a choice among its choices, a whole number in range, true
        or false, ... (what a grid of runs checks before it makes its cells)."""
        require_choice("precision", self.precision, PRECISIONS)
        require_choice("mode", self.mode, MODES)
        require_choice("device", self.device, DEVICES)
        require_int("batch_size", self.batch_size, 1)
        require_choice("compile_mode", self.compile_mode, COMPILE_MODES)
        for option in SWITCHES:
            require_bool(option, getattr(self, option))
        require_choice("tool", self.tool, TOOLS)
        require_int("iters", self.iters, 1)
        require_int("warmup", self.warmup, 0)
        if not isinstance(self.step, str):
            raise UsageError(f"`step` is a way to find steps, not {self.step!r}")
        check_step(self.step)
        require_bool("run_to_end", self.run_to_end)
        check_timeout(self.timeout_s)
        if self.metrics is not None and not isinstance(self.metrics, str):
            raise UsageError(
                f"`metrics` must be a preset name or comma-separated metric names, not {self.metrics!r}"
            )
        if self.name is not None:
            if not isinstance(self.name, str):
                raise UsageError(f"`name` must be a string, not {self.name!r}")
            check_run_name(self.name)
        for switch in ("cpu_sampling", "context_switches", "fresh_counters"):
            require_bool(switch, getattr(self, switch))
        require_int("nproc_per_node", self.nproc_per_node, 1)
        if self.nproc_per_node > MAX_RANKS:
            raise UsageError(
                f"`nproc_per_node` is at most {MAX_RANKS} (one machine's ranks), not {self.nproc_per_node}"
            )

    def _check_compile(self) -> None:
        if self.mode != "compile" and self.compile_mode != "default":
            raise UsageError(
                f"`compile_mode` {self.compile_mode} is torch.compile's: it needs `mode` compile"
            )
        if self.compile_mode == "reduce-overhead":
            if self.device != "cuda":
                raise UsageError(
                    "`compile_mode` reduce-overhead replays CUDA graphs: it needs `device` cuda"
                )
            if self.warmup < 3:
                # CUDA graph trees run eagerly, then record, then replay: measure replays only.
                raise UsageError(
                    "`compile_mode` reduce-overhead records its CUDA graphs during the first warm-up "
                    f"iterations: `warmup` must be at least 3 so the measured ones replay them, not "
                    f"{self.warmup}"
                )
        if self.mode == "compile" and self.warmup < 1:
            raise UsageError(
                "`mode` compile compiles in the warm-up, so that no measured iteration holds the "
                "compiler: `warmup` must be at least 1"
            )

    # ------------------------------------------------------------------ grids of runs
    def check_grid(
        self, precisions: Sequence[str], modes: Sequence[str], tools: Sequence[str] | None = None
    ) -> None:
        """Options given to a grid of runs (``compare``, ``bench``, ``sweep``) that no cell of it
        would take: each is refused in one line, never silently dropped. ``tools`` None: every
        cell has this record's tool."""
        if self.compile_mode != "default" and "compile" not in modes:
            raise UsageError(
                f"`compile_mode` {self.compile_mode} is torch.compile's: it needs compile among the "
                "`modes`"
            )
        if self.keep_bn_fp32 and not {"fp16", "bf16"} & set(precisions):
            raise UsageError(
                "`keep_bn_fp32` keeps BatchNorm in fp32 in a model cast to fp16 or bf16: it needs fp16 "
                "or bf16 among the `precisions`"
            )
        if tools is None:
            return
        if self.metrics is not None and "ncu" not in tools:
            raise UsageError("`metrics` chooses ncu counters: it needs ncu among the `tools`")
        if self.fresh_counters and "ncu" not in tools:
            raise UsageError(
                "`fresh_counters` counts ncu's counters again: it needs ncu among the `tools`"
            )
        for switch in ("cpu_sampling", "context_switches"):
            if getattr(self, switch) and "nsys" not in tools:
                raise UsageError(f"`{switch}` is an nsys option: it needs nsys among the `tools`")

    def cell(self, precision: str, mode: str, tool: str | None = None) -> RunOptions:
        """One cell of a grid of runs: these options, each where it applies: torch.compile's
        mode to the compile cells, BatchNorm kept in fp32 to the fp16 and bf16 cells, and (with
        ``tool``, a cell's own) ncu's metrics to the ncu cells and nsys's switches to the nsys
        cells."""
        by_tool: dict[str, Any] = (
            {}
            if tool is None
            else {
                "tool": tool,
                "metrics": self.metrics if tool == "ncu" else None,
                "fresh_counters": self.fresh_counters and tool == "ncu",
                "cpu_sampling": self.cpu_sampling and tool == "nsys",
                "context_switches": self.context_switches and tool == "nsys",
            }
        )
        return replace(
            self,
            precision=precision,
            mode=mode,
            compile_mode=self.compile_mode if mode == "compile" else "default",
            keep_bn_fp32=self.keep_bn_fp32 and precision in ("fp16", "bf16"),
            **by_tool,
        )

    # ------------------------------------------------------------------ names
    def default_name(self, workload: str, tool: str) -> str:
        """``workload-precision[-options]-mode-tool[-Nranks]`` (cpu for a CPU run's tool)."""
        return "-".join(
            [
                workload,
                self.precision,
                *(NAME_PARTS[k] for k in self.switches()),
                self.mode,
                "cpu" if self.device == "cpu" else tool,
                *([f"{self.nproc_per_node}ranks"] if self.nproc_per_node > 1 else []),
            ]
        )


def check_step(how: str) -> None:
    """``--step``'s value: a source, ``optimizer:CLASS`` / ``forward:CLASS``, or ``function:NAME``
    (a function or method of the script's, by name or qualified name: ``train_step``,
    ``Trainer.training_step``)."""
    source, _, name = how.partition(":")
    if (
        source not in STEP_SOURCES
        or (name and source not in ("optimizer", "forward", "function"))
        or (":" in how and not name)
        or (source == "function" and not name)
    ):
        raise UsageError(
            f"`step` {how!r} is not a way to find steps",
            "Use auto, optimizer, optimizer:CLASS, forward, forward:CLASS, backward, marker or "
            "function:NAME.",
        )
    if source == "function":
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name):
            raise UsageError(f"`step` {how!r}: {name!r} is no function's name")
    elif name and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise UsageError(f"`step` {how!r}: {name!r} is no class name")


def require_bool(option: str, value: object) -> None:
    if not isinstance(value, bool):
        raise UsageError(f"`{option}` is true or false, not {value!r}")


def check_timeout(t: object) -> None:
    if t is not None and (
        isinstance(t, bool)
        or not isinstance(t, (int, float))
        or not math.isfinite(t)
        or t < 1
        or t > MAX_TIMEOUT_S
    ):
        raise UsageError(
            f"`timeout_s` must be a number of seconds, at least 1 and at most {MAX_TIMEOUT_S} (30 days), "
            f"not {t!r}",
            "Leave it out for no time limit.",
        )


def check_run_name(name: str) -> None:
    """Refuse a run name that is not usable: it names the run's folder and must not read as an id."""
    if len(name) > MAX_NAME:
        raise UsageError(
            f"`name` is {len(name)} characters long; a run name has at most {MAX_NAME}"
        )
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name) or name.isdigit():
        raise UsageError(
            f"`name` {name!r} is not a usable run name",
            "Use letters, digits, '.', '_' and '-', starting with a letter, digit or '_', and not only digits "
            "(a number means a run id).",
        )


def for_command(command: str) -> list[Field[Any]]:
    """The options ``command`` takes, in the record's order."""
    return [f for f in fields(RunOptions) if command in cli_of(f).commands]


def default_for(f: Field[Any], command: str) -> Any:
    c = cli_of(f)
    return (
        c.defaults[command]
        if command in c.defaults
        else (f.default if f.default is not MISSING else None)
    )


def require_command_options(command: str, given: Mapping[str, Any]) -> None:
    """Refuse an option ``command`` does not take: a run option it has no use for, or a word
    that is no option at all (said with the nearest)."""
    takes = {f.name for f in for_command(command)}
    for key in given:
        if key in takes:
            continue
        _refuse_unknown(key)
        raise UsageError(
            f"{command} takes no option `{key}`", f"Its run options are {', '.join(sorted(takes))}."
        )


def _refuse_unknown(key: str) -> None:
    """A word that is no run option: a UsageError naming it and the nearest option (a typo
    must not be silently dropped)."""
    known = sorted(RunOptions.__dataclass_fields__)
    if key in known:
        return
    import difflib

    near = difflib.get_close_matches(key, known, n=1)
    raise UsageError(
        f"unknown option `{key}`" + (f" (did you mean `{near[0]}`?)" if near else ""),
        f"The options are {', '.join(known)}.",
    )
