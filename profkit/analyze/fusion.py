"""What torch.compile's generated kernels took over: a diff's kernels of run A without a
counterpart in run B, traced by their launching operators to the kernels B generated.

Inductor names each Triton kernel after the ATen operators it fused
(``triton_poi_fused_add_native_layer_norm_2``), and a compiled run made by ``profkit run`` also
holds each kernel's operator list read from Inductor's code (``parse.compiled``: the kernel's
``op``, ``aten::add+aten::native_layer_norm``). A kernel of A is traced to a generated kernel of
B when the operator that launched it (its ``op``, where the capture recorded one) is among the
operators that kernel fused. Operators are compared by their bare name (no namespace, no
overload, no leading or trailing ``_``: ``aten::add_`` is ``add``, ``aten::_to_copy`` is
``to_copy``), word by word (words are ``_``-separated), as ATen names its variants: the name
within a fused one (``to`` in ``to_copy``, ``native_batch_norm`` in
``native_batch_norm_legit_no_training``), or, from an operator list only, a fused operator
naming the end of the launching one (``convolution`` for ``cudnn_convolution``, a backend's own
implementation of it). A generated kernel known to do no matrix math (its family is neither
GEMM, convolution nor attention) takes over no GEMM, convolution or attention kernel, whatever
the operators say: its operator list names the matrix operators whose inputs or outputs it
touches.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ..rows import KernelGroup
from .matrix import MATRIX_FAMILIES

K = TypeVar("K", bound=Hashable)

# A kernel torch.compile generated (Inductor's Triton kernels: poi, per, red, tem, ...).
GENERATED_PREFIX = "triton_"
# Its name's fused part: the operators it fused, joined by `_` (sorted; a trailing counter).
_FUSED_NAME = re.compile(r"^triton_[a-z]+_fused_(?P<ops>.+?)(?:_\d+)?$")


def generated(short_name: str | None) -> bool:
    """Whether a kernel is one torch.compile generated."""
    return bool(short_name) and str(short_name).startswith(GENERATED_PREFIX)


def bare(op: str) -> str:
    """An operator's bare name: no namespace, no overload, no leading or trailing ``_``."""
    return op.rpartition("::")[2].partition(".")[0].strip("_")


def _within(words: str, text: str) -> bool:
    """Whether ``words`` stand in ``text`` as whole ``_``-separated words."""
    return bool(words) and f"_{words}_" in f"_{text}_"


@dataclass(frozen=True)
class GeneratedKernel:
    """One of B's generated kernels, by what it says it fused: Inductor's operator list (bare
    names) where the run holds it, else its name's fused part."""

    ops: tuple[str, ...]
    name_ops: str
    matrix_free: bool  # its family says it does no GEMM, convolution or attention

    @classmethod
    def of(cls, group: KernelGroup) -> GeneratedKernel:
        short = group.short_name or group.name
        listed = tuple(dict.fromkeys(bare(o) for o in (group.op or "").split("+") if "::" in o))
        m = _FUSED_NAME.match(short)
        return cls(
            tuple(o for o in listed if o),
            m.group("ops").strip("_") if m and not listed else "",
            group.family is not None and group.family not in MATRIX_FAMILIES,
        )

    def fuses(self, op: str, family: str | None) -> bool:
        """Whether this kernel fused the operator ``op`` that launched a kernel of ``family``."""
        if self.matrix_free and family in MATRIX_FAMILIES:
            return False
        x = bare(op)
        if not x:
            return False
        if self.ops:
            return any(_within(x, y) or x.endswith(f"_{y}") for y in self.ops)
        return _within(x, self.name_ops)


@dataclass
class TakenOver(Generic[K]):
    """The part of one of A's keys traced to B's generated kernels: its time (ns, per
    iteration where scaled), the launching operators traced, and B's keys of the kernels
    that fused them."""

    time_ns: float = 0.0
    ops: list[str] = field(default_factory=list)
    into: list[K] = field(default_factory=list)


def taken_over(
    groups_a: Iterable[KernelGroup],
    key_a: Callable[[KernelGroup], K],
    keys: set[K],
    groups_b: Iterable[KernelGroup],
    key_b: Callable[[KernelGroup], K],
    scale_a: float = 1.0,
) -> dict[K, TakenOver[K]]:
    """For each of ``keys`` (A's keys without a counterpart in B), what of it B's generated
    kernels fused, by the operators that launched its kernels; ``into`` most B time first.
    Keys with nothing traced are left out."""
    generated_b: list[tuple[K, GeneratedKernel]] = []
    time_b: dict[K, float] = {}
    for g in groups_b:
        if g.kind == "kernel" and generated(g.short_name or g.name):
            k = key_b(g)
            generated_b.append((k, GeneratedKernel.of(g)))
            time_b[k] = time_b.get(k, 0.0) + g.time_ns
    out: dict[K, TakenOver[K]] = {}
    if not generated_b:
        return out
    for g in groups_a:
        k = key_a(g)
        if k not in keys or not g.op:
            continue
        # a generated kernel of A: its operator list
        ops = g.op.split("+") if "::" in g.op else [g.op]
        into = [kb for kb, gk in generated_b if any(gk.fuses(o, g.family) for o in ops)]
        if not into:
            continue
        t = out.setdefault(k, TakenOver())
        t.time_ns += g.time_ns / scale_a
        if g.op not in t.ops:
            t.ops.append(g.op)
        t.into.extend(kb for kb in into if kb not in t.into)
    for t in out.values():
        t.into.sort(key=lambda kb: -time_b[kb])
    return out
