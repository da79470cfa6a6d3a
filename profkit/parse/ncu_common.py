"""What the two Nsight Compute importers share: which metrics belong in the kernel table,
how time units scale to nanoseconds, and how a launch's NVTX ranges (start/end, then push/pop)
are written."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .ranges import OF_RUN, TORCH_OP, attribute_row, read_range
from .schema import KernelRow, kernel_row

# ncu's raw page carries every device attribute and profiler bookkeeping value on every row;
# they describe the GPU, not the kernel, and would bloat each launch.
_NOT_KERNEL_METRICS = re.compile(
    r"^(device__attribute_|c2clink__|profiler__|launch__|numa__|nvlink__)"
)
_ROLLUP = re.compile(r"^(?P<base>.+)\.(?P<rollup>avg|min|max|sum)$")

TIME_SCALE = {
    "ns": 1,
    "nsecond": 1,
    "nanosecond": 1,
    "us": 1_000,
    "usecond": 1_000,
    "microsecond": 1_000,
    "ms": 1_000_000,
    "msecond": 1_000_000,
    "millisecond": 1_000_000,
    "s": 1_000_000_000,
    "second": 1_000_000_000,
}

DURATION = "gpu__time_duration.sum"


def kernel_metric_names(names: list[str]) -> list[str]:
    """The per-kernel metrics worth keeping: counters and timings, one rollup each.

    ncu lists .avg/.min/.max beside every .sum a user asked for; keep the .sum alone then.
    """
    keep = [n for n in names if "__" in n and not _NOT_KERNEL_METRICS.match(n)]
    sums = {m.group("base") for n in keep if (m := _ROLLUP.match(n)) and m.group("rollup") == "sum"}
    out = []
    for n in keep:
        m = _ROLLUP.match(n)
        if m and m.group("rollup") != "sum" and m.group("base") in sums:
            continue
        out.append(n)
    return out


def nvtx_path(ranges: list[tuple[str, str]]) -> str | None:
    """[(domain, range), ...] outermost first -> ``domain@outer/domain@inner`` (default domain bare)."""
    parts = []
    for domain, name in ranges:
        default = not domain or domain.startswith("<default")
        parts.append(name if default else f"{domain}@{name}")
    return "/".join(parts) if parts else None


def nvtx_columns(ranges: list[tuple[str, str]]) -> dict[str, Any]:
    """A launch's NVTX stack [(domain, range), ...] as kernel-table columns: its innermost
    range and path, and the attribution its operator ranges give (profkit's own operator
    ranges are attribution, not ranges: left out of the path; see ``ranges.attribute_row``)."""
    read = [(d, *read_range(n)) for d, n in ranges]
    kept = [(d, shown) for d, shown, _, role in read if role == OF_RUN]
    labels = [lab for _, _, lab, role in read if lab is not None and role != TORCH_OP]
    row = kernel_row(
        0, "kernel", "", "", nvtx_range=kept[-1][1] if kept else None, nvtx_path=nvtx_path(kept)
    )
    attribute_row(row, labels, next((lab for _, _, lab, role in read if role == TORCH_OP), None))
    return {k: row[k] for k in ATTRIBUTED}  # type: ignore[literal-required]


# The columns nvtx_columns gives.
ATTRIBUTED = (
    "nvtx_range",
    "nvtx_path",
    "op",
    "module",
    "module_type",
    "shapes",
    "phase",
    "input_types",
)


def path_list(rows: Iterable[KernelRow]) -> list[str]:
    """The distinct NVTX stacks the launches were made in, in first-seen order: an ncu
    capture's ranges as far as its kernels tell them."""
    return list(dict.fromkeys(r["nvtx_path"] for r in rows if r["nvtx_path"]))
