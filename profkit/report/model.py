"""What a report page shows, gathered from the library: a plain, JSON-able dict per page.

No analysis here (the figures come from ``profkit.analyze``'s functions, the ones behind
``Run.summary()``, ``Run.findings()`` and ``Run.diff()``, and the store's aggregates; each
function takes the store and a run's record, as the analyses do) and no HTML (``report.page`` renders these
dicts). Kernel names and every other string from a capture pass through unchanged: the page
escapes them.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..analyze.diff import diff as diff_runs
from ..analyze.findings import findings as run_findings
from ..analyze.matrix import (
    MATRIX_FAMILIES,
    describe_change,
    matrix_detail,
    matrix_work,
    pct_text,
    tensor_core_pct,
)
from ..analyze.module_tree import module_tree
from ..analyze.modules import attributed
from ..analyze.ranges import caveats, iteration_ranges, run_ranges
from ..analyze.summary import summarize
from ..analyze.throughput import throughput
from ..analyze.tuned import (
    ESTIMATE,
    GAIN,
    best_fix_line,
    outputs_text,
    saving_text,
    step_text,
    when,
)
from ..analyze.tuned import latest as latest_tuning
from ..choices import DEFAULT_MATCH
from ..formatting import fmt_ns
from ..names import display_name, table_labels
from ..records import ncu_timed
from ..workloads import option_labels

if TYPE_CHECKING:
    from ..records import RunRecord, Summary, TuneTrial
    from ..rows import TimelineOp
    from ..store import Store

LAUNCHES_PER_GROUP = 25  # launches listed inside each kernel group of the table
TIMELINE_LIMIT = 3000  # bars in the one-iteration timeline
RANGES_SHOWN = 30  # bars in the time-per-range chart


def _profkit_version() -> str:
    from ..version import __version__

    return __version__


def header(store: Store, run: RunRecord) -> dict[str, Any]:
    """The run's identity: what ran, how, on what, when, and the command line."""
    return {
        "name": run.name,
        "id": run.id,
        "source": run.source,
        "workload": run.workload,
        "precision": run.precision,
        "mode": run.mode,
        "batch_size": run.batch_size,
        "iters": run.iters,
        "device": run.device,
        "tool": run.tool,
        "tool_version": run.tool_version,
        "metric_set": run.metric_set,
        "gpu_name": run.gpu_name,
        "compute_capability": run.compute_capability,
        "date": run.finished_at or run.started_at,
        "command": shlex.join(run.command) if run.command else None,
        "imported_from": run.info.imported_from,
        "imported_sha256": run.source_sha256,
        "activity": run.activity,
        "database": str(store.path),
        "options": option_labels(run.info.options),
    }


def headline(summary: Summary, evidence_basis: str) -> list[dict[str, Any]]:
    """The headline figures, each with the exact value ``summary --format json`` gives (``key``
    names the summary field) and the text shown. On GPU runs the tensor-core coverage of matrix
    work leads, the share of all GPU time beside it; a CPU run has four, as before."""
    cpu = summary.activity == "cpu_op"
    total = summary.gpu_time_ns
    by_precision = summary.time_by_precision_ns
    mw = summary.matrix_work
    matrix: list[dict[str, Any]] = []
    if mw is not None:  # None for CPU operators, whose figures stay as they were
        matrix = [
            {
                "key": "matrix_work",
                "label": "tensor cores: share of matrix work",
                "lead": True,
                "value": asdict(mw),
                "text": pct_text(mw),
                "basis": f"{matrix_detail(mw)} in this run"
                if mw.tensor_core_pct is None
                else f"of its {matrix_detail(mw, gpu_share=True)}; {evidence_basis}",
            }
        ]
    return [
        {
            "key": "gpu_time_ns",
            "label": "CPU self time" if cpu else "GPU time",
            "value": total,
            "text": fmt_ns(total),
            "basis": "measured",
        },
        {
            "key": "kernels",
            "label": "operator calls" if cpu else "kernel launches",
            "value": summary.kernels,
            "text": f"{summary.kernels:,}",
            "basis": "measured",
        },
        *matrix,
        {
            "key": "tensor_core_time_pct",
            "label": "tensor cores: share of all GPU time" if matrix else "time on tensor cores",
            "value": summary.tensor_core_time_pct,
            "text": "n/a (CPU operators)" if cpu else f"{summary.tensor_core_time_pct:.1f}%",
            "basis": "CPU operators use no tensor cores"
            if cpu
            else (
                "every kernel counts: norms, element-wise and copies never use tensor cores; "
                if matrix
                else ""
            )
            + evidence_basis,
        },
        {
            "key": "time_by_precision_ns",
            "label": "time by precision",
            "value": by_precision,
            "text": " · ".join(f"{p} {100 * t / total:.1f}%" for p, t in by_precision.items() if t)
            if total
            else "-",
            "basis": "measured times; " + evidence_basis,
        },
    ]


def _basis(summary: Summary) -> str:
    """How the run's verdicts were reached, as shares of its time: counters (measured), names or
    the launching operators' input types (inferred), or nothing."""
    ev = {k: v for k, v in summary.time_by_evidence_ns.items() if v}
    if not ev:
        return "no verdicts" if not any(summary.evidence.values()) else "nothing told (no time)"
    if set(ev) == {"metrics"}:
        return "from hardware counters (measured)"
    total = sum(ev.values())
    kinds = {
        "metrics": "hardware counters",
        "name": "kernel names",
        "dtypes": "operator input types",
        "none": "nothing told",
    }
    return "precision from " + ", ".join(
        f"{kinds.get(k, k)} {100 * t / total:.0f}%" for k, t in ev.items()
    )


def kernel_table(store: Store, run: RunRecord) -> dict[str, Any]:
    """The kernel table: one row per (name, precision) with its first launches inside."""
    groups = store.name_groups(run.id, run.activity)
    total = sum(g.time_ns for g in groups) or 1
    index = {(g.name, g.precision): i for i, g in enumerate(groups)}
    launches: list[list[Any]] = [[] for _ in groups]
    for r in store.first_launches(run.id, run.activity, LAUNCHES_PER_GROUP):
        grid, block = (r.grid_x, r.grid_y, r.grid_z), (r.block_x, r.block_y, r.block_z)
        launches[index[(r.name, r.precision)]].append(
            [
                r.launch_id,
                r.duration_ns,
                "×".join(str(v) for v in grid) if grid[0] is not None else None,
                "×".join(str(v) for v in block) if block[0] is not None else None,
                r.stream,
                r.thread_id,
                r.nvtx_range,
                r.tensor_core,
                r.evidence_detail,
            ]
        )
    rows = []
    short = table_labels(g.name for g in groups)  # as the command's tables name them: no two alike
    for g, inside in zip(groups, launches):
        tc = (
            "yes"
            if g.tc_calls == g.calls
            else "no"
            if g.cuda_calls == g.calls
            else "mixed"
            if g.tc_calls or g.cuda_calls
            else "unknown"
        )
        rows.append(
            {
                "name": g.name,
                "short": short[g.name],
                "precision": g.precision,
                "tc": tc,
                "family": g.family,
                "matrix": g.family in MATRIX_FAMILIES,
                "op": g.op,
                "evidence": g.evidences,
                "details": g.details,
                "launches": g.calls,
                "time_ns": g.time_ns,
                "mean_ns": g.time_ns / g.calls,
                "min_ns": g.min_ns,
                "max_ns": g.max_ns,
                "pct": 100 * g.time_ns / total,
                "inside": inside,
            }
        )
    return {"rows": rows, "launches_per_group": LAUNCHES_PER_GROUP}


def range_times(store: Store, run: RunRecord) -> list[dict[str, Any]]:
    """GPU time (CPU self time) per NVTX stack the launches were made in, most first."""
    paths = sorted(store.kernel_paths(run.id), key=lambda p: -p.gpu_time_ns)
    return [
        {"path": p.nvtx_path, "name": p.name, "kernels": p.kernels, "time_ns": p.gpu_time_ns}
        for p in paths[:RANGES_SHOWN]
    ]


def timeline(store: Store, run: RunRecord) -> dict[str, Any]:
    """One measured iteration's GPU work by stream, from a timeline capture (nsys, torch)."""
    if run.activity == "cpu_op":
        return {"bars": [], "note": "CPU runs record operators' self times, not a GPU timeline"}
    if ncu_timed(run):
        return {
            "bars": [],
            "note": "ncu replays kernels one at a time and records no start times: "
            "profile with --tool nsys or torch for a timeline",
        }
    # The first measured iteration: from its range's start to the next iteration's (the harness
    # synchronises at the end of each), whichever thread launched the work (autograd's too).
    # A distributed run has each iteration once per rank: from the earliest rank's start to the
    # latest rank's end.
    spans: dict[str, list[int | None]] = {}
    for r in iteration_ranges(run_ranges(store, run)):
        if r["start_ns"] is None:
            continue
        end_ns = r["start_ns"] + r["wall_ns"] if r["wall_ns"] is not None else None
        span = spans.setdefault(r["name"], [r["start_ns"], end_ns])
        span[0] = min(span[0] or r["start_ns"], r["start_ns"])
        span[1] = None if span[1] is None or end_ns is None else max(span[1], end_ns)
    iterations = sorted(spans.items(), key=lambda kv: kv[1][0] or 0)
    iteration = iterations[0][0] if iterations else None
    start = iterations[0][1][0] if iterations else None
    end = iterations[0][1][1] if iterations else None
    # and up to the next iteration (work queued in this one may run past its end)
    if len(iterations) > 1:
        following = iterations[1][1][0]
        end = following if end is None or following is None else max(end, following)
    rows, total = store.timeline(run.id, start, end, TIMELINE_LIMIT)
    if not rows:
        return {
            "bars": [],
            "note": "this capture has no start times (stored by an earlier profkit: import it "
            "again for a timeline)",
        }
    t0 = min(r.start_ns for r in rows)
    many_gpus = len({r.device for r in rows}) > 1
    ranked = any(r.rank is not None for r in rows)

    def lane(key: tuple[int, int, int]) -> str:
        rank, dev, stream = key
        text = "stream ?" if stream < 0 else f"stream {stream}"
        text = f"GPU {dev if dev >= 0 else '?'} {text}" if many_gpus else text
        return f"rank {rank} · {text}" if ranked else text

    def key(r: TimelineOp) -> tuple[int, int, int]:
        return (
            -1 if r.rank is None else r.rank,
            -1 if r.device is None else r.device,
            -1 if r.stream is None else r.stream,
        )

    bars: list[list[Any]] = [
        [
            lane(key(r)),
            (r.start_ns - t0) / 1e3,
            (r.start_ns - t0 + (r.duration_ns or 0)) / 1e3,
            display_name(r.name, r.short_name),
            r.kind,
            r.precision,
            r.tensor_core,
            r.family in MATRIX_FAMILIES,
        ]
        for r in rows
    ]
    # by rank, device, then stream number
    lane_names = [lane(k) for k in sorted({key(r) for r in rows})]
    what = (
        f"iteration {iteration}"
        if iteration
        else "the capture's first launches (no iteration ranges)"
    )
    if ranked:
        what += " on every rank"
    note = f"{what}: {total:,} GPU operations"
    if total > len(rows):
        note += f", the first {len(rows):,} shown"
    return {"bars": bars, "note": note, "span_us": max(b[2] for b in bars), "lanes": lane_names}


NO_ATTRIBUTION = (
    "This capture has no module attribution: profkit run records the module, operator and shapes "
    "behind every kernel (by default under ncu; --attribution under nsys and torch)."
)


def modules(store: Store, run: RunRecord) -> dict[str, Any]:
    """The module tree (``analyze.modules``): its top-level nodes, each with its children, and
    their kernel time; or, for a run without attribution, the line that says so (``note``)."""
    # a CPU run's: its operators' CPU self time
    groups = store.module_groups(run.id, kind=run.activity)
    if not attributed(groups):
        harness = run.info.harness or {}
        why = harness.get("attribution_note")
        if harness.get("attribution") == "compiled":
            why = "a compiled model's kernels are traced to the operators Inductor fused, not to modules"
        return {
            "nodes": [],
            "time_ns": 0,
            "note": NO_ATTRIBUTION + (f" Here: {why}." if why else ""),
        }
    nodes = module_tree(groups)
    return {
        "nodes": [n.to_dict() for n in nodes],
        "time_ns": sum(n.time_ns for n in nodes),
        "note": None,
    }


def _finding_dicts(store: Store, run: RunRecord) -> list[dict[str, Any]]:
    return [f.to_dict() for f in run_findings(store, run)]


def _trial(rank: int | None, t: TuneTrial) -> dict[str, Any]:
    measured = t.median_ms is not None and t.verdict != ESTIMATE
    return {
        "rank": rank,
        "title": t.title,
        "fixes": t.fixes,
        "verdict": t.verdict,
        "step": step_text(t),
        "saving": saving_text(t) if rank is not None else "",
        "saving_pct": t.saving_pct if measured else None,
        "estimate": t.verdict == ESTIMATE,
        "outputs": outputs_text(t) if rank is not None else "",
        "findings": t.findings,
        "code": t.code,
        "note": t.note,
    }


def tuning(store: Store, run: RunRecord) -> dict[str, Any] | None:
    """The run's latest tuning (``profkit tune``) as the report's ranked fixes: the baseline,
    each trial in its rank with its figures in words (an estimate said as one), the code of each
    gain and estimate, and the line naming the best measured fix; None where it has none."""
    t = latest_tuning(store, run)
    if t is None:
        return None
    trials = [_trial(i, r) for i, r in enumerate(t.trials, start=1)]
    return {
        "target": t.target,
        "device": t.device,
        "iters": t.iters,
        "warmup": t.warmup,
        "created_at": when(t),
        "best": best_fix_line(t),
        "gains": sum(1 for r in t.trials if r.verdict == GAIN),
        "baseline": _trial(None, t.baseline),
        "trials": trials,
        "code": [r for r in trials if r["verdict"] in (GAIN, ESTIMATE) and r["code"]],
        "notes": [r for r in trials if r["note"]],
    }


def run_page(store: Store, run: RunRecord) -> dict[str, Any]:
    """Everything a single-run report shows."""
    summary = summarize(store, run, top=15)
    tp = throughput(store, run)
    return {
        "page": "run",
        "title": f"{run.name}: {run.workload or 'capture'} kernel report",
        "generated": _now(),
        "profkit_version": _profkit_version(),
        "header": header(store, run),
        "summary": summary.to_dict(),
        "headline": headline(summary, _basis(summary)),
        "memory_ops": {
            k: {"count": v.count, "time_ns": v.time_ns} for k, v in summary.memory_ops.items()
        },
        "findings": _finding_dicts(store, run),
        "tuning": tuning(store, run),
        "table": kernel_table(store, run),
        "ranges": range_times(store, run),
        "caveats": caveats(store, run),
        "modules": modules(store, run),
        "timeline": timeline(store, run),
        "throughput": tp.to_dict() if tp else None,
    }


def vs_page(
    store: Store,
    run_a: RunRecord,
    run_b: RunRecord,
    match: str = DEFAULT_MATCH.value,
    threshold_pct: float = 10.0,
) -> dict[str, Any]:
    """Everything a side-by-side report of two runs of ``store`` shows: each run's header,
    headline and findings, and their diff (``profkit diff``'s rows and totals)."""
    d = diff_runs(store, run_a, run_b, match=match, threshold_pct=threshold_pct)
    sides = []
    for run in (run_a, run_b):
        summary = summarize(store, run, top=15)
        sides.append(
            {
                "header": header(store, run),
                "summary": summary.to_dict(),
                "headline": headline(summary, _basis(summary)),
                "findings": _finding_dicts(store, run),
            }
        )
    diff = d.to_dict()
    # Readable labels for the rows (exact matching keys rows by full kernel name), as `diff` has them.
    labels = table_labels(r.name for r in d.rows) if d.match == "exact" else {}
    diff["labels"] = [labels.get(r.name, r.name) for r in d.rows]
    diff["matrix_change"] = describe_change(d.totals.matrix_work_a, d.totals.matrix_work_b)
    return {
        "page": "vs",
        "title": f"{run_a.name} vs {run_b.name}",
        "generated": _now(),
        "profkit_version": _profkit_version(),
        "sides": sides,
        "diff": diff,
    }


def index_page(
    store: Store, reports: dict[str, str], pairs: list[tuple[str, str, str]] | None = None
) -> dict[str, Any]:
    """The database's runs, oldest first, each with the file name of its report, and the
    side-by-side pages there are (``pairs``: run A, run B, the page's link)."""
    runs = []
    for r in store.runs():
        if r.status not in (None, "ok"):
            continue
        cpu = r.activity == "cpu_op"
        families = [] if cpu else store.family_totals(r.id, r.activity)
        mw = None if cpu else matrix_work(families)
        runs.append(
            {
                "matrix_tensor_core_pct": mw.tensor_core_pct if mw else None,
                "matrix_text": pct_text(mw),
                "matrix_time_ns": mw.time_ns if mw else None,
                "tensor_core_time_pct": None if cpu else tensor_core_pct(families),
                "name": r.name,
                "id": r.id,
                "workload": r.workload,
                "precision": r.precision,
                "mode": r.mode,
                "tool": r.tool,
                "device": r.device,
                "gpu_name": r.gpu_name,
                "activity": r.activity,
                "kernels": r.kernel_count,
                "time_ns": r.gpu_time_ns,
                "time": fmt_ns(r.gpu_time_ns) + (" CPU" if r.activity == "cpu_op" else ""),
                "date": r.finished_at or r.started_at,
                "report": reports.get(r.name),
            }
        )
    return {
        "page": "index",
        "title": f"profkit runs in {store.path}",
        "generated": _now(),
        "profkit_version": _profkit_version(),
        "database": str(store.path),
        "runs": runs,
        "pairs": [{"a": a, "b": b, "href": href} for a, b, href in pairs or []],
    }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
