"""The wheel is complete: built from the project and installed into a fresh virtual environment,
profkit lists and runs its built-in workloads from an empty folder, importing nothing from the
source tree.

The environment sees the packages of the Python running the tests (torch is far too big to
install per test): the system's site-packages, or, run from a venv, that venv's. So the
editable install of profkit there is visible too: the wheel goes in with
``--ignore-installed``, and the tests check that the copy imported is the venv's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILTINS = {
    "precision_zoo",
    "resnet18",
    "resnet18_train",
    "resnet50",
    "resnet50_train",
    "resnet50_ddp_train",
    "vgg16",
    "mobilenet_v2",
    "efficientnet_b0",
    "bert_encoder",
    "bert_encoder_train",
    "gpt_decoder",
    "attention_zoo",
}

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("torchvision") is None,
    reason="needs PyTorch and torchvision (the venv takes them from the system site-packages)",
)

# Left out of the copy the wheel is built from: VCS data, build outputs (a stale build/lib would
# end up in the wheel), caches and local results.
_TOP_LEVEL_SKIP = {
    ".git",
    "build",
    "dist",
    ".venv",
    ".pytest_cache",
    ".benchmarks",
    "profkit.db",
    "profkit-runs",
    "reports",
}


def _ignore(folder: str, names: list[str]) -> set[str]:
    skip = {n for n in names if n == "__pycache__" or n.endswith((".egg-info", ".pyc"))}
    if Path(folder).resolve() == ROOT:
        skip |= _TOP_LEVEL_SKIP & set(names)
    return skip


def _run(argv, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300, **kw)
    assert p.returncode == 0, (
        f"{argv} exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    )
    return p


class Installed:
    def __init__(self, base: Path):
        self.wheel: Path
        self.venv = base / "venv"
        self.bin = self.venv / ("Scripts" if os.name == "nt" else "bin")
        self.python = self.bin / ("python.exe" if os.name == "nt" else "python")
        self.profkit = self.bin / ("profkit.exe" if os.name == "nt" else "profkit")
        self.purelib: Path
        # What a user has: no PYTHONPATH into the checkout, no database chosen for them.
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PROFKIT_DB", "PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "VIRTUAL_ENV")
        }
        self.env["PATH"] = str(self.bin) + os.pathsep + self.env.get("PATH", "")
        self.env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"

    def run(self, argv, cwd: Path) -> subprocess.CompletedProcess:
        return _run(argv, cwd=cwd, env=self.env)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    base = tmp_path_factory.mktemp("packaging")
    inst = Installed(base)
    empty = base / "empty"
    empty.mkdir()

    # Build from a clean copy of the working tree, so that nothing is written into the checkout.
    src = base / "src"
    shutil.copytree(ROOT, src, ignore=_ignore)
    dist = base / "dist"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "-q",
            "-w",
            dist,
            src,
        ],
        cwd=empty,
    )
    (inst.wheel,) = dist.glob("profkit-*.whl")

    # No pip of its own: the pip this Python sees (the system's, through --system-site-packages,
    # or this venv's, below) installs into the venv, which is what sys.prefix names when the
    # venv's python runs it.
    in_venv = sys.prefix != sys.base_prefix
    _run(
        [
            sys.executable,
            "-m",
            "venv",
            *([] if in_venv else ["--system-site-packages"]),
            "--without-pip",
            inst.venv,
        ],
        cwd=empty,
    )
    inst.purelib = Path(
        inst.run(
            [inst.python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], empty
        ).stdout.strip()
    ).resolve()
    if in_venv:
        # Run from inside a venv (the README's set-up): the new venv sees what this one sees,
        # this venv's packages (and the base interpreter's only where this venv does), after its
        # own. Not --system-site-packages: the base interpreter's own packages (a distribution's
        # python3-gi, older copies of this venv's) need not agree with them, and `pip check`
        # below would fail on a conflict that is not profkit's.
        # No comprehension on the .pth line: it is exec'd inside a function of site.py, and
        # before Python 3.12 a comprehension there cannot see the `site` the line imported.
        dirs = [d for d in site.getsitepackages() if Path(d).is_dir()]
        (inst.purelib / "_outer_venv.pth").write_text(
            f"import site; list(map(site.addsitedir, {dirs!r}))\n"
        )
    inst.run(
        [
            inst.python,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--ignore-installed",
            "--no-index",
            "-q",
            inst.wheel,
        ],
        empty,
    )
    inst.run([inst.python, "-m", "pip", "check"], empty)
    return inst


def test_wheel_contents(installed):
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    assert {
        "profkit/py.typed",
        "profkit/rules.toml",
        "profkit/builtin_workloads/__init__.py",
    } <= names
    assert {f"profkit/builtin_workloads/{n}.py" for n in BUILTINS} <= names
    # Every subpackage of the source tree is found without being listed in pyproject.toml.
    for init in (ROOT / "profkit").rglob("__init__.py"):
        rel = init.relative_to(ROOT).as_posix()
        assert rel in names, f"{rel} missing from the wheel"
    assert not any(n.startswith(("workloads/", "tests/")) for n in names)


def test_installed_copy_is_imported(installed, tmp_path):
    probe = (
        "import json, profkit, profkit.builtin_workloads as b, profkit.workloads as w\n"
        "print(json.dumps({'profkit': profkit.__file__, 'package': b.__file__,"
        " 'names': w.builtin_names(), 'vgg16': str(w.builtin_path('vgg16'))}))"
    )
    got = json.loads(installed.run([installed.python, "-c", probe], tmp_path).stdout)
    site = installed.purelib
    assert installed.venv.resolve() in site.parents
    # Not the checkout, whether through a path entry or the editable install's finder.
    for key in ("profkit", "package", "vgg16"):
        path = Path(got[key]).resolve()
        assert site in path.parents, f"{key}: {path} is not under the venv's {site}"
        assert ROOT not in path.parents, f"{key}: {path} comes from the source tree"
    assert Path(got["vgg16"]).is_file() and Path(got["vgg16"]).parent.name == "builtin_workloads"
    assert set(got["names"]) == BUILTINS


def test_workloads_listed_from_an_empty_folder(installed, tmp_path):
    out = installed.run([installed.profkit, "workloads"], tmp_path).stdout
    listed = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert BUILTINS <= listed
    assert "__init__" not in listed


def test_run_builtin_from_an_empty_folder(installed, tmp_path):
    p = installed.run(
        [
            installed.profkit,
            "run",
            "resnet18",
            "--device",
            "cpu",
            "--iters",
            "1",
            "--batch-size",
            "2",
        ],
        tmp_path,
    )
    assert "CPU operator calls" in p.stdout
    assert (tmp_path / "profkit.db").is_file()
