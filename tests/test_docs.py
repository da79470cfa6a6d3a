"""The README says what CI does: its test command is the one .ci/run runs, in a fresh venv."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    line = next(l for l in readme.splitlines() if "pytest" in l and l.startswith("pip install"))
    install, *checks = [part.strip() for part in line.split("&&")]
    ci = [l.strip() for l in (ROOT / ".ci" / "run").read_text().splitlines() if l.strip() and not l.startswith("#")]
    # A new venv, made by the machine's python3 and activated: what follows runs with its
    # pip and python, as the README's command does in the venv a user has made.
    venv = next(i for i, l in enumerate(ci) if l.startswith("python3 -m venv "))
    assert ci[venv + 1].startswith("source ") and ci[venv + 1].endswith('/bin/activate"')
    ci_commands = [l for l in ci[venv + 2:] if l.startswith(("pip ", "python "))]
    assert ci_commands[0].startswith("pip install ") and ci_commands[0].endswith("-e '.[torch,test,cluster]'")
    assert install == "pip install -e '.[torch,test,cluster]'"
    assert ci_commands[1:] == checks == ["python -m mypy", "python -m pytest -q"]
    # Nothing outside the venv installs or runs Python after it is made.
    assert not any(l.startswith("python3 ") for l in ci[venv + 1:])
