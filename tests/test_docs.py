"""The README says what CI does: its test command is the one .ci/run runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    line = next(l for l in readme.splitlines() if "pytest" in l and l.startswith("pip install"))
    install, *checks = [part.strip() for part in line.split("&&")]
    ci = [l.strip() for l in (ROOT / ".ci" / "run").read_text().splitlines() if l.strip() and not l.startswith("#")]
    ci_commands = [re.sub(r"^python3 ", "python ", l) for l in ci if l.startswith("python3 -m")]
    assert ci_commands[0].endswith("-e '.[torch,test,cluster]'") and install.endswith("-e '.[torch,test,cluster]'")
    assert ci_commands[1:] == checks == ["python -m mypy", "python -m pytest -q"]
