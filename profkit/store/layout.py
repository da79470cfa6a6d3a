"""The layout of profkit's tables as stored: the columns of ``runs``, ``launches`` and
``kernel_groups`` (the kernel table, its texts interned in ``strings``), the ``kernel_rows`` view
joining them and the ``kernels`` view over that, ``ranges``,
``benches`` and ``bench_rows``. Shared by ``migrations`` (which makes them), the writers and
readers of each table, and ``nsys_import`` (the bulk import of an nsys export)."""

from __future__ import annotations

from ..parse.schema import CLASSIFIED, COLUMNS, HOST_SYNC_COLUMNS, RANGE_COLUMNS

# documented on RunRecord (but owner: "host:pid" of the process writing it, "host:pid+lock" where it holds
RUN_COLUMNS: dict[str, type] = {
    "id": int,
    "name": str,
    "source": str,
    "status": str,
    "workload": str,
    "precision": str,
    "mode": str,
    "batch_size": int,
    "iters": int,
    "device": str,
    "tool": str,
    "tool_version": str,
    "metric_set": str,
    "metrics": str,
    "gpu_name": str,
    "compute_capability": str,
    "command": str,
    "started_at": str,
    "finished_at": str,
    "raw_files": str,
    "source_sha256": str,
    "activity": str,
    "kernel_count": int,
    "gpu_time_ns": int,
    "profiled_wall_s": float,
    "info": str,
    "owner": str,
    "folder": str,
}
# the run's lock file, see Store._recover); metrics, command, raw_files and info hold JSON
JSON_RUN_COLUMNS = ("metrics", "command", "raw_files", "info")

KERNEL_COLUMNS: dict[str, type] = {"run_id": int}
for _col, _dtype in {**COLUMNS, **CLASSIFIED}.items():
    KERNEL_COLUMNS[_col] = {"int64": int, "Int64": int, "boolean": int, "object": str}.get(
        _dtype, str
    )
# Text columns of the kernel table kept once in ``strings`` and referenced by id (column
# ``<name>_id`` in ``kernel_rows``): a capture repeats the same few thousand names, ranges,
# operators and verdict texts over millions of launches.
INTERNED = (
    "name",
    "short_name",
    "nvtx_range",
    "nvtx_path",
    "input_types",
    "op",
    "module",
    "module_type",
    "shapes",
    "phase",
    "family",
    "evidence_detail",
)
STORED_COLUMNS: dict[str, type] = {
    (f"{c}_id" if c in INTERNED else c): (int if c in INTERNED else t)
    for c, t in KERNEL_COLUMNS.items()
}
# a stored column (``name_id``) -> its kernel table column (``name``)
KERNEL_COLUMN_OF: dict[str, str] = dict(zip(STORED_COLUMNS, KERNEL_COLUMNS))

# Schema 16: a launch's own columns in ``launches`` (LAUNCH_COLUMNS); the columns its run's
# launches share (kernel, launch configuration, stream, thread, operator, module, verdict...)
# once per distinct combination in ``kernel_groups`` (GROUP_COLUMNS, keyed by run and group,
# ``id`` numbered from 0 within a run). A launch is written as 8 values, not 31: the kernel
# table's write, an import's largest, is about 2.3 times quicker, and its database about 2.8
# times smaller (issue 39, benchmarks/rows_layout_spike.py). ``kernel_rows`` is a view over
# both with schema 15's columns, launches the outer loop (CROSS JOIN: each launch's group found
# by its key, in launch order).
LAUNCH_OWN = ("launch_id", "duration_ns", "start_ns", "nvtx_range_id", "nvtx_path_id", "metrics")
GROUP_COLUMNS: tuple[str, ...] = tuple(
    c for c in STORED_COLUMNS if c not in ("run_id", *LAUNCH_OWN)
)
LAUNCH_COLUMNS: tuple[str, ...] = ("run_id", "launch_id", "group_id", *LAUNCH_OWN[1:])
KERNEL_ROWS_VIEW = (
    "create view kernel_rows as select "
    + ", ".join(("l." if c in ("run_id", *LAUNCH_OWN) else "g.") + c for c in STORED_COLUMNS)
    + " from launches l cross join kernel_groups g on g.run_id = l.run_id and g.id = l.group_id"
)


def split_statements(source: str) -> list[str]:
    """SQL that writes the rows of ``source`` (a table or query with ``STORED_COLUMNS``, one row
    a launch, any number of runs) into ``kernel_groups`` and ``launches``: each run's distinct
    combinations of GROUP_COLUMNS numbered from 0 (NULLs alike), each launch given its group's
    number. Uses and drops ``temp.split_groups``."""
    cols = ", ".join(GROUP_COLUMNS)
    return [
        "drop table if exists temp.split_groups",
        f"create temp table split_groups as select run_id, row_number() over "
        f"(partition by run_id order by {cols}) - 1 as id, {cols} "
        f"from (select distinct run_id, {cols} from {source})",
        f"create index temp.split_groups_key on split_groups (run_id, {cols})",
        f"insert into kernel_groups (run_id, id, {cols}) select run_id, id, {cols} "
        "from temp.split_groups order by run_id, id",
        f"insert into launches ({', '.join(LAUNCH_COLUMNS)}) select k.run_id, k.launch_id, g.id, "
        f"{', '.join('k.' + c for c in LAUNCH_COLUMNS[3:])} from {source} k join temp.split_groups g "
        f"on g.run_id = k.run_id and {' and '.join(f'g.{c} is k.{c}' for c in GROUP_COLUMNS)} "
        "order by k.run_id, k.launch_id",
        "drop table temp.split_groups",
    ]


def stored_type(c: str) -> str:
    """A stored kernel column's SQL type."""
    return "integer" if STORED_COLUMNS.get(c, int) is int else "text"


# The kernels view: kernel_rows with each id replaced by its text, the columns and order of
# the table it replaced (schema 5); metrics '{}' where none were stored (NULL).
KERNELS_VIEW = (
    "create view kernels as select "
    + ", ".join(
        f"s_{c}.text as {c}"
        if c in INTERNED
        else ("coalesce(k.metrics, '{}') as metrics" if c == "metrics" else f"k.{c}")
        for c in KERNEL_COLUMNS
    )
    + " from kernel_rows k "
    + " ".join(f"left join strings s_{c} on s_{c}.id = k.{c}_id" for c in INTERNED)
)
RANGE_TABLE_COLUMNS: dict[str, type] = {
    "run_id": int,
    **{c: {"int": int}.get(t, str) for c, t in RANGE_COLUMNS.items()},
}
# A timeline run's host-blocking runtime calls (schema 10): parse.schema.HostSyncRow, one row each.
HOST_SYNC_TABLE_COLUMNS: dict[str, type] = {
    "run_id": int,
    **{c: {"int": int}.get(t, str) for c, t in HOST_SYNC_COLUMNS.items()},
}

# Benchmarks (``profkit bench``, schema 7): one ``benches`` row each (the fields of
# records.BenchRecord; precisions, modes and info hold JSON) and one ``bench_rows`` row per
# combination (records.BenchRow's fields; iter_ns holds JSON, reference_only 0 or 1), in the
# order ``seq`` the benchmark ran them.
BENCH_COLUMNS: dict[str, type] = {
    "id": int,
    "workload": str,
    "batch_size": int,
    "device": str,
    "iters": int,
    "warmup": int,
    "precisions": str,
    "modes": str,
    "created_at": str,
    "gpu_name": str,
    "torch_version": str,
    "info": str,
}
JSON_BENCH_COLUMNS = ("precisions", "modes", "info")

# profkit tune (schema 15): a row per trial of a tuning (records.TuneTrial's fields; fixes,
# findings, code and iter_ns hold JSON), a tuning being the rows of one (run_id, tuning) in the
# order ``seq`` they are ranked (the baseline first), with the tuning's own figures repeated.
TUNE_TRIAL_COLUMNS: dict[str, type] = {
    "run_id": int,
    "tuning": int,
    "seq": int,
    "created_at": str,
    "target": str,
    "device": str,
    "iters": int,
    "warmup": int,
    "fixes": str,
    "title": str,
    "verdict": str,
    "findings": str,
    "code": str,
    "median_ms": float,
    "spread_ms": float,
    "p25_ms": float,
    "p75_ms": float,
    "saving_ms": float,
    "saving_pct": float,
    "estimate_ms": float,
    "estimate_pct": float,
    "max_abs_diff": float,
    "rel_diff": float,
    "top1_agreement": float,
    "tolerance": float,
    "agreement": str,
    "note": str,
    "iter_ns": str,
}
JSON_TUNE_COLUMNS = ("fixes", "findings", "code", "iter_ns")
BENCH_ROW_COLUMNS: dict[str, type] = {
    "bench_id": int,
    "seq": int,
    "precision": str,
    "mode": str,
    "status": str,
    "reference_only": int,
    "error": str,
    "median_ms": float,
    "spread_ms": float,
    "p25_ms": float,
    "p75_ms": float,
    "min_ms": float,
    "max_ms": float,
    "items_per_s": float,
    "s_per_item": float,
    "peak_memory_bytes": int,
    "max_abs_diff": float,
    "top1_agreement": float,
    "note": str,
    "iter_ns": str,
}

# A run's aggregates (schema 12, ``aggregates``): written once, when its rows are complete, so
# that the analyses read a few thousand groups instead of millions of rows. ``kernel_aggs``:
# one row per distinct combination of AGG_KEYS (the columns an analysis groups or filters by;
# ``in_iter``: 1 where the launch was made inside a measured-iteration range, ``*.iterN``)
# with AGG_MEASURES. ``path_aggs``: one row per (NVTX stack, innermost range, kind, rank,
# family): per-iteration stacks would multiply the main table's groups by the iterations.
AGG_KEYS = (
    "kind",
    "name_id",
    "short_name_id",
    "precision",
    "tensor_core",
    "family_id",
    "evidence",
    "evidence_detail_id",
    "op_id",
    "module_id",
    "module_type_id",
    "phase_id",
    "shapes_id",
    "input_types_id",
    "rank",
    "device",
    "in_iter",
)
AGG_MEASURES = ("launches", "time_ns", "min_ns", "max_ns", "first_launch", "metric_launches")
PATH_AGG_KEYS = ("nvtx_path_id", "nvtx_range_id", "kind", "rank", "family_id")
PATH_AGG_MEASURES = ("launches", "time_ns", "first_launch", "min_thread")

# ncu's counters of a kernel function, kept across runs (schema 13, ``store.counters``; keyed
# per launch since schema 14): one row per (GPU, the environment that fixes a function's code,
# metric set, the run's signature, scope, mangled name, launch configuration); the scope is
# empty but for a kernel generated at run time: its source's digest (torch.compile's Triton
# kernels, whose names repeat across models); ``config`` the counted launch's grid and block.
# ``metrics`` and ``metric_units`` hold JSON; run_id, run_name and launch_id say which launch they were read from.
COUNTER_COLUMNS: dict[str, type] = {
    "gpu": str,
    "environment": str,
    "metric_set": str,
    "signature": str,
    "scope": str,
    "mangled": str,
    "config": str,
    "name": str,
    "short_name": str,
    "metrics": str,
    "metric_units": str,
    "run_id": int,
    "run_name": str,
    "launch_id": int,
    "created_at": str,
}
COUNTER_KEY = ("gpu", "environment", "metric_set", "signature", "scope", "mangled", "config")
