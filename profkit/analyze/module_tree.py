"""A run's kernel time by module, as a tree to open level by level (the report's module tree;
``analyze.modules`` is the same time as a table at one depth).

Built from the store's module groups (``Store.module_groups``: kernels grouped by module, phase,
precision, family and tensor-core verdict), never from the launches, so it costs the same for
any length of run. The module paths of the kernel table (``model.layers.0.mlp``) become nested
nodes: the model itself (path ``""``) at the top with its submodules below, beside the other
top-level entries the attribution names (``(optimizer)``, ``(outside modules)``, a loss module
called outside the model such as ``(CrossEntropyLoss)``), and ``(not attributed)`` for kernels
whose module the capture does not say. Each node's figures include its descendants'; a module
whose own code launched kernels besides its submodules' has them in an ``(own operators)``
child, so a node's children always add up to it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .matrix import MATRIX_FAMILIES
from .modules import NOT_ATTRIBUTED  # noqa: F401  (the tree's entry for kernels with no module)

if TYPE_CHECKING:
    from ..rows import ModuleGroup

MODEL = "(model)"  # the model's own node (module path "")
OWN = "(own operators)"  # a module's kernels launched by its own code, not its submodules'


@dataclass
class ModuleNode:
    """One node of the module tree: its figures summed over its groups and its descendants'."""

    name: str  # its label at its level: the path's last part, or a top-level entry
    path: str | None  # the module path ("" the model); None: not attributed
    module_type: str | None = None  # the module's class, where a kernel of its own says it
    time_ns: int = 0
    launches: int = 0
    precision_ns: dict[str, int] = field(default_factory=dict)  # time per precision, most first
    # time per phase ("unknown" where not told)
    phase_ns: dict[str, int] = field(default_factory=dict)
    matrix_ns: int = 0  # time of its GEMM, convolution and attention kernels
    matrix_tc_ns: int = 0  # of which on tensor cores
    children: list[ModuleNode] = field(default_factory=list)  # most time first

    @property
    def tensor_core_pct(self) -> float | None:
        """Tensor-core coverage of its matrix work (% of ``matrix_ns``, 2 places); None without any."""
        return round(100 * self.matrix_tc_ns / self.matrix_ns, 2) if self.matrix_ns else None

    def add(self, g: ModuleGroup) -> None:
        self.time_ns += g.time_ns
        self.launches += g.launches
        self.precision_ns[g.precision] = self.precision_ns.get(g.precision, 0) + g.time_ns
        phase = g.phase or "unknown"
        self.phase_ns[phase] = self.phase_ns.get(phase, 0) + g.time_ns
        if g.family in MATRIX_FAMILIES:
            self.matrix_ns += g.time_ns
            self.matrix_tc_ns += g.time_ns if g.tensor_core else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "type": self.module_type,
            "time_ns": self.time_ns,
            "launches": self.launches,
            "precision_ns": self.precision_ns,
            "phase_ns": self.phase_ns,
            "matrix_ns": self.matrix_ns,
            "matrix_tc_ns": self.matrix_tc_ns,
            "tensor_core_pct": self.tensor_core_pct,
            "children": [c.to_dict() for c in self.children],
        }


def _place(module: str | None) -> tuple[str, list[str]]:
    """The top-level entry a module path is under and the path's parts below it."""
    if module is None:
        return NOT_ATTRIBUTED, []
    if module.startswith("("):  # (optimizer), (outside modules), (CrossEntropyLoss)[.sub...]
        end = module.find(")")
        if end > 0:
            rest = module[end + 1 :].lstrip(".")
            return module[: end + 1], rest.split(".") if rest else []
    return MODEL, module.split(".") if module else []


def module_tree(groups: Iterable[ModuleGroup]) -> list[ModuleNode]:
    """The top-level nodes of the module tree of a run's module groups, most time first; their
    times add up to the groups' (the run's kernel time)."""
    top: dict[str, ModuleNode] = {}
    nested: dict[int, dict[str, ModuleNode]] = {}  # id(node) -> its children by name
    own: dict[int, ModuleNode] = {}  # id(node) -> its own kernels' node
    for g in groups:
        head, parts = _place(g.module)
        node = top.get(head)
        if node is None:
            node = top[head] = ModuleNode(
                head, "" if head == MODEL else None if head == NOT_ATTRIBUTED else head
            )
        node.add(g)
        for part in parts:
            kids = nested.setdefault(id(node), {})
            child = kids.get(part)
            if child is None:
                prefix = node.path + "." if node.path else ""
                child = kids[part] = ModuleNode(part, prefix + part)
                node.children.append(child)
            node = child
            node.add(g)
        if g.module_type and node.module_type is None:
            node.module_type = g.module_type
        mine = own.get(id(node))
        if mine is None:
            mine = own[id(node)] = ModuleNode(OWN, node.path, node.module_type)
        mine.add(g)

    def finish(node: ModuleNode) -> ModuleNode:
        mine = own.get(id(node))
        if node.children and mine is not None:
            mine.module_type = node.module_type
            node.children.append(mine)
        node.precision_ns = dict(sorted(node.precision_ns.items(), key=lambda kv: (-kv[1], kv[0])))
        node.children = sorted(
            (finish(c) for c in node.children), key=lambda c: (-c.time_ns, c.name)
        )
        return node

    return sorted((finish(n) for n in top.values()), key=lambda n: (-n.time_ns, n.name))
