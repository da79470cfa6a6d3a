"""One run's summary: launch count, GPU time, the tensor-core share of it, and where the time
went by precision, by family and by kernel. For a run of CPU operators (``--device cpu``) the
same figures are over operator calls and their CPU self time, and ``activity`` says so."""

from __future__ import annotations

from typing import Any

import pandas as pd


def summarize(df, top: int = 10) -> dict[str, Any]:
    """Summarise a classified kernel table. Times are integer nanoseconds."""
    from ..parse.schema import activity_of

    activity = activity_of(df)
    kernels = df[df["kind"] == activity]
    dur = kernels["duration_ns"].fillna(0).astype("int64")
    total = int(dur.sum())
    tc = kernels["tensor_core"].astype("boolean")
    tc_time = int(dur[tc.fillna(False)].sum())
    unknown_time = int(dur[tc.isna()].sum())

    def by(col: str) -> dict[str, int]:
        keys = kernels[col].astype("object").where(kernels[col].notna(), "unknown")
        grouped = dur.groupby(keys).sum().sort_values(ascending=False)
        return {str(k): int(v) for k, v in grouped.items()}

    counts = kernels["precision"].fillna("unknown").value_counts()
    top_rows = []
    if len(kernels):
        g = kernels.assign(_d=dur).groupby("name", sort=False)
        agg = g.agg(launches=("_d", "size"), total_ns=("_d", "sum"), precision=("precision", "first"),
                    tensor_core=("tensor_core", "first"), evidence=("evidence", "first"))
        agg = agg.sort_values("total_ns", ascending=False).head(top)
        for name, r in agg.iterrows():
            top_rows.append({
                "name": name, "launches": int(r["launches"]), "total_ns": int(r["total_ns"]),
                "pct": round(100.0 * r["total_ns"] / total, 2) if total else 0.0,
                "precision": r["precision"],
                "tensor_core": None if pd.isna(r["tensor_core"]) else bool(r["tensor_core"]),
                "evidence": r["evidence"],
            })
    return {
        "activity": activity,
        "kernels": int(len(kernels)),
        "gpu_time_ns": total,
        "tensor_core_kernels": int(tc.fillna(False).sum()),
        "tensor_core_time_ns": tc_time,
        "tensor_core_time_pct": round(100.0 * tc_time / total, 2) if total else 0.0,
        "unclassified_time_ns": unknown_time,
        "time_by_precision_ns": by("precision"),
        "kernels_by_precision": {str(k): int(v) for k, v in counts.items()},
        "time_by_family_ns": by("family") if "family" in kernels.columns else {},
        "evidence": {str(k): int(v) for k, v in kernels["evidence"].fillna("none").value_counts().items()},
        "top_kernels": top_rows,
    }
