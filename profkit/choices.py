"""The fixed sets of values profkit's options take, as enums: the one place they are listed.
The library checks values against them, and the CLI shows and checks them in ``--help``
(``--tool [auto|ncu|nsys|torch]``). Cheap to import: nothing but ``enum``."""

from __future__ import annotations

from enum import Enum


class Tool(str, Enum):
    auto = "auto"  # ncu where it can read counters, else nsys, else torch
    ncu = "ncu"  # Nsight Compute: per-kernel counters
    nsys = "nsys"  # Nsight Systems: the timeline
    torch = "torch"  # torch.profiler (Kineto)


class Precision(str, Enum):
    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"
    amp = "amp"  # torch.autocast: fp16 on CUDA, bf16 on the CPU


class Mode(str, Enum):
    eager = "eager"
    torchscript = "torchscript"  # torch.jit.trace
    compile = "compile"  # torch.compile, compiled during the warm-up


class CompileMode(str, Enum):
    default = "default"
    reduce_overhead = "reduce-overhead"  # CUDA graphs
    max_autotune = "max-autotune"


class Device(str, Enum):
    cuda = "cuda"
    cpu = "cpu"


class Match(str, Enum):
    exact = "exact"  # a kernel by its name
    family = "family"  # by kind of work (conv, gemm, ...)
    op = "op"  # by the operator that launched it (torch.profiler)
    module = "module"  # by the module whose code launched it (runs with attribution: profkit run)


# The one default of `diff`, `compare` and `report --vs` (and the library's): family answers
# "what changed when I compiled or cast it", where the kernels' exact names change with the
# precision, the tile sizes autotuning picks and the names Inductor generates.
DEFAULT_MATCH = Match.family


class Format(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


class CheckFormat(str, Enum):
    text = "text"  # one line per assertion and a summary line
    json = "json"
    junit = "junit"  # JUnit XML: one testsuite, one testcase per assertion


def values(choices: type[Enum]) -> tuple[str, ...]:
    return tuple(str(c.value) for c in choices)
