"""A user's own workload file that raises (at import, in build, in the warm-up, in a measured
iteration) keeps its traceback: the run's kept log holds it whole, the failing line of the
user's file included; ``-v`` shows it on stderr; without ``-v`` the error stays one line, which
names the log. CPU runs under torch.profiler (``--device cpu --tool torch``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import cli, cli_json, needs_torch, one_line_error

HERE = Path(__file__).parent
WORKLOADS = HERE / "workloads"
ROOT = HERE.parent

# workload file -> (what the one line says, the user's failing source line, the error's last line)
CASES = {
    "import_fails.py": ("workload file", 'WIDTH = SETTINGS["width"]', "KeyError: 'width'"),
    "broken_build.py": (
        "workload build(spec) failed",
        'raise RuntimeError("weights file missing")',
        "RuntimeError: weights file missing",
    ),
    "forward_fails.py": (
        "the warm-up failed for forward_fails",
        "return x @ torch.ones(3, 5)",
        "RuntimeError: mat1",
    ),
    "fails_in_iteration.py": (
        "a measured iteration failed for fails_in_iteration",
        'raise ValueError(f"cache full after {self.calls - 1} calls")',
        "ValueError: cache full after 2 calls",
    ),
}
ARGS = [
    "--device",
    "cpu",
    "--tool",
    "torch",
    "--warmup",
    "1",
    "--iters",
    "3",
    "--batch-size",
    "2",
    "--no-report",
]


def _line_of(path: Path, source: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if source in line)


def _user_frame(path: Path, source: str) -> str:
    """How a traceback names the user's failing line: its file, line number, then the line."""
    return f'File "{path}", line {_line_of(path, source)}'


def _log_of(stderr: str) -> Path:
    m = re.search(r"Its log is (\S+)\.$", stderr.strip())
    assert m, stderr
    return Path(m.group(1))


@needs_torch
@pytest.mark.parametrize("workload", list(CASES))
def test_the_kept_log_holds_the_users_traceback(tmp_path, workload):
    """Without -v: one line (as before) naming the log; the log holds the whole traceback, with
    the user's file, line number and failing line; the run is recorded failed."""
    says, source, last = CASES[workload]
    path = WORKLOADS / workload
    db = tmp_path / "p.db"
    r = cli("run", path, *ARGS, db=db)
    one_line_error(r, says)
    assert "Traceback" not in r.stderr and source not in r.stderr
    log = _log_of(r.stderr)
    assert log.is_file() and log.parent.parent == tmp_path / "p-runs", log
    text = log.read_text()
    assert "Traceback (most recent call last):" in text
    frame = _user_frame(path, source)
    assert frame in text, text
    # The frame's next line is the failing source line itself.
    after = text[text.index(frame) :].splitlines()
    assert after[1].strip().startswith(source), after[:3]
    assert last in text
    # The same traceback beside the error file, where profkit reads it for -v.
    assert frame in (log.parent / "harness-error.traceback.txt").read_text()
    assert [x["status"] for x in cli_json("runs", db=db)] == ["failed"]


def _profkit(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "profkit", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@needs_torch
@pytest.mark.parametrize("workload", ["broken_build.py", "fails_in_iteration.py"])
def test_verbose_shows_the_users_traceback_on_stderr(tmp_path, workload):
    """-v: stderr holds the workload's own traceback (its failing line) as the cause of the
    error, above profkit's own frames; stdout holds none of it."""
    says, source, last = CASES[workload]
    path = WORKLOADS / workload
    r = _profkit("-v", "run", path, *ARGS, "--db", tmp_path / "p.db")
    assert r.returncode != 0
    frame = _user_frame(path, source)
    assert frame in r.stderr and source in r.stderr and last in r.stderr, r.stderr
    assert "The above exception was the direct cause of the following exception" in r.stderr
    assert r.stderr.index(frame) < r.stderr.rindex("profkit.errors.WorkloadError")
    assert says in r.stderr.strip().splitlines()[-1]
    assert "Traceback" not in r.stdout


@needs_torch
def test_the_library_error_carries_the_users_traceback(tmp_path):
    """In a notebook, the WorkloadError's cause is the workload's traceback (what a notebook
    shows under it)."""
    import profkit
    from profkit.errors import WorkloadError, WorkloadTraceback

    path = WORKLOADS / "fails_in_iteration.py"
    with pytest.raises(WorkloadError) as info:
        profkit.profile(
            str(path),
            device="cpu",
            tool="torch",
            warmup=1,
            iters=3,
            batch_size=2,
            db=tmp_path / "p.db",
        )
    cause = info.value.__cause__
    assert isinstance(cause, WorkloadTraceback)
    assert _user_frame(path, CASES["fails_in_iteration.py"][1]) in str(cause)
    assert info.value.hint and info.value.hint.startswith("Its log is ")


@needs_torch
def test_profkits_own_workload_errors_have_no_user_traceback(tmp_path):
    """A file that defines no build() is profkit's finding, not a raise in the user's code:
    one line, and no traceback file."""
    path = tmp_path / "nobuild.py"
    path.write_text("def build_model(spec):\n    pass\nbuild = None\n")
    db = tmp_path / "p.db"
    r = cli("run", path, *ARGS, db=db)
    one_line_error(r, "defines no build(spec) function")
    assert not list((tmp_path / "p-runs").rglob("harness-error.traceback.txt"))
