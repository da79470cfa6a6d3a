"""The NVTX ranges profkit puts around measured iterations, and the profiler filters that
select them. One place decides the names so that the harness that opens the ranges and the
tools that filter on them cannot drift apart.

Ranges are NVTX start/end ranges in domain ``profkit`` named ``<tag>.iter<N>``, where the tag
is ``<workload>.<precision>.<mode>`` with anything outside ``[A-Za-z0-9_-]`` replaced. Start/end
ranges belong to the process, not to a thread: ncu's filter, nsys and profkit's importers
count every kernel any thread launched while one was open, so a training step's backward
kernels (launched by autograd's own thread) are the step's. (Push/pop ranges would hold only
the main thread's launches: 182 of a ResNet-18 AMP step's 420 kernels on the H100.) Nsight
filters use ``/`` to separate nested push/pop ranges, so a range name never contains one.
Under torch.profiler the iterations are ``record_function`` ranges of the same names, which
the trace importer treats as the process's too (:func:`is_iteration_range`).
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
    """``--nvtx-include`` value matching every measured iteration of ``run_tag`` (start/end
    ranges: no trailing ``/``, which would mean push/pop)."""
    return f"regex:{DOMAIN}@{re.escape(run_tag)}\\.iter[0-9]+"


_ITERATION = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.iter[0-9]+")


def is_iteration_range(name: str) -> bool:
    """Whether a range name is one of profkit's measured iterations (``<tag>.iter<N>``)."""
    return bool(_ITERATION.fullmatch(name))
