"""ncu's counters of kernel functions kept across runs (schema 13's ``counters``, keyed per launch
since schema 14): a kernel function's tensor-path counters do not change between runs of the
same binaries on the same GPU and the same launch, so the per-function plan reads them here
before it profiles anything, and profiles only the functions not found. A row is keyed by the
GPU, the environment that fixes the function's code (``profkit.code_versions``), the metric
set, the run's signature (workload and options), a scope (a generated kernel's source digest),
the mangled name and the counted launch's configuration (grid and block)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime

from ..records import CountedFunction
from .connection import Connection
from .layout import COUNTER_COLUMNS

CounterKey = tuple[str, str, str, str]  # (GPU, environment key, metric set, signature)
FunctionKey = tuple[str, str, str]  # (mangled name, scope, launch configuration)


class Counters(Connection):
    """Reading and keeping counted kernel functions."""

    def counted(
        self, key: CounterKey, functions: Iterable[FunctionKey]
    ) -> dict[FunctionKey, CountedFunction]:
        """The kept counters of these (mangled name, scope, launch configuration) functions under
        ``key``, by function; those never counted so are absent."""
        wanted = list(dict.fromkeys(functions))
        found: dict[FunctionKey, CountedFunction] = {}
        cols = "mangled, scope, config, name, short_name, metrics, metric_units, run_id, run_name, launch_id"
        for i in range(0, len(wanted), 200):
            chunk = wanted[i : i + 200]
            triples = " or ".join("(mangled = ? and scope = ? and config = ?)" for _ in chunk)
            rows = self.execute(
                f"select {cols} from counters where gpu = ? and environment = ? and metric_set = ? "
                f"and signature = ? and ({triples})",
                [*key, *(v for f in chunk for v in f)],
            ).fetchall()
            for (
                mangled,
                scope,
                config,
                name,
                short,
                metrics,
                units,
                run_id,
                run_name,
                launch_id,
            ) in rows:
                found[(mangled, scope, config)] = CountedFunction(
                    mangled,
                    scope,
                    config,
                    name,
                    short,
                    json.loads(metrics or "{}"),
                    json.loads(units or "{}"),
                    int(run_id),
                    run_name,
                    int(launch_id),
                )
        return found

    def keep_counters(self, key: CounterKey, functions: Iterable[CountedFunction]) -> int:
        """Keep these functions' counters under ``key`` (a function counted again at the same
        launch configuration replaces its row: the latest count stands). Returns how many were
        written."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        rows = [
            (
                *key,
                f.scope,
                f.mangled,
                f.config,
                f.name,
                f.short_name,
                json.dumps(f.metrics, sort_keys=True),
                json.dumps(f.metric_units, sort_keys=True),
                f.run_id,
                f.run_name,
                f.launch_id,
                now,
            )
            for f in functions
        ]
        if not rows:
            return 0
        with self.write():
            self.conn.executemany(
                f"insert or replace into counters ({', '.join(COUNTER_COLUMNS)}) "
                f"values ({', '.join('?' * len(COUNTER_COLUMNS))})",
                rows,
            )
        return len(rows)

    def counted_run(self, machine_key: str, signature: str) -> int | None:
        """The latest complete ncu run of this signature (``ncu_counters``) made where the
        environment's parts known before a run have this digest, if any."""
        row = self.execute(
            """select id from runs where status = 'ok' and tool = 'ncu'
                              and json_extract(info, '$.ncu_plan.counters.machine_key') = ?
                              and json_extract(info, '$.ncu_plan.counters.signature') = ?
                              order by id desc limit 1""",
            [machine_key, signature],
        ).fetchone()
        return int(row[0]) if row else None
