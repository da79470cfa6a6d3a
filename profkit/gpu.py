"""What GPU this machine has, asked of nvidia-smi (cheap; no CUDA context, no torch)."""

from __future__ import annotations

import shutil

from .errors import ProfkitError
from .tools import runner


def query() -> tuple[str, str] | None:
    """(name, compute capability) of GPU 0, or None where nvidia-smi cannot tell."""
    first = _smi("name,compute_cap")
    if first is None or "," not in first:
        return None
    name, cc = (p.strip() for p in first.rsplit(",", 1))
    return name, cc


def driver_version() -> str | None:
    """The NVIDIA driver's version (GPU 0's), or None where nvidia-smi cannot tell."""
    return _smi("driver_version")


def _smi(fields: str) -> str | None:
    """GPU 0's line of ``nvidia-smi --query-gpu=FIELDS``, or None where it cannot tell."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = runner.capture([smi, f"--query-gpu={fields}", "--format=csv,noheader"], timeout=30)
    except ProfkitError:
        return None
    lines = out.strip().splitlines()
    return (lines[0].strip() or None) if lines else None


def count() -> int:
    """How many GPUs this machine has (``nvidia-smi -L``), 0 where there is none or no driver."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        listing = runner.capture([smi, "-L"], timeout=20)
    except ProfkitError:
        return 0
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def visible(count: int) -> int:
    """How many of ``count`` GPUs a CUDA program started from here sees: CUDA_VISIBLE_DEVICES
    (indexes or UUIDs, comma-separated; CUDA stops at the first it cannot use) where set."""
    import os

    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return count
    shown = 0
    for item in value.split(","):
        item = item.strip()
        if not item or (item.lstrip("-").isdigit() and not 0 <= int(item) < count):
            break
        shown += 1
    return min(shown, count)
