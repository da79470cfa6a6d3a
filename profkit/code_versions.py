"""What fixes a kernel function's code on this machine, read without starting CUDA or importing
torch: the GPU, its driver, the CUDA and PyTorch the harness runs with, a digest of every
installed Python package, and which ncu (its path, size and time: what its counters mean);
then, read in the profiled process itself once its measured iterations have run, every native
library it mapped (cuDNN or cuBLAS from conda or ``LD_LIBRARY_PATH``, an extension built in
place: ``native_libraries``) and the source of the workload file and of every module it
imported from outside the installed packages (``workload_sources``). ncu's counters of a
kernel function are kept across runs under this environment (``store.counters``): when any of
it changes, every function is counted afresh."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import stat
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

# Libraries profkit's own timing and counting load (CUPTI, and the perfworks libraries its
# profiler API loads to count): they time and count kernels but hold none of the workload's,
# and a run that counts in its process maps them where a run that only times does not.
PROFILER_LIBRARIES = ("libcupti", "libnvperf", "libpcsamplingutil")
# The compilers that load only where a kernel is compiled at run time, which a cache may spare
# the next run: the driver's PTX JIT (libnvidia-ptxjitcompiler; its JIT cache) and its NVVM,
# NVRTC and its builtins (PyTorch's jiterator keeps what it compiled) and nvJitLink. Whether a
# process mapped them says what the caches held, not what code ran: the kernels they compile
# are the same, and their versions are the driver's, CUDA's and the packages', all in the key.
# (H200, RESULTS.md issue 39: a first run on a cold JIT cache mapped the PTX compiler, and the
# repeat run of an LSTM and of BERT found none of its counters.)
JIT_LIBRARIES = ("libnvidia-ptxjitcompiler", "libnvidia-nvvm", "libnvrtc", "libnvJitLink")


def environment(gpu: str, driver: str | None, ncu: str | None) -> dict[str, str]:
    """The environment's parts, as text (what a run's info shows)."""
    return {
        "gpu": gpu,
        "driver": driver or "unknown",
        "python": sys.version.split()[0],
        "torch": _version("torch"),
        "cuda": torch_cuda() or "unknown",
        "packages": packages_digest(),
        "ncu": ncu or "unknown",
    }


def environment_key(env: dict[str, str]) -> str:
    """A short digest of ``env`` (the ``counters`` table's ``environment``)."""
    return hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()[:20]


def native_libraries(maps: Path = Path("/proc/self/maps")) -> str:
    """Every native library this process has mapped, as a count and a digest of each one's
    path, size and modification time (an in-place rebuild changes the time): the files of its
    executable mappings in ``maps`` (``/proc/self/maps``), but deleted ones (a trampoline's
    temporary file), profkit's own profiler libraries (``PROFILER_LIBRARIES``) and the run-time
    compilers a cache may spare a run (``JIT_LIBRARIES``). "unknown"
    where ``maps`` cannot be read (not Linux)."""
    try:
        text = maps.read_text(errors="surrogateescape")
    except OSError:
        return "unknown"
    files: set[str] = set()
    for line in text.splitlines():
        parts = line.split(None, 5)
        if (
            len(parts) == 6
            and "x" in parts[1]
            and parts[5].startswith("/")
            and not parts[5].endswith(" (deleted)")
        ):
            files.add(parts[5])
    seen = []
    for path in sorted(files):
        if os.path.basename(path).startswith(PROFILER_LIBRARIES + JIT_LIBRARIES):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            seen.append(f"{path}\0{st.st_size}\0{st.st_mtime_ns}")
    digest = hashlib.sha256("\n".join(seen).encode(errors="surrogateescape")).hexdigest()[:16]
    return f"{len(seen)} files, {digest}"


def workload_sources(
    workload: Path, modules: Iterable[ModuleType] | None = None, generated: Iterable[str] = ()
) -> str:
    """The source of the workload file and of every Python module loaded (``modules``, by
    default ``sys.modules``) from outside the installed packages and the standard library, but
    profkit's own and the ``generated`` files (torch.compile's output code, whose kernels are
    keyed by their own source's digest), as a count and a digest of each one's name and
    content (a moved checkout keeps its digest)."""
    installed = {os.path.realpath(p) for p in _installed_paths()}
    # profkit: times and counts, launches nothing measured
    installed.add(os.path.realpath(Path(__file__).parent))
    skip = {os.path.realpath(p) for p in generated}
    found = {"<workload>": os.path.realpath(workload)}
    for module in list(sys.modules.values()) if modules is None else modules:
        try:  # a module's own __getattr__ may raise anything
            path, name = getattr(module, "__file__", None), getattr(module, "__name__", None)
        except Exception:
            continue
        if not isinstance(path, str) or not path.endswith(".py") or "\0" in path:
            continue
        real = os.path.realpath(path)
        if real in skip or any(real.startswith(root + os.sep) for root in installed):
            continue
        found.setdefault(name if isinstance(name, str) else real, real)
    entries = [f"{name}\0{_file_digest(path)}" for name, path in sorted(found.items())]
    digest = hashlib.sha256("\n".join(entries).encode(errors="surrogateescape")).hexdigest()[:16]
    return f"{len(entries)} files, {digest}"


def _file_digest(path: str) -> str:
    """A regular file's content digest; "unreadable" for anything else (a FIFO put in a module's
    place is not waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return "unreadable"
    with os.fdopen(fd, "rb") as f:
        try:
            return (
                hashlib.sha256(f.read()).hexdigest()
                if stat.S_ISREG(os.fstat(fd).st_mode)
                else "unreadable"
            )
        except OSError:
            return "unreadable"


def _installed_paths() -> set[str]:
    """The folders installed code lives in: the standard library's and every site-packages
    (sysconfig's, site's, the user's, and any on the path, as a venv sharing the system's has)."""
    import site

    paths = {
        p
        for n in ("stdlib", "platstdlib", "purelib", "platlib")
        if (p := sysconfig.get_paths().get(n))
    }
    paths.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    paths.add(site.getusersitepackages())
    paths.update(
        p
        for p in sys.path
        if os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages")
    )
    return {p for p in paths if p}


def packages_digest() -> str:
    """A digest of every installed distribution's name and version, as this Python sees them:
    the names of the ``*.dist-info`` / ``*.egg-info`` folders on its path (a name and a version
    each; listing the folders takes a millisecond, reading every package's metadata 0.3 s)."""
    seen: set[str] = set()
    for entry in sys.path:
        # the current folder ('' for python -m): not the installation
        if not entry or not os.path.isabs(entry):
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
