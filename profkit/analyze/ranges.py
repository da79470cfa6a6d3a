"""A run's NVTX (or record_function) ranges: per range instance, the kernels attributed to it,
their GPU time, its wall time, and the kernels other threads launched while it was open.

Timeline captures (nsys, torch.profiler) store their ranges at import. An ncu run has no
range table (ncu records kernels, not ranges): its ranges are rebuilt from the kernels'
``nvtx_path``, with counts and GPU time only.
"""

from __future__ import annotations

from typing import Any

from ..parse.schema import RANGE_COLUMNS

RANGE_FIELDS = [c for c in RANGE_COLUMNS if c != "range_id"]


def run_ranges(store, run: dict[str, Any]) -> list[dict[str, Any]]:
    rows = store.ranges(run["id"])
    if rows:
        return [{k: r[k] for k in RANGE_FIELDS} for r in rows]
    # ncu: group the kernels by the stack they were launched in (one SQL pass).
    out = []
    q = """select nvtx_path, min(launch_id) as first, min(nvtx_range) as name, min(thread_id) as thread_id,
                  sum(kind = 'kernel') as kernels, count(*) as gpu_ops,
                  sum(case when kind = 'kernel' then duration_ns else 0 end) as gpu_time_ns
           from kernels where run_id = ? and nvtx_path is not null group by nvtx_path order by first"""
    for r in store.db.query(q, [run["id"]]):
        path = r["nvtx_path"]
        leaf = path.rsplit("/", 1)[-1]
        out.append({
            "name": r["name"], "domain": leaf.split("@", 1)[0] if "@" in leaf else None, "path": path,
            "depth": path.count("/"), "thread_id": r["thread_id"], "start_ns": None, "wall_ns": None,
            "kernels": r["kernels"], "gpu_ops": r["gpu_ops"], "gpu_time_ns": r["gpu_time_ns"],
            "other_thread_kernels": None,
        })
    return out
