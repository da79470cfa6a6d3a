"""A run's GPU time (a CPU run's: CPU self time) by module: the by-module view of ``profkit
summary``, ``Run.modules`` and ``profkit diff --match module``.

Every kernel row of a run with attribution names the module whose code launched it (its path
from the model, ``model.layers.0.self_attn.q_proj``; see ``parse.schema``). The view cuts the
paths at a depth of the module tree and sums each module's kernels with its submodules': at
depth 2, ``model.layers.0.self_attn.q_proj``'s time is ``model.layers.0``'s. A list's index
counts with its name (``layers.0`` is one level), so that depth 2 of a transformer is its
blocks. Rows that are no module's keep their own: ``""`` (the model's own code),
``(optimizer)``, ``(outside modules)``, ``(CrossEntropyLoss)`` (another top-level module) and
``(not attributed)`` (kernels the capture gives no module). So the rows' times add up to the
run's kernel time.

Per row: launches, time and its share of the run's, time per precision, per phase (forward,
backward, optimizer) and the tensor-core coverage of its matrix work (``analyze.matrix``'s
definition: the share of its GEMM, convolution and attention time on tensor cores). Summed
from ``Store.module_groups``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import UsageError, require_int
from ..formatting import num
from ..records import ModuleRow, ModuleView, RunRecord
from ..rows import ModuleGroup
from ..store import Store
from .matrix import MATRIX_FAMILIES

DEFAULT_DEPTH = 2
NOT_ATTRIBUTED = "(not attributed)"
UNKNOWN_PHASE = "unknown"
HOW = "profkit run records it (by default under ncu; --attribution under nsys and torch)"


def level_path(module: str, depth: int | None) -> str:
    """A module's path cut at ``depth`` levels (None: whole); a list's index counts with its
    name (``model.layers.0.mlp`` at depth 2 is ``model.layers.0``). Names in parentheses
    (``(optimizer)``) and ``""`` (the model's own code) stay as they are."""
    if depth is None or not module or module.startswith("("):
        return module
    levels: list[str] = []
    for part in module.split("."):
        if part.isdigit() and levels:
            levels[-1] += "." + part
        else:
            levels.append(part)
    return ".".join(levels[:depth])


def attributed(groups: Iterable[ModuleGroup]) -> bool:
    """Whether any kernel of these groups has a module: whether the capture has attribution."""
    return any(g.module is not None for g in groups)


def no_attribution(run: RunRecord) -> str:
    """Why a run has no by-module view, in one line."""
    harness = run.info.harness or {}
    why = harness.get("attribution_note") or ""
    how = HOW
    if harness.get("attribution") == "compiled":
        why = "a compiled model's kernels carry the operators Inductor fused, not modules"
        how = "profile the model in eager mode to see its modules"
    elif harness.get("attribution") == "off" and not why:
        why = "profiled with --no-attribution"
    return f"{run.name} has no module attribution" + (f" ({why})" if why else "") + f": {how}"


@dataclass
class _Acc:
    launches: float = 0.0
    time: float = 0.0
    matrix: float = 0.0
    matrix_tc: float = 0.0
    types: set[str] = field(default_factory=set)
    precision: dict[str, float] = field(default_factory=dict)
    phase: dict[str, float] = field(default_factory=dict)

    def add(self, g: ModuleGroup, scale: float) -> None:
        t = g.time_ns / scale
        self.launches += g.launches / scale
        self.time += t
        self.precision[g.precision] = self.precision.get(g.precision, 0.0) + t
        ph = g.phase or UNKNOWN_PHASE
        self.phase[ph] = self.phase.get(ph, 0.0) + t
        if g.family in MATRIX_FAMILIES:
            self.matrix += t
            if g.tensor_core:
                self.matrix_tc += t


def module_rows(
    groups: Iterable[ModuleGroup], depth: int | None, scale: float = 1.0, tensor_cores: bool = True
) -> list[ModuleRow]:
    """The groups summed per module at ``depth`` (None: whole paths), most time first; times
    divided by ``scale`` (a diff's iteration count). Without ``tensor_cores`` (CPU operators)
    no row has a tensor-core coverage."""
    groups = list(groups)
    types: dict[str, str] = {}
    for g in groups:  # a module's class, where a kernel of its own names it
        if g.module is not None and g.module_type and g.module not in types:
            types[g.module] = g.module_type
    acc: dict[str, _Acc] = {}
    for g in groups:
        key = NOT_ATTRIBUTED if g.module is None else level_path(g.module, depth)
        acc.setdefault(key, _Acc()).add(g, scale)
    total = sum(a.time for a in acc.values())
    rows = [
        ModuleRow(
            module=key,
            module_type=types.get(key),
            launches=num(a.launches),
            time_ns=num(a.time),
            time_pct=round(100 * a.time / total, 2) if total else 0.0,
            time_by_precision_ns={
                p: num(t) for p, t in sorted(a.precision.items(), key=lambda x: (-x[1], x[0]))
            },
            time_by_phase_ns={
                p: num(t) for p, t in sorted(a.phase.items(), key=lambda x: _phase_order(x[0]))
            },
            matrix_time_ns=num(a.matrix),
            matrix_tensor_core_pct=round(100 * a.matrix_tc / a.matrix, 2)
            if a.matrix and tensor_cores
            else None,
        )
        for key, a in acc.items()
    ]
    rows.sort(key=lambda r: (-r.time_ns, r.module))
    return rows


def _phase_order(phase: str) -> int:
    order = ("forward", "backward", "optimizer")
    return order.index(phase) if phase in order else len(order)


def check_depth(depth: object) -> None:
    """A depth of the module tree: a whole number of at least 1."""
    require_int("depth", depth, 1)


def module_view(store: Store, run: RunRecord, depth: int = DEFAULT_DEPTH) -> ModuleView | None:
    """A stored run's GPU time (a CPU run's: its operators' CPU self time, each call counted
    once) by module at ``depth`` levels; None where its capture has no module attribution."""
    check_depth(depth)
    groups = store.module_groups(run.id, kind=run.activity)
    if not attributed(groups):
        return None
    return ModuleView(
        depth=depth, rows=module_rows(groups, depth, tensor_cores=run.activity != "cpu_op")
    )


def require_attribution(store: Store, run: RunRecord) -> None:
    """Refuse a run whose capture has no module attribution, in one line."""
    if not attributed(store.module_groups(run.id, kind=run.activity)):
        raise UsageError(no_attribution(run))
