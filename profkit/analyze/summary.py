"""One run's summary: launch count, GPU time, the tensor-core share of it and of its matrix work
(``analyze.matrix``), and where the time
went by precision, by family, by kernel and by module (``analyze.modules``, where the capture
has module attribution), and the run's latest tuning (``profkit tune``, where it has one);
for a distributed run (``--nproc-per-node``) the
same per rank, with its communication (``analyze.ranks``). For a run of CPU operators (``device`` cpu) the
same figures are over operator calls and their CPU self time, and ``activity`` says so.

The figures are aggregates the store computes in SQL over the run's rows of the kernel table
(``Store.totals``, ``grouped``, ``top_names``), so a run of millions of launches is
summarised in bounded memory.
"""

from __future__ import annotations

from typing import cast

from ..errors import require_int
from ..parse.schema import Evidence, Precision
from ..records import MemoryOps, RunRecord, Summary, TopKernel
from ..store import Store
from .matrix import of_run
from .modules import DEFAULT_DEPTH, module_view
from .ranks import rank_report
from .tuned import latest as latest_tuning

MEMORY_KINDS = ("memcpy", "memset")


def summarize(
    store: Store, run: RunRecord, top: int = 10, module_depth: int = DEFAULT_DEPTH
) -> Summary:
    """Summarise a stored run. Times are integer nanoseconds. ``module_depth``: the levels of
    the module tree its by-module view shows (``analyze.modules``)."""
    require_int("top", top, 0)
    require_int("module_depth", module_depth, 1)
    activity = run.activity
    t = store.totals(run.id, activity)
    total = t.time_ns

    def pct(ns: int) -> float:
        return round(100.0 * ns / total, 2) if total else 0.0

    groups = store.breakdown(
        run.id, ("precision", "family", "evidence"), [activity], {"evidence": "none"}
    )
    by_precision = groups["precision"]
    top_rows = [
        TopKernel(
            name=r.name,
            launches=r.launches,
            total_ns=r.total_ns,
            pct=pct(r.total_ns),
            precision=r.precision,
            tensor_core=r.tensor_core,
            evidence=r.evidence,
        )
        for r in store.top_names(run.id, activity, top)
    ]
    return Summary(
        run=run.name,
        activity=activity,
        kernels=t.count,
        gpu_time_ns=total,
        tensor_core_kernels=t.tensor_core_count,
        tensor_core_time_ns=t.tensor_core_time_ns,
        tensor_core_time_pct=pct(t.tensor_core_time_ns),
        unclassified_time_ns=t.unknown_time_ns,
        # the store's texts are the classifier's verdicts (parse.schema's Precision, Evidence)
        time_by_precision_ns={cast(Precision, k): ns for k, _, ns in by_precision},
        kernels_by_precision={
            cast(Precision, k): n for k, n, _ in sorted(by_precision, key=lambda r: (-r[1], r[0]))
        },
        time_by_family_ns={k: ns for k, _, ns in groups["family"]},
        evidence={
            cast(Evidence, k): n
            for k, n, _ in sorted(groups["evidence"], key=lambda r: (-r[1], r[0]))
        },
        time_by_evidence_ns={cast(Evidence, k): ns for k, _, ns in groups["evidence"]},
        top_kernels=top_rows,
        memory_ops={
            k: MemoryOps(count=n, time_ns=ns)
            for k, n, ns in sorted(store.grouped(run.id, "kind", MEMORY_KINDS))
        },
        matrix_work=of_run(store, run),
        ranks=rank_report(store, run),
        modules=module_view(store, run, module_depth),
        tuning=latest_tuning(store, run),
    )
