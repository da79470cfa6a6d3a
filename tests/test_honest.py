"""Nothing stored under a false label (issue 37, item 4), and ``run`` without PyTorch saying how
to install it (item 5): options a workload's own step cannot apply refused, runs deleted with
their rows and folder, failed runs' names reused, the README's notebook cell run twice, CPU
diffs of too few iterations called noise-bound, CPU attribution counted once, CPU findings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import profkit
from profkit.errors import RunExists, RunNotFound, TorchNotInstalled, UsageError, WorkloadError

from .conftest import DATA, needs_torch

ROOT = Path(__file__).parents[1]


# ------------------------------------------------------------------ run without PyTorch (item 5)
BLOCK_TORCH = """
import sys

class _NoTorch:  # as if PyTorch were not installed: importing it (or finding it) fails
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return None

sys.meta_path.insert(0, _NoTorch())
"""


def test_run_without_torch_says_how_to_install_it(tmp_path):
    """Without PyTorch, ``run`` (CLI and API) stops before anything is written, in one line that
    says how to install it, CPU-only build included; a TorchNotInstalled (a ProfkitError)."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(BLOCK_TORCH)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)])}
    env.pop("PROFKIT_DB", None)
    db = tmp_path / "p.db"
    p = subprocess.run([sys.executable, "-m", "profkit", "--db", str(db), "run", "resnet18", "--device", "cpu"],
                       cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("profkit: error: PyTorch is not installed"), p.stderr
    assert "pip install torch" in lines[0] and "--index-url https://download.pytorch.org/whl/cpu" in lines[0]
    assert not db.exists()
    code = ("import profkit, sys\nfrom profkit.errors import TorchNotInstalled\n"
            f"try:\n    profkit.profile('resnet18', device='cpu', db={str(db)!r})\n"
            "except TorchNotInstalled as exc:\n    print(type(exc).__mro__[1].__name__, exc.one_line())\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("ToolNotFound PyTorch is not installed"), (p.stdout, p.stderr)
    assert issubclass(TorchNotInstalled, profkit.errors.ProfkitError) and not db.exists()


# ------------------------------------------------------------------ options a step cannot apply (item 4)
STEP_FILE = '''
def build(spec):
    import torch

    x = torch.randn(spec.batch_size, 64)
    w = torch.randn(64, 64)

    def step():
        return x @ w

    return step
'''
# The same step, built where reading the file cannot tell (a call's result): building it tells.
STEP_BY_CALL = '''
def make(spec):
    import torch

    x = torch.randn(spec.batch_size, 64)
    return lambda: x @ x.T


def build(spec):
    return make(spec)
'''


@pytest.mark.parametrize("option, value", [("precision", "bf16"), ("mode", "torchscript"), ("precision", "amp")])
def test_a_step_that_cannot_apply_an_option_is_refused_before_the_run(tmp_path, option, value):
    """A workload that returns its own step and declares nothing: asked for a precision or mode
    it may not apply, it is refused before anything is written, naming the option and why,
    instead of a run stored as bf16 or torchscript that is neither."""
    path = tmp_path / "my_step.py"
    path.write_text(STEP_FILE)
    db = tmp_path / "p.db"
    with pytest.raises(WorkloadError) as exc:
        profkit.profile(str(path), device="cpu", db=db, **{option: value})
    line = exc.value.one_line()
    assert f"builds its own step and does not say that it applies `{option}` {value}" in line
    assert ("PRECISIONS" if option == "precision" else "MODES") in line
    assert not db.exists()


def test_a_step_that_declares_what_it_applies_is_not_refused(tmp_path):
    from profkit import launch
    from profkit.options import RunOptions

    path = tmp_path / "my_step.py"
    path.write_text('PRECISIONS = ("fp32", "bf16")\n' + STEP_FILE)
    launch.check(launch.RunRequest(str(path), RunOptions.make(device="cpu", precision="bf16")))
    with pytest.raises(WorkloadError, match="`mode` compile"):
        launch.check(launch.RunRequest(str(path), RunOptions.make(device="cpu", mode="compile")))


def test_the_builtin_that_ignores_precision_says_so():
    from profkit import launch
    from profkit.options import RunOptions

    with pytest.raises(WorkloadError, match="does not support precision 'fp16'"):
        launch.check(launch.RunRequest(str(ROOT / "workloads" / "precision_zoo.py"),
                                       RunOptions.make(device="cpu", precision="fp16")))


@needs_torch
def test_a_step_found_when_built_is_refused_there(tmp_path):
    """Where only building tells that a workload returns its own step, the build refuses the
    option, before any iteration: the run is failed with that one line, no run labelled bf16."""
    path = tmp_path / "by_call.py"
    path.write_text(STEP_BY_CALL)
    db = tmp_path / "p.db"
    with pytest.raises(WorkloadError, match="does not say that it applies `precision` bf16"):
        profkit.profile(str(path), device="cpu", db=db, precision="bf16", iters=1, warmup=0, batch_size=2)
    runs = profkit.open_db(db).list_runs()
    assert [(r.status, r.kernel_count) for r in runs] == [("failed", 0)]
