"""Nsight Systems: find ``nsys``, build its profile and export command lines, and turn a
leftover ``.qdstrm`` into a report with nsys's own importer."""

from __future__ import annotations

import glob
import re
from collections.abc import Sequence
from pathlib import Path

from ..errors import ToolFailed, ToolNotFound
from . import runner

# Where installers put nsys. The last pattern is the copy bundled inside an Nsight Compute
# install, which is all some images have.
SEARCH = (
    "/usr/local/cuda/bin/nsys",
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
    "/usr/local/cuda/nsight-systems-*/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
)


def find() -> str:
    """The nsys executable: PATH first, then the usual install folders."""
    path = runner.find_executable("nsys", SEARCH)
    if path:
        return path
    raise ToolNotFound(
        "Nsight Systems (nsys) is not installed or not on PATH",
        "Install Nsight Systems, or import a capture (.nsys-rep) made where it is installed",
    )


def version(nsys: str) -> str:
    out = runner.capture([nsys, "--version"])
    m = re.search(r"(\d+\.\d+[\d.]*)", out)
    return m.group(1) if m else out.strip()


def profile_argv(
    nsys: str,
    out_base: Path,
    target: list[str],
    cpu_sampling: bool = False,
    context_switches: bool = False,
) -> list[str]:
    """``nsys profile`` of CUDA and NVTX only, capturing between the harness's
    cudaProfilerStart and cudaProfilerStop (the measured iterations). CPU sampling and
    context switches are off unless asked for: with them one capture reached 2.4 GB."""
    return [
        nsys,
        "profile",
        "--trace",
        "cuda,nvtx",
        # A CUDA graph's kernels one by one (torch.compile's reduce-overhead), not one opaque launch.
        "--cuda-graph-trace",
        "node",
        "--sample",
        "process-tree" if cpu_sampling else "none",
        "--cpuctxsw",
        "process-tree" if context_switches else "none",
        *([] if cpu_sampling else ["--backtrace", "none"]),
        "--capture-range",
        "cudaProfilerApi",
        "--capture-range-end",
        "stop",
        "--force-overwrite",
        "true",
        "--output",
        str(out_base),
        *target,
    ]


def export_sqlite_argv(
    nsys: str, report: Path, out: Path, tables: Sequence[str] | None = None
) -> list[str]:
    """``nsys export`` to SQLite; with ``tables``, those tables alone (each matched whole:
    ``--tables`` takes regular expressions)."""
    only = ["--tables", ",".join(f"^{re.escape(t)}$" for t in tables)] if tables else []
    return [
        nsys,
        "export",
        "--type",
        "sqlite",
        *only,
        "--force-overwrite",
        "true",
        "--output",
        str(out),
        str(report),
    ]


def find_importer(nsys_exe: str | None = None) -> str | None:
    """QdstrmImporter, which turns a raw .qdstrm into a .nsys-rep, from the nsys install."""
    roots = []
    if nsys_exe:
        exe = Path(nsys_exe).resolve()
        roots += [exe.parent, exe.parent.parent]
    roots += [Path(p) for p in glob.glob("/opt/nvidia/nsight-systems*/*")] + [
        Path(p) for p in glob.glob("/opt/nvidia/nsight-compute/*")
    ]
    for root in roots:
        for pattern in ("QdstrmImporter", "*/QdstrmImporter", "host/*/QdstrmImporter"):
            hits = sorted(root.glob(pattern))
            if hits:
                return str(hits[-1])
    return None


def import_qdstrm(qdstrm: Path, nsys_exe: str | None = None) -> Path:
    """Turn a .qdstrm (what nsys leaves when its importer cannot run) into a .nsys-rep."""
    importer = find_importer(nsys_exe)
    if importer is None:
        raise ToolNotFound(
            f"{qdstrm.name} is a raw Nsight Systems stream and no QdstrmImporter was found to convert it",
            "Install Nsight Systems here, or convert it where nsys works: QdstrmImporter -i FILE.qdstrm",
        )
    try:
        runner.capture([importer, "-i", str(qdstrm)], timeout=1800)
    except ToolFailed as exc:
        raise ToolFailed(
            f"nsys's importer could not convert {qdstrm.name}: {exc.message}",
            "In containers it often lacks a library (libdw.so.1 is in the elfutils/libdw1 package).",
        ) from None
    rep = qdstrm.with_suffix(".nsys-rep")
    if not rep.exists():
        raise ToolFailed(f"QdstrmImporter ran but wrote no {rep.name}")
    return rep
