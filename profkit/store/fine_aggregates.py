"""The launches of a run grouped finely (by both aggregate tables' keys but ``in_iter``), the
step that ``writes.write_aggregates`` makes ``kernel_aggs`` and ``path_aggs`` from: filled from
a run's rows, or from an nsys bulk import's own grouping of its operations
(``nsys_import``), which is why it is a module of its own that both import."""

from __future__ import annotations

from typing import Any

from .connection import Connection
from .layout import AGG_KEYS

FINE_MEASURES = (
    "launches",
    "time_ns",
    "min_ns",
    "max_ns",
    "first_launch",
    "min_thread",
    "metric_launches",
)


def fine_keys() -> list[str]:
    """The columns ``agg_fine`` groups by: both aggregate tables' keys but ``in_iter``."""
    return [*(k for k in AGG_KEYS if k != "in_iter"), "nvtx_path_id", "nvtx_range_id"]


def key_sentinel(c: str) -> str:
    """A key column's sentinel for NULL (a unique index holds NULLs apart)."""
    return "char(0)" if c in ("kind", "precision", "evidence") else "-9223372036854775808"


def fill_fine_aggregates(s: Connection, table: str, select: str, params: list[Any]) -> None:
    """Make ``table`` (temporary), the launches grouped by ``fine_keys()`` (NULLs as their
    sentinel) with ``FINE_MEASURES``, from ``select``: rows of those keys (raw) and measures,
    a row being one launch or a group of launches already summed. An upsert per row into a
    small table keyed by the group (a GROUP BY would sort millions of rows, three times slower)."""
    fine = fine_keys()

    def least(c: str) -> str:  # the least of the kept and the new value, NULL only where both are
        return f"{c} = min(coalesce({c}, excluded.{c}), coalesce(excluded.{c}, {c}))"

    new_fine_table(s, table)
    s.execute(
        f"""insert into {table}
                  select {", ".join(f"coalesce({c}, {key_sentinel(c)})" for c in fine)}, {", ".join(FINE_MEASURES)}
                  from ({select}) where true
                  on conflict ({", ".join(fine)}) do update set
                      launches = launches + excluded.launches, time_ns = time_ns + excluded.time_ns, {least("min_ns")},
                      max_ns = max(coalesce(max_ns, excluded.max_ns), coalesce(excluded.max_ns, max_ns)),
                      first_launch = min(first_launch, excluded.first_launch), {least("min_thread")},
                      metric_launches = metric_launches + excluded.metric_launches""",
        params,
    )


def new_fine_table(s: Connection, table: str, unique: bool = True) -> None:
    """An empty (temporary) ``table`` for ``fill_fine_aggregates``; ``unique``: keyed by the
    group (for the upsert), else rows as they come."""
    fine = fine_keys()
    s.execute(f"drop table if exists {table}")
    s.execute(
        f"create temp table {table.removeprefix('temp.')} ({', '.join(fine)}, {', '.join(FINE_MEASURES)})"
    )
    if unique:
        s.execute(
            f"create unique index {table}_key on {table.removeprefix('temp.')} ({', '.join(fine)})"
        )
