"""MkDocs hook (``hooks:`` in mkdocs.yml): the pages made from the code at build time.

A page holding ``<!-- generated: cli -->`` gets the command reference, read from the command
object itself (``profkit.cli.app``: a Typer app is turned into its Click command through
``typer.main.get_command``, a Click group is used as it is), so it can never lag the CLI. A page
holding ``<!-- generated: findings -->`` gets the findings and classification rules of
``profkit/rules.toml``. Only the public API of Click and Typer is used (commands, their
parameters and help), nothing of ``profkit/cli.py``'s own helpers. The tests import this file
too (``tests/test_docs.py``) to check the docs' commands against the same command object.
"""

from __future__ import annotations

import html
import inspect
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "profkit" / "rules.toml"
MARKERS = {"<!-- generated: cli -->": "cli", "<!-- generated: findings -->": "findings"}


def cli_command() -> Any:
    """The ``profkit`` command as a Click command object (Click's or the one Typer vendors)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from profkit.cli import app

    try:
        import typer
    except ImportError:
        return app
    if isinstance(app, typer.Typer):
        return typer.main.get_command(app)
    return app


def subcommands(group: Any) -> Iterator[tuple[str, Any, Any]]:
    """(name, command, context) for each visible command, in the order ``--help`` lists them."""
    root = group.make_context("profkit", [], resilient_parsing=True)
    for name in group.list_commands(root):
        cmd = group.get_command(root, name)
        if cmd is None or getattr(cmd, "hidden", False):
            continue
        yield name, cmd, cmd.make_context(name, [], parent=root, resilient_parsing=True)


def option_strings(cmd: Any) -> set[str]:
    """Every option string a command takes (``--tool``, ``-o``, ``--no-report``)."""
    out: set[str] = set()
    for p in cmd.params:
        if getattr(p, "param_type_name", "") == "option":
            out.update(p.opts)
            out.update(p.secondary_opts)
    return out


def _text(s: str) -> str:
    """Help text as Markdown shows it: HTML and emphasis characters escaped (backticks kept: help
    texts quote commands in them), one line."""
    s = html.escape(" ".join(s.replace("\b", "").split()), quote=False)
    for ch in "\\*_[]":
        s = s.replace(ch, "\\" + ch)
    return s


def _code(s: str) -> str:
    return f"`` {s} ``" if "`" in s else f"`{s}`"


def _param_lines(cmd: Any, ctx: Any) -> list[str]:
    lines = []
    for p in cmd.params:
        if getattr(p, "hidden", False):
            continue
        record = p.get_help_record(ctx) if hasattr(p, "get_help_record") else None
        if record is not None:
            names, help_text = record
        elif getattr(p, "param_type_name", "") == "option":
            continue
        else:  # Click's arguments have no help record
            names = getattr(p, "human_readable_name", None) or str(p.name).upper()
            help_text = getattr(p, "help", None) or ""
        lines.append(f"- {_code(names)}: {_text(help_text)}" if help_text else f"- {_code(names)}")
    return lines


def _usage(cmd: Any, ctx: Any) -> str:
    return " ".join([ctx.command_path, *cmd.collect_usage_pieces(ctx)])


def _help(cmd: Any) -> str:
    text = inspect.cleandoc(cmd.help or "")
    return "\n\n".join(_text(par) for par in text.split("\n\n") if par.strip())


def cli_reference() -> str:
    """The command reference: the global options, then each command's usage, help and options."""
    group = cli_command()
    root = group.make_context("profkit", [], resilient_parsing=True)
    out = [
        _help(group),
        "",
        "```text",
        _usage(group, root),
        "```",
        "",
        "Options of every command:",
        "",
    ]
    out += _param_lines(group, root)
    for name, cmd, ctx in subcommands(group):
        out += [
            "",
            f"## profkit {name}",
            "",
            _help(cmd),
            "",
            "```text",
            _usage(cmd, ctx),
            "```",
            "",
        ]
        out += _param_lines(cmd, ctx) or ["No options."]
        out += ["", f"Guide: [profkit {name}](../guide/{name}.md)."]
    return "\n".join(out) + "\n"


def _value(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k} {_value(x)}" for k, x in v.items())
    if isinstance(v, list):
        return ", ".join(str(x) for x in v)
    return str(v)


def findings_reference(path: Path = RULES) -> str:
    """The findings (``[[finding]]``) with their thresholds, then the classification rules."""
    rules = tomllib.loads(path.read_text(encoding="utf-8"))
    out = ["## Findings", ""]
    for f in rules.get("finding", []):
        out += [
            f"### {_text(f['title'])}",
            "",
            f"Id `{f['id']}`.",
            "",
            f"**Try:** {_text(f['advice'])}",
            "",
        ]
        knobs = {k: v for k, v in f.items() if k not in ("id", "title", "advice")}
        if knobs:
            out += ["Thresholds and settings (`rules.toml`):", ""]
            out += [f"- `{k}`: {_code(_value(v))}" for k, v in knobs.items()]
            out.append("")
    out += [
        "## Name rules",
        "",
        "Tried in order; for each verdict the first rule that sets it decides.",
        "",
    ]
    for r in rules.get("name_rule", []):
        verdict = ", ".join(
            f"{k} {_code('from the name' if isinstance(r[k], dict) else _value(r[k]))}"
            for k in ("precision", "tensor_core", "family", "precision_else")
            if k in r
        )
        out += [
            f"### `{r['id']}`",
            "",
            _text(r.get("description", "")),
            "",
            f"Sets: {verdict or 'nothing'}.",
            "",
            f"Pattern: {_code(r['pattern'])}",
            "",
        ]
        if r.get("examples"):
            out += [f"Example: {_code(r['examples'][0])}", ""]
    out += [
        "## Operator rules",
        "",
        "The family of a CPU operator or autograd node; the first match wins.",
        "",
    ]
    out += [
        f"- `{r['id']}` -> {r['family']}: {_code(r['pattern'])}" for r in rules.get("op_rule", [])
    ]
    out += [
        "",
        "## Work rules",
        "",
        "What `profkit diff --match family` lines up across variants.",
        "",
    ]
    out += [
        f"- `{r['id']}`: {_text(r['label'])} ({_code(r['pattern'])})"
        for r in rules.get("work_rule", [])
    ]
    return "\n".join(out) + "\n"


def generate(markdown: str) -> str:
    """``markdown`` with each ``<!-- generated: ... -->`` marker replaced by what it names."""
    for marker, what in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(
                marker, cli_reference() if what == "cli" else findings_reference()
            )
    return markdown


def on_page_markdown(markdown: str, **_: Any) -> str:
    return generate(markdown)
