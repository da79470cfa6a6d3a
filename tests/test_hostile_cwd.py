"""What a module planted in the folder profkit is started in cannot do (issue 34, item 2): no
Python process profkit starts (the harness of ``run`` and ``bench``, ``doctor``'s probe,
torchrun and its ranks) has the current folder on its path, so a ``./torch.py``,
``./numpy.py``, ``./nvtx.py`` or ``./profkit/`` someone left there is never imported. A
workload file's own folder is on the harness's path on purpose (last), so its sibling modules
import wherever profkit was started, without shadowing an installed module; not where other
users may add files to it (a folder like /tmp): then nothing beside the workload is imported."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from profkit.tools import runner

from .conftest import cli, needs_torch

TINY = str(Path(__file__).parent / "workloads" / "tiny_classifier.py")
CPU = ("--device", "cpu", "--batch-size", "2", "--iters", "1", "--warmup", "0")
PLANTS = ("torch.py", "numpy.py", "nvtx.py", "profkit")


def plant(folder: Path, marker: Path, which: tuple[str, ...] = PLANTS) -> None:
    """Modules in ``folder`` that, imported, append their name to ``marker`` (a package for a
    name without ``.py``)."""
    for name in which:
        code = f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n"
        if name.endswith(".py"):
            (folder / name).write_text(code)
        else:
            (folder / name).mkdir()
            (folder / name / "__init__.py").write_text(code)


def ran(marker: Path) -> list[str]:
    return marker.read_text().split() if marker.exists() else []


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A current folder holding every planted module; the marker file they would write."""
    where = tmp_path / "cwd"
    where.mkdir()
    marker = tmp_path / "ran.txt"
    plant(where, marker)
    monkeypatch.chdir(where)
    return where, marker


@needs_torch
@pytest.mark.parametrize("which", PLANTS)
def test_run_imports_nothing_from_the_current_folder(tmp_path, monkeypatch, which):
    """``profkit run`` (torch on the CPU) started in a folder holding a planted module: the
    harness imports the installed one, the run succeeds and the planted one never runs."""
    where = tmp_path / "cwd"
    where.mkdir()
    marker = tmp_path / "ran.txt"
    plant(where, marker, (which,))
    monkeypatch.chdir(where)
    r = cli("run", TINY, "--tool", "torch", *CPU, "--no-report", db=tmp_path / "p.db")
    assert ran(marker) == [] and r.exit_code == 0, r.output


@needs_torch
def test_a_builtin_run_imports_nothing_from_the_current_folder(planted, tmp_path):
    """The report's case: ``profkit run resnet18`` where every module is planted."""
    _, marker = planted
    r = cli("run", "resnet18", "--tool", "torch", *CPU, "--no-report", db=tmp_path / "p.db")
    assert ran(marker) == [] and r.exit_code == 0, r.output


@needs_torch
def test_torchrun_and_its_ranks_import_nothing_from_the_current_folder(planted, tmp_path):
    """Two ranks on the CPU: torchrun (``-P``) and the ranks it starts (``python -m``, without
    ``-P``: PYTHONSAFEPATH, inherited) import nothing planted."""
    _, marker = planted
    r = cli(
        "run",
        TINY,
        "--tool",
        "torch",
        *CPU,
        "--nproc-per-node",
        "2",
        "--no-report",
        db=tmp_path / "p.db",
    )
    assert ran(marker) == [] and r.exit_code == 0, r.output


@needs_torch
def test_bench_imports_nothing_from_the_current_folder(planted, tmp_path):
    _, marker = planted
    r = cli("bench", TINY, *CPU, "-f", "json", db=tmp_path / "p.db")
    assert ran(marker) == [] and r.exit_code == 0, r.output
    assert json.loads(r.stdout)["rows"][0]["status"] == "ok"


@needs_torch
def test_doctor_imports_nothing_from_the_current_folder(planted, tmp_path):
    _, marker = planted
    r = cli("doctor", "-f", "json", db=tmp_path / "p.db")
    assert ran(marker) == [], r.output
    torch_line = next(c for c in json.loads(r.stdout) if c["name"] == "PyTorch")
    assert torch_line["detail"].startswith("torch "), torch_line


@needs_torch
def test_every_python_child_and_its_children_leave_out_the_current_folder(planted, monkeypatch):
    """The argv and environment every Python child gets: ``-P``, and PYTHONSAFEPATH for what
    that child starts in turn (a grandchild started as ``python -c`` or ``-m``, as torchrun
    starts its ranks); an empty PYTHONPATH entry (which Python reads as the current folder) is
    dropped."""
    where, marker = planted
    monkeypatch.setenv("PYTHONPATH", os.pathsep + os.environ.get("PYTHONPATH", "") + os.pathsep)
    grandchild = (
        "import subprocess, sys; subprocess.run([sys.executable, '-c', "
        "'import sys, torch, numpy, nvtx, profkit; print(repr(sys.path))'], check=True)"
    )
    argv = runner.python_argv("-c", grandchild)
    assert argv[:2] == [sys.executable, "-P"]
    out = subprocess.run(argv, env=runner.child_env(), capture_output=True, text=True, timeout=120)
    assert ran(marker) == [] and out.returncode == 0, out.stderr
    path = ast.literal_eval(out.stdout)
    assert str(where) not in path and "" not in path
    env = runner.child_env()
    assert env["PYTHONSAFEPATH"] == "1" and "" not in env.get("PYTHONPATH", "x").split(os.pathsep)


WITH_SIBLING = """
import helper  # beside this file


def build(spec):
    import torch

    assert helper.VALUE == 42
    return torch.nn.Linear(4, 2), (torch.randn(spec.batch_size, 4),)
"""


@needs_torch
@pytest.mark.parametrize("start_in", ["its folder", "elsewhere"])
def test_a_workload_file_imports_its_siblings(tmp_path, monkeypatch, start_in):
    """A workload file given by path imports the modules beside it, whether profkit starts in
    its folder (as before) or elsewhere (its folder is put on the path explicitly); a module
    beside it named like an installed one (nvtx.py, numpy.py) does not replace that one."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "my_workload.py").write_text(WITH_SIBLING)
    (folder / "helper.py").write_text("VALUE = 42\n")
    marker = tmp_path / "ran.txt"
    plant(folder, marker, ("nvtx.py", "numpy.py"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(folder if start_in == "its folder" else elsewhere)
    workload = "./my_workload.py" if start_in == "its folder" else str(folder / "my_workload.py")
    r = cli("run", workload, "--tool", "torch", *CPU, "--no-report", db=tmp_path / "p.db")
    assert r.exit_code == 0, r.output
    assert ran(marker) == []


# ---------------------------------------------------- a workload in a folder others may add to
NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="plays another user (nobody): needs root")

OPTIONAL_IMPORT = """
try:  # an optional import, missing here, as torch and its helpers probe many
    import profkit_missing_optional
except ImportError:
    profkit_missing_optional = None


def build(spec):
    import torch

    return torch.nn.Linear(4, 2), (torch.randn(spec.batch_size, 4),)
"""


def as_nobody(write: Path, text: str) -> None:
    """``text`` written to ``write`` by a child of this process that became nobody."""
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            write.write_text(text)
            code = 0
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


@pytest.fixture
def open_folder():
    """``/tmp/<x>/wl``: a folder anyone may add files to (1777, as /tmp), holding nothing yet;
    the marker beside it."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="profkit-wl-", dir="/tmp"))
    os.chmod(base, 0o755)
    folder = base / "wl"
    folder.mkdir()
    os.chmod(folder, 0o1777)
    yield folder, base / "ran.txt"
    shutil.rmtree(base, ignore_errors=True)


@needs_torch
@needs_root
def test_a_module_another_user_planted_beside_a_workload_in_a_shared_folder_never_runs(
    open_folder, tmp_path
):
    """A workload file in a sticky world-writable folder (/tmp-like); another user adds a module
    named like an optional import it tries: the run succeeds without it, as if it were missing."""
    folder, marker = open_folder
    (folder / "mymodel.py").write_text(OPTIONAL_IMPORT)
    as_nobody(
        folder / "profkit_missing_optional.py", f"open({str(marker)!r}, 'a').write('planted\\n')\n"
    )
    r = cli(
        "run",
        str(folder / "mymodel.py"),
        "--tool",
        "torch",
        *CPU,
        "--no-report",
        db=tmp_path / "p.db",
    )
    assert ran(marker) == [] and r.exit_code == 0, r.output


@needs_torch
def test_a_workload_in_a_shared_folder_imports_no_sibling_and_says_why(open_folder, tmp_path):
    """Its own sibling is not imported either: the run fails in one line saying the folder is
    not on the import path and why."""
    folder, marker = open_folder
    (folder / "my_workload.py").write_text(WITH_SIBLING)
    (folder / "helper.py").write_text("VALUE = 42\n")
    r = cli(
        "run",
        str(folder / "my_workload.py"),
        "--tool",
        "torch",
        *CPU,
        "--no-report",
        db=tmp_path / "p.db",
    )
    assert r.exit_code != 0
    assert "No module named 'helper'" in r.output and "not on the import path" in r.output, r.output
    assert "writable by group or others" in r.output and "Traceback" not in r.output, r.output
