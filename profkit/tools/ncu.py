"""Nsight Compute: find ``ncu``, read its version, build the profile and export command lines,
and read its console output (progress, errors, "No kernels were profiled")."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from ..errors import NoKernelsProfiled, ToolFailed, ToolNotFound
from . import runner

_PROGRESS = re.compile(
    r'^==PROF== Profiling "(?P<name>.*)"(?: - (?P<index>\d+))?:(?:.*- (?P<passes>\d+) pass)?'
)
# With --kernel-id, ncu names the kernel by its id (context:stream:name:invocation), no index.
_KERNEL_ID = re.compile(r"^\d+:\d+:(?P<name>.+):\d+$")
_VERSION = re.compile(r"Version\s+(\d[\d.]*)")
SEARCH = (
    "/usr/local/cuda/bin/ncu",
    "/opt/nvidia/nsight-compute/*/ncu",
    "/usr/local/NVIDIA-Nsight-Compute*/ncu",
)


def find() -> str:
    """The ncu executable: PATH first, then the usual install folders."""
    path = runner.find_executable("ncu", SEARCH)
    if path:
        return path
    raise ToolNotFound(
        "Nsight Compute (ncu) is not installed or not on PATH",
        "Install Nsight Compute, or import a report (.ncu-rep) made where it is installed",
    )


DRIVER_PARAMS = Path("/proc/driver/nvidia/params")


def counters_readable(params: Path = DRIVER_PARAMS, euid: int | None = None) -> tuple[bool, str]:
    """Whether this user may read GPU performance counters, and how we know.

    The NVIDIA driver restricts them to admin users unless ``RmProfilingAdminOnly`` is 0
    (the ERR_NVGPUCTRPERM failure); root may always read them.
    """
    if euid is None and hasattr(os, "geteuid"):
        euid = os.geteuid()
    if euid == 0:
        return True, "running as root, so GPU performance counters are readable"
    try:
        text = params.read_text()
    except OSError:
        return True, f"{params} is unreadable, so the counter permission is unknown; trying ncu"
    m = re.search(r"RmProfilingAdminOnly:\s*(\d+)", text)
    if m is None:
        return True, f"{params} does not say whether counters are restricted; trying ncu"
    if m.group(1) != "0":
        return (
            False,
            "the driver lets only admin users read GPU performance counters (RmProfilingAdminOnly: 1)",
        )
    return (
        True,
        "the driver lets every user read GPU performance counters (RmProfilingAdminOnly: 0)",
    )


def identity(ncu: str) -> str:
    """Which ncu this is, without starting it (``--version`` takes a while): its resolved path,
    size and modification time."""
    path = os.path.realpath(ncu)
    try:
        st = os.stat(path)
    except OSError:
        return path
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


def version(ncu: str) -> str:
    out = runner.capture([ncu, "--version"])
    m = _VERSION.search(out)
    return m.group(1) if m else out.strip().splitlines()[-1]


def profile_argv(
    ncu: str,
    report: Path,
    nvtx_include: str,
    metrics: list[str],
    target: list[str],
    import_sass: bool = False,
    extra: list[str] | None = None,
) -> list[str]:
    """``ncu`` command that profiles only the kernels inside the measured NVTX ranges."""
    argv = [
        ncu,
        "--target-processes",
        "all",
        "--nvtx",
        "--nvtx-include",
        nvtx_include,
        # Each CUDA graph node as its own kernel (ncu's default, said so that it stays so).
        "--graph-profiling",
        "node",
        "--metrics",
        ",".join(metrics),
        # The cubins ncu embeds by default make a report of a dozen kernels 33 MB; the
        # kernel table needs none of them.
        "--import-sass",
        "1" if import_sass else "0",
        "--force-overwrite",
        "--export",
        str(report),
    ]
    return argv + list(extra or []) + list(target)


# profkit's per-function plan: the first launch of each kernel function inside the NVTX
# filter, a function being a mangled name (so each template instance is one).
# The per-function plan reads counts (instructions, tensor-path operations), which neither the
# caches nor the clocks change, and takes durations from CUPTI: ncu neither flushes the caches
# nor locks the clocks for its replays.
COUNTS_ONLY = ["--cache-control", "none", "--clock-control", "none"]
PER_FUNCTION = ["--kernel-name-base", "mangled", "--kernel-id", "::regex:.:1", *COUNTS_ONLY]


MAX_FILTER = (
    100_000  # characters of names in one argument (Linux takes at most 128 KiB per argument)
)


def per_function_argv(only: Sequence[str] | None = None) -> list[str]:
    """The per-function plan's filter: the first launch of every kernel function, or of only
    these (mangled names, matched whole; a name ncu's ``--kernel-id`` cannot hold, one with a
    colon, leaves the filter at every function, as do names past ``MAX_FILTER`` characters)."""
    names = "|".join(re.sub(r"([^A-Za-z0-9_])", r"\\\1", m) for m in only or ())
    if not only or any(":" in m for m in only) or len(names) > MAX_FILTER:
        return list(PER_FUNCTION)
    return ["--kernel-name-base", "mangled", "--kernel-id", f"::regex:^({names})$:1", *COUNTS_ONLY]


def export_csv_argv(ncu: str, report: Path, mangled: bool = False) -> list[str]:
    """Raw page, one row per launch, base units (ns) so no unit guessing is needed; with
    ``mangled``, kernel names as the binary has them (what CUPTI reports)."""
    return [
        ncu,
        "--import",
        str(report),
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        *(["--print-kernel-base", "mangled"] if mangled else []),
    ]


def parse_progress(line: str) -> tuple[int | None, str, int | None] | None:
    """'==PROF== Profiling "k" - 12: 0%....100% - 5 passes' -> (12, 'k', 5); with a kernel-id
    filter, '==PROF== Profiling "1:7:k:1": 0%....100% - 7 passes' -> (None, 'k', 7)."""
    m = _PROGRESS.match(line)
    if not m:
        return None
    name = m.group("name")
    if m.group("index") is None and (k := _KERNEL_ID.match(name)):
        name = k.group("name")
    index = int(m.group("index")) if m.group("index") is not None else None
    return index, name, int(m.group("passes")) if m.group("passes") else None


def check_result(result: runner.Result, report: Path, kernels_seen: int, nvtx_include: str) -> None:
    """Turn ncu's ways of failing into one clear error each."""
    errors = [l.split("==ERROR==", 1)[1].strip() for l in result.tail if "==ERROR==" in l]
    log = f"ncu's log: {result.log_path}" if result.log_path else None
    if any("No kernels were profiled" in l for l in result.tail) or (
        result.returncode == 0 and kernels_seen == 0
    ):
        raise NoKernelsProfiled(
            f"ncu profiled no kernels: the NVTX filter {nvtx_include!r} matched no kernel launch",
            "Did the workload run its measured iterations on the GPU? " + (log or ""),
        )
    if errors and (
        "ERR_NVGPUCTRPERM" in " ".join(errors) or "permission" in " ".join(errors).lower()
    ):
        raise ToolFailed(
            f"ncu may not read the GPU's performance counters here: {errors[0]}",
            "Run as root or allow profiling (NVreg_RestrictProfilingToAdminUsers=0), or use `tool` torch.",
        )
    if result.returncode != 0 or errors:
        what = errors[0] if errors else (result.tail[-1] if result.tail else "no output")
        raise ToolFailed(f"ncu failed (exit {result.returncode}): {what}", log)
    if not report.exists():
        raise ToolFailed(f"ncu finished but wrote no report at {report}", log)
