"""Shared fixtures and the skip rules for GPU and tool-dependent tests."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

DATA = Path(__file__).parent / "data"
NCU_DATA = DATA / "ncu"


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def has_tool(module) -> bool:
    from profkit.errors import ToolNotFound

    try:
        module.find()
    except ToolNotFound:
        return False
    return True


def has_ncu() -> bool:
    from profkit.tools import ncu

    return has_tool(ncu)


needs_gpu_ncu = pytest.mark.skipif(not (has_ncu() and has_cuda()), reason="needs a CUDA GPU and Nsight Compute (ncu)")
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch")


@pytest.fixture
def db(tmp_path):
    return tmp_path / "profkit.db"


_runner = CliRunner()


def cli(*args, db=None, env=None):
    """Invoke ``profkit ARGS [--db DB]`` in-process; the result has exit_code, stdout, stderr.
    ``env`` adds environment variables (``COLUMNS``, ``TTY_COMPATIBLE``: a terminal's size)."""
    from profkit.cli import app

    return _runner.invoke(app, [str(a) for a in args] + (["--db", str(db)] if db else []), env=env)


def cli_json(*args, db=None):
    """``profkit ARGS --format json``, parsed; fails the test on a non-zero exit."""
    import json

    r = cli(*args, "-f", "json", db=db)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def one_line_error(result, message: str, code: int = 1) -> None:
    """The way every bad input must end: exit ``code``, one line on stderr naming the problem,
    no traceback."""
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("profkit: error:") and message in lines[0], result.stderr
    assert "Traceback" not in result.output
    assert "`" not in lines[0], lines[0]  # the library's `param` marks became flags


@pytest.fixture(scope="session")
def ncu_rep_dir(tmp_path_factory):
    """The committed .ncu-rep.gz captures, decompressed (the report reader needs a plain file)."""
    out = tmp_path_factory.mktemp("ncu-rep")
    for gz in NCU_DATA.glob("*.ncu-rep.gz"):
        (out / gz.name[:-3]).write_bytes(gzip.decompress(gz.read_bytes()))
    return out


NSYS_DATA = DATA / "nsys"


@pytest.fixture(scope="session")
def nsys_dir(tmp_path_factory):
    """The committed nsys SQLite exports (.sqlite.gz), decompressed."""
    out = tmp_path_factory.mktemp("nsys")
    for gz in NSYS_DATA.glob("*.sqlite.gz"):
        (out / gz.name[:-3]).write_bytes(gzip.decompress(gz.read_bytes()))
    return out


def has_nsys() -> bool:
    from profkit.tools import nsys

    return has_tool(nsys)


needs_gpu_nsys = pytest.mark.skipif(not (has_nsys() and has_cuda()), reason="needs a CUDA GPU and Nsight Systems (nsys)")


def kernel_table(path, capture=None):
    """The kernel table (a DataFrame, not yet classified) of a capture file, or of a capture
    already loaded from it; its ranges are complete afterwards."""
    from profkit.parse import load
    from profkit.parse.schema import frame

    return frame((capture or load(path)).rows)


DIFF_DATA = DATA / "diff"


def _unpacked(src: Path, out: Path) -> Path:
    """A copy of a tests/data folder with its nsys SQLite exports (.sqlite.gz) decompressed
    (the importer reads them plain); the other files as they are."""
    import shutil

    for f in src.iterdir():
        if f.name.endswith(".sqlite.gz"):
            (out / f.name[:-3]).write_bytes(gzip.decompress(f.read_bytes()))
        elif f.is_file():
            shutil.copy(f, out / f.name)
    return out


@pytest.fixture(scope="session")
def diff_dir(tmp_path_factory):
    """tests/data/diff, nsys SQLite exports decompressed."""
    return _unpacked(DIFF_DATA, tmp_path_factory.mktemp("diff"))


REPORT_DATA = DATA / "report"


@pytest.fixture(scope="session")
def report_dir(tmp_path_factory):
    """tests/data/report's captures, nsys SQLite exports decompressed."""
    return _unpacked(REPORT_DATA, tmp_path_factory.mktemp("report"))
