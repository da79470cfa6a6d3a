"""What fixes a kernel function's code on this machine, read without starting CUDA or importing
torch: the GPU, its driver, the CUDA and PyTorch the harness runs with, a digest of every
installed Python package (cuBLAS, cuDNN, Triton and any library that ships kernels come as
packages), and which ncu (its path, size and time: what its counters mean). ncu's counters of a kernel function
are kept across runs under this environment (``store.counters``): when any of it changes,
every function is counted afresh."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
from pathlib import Path


def environment(gpu: str, driver: str | None, ncu: str | None) -> dict[str, str]:
    """The environment's parts, as text (what a run's info shows)."""
    return {"gpu": gpu, "driver": driver or "unknown", "python": sys.version.split()[0],
            "torch": _version("torch"), "cuda": torch_cuda() or "unknown", "packages": packages_digest(),
            "ncu": ncu or "unknown"}


def environment_key(env: dict[str, str]) -> str:
    """A short digest of ``env`` (the ``counters`` table's ``environment``)."""
    return hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()[:20]


def packages_digest() -> str:
    """A digest of every installed distribution's name and version, as this Python sees them:
    the names of the ``*.dist-info`` / ``*.egg-info`` folders on its path (a name and a version
    each; listing the folders takes a millisecond, reading every package's metadata 0.3 s)."""
    seen: set[str] = set()
    for entry in sys.path:
        if not entry or not os.path.isabs(entry):  # the current folder ('' for python -m): not the installation
            continue
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        seen.update(n.lower() for n in names if n.endswith((".dist-info", ".egg-info")))
    return hashlib.sha256("\n".join(sorted(seen)).encode()).hexdigest()[:16]


def driver_version() -> str | None:
    """The NVIDIA kernel driver's version, from ``/proc/driver/nvidia/version`` (no process
    started), else nvidia-smi's."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text(errors="replace")
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", text)
        if m:
            return m.group(1)
    except OSError:
        pass
    from . import gpu

    return gpu.driver_version()


def torch_cuda() -> str | None:
    """The CUDA version torch was built with, read from its ``version.py`` (no import)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        try:
            text = (Path(folder) / "version.py").read_text(errors="replace")
        except OSError:
            continue
        m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
        return m.group(1) if m else None
    return None


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"
