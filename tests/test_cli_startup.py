"""What keeps the everyday commands quick (issue 12: `--help`, `summary`, `runs`, `kernels` under
0.3 s; issue 37, on Typer with Rich's own tables: `--help` under 0.35 s, `summary` under 0.6 s):
which modules they import."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from profkit import render

from .conftest import NCU_DATA, cli

CAPTURE = NCU_DATA / "vgg16_fp16_eager.raw.csv.gz"
# Each of these alone takes longer to import than the rest of a command: none is imported by
# the everyday commands. Typer is the command line (issue 37): every command imports it, and
# pydantic, with which Typer converts the values given; --help imports Rich (Typer's help) but
# no pydantic (nothing is converted).
HEAVY = ("pandas", "numpy", "torch", "sqlite_utils", "ncu_report")


def imported_modules(*args: str) -> set[str]:
    """The modules ``python -m profkit ARGS`` imports, its output a pipe, as `-X importtime` lists them."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PROFKIT_DB", "COLUMNS", "TTY_COMPATIBLE", "FORCE_COLOR")
    }
    p = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "profkit", *args],
        capture_output=True,
        text=True,
        env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return set(re.findall(r"^import time:.*\|\s*([\w.]+)\s*$", p.stderr, re.M))


@pytest.fixture(scope="module")
def vgg_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("startup") / "profkit.db"
    assert cli("import", CAPTURE, "--name", "v", db=db).exit_code == 0
    return db


@pytest.mark.parametrize(
    "args", [["--help"], ["summary", "v"], ["runs"], ["kernels", "v"]], ids=" ".join
)
def test_everyday_commands_import_nothing_heavy(vgg_db, args):
    modules = imported_modules(*args, *(["--db", str(vgg_db)] if args != ["--help"] else []))
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert not heavy, heavy
    assert "typer" in modules
    if args == ["--help"]:
        assert "pydantic" not in modules


def test_no_private_names_of_click_rich_or_typer():
    """profkit reaches nothing of Click's, Rich's or Typer's that starts with an underscore (a
    module, a class, an attribute): what it uses is their public API."""
    import ast
    from pathlib import Path

    found = []
    for path in sorted((Path(render.__file__).parent).rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in ("click", "rich", "typer"):
                        aliases[a.asname or a.name.split(".")[0]] = a.name
                        found += [f"{path.name}: import {a.name}"] if "._" in a.name else []
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                "click",
                "rich",
                "typer",
            ):
                names = [node.module or ""] + [a.name for a in node.names]
                if any(n.startswith("_") or "._" in n for n in names):
                    found.append(
                        f"{path.name}: from {node.module} import {', '.join(a.name for a in node.names)}"
                    )
        for node in ast.walk(tree):  # click._x, typer.core._x, rich.console._x
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in aliases:
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
