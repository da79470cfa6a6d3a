"""The values profkit's options take, and the messages for those they refuse, are what they were
when the command line stood on Typer 0.29 (which converted every value with pydantic): for every
parameter of every command, the conversion of ~3000 values (the odd ones of the old test, and
numbers and words drawn from its alphabets) against Typer's own, recorded before the move to
plain Click by tests/cli_values/record.py (which needs Typer's private converter, so it ran on
the tree before the move)."""

from __future__ import annotations

import gzip
import json
import os
from enum import Enum
from pathlib import Path
from typing import Any

import click
import pytest

from profkit.cli import Value, app

RECORD = json.loads(gzip.decompress((Path(__file__).parent / "cli_values" / "values.json.gz").read_bytes()))

# Where profkit now differs from what pydantic made of a value, on purpose: pydantic read "0-6"
# as the int -6, and took an underscore before a float's "." or after its "E"; profkit refuses
# those (as Python's int() and float() do) with the message pydantic gave any other bad number.
DIFFERENT = {("int", "0-6"), ("float", "5_.27368"), ("float", "5_.8"), ("float", "+8E_4")}


# Parameters added since the recording, on purpose: issue 22 gave `sweep` every run option that
# applies to a job, and `compare` and `bench` the run options their library calls took already.
# Each converts exactly as `run`'s option of the same name did (checked below against its record).
ADDED = {"sweep compile_mode", "sweep keep_bn_fp32", "sweep channels_last", "sweep cudnn_benchmark", "sweep metrics",
         "sweep cpu_sampling", "sweep context_switches", "compare timeout", "compare cpu_sampling",
         "compare context_switches", "bench timeout"}


# Options no recorded one stands for (issue 23): a pair of switches, neither given by default (the
# library decides: attribution is on under ncu).
NEW = {f"{c} attribution": ("--attribution", "--no-attribution", None) for c in ("run", "compare", "sweep")}
# And an int option (issue 23: the summary's by-module table; tests/test_where_views.py checks it).
NEW_OPTIONS = {"summary module_depth"}
# A command added since the recording (issue 24: profkit check; tests/test_check.py checks it).
NEW_OPTIONS |= {f"check {p}" for p in ("run_ref", "config", "min_coverage", "no_fp32_matrix", "max_finding", "baseline",
                                       "max_slowdown", "max_launches", "strict", "fmt", "junit_xml", "db", "help")}
# Issue 24: --wide, a switch on every table command (tests/test_tables.py checks what it does).
NEW_OPTIONS |= {f"{c} wide" for c in ("runs", "kernels", "summary", "ranges", "diff", "compare", "bench")}
# Issue 25: --fresh-counters on every profiling command (tests/test_counters.py checks the plan it changes).
NEW_OPTIONS |= {f"{c} fresh_counters" for c in ("run", "compare", "sweep")}
# Issue 34: a tls:// scheduler's files for `sweep --address` (tests/test_sweep_security.py checks them).
NEW_OPTIONS |= {f"sweep {p}" for p in ("tls_ca_file", "tls_cert", "tls_key")}
# Issue 35: a program's steps and its end (tests/test_program_scripts.py), and import's step ranges.
NEW_OPTIONS |= {"run step", "run run_to_end", "import step_range"}
# A choice added since the recording (issue 23): --match module, listed in the messages too.
NEW_CHOICES = {"match": ("'exact', 'family', 'op'.", "'exact', 'family', 'op', 'module'.", "module")}
# Defaults changed since the recording, on purpose (issue 24: one default --match, family, for
# diff, compare and report --vs: what changed when a model was compiled or cast).
NEW_DEFAULTS = {"diff match": "'family'", "report match": "'family'"}


def recorded(key: str) -> dict[str, Any]:
    """The record of parameter ``key``; for one added since, that of `run`'s same option."""
    return RECORD["params"][f"run {key.split(' ', 1)[1]}" if key in ADDED else key]


def _name(p: click.Parameter) -> str | None:
    """A parameter's name; the --help option's is "help" (Click 8.5 names it ``_click_default_help``)."""
    return "help" if isinstance(p, click.Option) and "--help" in p.opts and not p.expose_value else p.name


def parameters() -> dict[str, tuple[click.Parameter, click.Context]]:
    """``"command name"`` -> (the parameter, a context for it), the --help options too."""
    root = click.Context(app, info_name="profkit")
    found = {f"profkit {_name(p)}": (p, root) for p in app.get_params(root)}
    for name, command in app.commands.items():
        ctx = click.Context(command, info_name=name, parent=root)
        found.update({f"{name} {_name(p)}": (p, ctx) for p in command.get_params(ctx)})
    return found


PARAMS = parameters()


def outcome(param: click.Parameter, ctx: click.Context, value: str) -> list[str]:
    try:
        out = param.type.convert(value, param, ctx)
    except click.BadParameter as exc:
        return ["error", "BadParameter", exc.format_message()]
    return ["ok", type(out).__name__, repr(out)]


def test_the_same_parameters(monkeypatch):
    """Every parameter Typer had, with its flags, and no other; each left out takes the default it
    took (as the command receives it)."""
    monkeypatch.delenv("PROFKIT_DB", raising=False)
    assert set(PARAMS) == set(RECORD["params"]) | ADDED | set(NEW) | NEW_OPTIONS
    root = app.make_context("profkit", ["runs"])
    received = {f"profkit {k}": v for k, v in root.params.items()}
    for name, command in app.commands.items():
        args = ["x" for p in command.params if isinstance(p, click.Argument) and p.required]
        ctx = command.make_context(name, args + (["--workloads", "w"] if name == "sweep" else []), parent=root)
        received.update({f"{name} {k}": v for k, v in ctx.params.items()})
    for key in [*RECORD["params"], *ADDED]:
        param, rec = PARAMS[key][0], recorded(key)
        assert list(param.opts) == rec["opts"], key
        if key in ("sweep workloads",) or isinstance(param, click.Argument) and param.required:
            continue
        if key.endswith((" help", " version")):  # not passed to the command
            assert isinstance(param, click.Option) and param.is_flag and key not in received, key
            continue
        value = received[key]
        assert repr(value.value if isinstance(value, Enum) else value) == NEW_DEFAULTS.get(key, rec["default"]), key


def test_the_new_switches():
    root = app.make_context("profkit", ["runs"])
    for key, (on, off, default) in NEW.items():
        param = PARAMS[key][0]
        assert isinstance(param, click.Option) and param.is_flag, key
        assert param.opts == [on] and param.secondary_opts == [off] and param.default is default, key
        name = key.split()[0]
        command = app.commands[name]
        args = ["x" for p in command.params if isinstance(p, click.Argument) and p.required]
        extra = ["--workloads", "w"] if name == "sweep" else []
        assert command.make_context(name, args + extra, parent=root).params["attribution"] is default
        assert command.make_context(name, args + extra + [off], parent=root).params["attribution"] is False
        assert command.make_context(name, args + extra + [on], parent=root).params["attribution"] is True


def test_every_parameter_converts_as_typer_did(tmp_path):
    """The same value (its type and repr) or the same message, for every recorded value; a path
    value is recorded relative to a folder holding a file, a folder and a locked file."""
    (tmp_path / "file.db").write_text("x")
    (tmp_path / "dir").mkdir()
    (tmp_path / "locked.db").write_text("x")
    os.chmod(tmp_path / "locked.db", 0)
    values = [v.replace("{tmp}", str(tmp_path)) for v in RECORD["values"]]
    kinds = set()
    for key in [*RECORD["params"], *ADDED]:
        (param, ctx), rec = PARAMS[key], recorded(key)
        if rec["kind"] == "bool":
            assert isinstance(param, click.Option) and param.is_flag, key
            continue
        assert isinstance(param.type, Value), key
        kinds.add(rec["kind"])
        mismatched = []
        for value, (raw, expected) in zip(values, zip(RECORD["values"], RECORD["outcomes"][rec["outcomes"]])):
            # "Value error, " opened pydantic's messages; the command line always dropped it.
            expected = [x.replace("{tmp}", str(tmp_path)).replace("Value error, ", "") for x in expected]
            if key.split()[1] in NEW_CHOICES:
                was, now, choice = NEW_CHOICES[key.split()[1]]
                expected = [x.replace(was, now) for x in expected]
                assert value != choice, (key, value)  # else it converts now where it did not
            got = outcome(param, ctx, value)
            if (rec["kind"], raw) in DIFFERENT:
                assert got[0] == "error" and got != expected and "Input should be a valid" in got[2], (key, raw, got)
            elif got != expected:
                mismatched.append((raw, got, expected))
        assert not mismatched, (key, mismatched[:5], len(mismatched))
    assert kinds == {"str", "int", "float", "Path", "enum"}


@pytest.mark.parametrize("args, message", [
    (["summary", "x", "--top", "-1"], "Invalid value for '--top': Input should be greater than or equal to 0"),
    (["diff", "a", "b", "--threshold", "nan"], "Invalid value for '--threshold': Input should be less than or equal to 1000"),
    (["runs", "-f", "xml"], "Invalid value for '--format' / '-f': 'xml' is not one of 'table', 'json', 'csv'."),
    (["import", "a\0b"], "Invalid value for 'PATH': embedded null byte"),
    (["summary", "x", "--to", "3"], "No such option: --to (Possible options: --top)"),
    (["runs", "a", "b"], "Got unexpected extra argument(s) (a b)"),
    (["sweep"], "Missing option '--workloads'."),
    (["kernels"], "Missing argument 'RUN'."),
    (["bench", "--show", "9" * 4301], "Invalid value for '--show': Unable to parse input string as an integer, "
                                      "exceeded maximum size"),
])
def test_usage_errors_read_as_before(args, message, tmp_path):
    from .conftest import cli, one_line_error

    db = tmp_path / "profkit.db"
    one_line_error(cli(*args, db=db), f"profkit: error: {message} (see: profkit ", code=2)
    assert not db.exists()
