"""The NVTX ranges profkit puts around measured iterations, and the profiler filters that
select them. One place decides the names so that the harness that opens the ranges and the
tools that filter on them cannot drift apart.

Ranges are push/pop ranges in domain ``profkit`` named ``<tag>.iter<N>``, where the tag is
``<workload>.<precision>.<mode>`` with anything outside ``[A-Za-z0-9_-]`` replaced. Nsight
filters use ``/`` to separate nested ranges, so a range name never contains one.
"""

from __future__ import annotations

import re

DOMAIN = "profkit"


def tag(workload: str, precision: str, mode: str) -> str:
    parts = (workload, precision, mode)
    return ".".join(re.sub(r"[^A-Za-z0-9_-]", "_", p) for p in parts)


def iteration_range(run_tag: str, i: int) -> str:
    return f"{run_tag}.iter{i}"


def ncu_include_filter(run_tag: str) -> str:
    """``--nvtx-include`` value matching every measured iteration of ``run_tag`` (push/pop)."""
    return f"regex:{DOMAIN}@{re.escape(run_tag)}\\.iter[0-9]+/"
