"""profkit's layers: every import inside profkit points down (or within its layer), and no two
modules import each other, however indirectly.

The graph is read from the source (``ast``), not from a running interpreter: every ``import``
counts wherever it is, inside a function (a lazy import is still a dependency) or under
``if TYPE_CHECKING:`` (a type is one too). Relative imports are resolved; ``from X import name``
is an edge to the module ``X.name`` where there is one, else to ``X``. Importing ``a.b`` runs
``a/__init__.py`` as well, but that implicit edge is not counted: a package's ``__init__`` is a
module like any other, with its own place.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "profkit"

# Bottom first. A module is placed by the longest entry naming it or a package above it
# ("parse.schema" before "parse"); "profkit" is the package's own __init__ (the public names)
# alone. A module may import any module of its own layer or of a layer below.
LAYERS: list[tuple[str, list[str]]] = [
    (
        "shared",
        [
            "version",
            "errors",
            "records",
            "rows",
            "formatting",
            "processes",
            "names",
            "choices",
            "options",
            "files",
            "parse.schema",
            "nvtx_ranges",
        ],
    ),
    (
        "launch side",
        [
            "tools",
            "gpu",
            "code_versions",
            "torchrun",
            "workloads",
            "harness",
            "kernel_timer",
            "kernel_counter",
            "steps",
            "annotate",
            "process",
            "program",
        ],
    ),
    ("verdicts", ["classify"]),
    ("readers", ["parse"]),
    ("store", ["store"]),
    ("analyses", ["analyze"]),
    (
        "jobs and pages",
        [
            "ingest",
            "ncu_counters",
            "launch",
            "benchmark",
            "cluster",
            "sweep_job",
            "doctor",
            "tuning",
            "report",
        ],
    ),
    ("front door", ["api"]),
    ("command and public names", ["cli", "render", "__main__", "profkit"]),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The profkit modules ``name`` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            targets = [
                f"{target}.{a.name}" if f"{target}.{a.name}" in known else target
                for a in node.names
            ]
        else:
            continue
        for t in targets:
            # "import profkit.parse.schema.X" style: the module that exists
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def layer_of(module: str) -> int | None:
    """The index of ``module``'s layer, or None where LAYERS does not place it."""
    short = "profkit" if module == "profkit" else module.removeprefix("profkit.")
    best: tuple[int, int] | None = None  # (length of the entry, layer)
    for i, (_, entries) in enumerate(LAYERS):
        for e in entries:
            if e == short or (e != "profkit" and short.startswith(e + ".")):
                if best is None or len(e) > best[0]:
                    best = (len(e), i)
    return None if best is None else best[1]


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated last), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(g.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n) :] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(g):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def upward_imports(g: dict[str, set[str]]) -> list[str]:
    out = []
    for m in sorted(g):
        for n in sorted(g[m]):
            lm, ln = layer_of(m), layer_of(n)
            if lm is not None and ln is not None and ln > lm:
                out.append(f"{m} ({LAYERS[lm][0]}) imports {n} ({LAYERS[ln][0]})")
    return out


def test_the_graph_sees_lazy_and_type_only_imports() -> None:
    g = graph()
    assert "profkit.store" in g["profkit.analyze.summary"]  # from ..store import Store
    assert "profkit.api" in g["profkit.cli"]  # inside a function
    assert "profkit.report.model" in g["profkit.report"]  # from . import model, page
    assert "profkit.parse.schema" in g["profkit"]  # under if TYPE_CHECKING


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in graph() if layer_of(m) is None]
    assert not unplaced, (
        f"place these modules in a layer of LAYERS (tests/test_layers.py): {unplaced}"
    )


def test_imports_point_down() -> None:
    up = upward_imports(graph())
    assert not up, "imports from a lower layer to a higher one:\n" + "\n".join(up)


def test_no_import_cycle() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_find_cycle_reports_the_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def layers_text() -> str:
    """LAYERS as the architecture page (docs/architecture.md) shows them: top first, one line each."""
    width = max(len(name) for name, _ in LAYERS)
    return "\n".join(f"{name:<{width}}  {', '.join(entries)}" for name, entries in reversed(LAYERS))


def test_the_architecture_page_shows_these_layers() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert f"```text\n{layers_text()}\n```" in page, (
        "docs/architecture.md's layers differ from LAYERS: paste\n" + layers_text()
    )
