"""What keeps the everyday commands quick (issue 12: `--help`, `summary`, `runs`, `kernels` under
0.3 s; issue 37, on Typer: `--help` under 0.35 s, `summary` under 0.6 s): which modules they
import, and that the plain rendering profkit.render does itself, where rich would add no colour
and cut nothing, writes exactly what rich writes."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from contextlib import redirect_stdout
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    env = {k: v for k, v in os.environ.items() if k not in ("PROFKIT_DB", "COLUMNS", "TTY_COMPATIBLE", "FORCE_COLOR")}
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "profkit", *args], capture_output=True, text=True,
                       env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return set(re.findall(r"^import time:.*\|\s*([\w.]+)\s*$", p.stderr, re.M))


@pytest.fixture(scope="module")
def vgg_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("startup") / "profkit.db"
    assert cli("import", CAPTURE, "--name", "v", db=db).exit_code == 0
    return db


@pytest.mark.parametrize("args", [["--help"], ["summary", "v"], ["runs"], ["kernels", "v"]], ids=" ".join)
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
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("click", "rich", "typer"):
                names = [node.module or ""] + [a.name for a in node.names]
                if any(n.startswith("_") or "._" in n for n in names):
                    found.append(f"{path.name}: from {node.module} import {', '.join(a.name for a in node.names)}")
        for node in ast.walk(tree):  # click._x, typer.core._x, rich.console._x
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in aliases:
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def test_piped_output_is_richs(vgg_db):
    """The plain path writes, byte for byte, what the rich console writes for the same calls."""
    from profkit.api import open_db

    run = open_db(vgg_db).run("v")
    rows = list(run.iter_kernels())
    calls = [lambda: render.kernels(run, iter(rows), "table"), lambda: render.summary(run, run.summary(top=10), "table"),
             lambda: render.findings(run.findings()), lambda: render.runs(open_db(vgg_db).list_runs(), "table"),
             lambda: render.ranges(run, run.range_rows(), "table")]
    for call in calls:
        assert plain_output(call) == rich_output(call)


def plain_output(call: Any) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        call()
    return out.getvalue()


def rich_output(call: Any) -> str:
    """What ``call`` prints when every console is rich's own (as before the plain path)."""
    real = render._surely_no_terminal
    render._surely_no_terminal = lambda stream: False  # type: ignore[assignment]
    try:
        return plain_output(call)
    finally:
        render._surely_no_terminal = real


def test_no_terminal_as_rich_decides(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    for var in ("TTY_COMPATIBLE", "FORCE_COLOR"):
        monkeypatch.delenv(var, raising=False)
    assert render._surely_no_terminal(io.StringIO()) and not render._surely_no_terminal(Tty())
    assert isinstance(render.console(), render.PlainConsole)
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    assert render._surely_no_terminal(Tty())
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    assert not render._surely_no_terminal(io.StringIO())
    monkeypatch.delenv("TTY_COMPATIBLE")
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert not render._surely_no_terminal(io.StringIO())


# Text as it comes from capture files: kernel names with brackets, colons and angle brackets,
# markup-like and emoji-like words, backslashes, tabs, wide and combining characters.
ALPHABET = st.sampled_from(list("ab Z09_.,;<>()[]/\\:-+*#@!?'\"") + ["[bold]", "[/bold]", ":smile:", "\t", "…", "é",
                                                                        "漢", "\u0301", "\x1b", "\r", "[red]", "\\["])
CELLS = st.lists(ALPHABET, max_size=12).map("".join) | st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                                             max_size=14)
COLUMN = st.fixed_dictionaries({}, optional={
    "justify": st.sampled_from(["left", "right", "center"]), "no_wrap": st.booleans(),
    "overflow": st.sampled_from(["ellipsis", "fold", "crop"]), "min_width": st.none() | st.integers(0, 12),
    "max_width": st.none() | st.integers(1, 12)})


def check_table(title: str | None, left: bool, headers: list[str], options: list[dict[str, Any]],
                rows: list[list[str]]) -> None:
    def call() -> None:
        c = render.console()
        t = render.table(c, title, title_left=left)
        for header, opts in zip(headers, options):
            t.add_column(header, **opts)
        for row in rows:
            render.add_row(t, *row)
        c.print(t)

    assert outcome(plain_output, call) == outcome(rich_output, call)


@settings(max_examples=300, deadline=None)
@given(title=st.none() | CELLS, left=st.booleans(), headers=st.lists(st.sampled_from(["#", "kernel", "time", "TC A->B",
                                                                                       "a:b:", "[x]", "prec"]) | CELLS,
                                                                     min_size=1, max_size=4),
       options=st.lists(COLUMN, min_size=4, max_size=4), data=st.data())
def test_plain_tables_are_richs(title, left, headers, options, data):
    rows = data.draw(st.lists(st.lists(CELLS, min_size=len(headers), max_size=len(headers)), max_size=5))
    check_table(title, left, headers, options, rows)


ASCII = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30)


@settings(max_examples=300, deadline=None)
@given(title=st.none() | ASCII, headers=st.lists(st.sampled_from(["#", "kernel", "time", "launches", "TC A->B", "prec"]),
                                                 min_size=1, max_size=5),
       options=st.lists(st.fixed_dictionaries({"justify": st.sampled_from(["left", "right"])}, optional={
           "no_wrap": st.booleans(), "overflow": st.just("ellipsis"), "min_width": st.none() | st.integers(0, 40),
           "max_width": st.none() | st.integers(20, 40)}), min_size=5, max_size=5), data=st.data())
def test_plain_ascii_tables_are_richs(title, headers, options, data):
    """Tables like profkit's own, most of them written by the plain path."""
    rows = data.draw(st.lists(st.lists(ASCII, min_size=len(headers), max_size=len(headers)), max_size=8))
    check_table(title, False, headers, options, rows)


def outcome(output: Any, call: Any) -> tuple[str, str]:
    """What ``output(call)`` prints, or the kind of error it raises (rich's, for bad markup)."""
    try:
        return "printed", output(call)
    except Exception as exc:  # noqa: BLE001 - the kind is what is compared
        return "raised", type(exc).__name__


@settings(max_examples=300, deadline=None)
@given(text=CELLS, style=st.sampled_from(["", "bold"]), as_text=st.booleans())
def test_plain_lines_of_text_are_richs(text, style, as_text):
    def call() -> None:
        c = render.console()
        c.print(render.Text(text, style=style) if as_text else text)

    assert outcome(plain_output, call) == outcome(rich_output, call)
