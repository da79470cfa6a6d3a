"""Shared fixtures and the skip rules for GPU and tool-dependent tests."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import pytest

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
