"""One run's summary: launch count, GPU time, the tensor-core share of it, and where the time
went by precision, by family and by kernel. For a run of CPU operators (``--device cpu``) the
same figures are over operator calls and their CPU self time, and ``activity`` says so.

Computed in SQL over the run's rows of the kernel table, so a run of millions of launches is
summarised in bounded memory.
"""

from __future__ import annotations

from typing import Any


def summarize(store, run: dict[str, Any], top: int = 10) -> dict[str, Any]:
    """Summarise a stored run. Times are integer nanoseconds."""
    db = store.db
    activity = run.get("activity") or "kernel"
    where, args = "run_id = ? and kind = ?", [run["id"], activity]

    def one(sql: str) -> tuple:
        return db.execute(f"select {sql} from kernels where {where}", args).fetchone()

    count, total, tc_count, tc_time, unknown_time = one(
        "count(*), coalesce(sum(duration_ns), 0), coalesce(sum(tensor_core = 1), 0), "
        "coalesce(sum(case when tensor_core = 1 then duration_ns else 0 end), 0), "
        "coalesce(sum(case when tensor_core is null then duration_ns else 0 end), 0)")

    def by(col: str, default: str) -> tuple[dict[str, int], dict[str, int]]:
        rows = db.execute(f"""select coalesce({col}, '{default}') as k, coalesce(sum(duration_ns), 0) as t, count(*)
                              from kernels where {where} group by k order by t desc, k""", args).fetchall()
        return {k: int(t) for k, t, _ in rows}, {k: int(n) for k, _, n in sorted(rows, key=lambda r: (-r[2], r[0]))}

    time_by_precision, kernels_by_precision = by("precision", "unknown")
    time_by_family, _ = by("family", "unknown")
    _, evidence = by("evidence", "none")
    top_rows = []
    # Per name and precision (a CPU operator's name says nothing of its types). One min()
    # aggregate: SQLite takes the bare columns from the group's first launch.
    q = f"""select name, min(launch_id), count(*) as n, coalesce(sum(duration_ns), 0) as t, precision, tensor_core, evidence
            from kernels where {where} group by name, precision order by t desc, name limit ?"""
    for name, _, n, t, precision, tensor_core, ev in db.execute(q, args + [top]):
        top_rows.append({
            "name": name, "launches": int(n), "total_ns": int(t),
            "pct": round(100.0 * t / total, 2) if total else 0.0,
            "precision": precision, "tensor_core": None if tensor_core is None else bool(tensor_core),
            "evidence": ev,
        })
    copies = {kind: {"count": int(n), "time_ns": int(t or 0)} for kind, n, t in db.execute(
        "select kind, count(*), sum(duration_ns) from kernels where run_id = ? and kind in ('memcpy', 'memset') "
        "group by kind order by kind", [run["id"]])}
    return {
        "activity": activity,
        "kernels": int(count),
        "gpu_time_ns": int(total),
        "tensor_core_kernels": int(tc_count),
        "tensor_core_time_ns": int(tc_time),
        "tensor_core_time_pct": round(100.0 * tc_time / total, 2) if total else 0.0,
        "unclassified_time_ns": int(unknown_time),
        "time_by_precision_ns": time_by_precision,
        "kernels_by_precision": kernels_by_precision,
        "time_by_family_ns": time_by_family,
        "evidence": evidence,
        "top_kernels": top_rows,
        "memory_ops": copies,  # memcpy / memset: count and GPU time, apart from the kernels
    }
