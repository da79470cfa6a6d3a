"""The quick conversion of parameter values (profkit.cli.quick_values) against Typer's own: for
every parameter of every command and many values, the same result or the same error message,
and Typer's converter (with pydantic) is only built for the values the quick one leaves to it."""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

typer_core = pytest.importorskip("typer.core")
if not hasattr(typer_core._TyperParameter, "get_runtime_param"):
    pytest.skip("this Typer converts values with Click's types (no pydantic): nothing to compare", allow_module_level=True)

from typer._click import Context  # noqa: E402
from typer._coercion import build_runtime_param  # noqa: E402
from typer.main import get_command  # noqa: E402

from profkit.cli import QuickValue, app  # noqa: E402


def parameters() -> list[tuple[str, Any, Context]]:
    """(command name, parameter, a context for it) for every parameter, the --help options too."""
    group = get_command(app)
    root = Context(group, info_name="profkit")
    found = [("profkit", p, root) for p in group.get_params(root)]
    for name, command in group.commands.items():
        ctx = Context(command, info_name=name, parent=root)
        found += [(name, p, ctx) for p in command.get_params(ctx)]
    return found


PARAMS = parameters()


def outcome(converter: Any, value: Any, param: Any, ctx: Context) -> tuple[str, str, str]:
    try:
        out = converter.coerce(value, param=param, ctx=ctx)
    except Exception as exc:  # noqa: BLE001 - the kind and the message are what is compared
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        return ("error", type(exc).__name__, message)
    return ("ok", type(out).__name__, repr(out))


def same_as_typer(value: Any, kinds: tuple[type, ...] | None = None) -> None:
    for command, param, ctx in PARAMS:
        annotation = param.type_descriptor.annotation
        if kinds is not None and not (annotation in kinds or isinstance(annotation, type) and issubclass(annotation, kinds)):
            continue
        quick = param.get_runtime_param()
        typers = build_runtime_param(param.type_descriptor)
        assert outcome(quick, value, param, ctx) == outcome(typers, value, param, ctx), (command, param.name, value)


def test_every_parameter_has_a_quick_value():
    """So a Typer release that changes what quick_values relies on fails here, not silently slow."""
    kinds = set()
    for command, param, _ in PARAMS:
        assert isinstance(param.get_runtime_param(), QuickValue), (command, param.name)
        annotation = param.type_descriptor.annotation
        kinds.add(annotation if not issubclass(annotation, Enum) else Enum)
    assert kinds == {bool, str, int, float, Path, Enum}


VALUES = [None, True, False, 0, 3, 10, -1, 10.0, 2.5, "", "0", "3", "12", "007", "-1", "-0", "+5", "1_000", " 5", "5 ",
          "5.0", "5.", ".5", "1e3", "10.5", "999", "1000", "1000.0", "1001", "nan", "inf", "-inf", "12345678901234567890",
          "abc", "table", "TABLE", "json", "csv", "nope", "eager", "fp16", "auto", "ncu", "cuda", "family",
          "reduce-overhead", "a\udcff", "a\x00b", "-", ".", "relative/path", "/nonexistent/dir/x.db", "x" * 300]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_same_as_typer(value):
    same_as_typer(value)


def test_paths_same_as_typer(tmp_path):
    """A file, a folder, an unreadable file (as root, readable after all), a missing path."""
    (tmp_path / "file.db").write_text("x")
    (tmp_path / "dir").mkdir()
    locked = tmp_path / "locked.db"
    locked.write_text("x")
    os.chmod(locked, 0)
    for value in (tmp_path / "file.db", tmp_path / "dir", locked, tmp_path / "missing.db", tmp_path / "dir" / ".."):
        same_as_typer(str(value))
        same_as_typer(value)


def test_choices_same_as_typer():
    for _, param, _ in PARAMS:
        annotation = param.type_descriptor.annotation
        if isinstance(annotation, type) and issubclass(annotation, Enum):
            for member in annotation:
                for value in (member, member.value, member.value.upper(), member.name, member.value + " "):
                    same_as_typer(value, (Enum,))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789.-+_eE xnaifINF", max_size=12))
def test_numbers_same_as_typer(value):
    same_as_typer(value, (int, float))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
def test_any_text_same_as_typer(value):
    same_as_typer(value, (str, Enum))


def test_plain_values_do_not_build_typers_converter():
    """The values of an ordinary command line, and the defaults, are converted without Typer's
    converter (and so without pydantic)."""
    ordinary = {"verbose": True, "db": "/tmp/x.db", "version": False, "help": None, "run_ref": "v", "fmt": "json",
                "top": "5", "limit": "12", "threshold": "2.5", "tool": "nsys", "match": "family", "name": "r1",
                "workload": "vgg16", "precisions": "fp16,bf16", "path": "capture.csv.gz", "output": "out.html"}
    for command, param, ctx in PARAMS:
        quick = param.get_runtime_param()
        quick.typers = None  # built by the tests above for their odd values
        for value in (param.default, ordinary.get(param.name)):
            quick.coerce(value, param=param, ctx=ctx)
        assert quick.typers is None, (command, param.name)
