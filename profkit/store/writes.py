"""Bulk writes of a run's kernel rows: streamed in batches of short write transactions (other
writers get their turn between them), texts interned in ``strings``; the way in of an nsys
export's bulk import (``nsys_import``); and a run's aggregates, written once its rows are
complete (:meth:`Writes.write_aggregates`).

Aggregates (schema 12, issue 25): the analyses (summary, diff, ranges, report, findings,
check, compare's tables, ranks) group a run's launches by a few columns; over millions of
rows each such GROUP BY costs seconds. So when a run's rows are final (the end of
``Runs.fill_run``, in its last transaction, after a bulk import's own rewrites of the rows:
``set_kernel_columns``, ``judge_by_inputs``; and for the runs of an earlier database, the
``aggregates`` migration) one pass over its rows writes

* ``kernel_aggs``: one row per distinct combination of ``layout.AGG_KEYS`` (kind, name, short
  name, precision, tensor-core verdict, family, evidence and its detail, operator, module,
  module type, phase, shapes, input types, rank, device, and ``in_iter``: whether the launch
  was made inside a measured-iteration range) with launches, summed / least / largest
  duration, first launch id and the launches that have counters; and
* ``path_aggs``: one row per (NVTX stack, innermost range, kind, rank, family) with launches,
  summed duration, first launch id and least thread id. Stacks are kept apart because a long
  capture's per-iteration stacks would multiply the main table's groups by its iterations.

Every grouped query of ``queries`` reads these (the same answers, order and tie-breaks as the
row-based SQL, which tests/test_aggregates.py keeps as the reference); the rows stay the
source of what is read launch by launch (``kernels``, a report's first launches and timeline,
the ranks' overlap). A failed import leaves no aggregates: they are written in the run's last
transaction and removed with its rows."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..errors import BadExport, EmptyCapture
from ..parse.schema import GPU_KINDS, ClassifiedRow, check_row
from .connection import Connection
from .fine_aggregates import (
    FINE_MEASURES,
    fill_fine_aggregates,
    fine_keys,
    key_sentinel,
    new_fine_table,
)
from .layout import (
    AGG_KEYS,
    GROUP_COLUMNS,
    INTERNED,
    KERNEL_COLUMN_OF,
    KERNEL_COLUMNS,
    LAUNCH_COLUMNS,
    PATH_AGG_KEYS,
)

if TYPE_CHECKING:
    from ..classify import Verdict
    from ..parse.nsys_export import (
        GpuOpsImport,
        NameRow,
        NsysExport,
        OperatorCall,
        Segment,
        StateRange,
        Window,
    )

BATCH_ROWS = (
    20_000  # kernel rows per write transaction: other writers get their turn between batches
)


class Writes(Connection):
    """Writing kernel rows (the run's row around them is ``runs``')."""

    def insert_gpu_ops(
        self,
        run_id: int,
        export: NsysExport,
        names: list[NameRow],
        ranges: Callable[[list[int]], list[StateRange]],
        segments: list[Segment],
        windows: list[Window],
        ranks: dict[int, int] | None = None,
        operators: list[OperatorCall] | None = None,
        operations_read: Callable[[Any, Any], None] | None = None,
    ) -> GpuOpsImport:
        """An nsys export's GPU operations as ``run_id``'s kernel rows, by SQL straight from the
        file: the bulk import a capture's ``bulk`` calls (see ``nsys_import.insert_gpu_ops``)."""
        from .nsys_import import insert_gpu_ops

        return insert_gpu_ops(
            self,
            run_id,
            export,
            names,
            ranges,
            segments,
            windows,
            ranks,
            operators,
            operations_read,
        )

    def _insert_kernels(self, run_id: int, rows: Iterable[ClassifiedRow]) -> tuple[str, int, int]:
        """Bulk insert through prepared statements (sqlite-utils' insert_all re-checks every
        value of every row, which made a 2-million-kernel import three times slower), one
        transaction per BATCH_ROWS rows, texts replaced by their ids in ``strings``, each row's
        shared columns by its group's number (``kernel_groups``, a new group written with the
        batch that first has it). Returns the run's activity and the count and summed duration
        of its rows of that activity: a run's rows are CPU operators or GPU work, never both."""
        cols = [c for c in KERNEL_COLUMNS if c != "run_id"]
        own = [cols.index(KERNEL_COLUMN_OF[c]) for c in LAUNCH_COLUMNS[3:]]
        shared = [cols.index(KERNEL_COLUMN_OF[c]) for c in GROUP_COLUMNS]
        launch_at = cols.index("launch_id")
        groups_sql = (
            f"insert into kernel_groups (run_id, id, {', '.join(GROUP_COLUMNS)}) "
            f"values (?, ?, {', '.join('?' * len(GROUP_COLUMNS))})"
        )
        launches_sql = (
            f"insert into launches ({', '.join(LAUNCH_COLUMNS)}) "
            f"values (?, ?, ?, {', '.join('?' * len(own))})"
        )
        # positions in a row's values
        text_at = [i for i, c in enumerate(cols) if c in INTERNED]
        ids: dict[str, int] = {}
        group_ids: dict[tuple[Any, ...], int] = {}
        batch: list[list[Any]] = []
        kinds: set[str] = set()
        count = {"kernel": 0, "cpu_op": 0}
        total = {"kernel": 0, "cpu_op": 0}

        def flush() -> None:
            with self.write():
                self._intern(
                    ids,
                    {
                        v
                        for values in batch
                        for i in text_at
                        if (v := values[i]) is not None and v not in ids
                    },
                )
                new_groups: list[tuple[Any, ...]] = []
                launches: list[tuple[Any, ...]] = []
                for values in batch:
                    for i in text_at:
                        if (v := values[i]) is not None:
                            values[i] = ids[v]
                    key = tuple(values[i] for i in shared)
                    group = group_ids.get(key)
                    if group is None:
                        group = group_ids[key] = len(group_ids)
                        new_groups.append((run_id, group, *key))
                    launches.append((run_id, values[launch_at], group, *(values[i] for i in own)))
                self.conn.executemany(groups_sql, new_groups)
                self.conn.executemany(launches_sql, launches)

        try:
            for r in rows:
                check_row(r)
                kind = r["kind"]
                kinds.add(kind)
                if kind in count:
                    count[kind] += 1
                    total[kind] += r["duration_ns"] or 0
                values: list[Any] = []
                for c in cols:
                    v = r[c]  # type: ignore[literal-required]
                    if c == "metrics":
                        v = _metrics_json(v) if v else None
                    elif c == "tensor_core" and v is not None:
                        v = int(bool(v))
                    values.append(v)
                batch.append(values)
                if len(batch) >= BATCH_ROWS:
                    flush()
                    batch = []
            if batch:
                flush()
        except sqlite3.IntegrityError as exc:
            raise BadExport(f"the capture lists a launch twice ({exc})") from exc
        if "cpu_op" in kinds and kinds & set(GPU_KINDS):
            raise BadExport("the capture mixes CPU operators and GPU activities")
        activity = "cpu_op" if "cpu_op" in kinds else "kernel"
        if not count[activity]:
            raise EmptyCapture("the capture holds no kernel launches and no CPU operator calls")
        return activity, count[activity], total[activity]

    def set_kernel_columns(
        self, run_id: int, by_short_name: dict[str, tuple[str | None, str | None]]
    ) -> int:
        """``op`` and ``input_types`` of ``run_id``'s kernels by their short name (a compiled
        model's generated kernels, ``parse.compiled``), where given. Returns the
        launch groups changed (``kernel_groups``: 0 where none was)."""
        changed = 0
        with self.write():
            ids = self.intern(
                {t for pair in by_short_name.values() for t in pair if t} | set(by_short_name)
            )
            for name, (op, types) in by_short_name.items():
                changed += self.conn.execute(
                    "update kernel_groups set op_id = coalesce(?, op_id), input_types_id = coalesce(?, input_types_id) "
                    "where run_id = ? and short_name_id = ? and kind = 'kernel'",
                    [
                        ids.get(op) if op else None,
                        ids.get(types) if types else None,
                        run_id,
                        ids[name],
                    ],
                ).rowcount
            if changed:
                forget_prepared_aggregates(self)
        return changed

    def judge_by_inputs(self, run_id: int, judge: Callable[[str, str], Verdict]) -> int:
        """Kernels of ``run_id`` with no precision yet and their launching operator's input
        types (a bulk import's, judged by name alone): ``judge(name, input_types)`` once per
        distinct pair, its verdict written where it gives a precision. Returns the launch groups changed."""
        pairs = self.conn.execute(
            "select distinct k.name_id, k.input_types_id, n.text, t.text from kernel_groups k "
            "join strings n on n.id = k.name_id join strings t on t.id = k.input_types_id "
            "where k.run_id = ? and k.kind = 'kernel' and k.precision = 'unknown'",
            [run_id],
        ).fetchall()
        changed = 0
        with self.write():
            for name_id, types_id, name, types in pairs:
                v = judge(name, types)
                if v.precision == "unknown":
                    continue
                detail = self.intern([v.evidence_detail])[v.evidence_detail]
                changed += self.conn.execute(
                    "update kernel_groups set precision = ?, evidence = ?, evidence_detail_id = ? where run_id = ? "
                    "and name_id = ? and input_types_id = ? and kind = 'kernel' and precision = 'unknown'",
                    [v.precision, v.evidence, detail, run_id, name_id, types_id],
                ).rowcount
            if changed:
                forget_prepared_aggregates(self)
        return changed

    def judge_by_run(self, run_id: int, tag: str | None) -> int:
        """Kernels of ``run_id`` still of unknown precision whose names a rule's ``precision_else``
        reads (``classify.name_else``: a type in the name where no operator's types were recorded,
        an opaque copy's element size), judged so; the run's own types stand for RUN_HALF and
        RUN_FLOAT: its tag (``tag``: fp16, bf16, fp32, amp), else its kernels' time by precision.
        Returns the launch groups changed."""
        from ..classify import RUN_FLOAT, RUN_HALF, name_else

        unknown, times = self._unknown_names_and_times(run_id)
        judged = [(i, found) for i, name in unknown if (found := name_else(name)) is not None]
        if not judged:
            return 0

        def most(among: tuple[str, ...]) -> str | None:
            present = [p for p in among if times.get(p)]
            return max(present, key=lambda p: times[p]) if present else None

        # An AMP run's parameters (embeddings included) stay fp32: its float type is fp32.
        run = {
            RUN_HALF: tag if tag in ("fp16", "bf16") else most(("fp16", "bf16")) or "fp16",
            RUN_FLOAT: tag
            if tag in ("fp32", "fp16", "bf16")
            else "fp32"
            if tag == "amp"
            else most(("fp32", "fp16", "bf16")) or "fp32",
        }
        said = {RUN_HALF: "the run's 2-byte float type", RUN_FLOAT: "the run's float type"}
        changed = 0
        verdicts: dict[int, tuple[str, int]] = {}  # name id -> (precision, evidence detail id)
        with self.write():
            for name_id, (value, rule) in judged:
                precision = run.get(value, value)
                detail = (
                    f"rule {rule}: {said[value]} ({precision}), no operator's types recorded"
                    if value in run
                    else f"rule {rule}: by what its name says (an element type or size), no operator's types "
                    "recorded"
                )
                ids = self.intern([detail])
                verdicts[name_id] = (precision, ids[detail])
                changed += self.conn.execute(
                    "update kernel_groups set precision = ?, evidence = 'name', evidence_detail_id = ? where run_id = ? "
                    "and name_id = ? and kind = 'kernel' and precision = 'unknown'",
                    [precision, ids[detail], run_id, name_id],
                ).rowcount
            if changed:
                self._judge_prepared(run_id, verdicts)
        return changed

    def _unknown_names_and_times(self, run_id: int) -> tuple[list[tuple[int, str]], dict[str, int]]:
        """The (id, text) of the names of ``run_id``'s kernels of unknown precision, and its kernel
        time per precision: from a bulk import's grouped launches where it has them (a few
        thousand groups, not millions of rows), else from its rows."""
        prepared = self.prepared_aggregates
        if prepared is None or prepared[0] != run_id:
            names = self.conn.execute(
                "select distinct k.name_id, n.text from kernel_groups k join strings n on n.id = k.name_id "
                "where k.run_id = ? and k.kind = 'kernel' and k.precision = 'unknown'",
                [run_id],
            ).fetchall()
            return names, dict(
                self.conn.execute(
                    "select precision, sum(coalesce(duration_ns, 0)) from kernel_rows where run_id = ? and kind = 'kernel' "
                    "group by precision",
                    [run_id],
                ).fetchall()
            )
        keys = fine_keys()
        kind, name, prec, time = (
            *(keys.index(c) for c in ("kind", "name_id", "precision")),
            len(keys) + FINE_MEASURES.index("time_ns"),
        )
        times: dict[str, int] = {}
        ids: set[int] = set()
        for g in prepared[1]:
            if g[kind] == "kernel":
                times[g[prec]] = times.get(g[prec], 0) + int(g[time] or 0)
                if g[prec] == "unknown":
                    ids.add(g[name])
        texts = self._texts(ids) if ids else {}
        return [(i, texts[i]) for i in ids if i in texts], times

    def _judge_prepared(self, run_id: int, verdicts: dict[int, tuple[str, int]]) -> None:
        """A bulk import's grouped launches (``prepared_aggregates``) given the verdicts
        :meth:`judge_by_run` wrote to the rows, so the run's aggregates are still written from
        them (not by reading every row again)."""
        prepared = self.prepared_aggregates
        if prepared is None or prepared[0] != run_id:
            return
        keys = fine_keys()
        kind, name, prec, ev, detail = (
            keys.index(c)
            for c in ("kind", "name_id", "precision", "evidence", "evidence_detail_id")
        )
        groups: list[tuple[Any, ...]] = []
        for g in prepared[1]:
            v = verdicts.get(g[name]) if g[kind] == "kernel" and g[prec] == "unknown" else None
            if v is not None:
                changed = list(g)
                changed[prec], changed[ev], changed[detail] = v[0], "name", v[1]
                g = tuple(changed)
            groups.append(g)
        self.prepared_aggregates = (run_id, groups)

    def write_aggregates(self, run_id: int) -> None:
        """Write ``run_id``'s aggregates from its rows as they are now (:func:`write_aggregates`);
        inside a write transaction."""
        write_aggregates(self, run_id)

    def intern(self, texts: Iterable[str]) -> dict[str, int]:
        """The ids of ``texts`` in ``strings``, adding those not there yet; inside a write
        transaction (a bulk importer's)."""
        ids: dict[str, int] = {}
        self._intern(ids, set(texts))
        return ids

    def _intern(self, ids: dict[str, int], texts: set[str]) -> None:
        """Put ``texts`` in ``strings`` (those not there yet) and their ids in ``ids``; inside a
        write transaction."""
        if not texts:
            return
        self.conn.executemany(
            "insert or ignore into strings (text) values (?)", ((t,) for t in texts)
        )
        for t in texts:
            ids[t] = self.execute("select id from strings where text = ?", [t]).fetchone()[0]


def write_aggregates(s: Connection, run_id: int) -> None:
    """Write ``run_id``'s aggregates (``kernel_aggs``, ``path_aggs``) from its rows, as they
    are now (any earlier ones replaced); inside a write transaction. One pass over the rows
    adds each launch to its group in a small temporary table keyed by both tables' keys (an
    upsert: a GROUP BY would sort millions of rows, three times slower), whose few rows each
    table is then grouped from. The key's NULLs are a sentinel there (a unique index holds
    NULLs apart), NULL again in the tables."""
    delete_aggregates(s, run_id)
    keys = [k for k in AGG_KEYS if k != "in_iter"]
    fine = fine_keys()
    table = "temp.agg_fine"
    prepared = s.prepared_aggregates
    forget_prepared_aggregates(s)
    # a bulk import's, from its working table (the same groups)
    if prepared is not None and prepared[0] == run_id:
        # groups already: summed again below, a key in two of them (a verdict given since) alike
        new_fine_table(s, table, unique=False)
        s.conn.executemany(
            f"insert into {table} values ({', '.join('?' * (len(fine) + len(FINE_MEASURES)))})",
            prepared[1],
        )
    else:
        fill_fine_aggregates(
            s,
            table,
            f"""
            select {", ".join(fine)}, 1 as launches, coalesce(duration_ns, 0) as time_ns, duration_ns as min_ns,
                   duration_ns as max_ns, launch_id as first_launch, thread_id as min_thread,
                   metrics is not null and metrics != '{{}}' as metric_launches
            from kernel_rows where run_id = ?""",
            [run_id],
        )
    plain = {c: f"nullif({c}, {key_sentinel(c)})" for c in fine}
    in_iter = f"coalesce({plain['nvtx_path_id']} in (select id from strings where text glob '*.iter[0-9]*'), 0)"
    s.execute(
        f"""insert into kernel_aggs (run_id, {", ".join(AGG_KEYS)}, launches, time_ns, min_ns, max_ns,
                                           first_launch, metric_launches)
                  select ?, {", ".join(plain[c] for c in keys)}, {in_iter}, sum(launches), sum(time_ns), min(min_ns),
                         max(max_ns), min(first_launch), sum(metric_launches)
                  from {table} group by {", ".join(keys)}, {in_iter}""",
        [run_id],
    )
    s.execute(
        f"""insert into path_aggs (run_id, {", ".join(PATH_AGG_KEYS)}, launches, time_ns, first_launch,
                                         min_thread)
                  select ?, {", ".join(plain[c] for c in PATH_AGG_KEYS)}, sum(launches), sum(time_ns),
                         min(first_launch), min(min_thread)
                  from {table} group by {", ".join(PATH_AGG_KEYS)}""",
        [run_id],
    )
    s.execute(f"drop table {table}")


def forget_prepared_aggregates(s: Connection) -> None:
    """Forget a bulk import's grouped launches: the rows changed since, or they are used."""
    s.prepared_aggregates = None


def delete_aggregates(s: Connection, run_id: int) -> None:
    """Remove ``run_id``'s aggregates; inside a write transaction."""
    for table in ("kernel_aggs", "path_aggs"):
        s.execute(f"delete from {table} where run_id = ?", [run_id])


def _metrics_json(metrics: dict[str, Any]) -> str:
    """A row's metrics as JSON text; a value that is not a finite number (NaN, infinity: not
    JSON) is stored as null."""
    try:
        return json.dumps(metrics, allow_nan=False)
    except ValueError:
        return json.dumps(
            {
                k: v if not isinstance(v, float) or math.isfinite(v) else None
                for k, v in metrics.items()
            }
        )
