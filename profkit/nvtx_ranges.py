"""The NVTX ranges profkit puts around measured iterations, and the profiler filters that
select them. One place decides the names so that the harness that opens the ranges and the
tools that filter on them cannot drift apart.

Ranges are NVTX start/end ranges in domain ``profkit`` named ``<tag>.iter<N>``, where the tag
is ``<workload>.<precision>.<mode>`` with anything outside ``[A-Za-z0-9_-]`` replaced. Start/end
ranges belong to the process, not to a thread: ncu's filter, nsys and profkit's importers
count every kernel any thread launched while one was open, so a training step's backward
kernels (launched by autograd's own thread) are the step's. (Push/pop ranges would hold only
the main thread's launches: 182 of a ResNet-18 AMP step's 420 kernels on the H100.) Nsight
filters use ``/`` to separate nested push/pop ranges, so a range name never contains one.
Under torch.profiler the iterations are ``record_function`` ranges of the same names, which
the trace importer treats as the process's too (:func:`is_iteration_range`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NamedTuple

DOMAIN = "profkit"


def tag(workload: str, precision: str, mode: str) -> str:
    parts = (workload, precision, mode)
    return ".".join(re.sub(r"[^A-Za-z0-9_-]", "_", p) for p in parts)


def iteration_range(run_tag: str, i: int) -> str:
    return f"{run_tag}.iter{i}"


def ncu_include_filter(run_tag: str) -> str:
    """``--nvtx-include`` value matching every measured iteration of ``run_tag`` (start/end
    ranges: no trailing ``/``, which would mean push/pop)."""
    return f"regex:{DOMAIN}@{re.escape(run_tag)}\\.iter[0-9]+"


_ITERATION = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.iter[0-9]+")
# torch.profiler's own step ranges, one per prof.step() of a schedule's recorded steps.
_PROFILER_STEP = re.compile(r"ProfilerStep#[0-9]+")
# Ranges an import is told are steps (``profkit import --step-range NAME``): a user's own or a
# framework's NVTX or record_function ranges, one per step.
_STEP_NAMES: ContextVar[frozenset[str]] = ContextVar("step_names", default=frozenset())


def is_iteration_range(name: str) -> bool:
    """Whether a range is a step: one of profkit's measured iterations (``<tag>.iter<N>``),
    torch.profiler's ``ProfilerStep#N``, or a range the import was told holds a step
    (:func:`step_ranges`). A step's range is the process's: every thread's work in it is the step's."""
    return bool(
        _ITERATION.fullmatch(name) or _PROFILER_STEP.fullmatch(name) or name in _STEP_NAMES.get()
    )


def is_named_step(name: str) -> bool:
    """A step range that is not profkit's own: torch.profiler's ``ProfilerStep#N`` or one an import
    names (:func:`step_ranges`). A push/pop one is taken for the process's; profkit's own
    push/pop iteration ranges of older runs stay their thread's, as they were recorded."""
    return bool(_PROFILER_STEP.fullmatch(name) or name in _STEP_NAMES.get())


@contextmanager
def step_ranges(names: Iterable[str]) -> Iterator[None]:
    """While importing: ranges of these names are steps (:func:`is_iteration_range`)."""
    token = _STEP_NAMES.set(frozenset(names))
    try:
        yield
    finally:
        _STEP_NAMES.reset(token)


# ------------------------------------------------------------------------------ operator ranges
# Attribution (``profkit.annotate``): in the measured iterations of an eager or TorchScript
# model, every PyTorch operator call the dispatcher sees below autograd is wrapped in one range
# (NVTX push/pop in the default domain, or a record_function range under torch.profiler)
# whose name carries the operator, the phase, the module that called it, its input shapes
# and dtypes:
#
#     pk.op|aten::addmm|fwd|model.layers.3.mlp.down_proj|Linear|[8,512];[512,64]|float16,float16
#
# Fields are separated by ``|``, which no operator name, module path, shape or dtype holds; no
# field holds ``/`` (Nsight's separator of nested ranges). Backward operators (``bwd``) carry
# the module whose forward created the autograd node that ran them; ``opt`` is an optimizer's
# step. The importers see these ranges like any other; profkit's attribution pass
# (:func:`op_label`) turns the innermost one into the kernel table's attribution columns and
# takes it out of ``nvtx_range`` and ``nvtx_path``, so a run's ranges are the same with or
# without attribution.
OP_PREFIX = "pk.op|"
PHASES = {"fwd": "forward", "bwd": "backward", "opt": "optimizer"}


def op_range(
    op: str, phase: str, module: str | None, module_type: str | None, shapes: str, dtypes: str
) -> str:
    """The name of an operator call's range (see above); ``module`` None: outside any module."""
    return f"{OP_PREFIX}{op}|{phase}|{'' if module is None else module}|{module_type or ''}|{shapes}|{dtypes}"


class OpLabel(NamedTuple):
    """What an operator range says: the kernel table's attribution of the kernels in it."""

    op: str
    phase: str | None  # forward, backward, optimizer (None: the range does not say)
    module: str | None  # module path ("" the model itself); None outside any module
    module_type: str | None  # the module's class
    shapes: str | None  # input shapes, ``[8,512];[512,64]`` (scalars left out)
    input_types: str | None  # input dtypes, ``float16,float16``


def op_label(name: str) -> OpLabel | None:
    """The attribution one of profkit's operator ranges gives (see above), or None for any
    other range. (The ranges PyTorch's own annotation writes, ``emit_nvtx`` and nsys
    ``--pytorch``, are read by ``profkit.parse.torch_nvtx``.)"""
    if not name.startswith(OP_PREFIX):
        return None
    fields = name[len(OP_PREFIX) :].split("|")
    if len(fields) != 6:
        return None
    op, phase, module, module_type, in_shapes, dtypes = fields
    return OpLabel(
        op,
        PHASES.get(phase, phase) or None,
        module if module or module_type else None,
        module_type or None,
        in_shapes or None,
        dtypes or None,
    )
