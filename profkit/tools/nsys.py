"""Nsight Systems: find ``nsys`` and read its version."""

from __future__ import annotations

import glob
import re
import shutil

from ..errors import ToolNotFound
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
    path = shutil.which("nsys")
    if path:
        return path
    for pattern in SEARCH:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    raise ToolNotFound(
        "Nsight Systems (nsys) is not installed or not on PATH",
        "Install Nsight Systems, or import a capture made elsewhere with: profkit import REPORT.nsys-rep",
    )


def version(nsys: str) -> str:
    out = runner.capture([nsys, "--version"])
    m = re.search(r"(\d+\.\d+[\d.]*)", out)
    return m.group(1) if m else out.strip()
