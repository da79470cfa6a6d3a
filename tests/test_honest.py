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
