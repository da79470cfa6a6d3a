"""The captures of a distributed job's ranks as one capture: what ``profkit run
--nproc-per-node N --tool torch`` imports (each rank's process writes a trace of its own).
(Under nsys one report holds every rank's process; its importer takes the ranks by pid.)

Rows come rank by rank, each rank's in its own launch order, renumbered from 0; every row and
range (and host sync) gets its ``rank``. Times stay on each trace's clock: torch.profiler's are the host's
monotonic clock in every process of one machine, so the ranks' ranges line up in time.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..errors import BadExport
from .schema import Capture, HostSyncRow, KernelRow, RangeRow


def merge_ranks(captures: dict[int, Capture[KernelRow]]) -> Capture[KernelRow]:
    """One capture of ``{rank: capture}`` (same tool and format, all GPU work or all CPU
    operators)."""
    if not captures:
        raise BadExport("no rank's capture to merge")
    ordered = [captures[r] for r in sorted(captures)]
    first = ordered[0]
    formats = {c.source_format for c in ordered}
    if len(formats) > 1:
        raise BadExport(
            f"the ranks' captures are of different formats ({', '.join(sorted(formats))})"
        )
    ranges: list[RangeRow] = []
    for rank in sorted(captures):
        for r in captures[rank].ranges:
            ranges.append({**r, "range_id": len(ranges), "rank": rank})
    syncs: list[HostSyncRow] = []
    for rank in sorted(captures):
        for h in captures[rank].host_syncs:
            syncs.append({**h, "sync_id": len(syncs), "rank": rank})
    notes = list(dict.fromkeys(n for c in ordered for n in c.notes))
    return Capture(
        rows=_rows(captures),
        tool=first.tool,
        source_format=first.source_format,
        tool_version=first.tool_version,
        gpu_name=first.gpu_name,
        compute_capability=first.compute_capability,
        metric_names=list(dict.fromkeys(m for c in ordered for m in c.metric_names)),
        metric_units={k: v for c in ordered for k, v in c.metric_units.items()},
        notes=notes,
        ranges=ranges,
        range_paths=list(dict.fromkeys(p for c in ordered for p in c.range_paths)),
        host_syncs=syncs,
    )


def _rows(captures: dict[int, Capture[KernelRow]]) -> Iterator[KernelRow]:
    launch_id = 0
    for rank in sorted(captures):
        for row in captures[rank].rows:
            row["launch_id"] = launch_id
            row["rank"] = rank
            launch_id += 1
            yield row
