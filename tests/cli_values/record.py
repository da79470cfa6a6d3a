"""Records what Typer 0.29 (with pydantic) made of each value of each profkit parameter, before
profkit's command line moved to plain Click (issue 22): tests/test_cli_values.py checks that
profkit's own conversion gives the same values and the same messages.

Run once, at the commit before the move (2da848a), with that tree on PYTHONPATH:

    PYTHONPATH=OLD_TREE python tests/cli_values/record.py tests/cli_values/values.json.gz

It uses Typer's private converter (typer._coercion), which is why it cannot run on the tree
after the move; the recorded file is the reference. A path value is recorded relative to a
folder holding a file, a folder and a locked file, written {tmp} in the record."""

from __future__ import annotations

import gzip
import json
import os
import random
import sys
import tempfile
from enum import Enum
from pathlib import Path
from typing import Any

from typer._click import Context
from typer._coercion import build_runtime_param
from typer.main import get_command

from profkit.cli import app

VALUES = ["", "0", "3", "12", "007", "-1", "-0", "+5", "1_000", " 5", "5 ", "5.0", "5.", ".5", "1e3", "10.5", "999",
          "1000", "1000.0", "1001", "nan", "inf", "-inf", "12345678901234567890", "abc", "table", "TABLE", "json",
          "csv", "nope", "eager", "fp16", "auto", "ncu", "cuda", "family", "reduce-overhead", "a\udcff", "a\x00b", "-",
          ".", "relative/path", "/nonexistent/dir/x.db", "x" * 300, "0.0", "00", "1__0", "_1", "1_", "5_000.5", "0x10",
          "1e-3", "1E3", "+.5", "-.5", "- 5", "\t5\n", "٣", "５", "1.5e2", "9" * 19, "-" + "9" * 19, "1.7976931348623157e309"]


def sample(seed: int) -> list[str]:
    rnd = random.Random(seed)
    numbers = ["".join(rnd.choice("0123456789.-+_eE xnaifINF") for _ in range(rnd.randint(0, 12))) for _ in range(3000)]
    texts = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz-_ .ABCDEF0123456789\t\u00e9\u6f22")
                     for _ in range(rnd.randint(0, 20))) for _ in range(300)]
    return numbers + texts


def main() -> None:
    out = Path(sys.argv[1])
    tmp = Path(tempfile.mkdtemp())
    (tmp / "file.db").write_text("x")
    (tmp / "dir").mkdir()
    (tmp / "locked.db").write_text("x")
    os.chmod(tmp / "locked.db", 0)
    paths = [str(tmp / p) for p in ("file.db", "dir", "locked.db", "missing.db", "dir/..")]
    choices = []
    group = get_command(app)
    root = Context(group, info_name="profkit")
    params = [("profkit", p, root) for p in group.get_params(root)]
    for name, command in group.commands.items():
        ctx = Context(command, info_name=name, parent=root)
        params += [(name, p, ctx) for p in command.get_params(ctx)]
    for _, p, _ in params:
        a = p.type_descriptor.annotation
        if isinstance(a, type) and issubclass(a, Enum):
            for m in a:
                choices += [m.value, m.value.upper(), m.name, m.value + " ", " " + m.value, m.value.title()]
    values = list(dict.fromkeys(VALUES + paths + choices + sample(22)))
    record: dict[str, Any] = {"values": [v.replace(str(tmp), "{tmp}") for v in values], "params": {}, "outcomes": []}
    tables: dict[str, int] = {}  # parameters that convert alike share one list of outcomes
    for command, param, ctx in params:
        a = param.type_descriptor.annotation
        kind = "enum" if isinstance(a, type) and issubclass(a, Enum) else a.__name__
        conv = build_runtime_param(param.type_descriptor)
        outcomes = []
        for v in ([param.default] if kind == "bool" else values):
            try:
                r = conv.coerce(v, param=param, ctx=ctx)
                o = ["ok", type(r).__name__, repr(r)]
            except Exception as exc:  # noqa: BLE001
                o = ["error", type(exc).__name__, exc.format_message() if hasattr(exc, "format_message") else str(exc)]
            outcomes.append([x.replace(str(tmp), "{tmp}") for x in o])
        d = param.default
        key = json.dumps(outcomes)
        if key not in tables:
            tables[key] = len(tables)
            record["outcomes"].append(outcomes)
        record["params"][f"{command} {param.name}"] = {
            "kind": kind, "opts": list(getattr(param, "opts", [])), "default": repr(d.value if isinstance(d, Enum) else d),
            "outcomes": tables[key]}
    os.chmod(tmp / "locked.db", 0o600)
    out.write_bytes(gzip.compress(json.dumps(record, ensure_ascii=True).encode(), mtime=0))
    print(len(values), "values,", len(params), "parameters")


if __name__ == "__main__":
    main()
