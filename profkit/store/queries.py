"""The analyses' queries over profkit's database: a run's kernel rows streamed (as rows or as
SQLite-made JSON), their totals and groupings (read from the run's aggregates, ``kernel_aggs``
and ``path_aggs``, written at import: see ``writes``; by text ids, named after), the timeline,
ranges and NVTX stacks, and the per-rank figures of a distributed run. The analyses call these
and hold no SQL of their own."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..parse.schema import (
    HOST_SYNC_COLUMNS,
    KERNEL_FIELDS,
    RANGE_COLUMNS,
    ClassifiedRow,
    HostSyncRow,
    RangeRow,
)
from .connection import Connection
from .layout import INTERNED

# imported where the rows are made: `profkit runs` and `kernels` need none of them
if TYPE_CHECKING:
    from ..rows import (
        FamilyTotals,
        KernelGroup,
        KindTotals,
        Launch,
        MetricSums,
        ModuleGroup,
        NameGroup,
        NameTotal,
        PathTotals,
        RankPathTime,
        RankTotals,
        ShapeGroup,
        TimelineOp,
    )


class Queries(Connection):
    """Reading a run's rows and figures."""

    # ------------------------------------------------------------------ reading kernels
    def iter_kernels(self, run_id: int) -> Iterator[ClassifiedRow]:
        """Kernel rows (KERNEL_FIELDS, in that order) in launch order, streamed, with metrics
        decoded and tensor_core as bool."""
        cur = self.execute(
            f"select {', '.join(KERNEL_FIELDS)} from kernels where run_id = ? order by launch_id",
            [run_id],
        )
        loads = json.loads
        while batch := cur.fetchmany(5000):
            for values in batch:
                row = dict(zip(KERNEL_FIELDS, values))
                row["metrics"] = loads(row["metrics"]) if row["metrics"] else {}
                if row["tensor_core"] is not None:
                    row["tensor_core"] = bool(row["tensor_core"])
                yield row  # type: ignore[misc]  # KERNEL_FIELDS are ClassifiedRow's keys

    def iter_kernels_json(self, run_id: int) -> Iterator[str]:
        """The rows of :meth:`iter_kernels` as JSON objects (one text each, same keys, order and
        values), made by SQLite itself: the fast path of ``kernels --format json``."""

        def field(c: str) -> str:
            if c == "tensor_core":
                return "case tensor_core when 1 then json('true') when 0 then json('false') end"
            return "json(metrics)" if c == "metrics" else c

        obj = "json_object(" + ", ".join(f"'{c}', {field(c)}" for c in KERNEL_FIELDS) + ")"
        cur = self.execute(
            f"select {obj} from kernels where run_id = ? order by launch_id", [run_id]
        )
        while batch := cur.fetchmany(5000):
            for (text,) in batch:
                yield text

    def count_by_kind(self, run_id: int) -> dict[str, int]:
        """How many rows of each kind (kernel, memcpy, memset, cpu_op) a run has."""
        return {
            k: int(n)
            for k, n in self.execute(
                "select kind, sum(launches) from kernel_aggs where run_id = ? group by kind order by kind",
                [run_id],
            )
        }

    def totals(self, run_id: int, kind: str) -> KindTotals:
        """Over a run's rows of one kind: count, summed duration, tensor-core launches and time,
        and the time of launches whose tensor-core use is unknown."""
        from ..rows import KindTotals

        count, total, tc_count, tc_time, unknown_time = self.execute(
            "select coalesce(sum(launches), 0), coalesce(sum(time_ns), 0), "
            "coalesce(sum(case when tensor_core = 1 then launches else 0 end), 0), "
            "coalesce(sum(case when tensor_core = 1 then time_ns else 0 end), 0), "
            "coalesce(sum(case when tensor_core is null then time_ns else 0 end), 0) "
            "from kernel_aggs where run_id = ? and kind = ?",
            [run_id, kind],
        ).fetchone()
        return KindTotals(
            count=int(count),
            time_ns=int(total),
            tensor_core_count=int(tc_count),
            tensor_core_time_ns=int(tc_time),
            unknown_time_ns=int(unknown_time),
        )

    def family_totals(
        self, run_id: int, kind: str, in_iterations: bool = False
    ) -> list[FamilyTotals]:
        """Per family over a run's rows of one kind (largest time first): launches, summed
        duration, the time on tensor cores and the time whose tensor-core use is unknown.
        ``in_iterations``: only rows launched inside a measured-iteration range, as
        :meth:`kernel_groups`."""
        from ..rows import FamilyTotals

        where, args = self._iterations_filter(in_iterations)
        rows = self.execute(
            f"""select family_id, sum(launches), sum(time_ns),
                                       sum(case when tensor_core = 1 then time_ns else 0 end),
                                       sum(case when tensor_core is null then time_ns else 0 end)
                                from kernel_aggs where run_id = ? and kind = ?{where} group by family_id""",
            [run_id, kind, *args],
        ).fetchall()
        texts = self._texts({r[0] for r in rows if r[0] is not None})
        out = [
            FamilyTotals(
                family=texts.get(f) if f is not None else None,
                count=int(n),
                time_ns=int(t),
                tensor_core_time_ns=int(tc),
                undecided_time_ns=int(un),
            )
            for f, n, t, tc, un in rows
        ]
        return sorted(out, key=lambda r: (-r.time_ns, r.family or ""))

    def _iterations_filter(self, in_iterations: bool) -> tuple[str, list[Any]]:
        """The ``where`` clause (and its arguments) that keeps only the aggregates of launches
        made inside a measured-iteration range (``<tag>.iterN``); none unless ``in_iterations``."""
        return (" and in_iter = 1", []) if in_iterations else ("", [])

    GROUPABLE = ("precision", "family", "evidence", "kind", "name", "short_name")

    def grouped(
        self, run_id: int, by: str, kinds: Iterable[str], missing: str = "unknown"
    ) -> list[tuple[str, int, int]]:
        """(value of ``by``, count, summed duration) over a run's rows of these kinds, largest
        time first; a NULL value counts as ``missing``."""
        return self.breakdown(run_id, (by,), kinds, missing)[by]

    def breakdown(
        self,
        run_id: int,
        bys: Sequence[str],
        kinds: Iterable[str],
        missing: str | dict[str, str] = "unknown",
    ) -> dict[str, list[tuple[str, int, int]]]:
        """:meth:`grouped` for several columns in one pass over the run's rows (texts by their
        ids, read once each): ``missing`` names a NULL value, for all or per column."""
        bad = [b for b in bys if b not in self.GROUPABLE]
        if bad:
            raise ValueError(f"cannot group kernels by {bad[0]!r}")
        kinds = list(kinds)
        cols = [f"{b}_id" if b in INTERNED else b for b in bys]
        q = f"""select {", ".join(cols)}, sum(launches), sum(time_ns) from kernel_aggs
                where run_id = ? and kind in ({", ".join("?" * len(kinds))}) group by {", ".join(cols)}"""
        combos = self.execute(q, [run_id, *kinds]).fetchall()
        texts = self._texts(
            {v for row in combos for b, v in zip(bys, row) if b in INTERNED and v is not None}
        )
        out = {}
        for i, b in enumerate(bys):
            acc: dict[str, list[int]] = {}
            absent = missing if isinstance(missing, str) else missing.get(b, "unknown")
            for row in combos:
                v = row[i]
                key = absent if v is None else (texts[v] if b in INTERNED else str(v))
                cell = acc.setdefault(key, [0, 0])
                cell[0] += int(row[-2])
                cell[1] += int(row[-1])
            out[b] = sorted(((k, n, t) for k, (n, t) in acc.items()), key=lambda r: (-r[2], r[0]))
        return out

    def top_names(self, run_id: int, kind: str, limit: int) -> list[NameTotal]:
        """The most expensive (name, precision) pairs of a run's rows of one kind: launches,
        summed time, and the tensor-core verdict and evidence of the first launch."""
        # One min() aggregate: SQLite takes the bare columns from the group's first launch.
        from ..rows import NameTotal

        q = """select name_id, min(first_launch), sum(launches) as n, sum(time_ns) as t, precision,
                      tensor_core, evidence
               from kernel_aggs where run_id = ? and kind = ? group by name_id, precision"""
        groups = self.execute(q, [run_id, kind]).fetchall()
        texts = self._texts({g[0] for g in groups if g[0] is not None})
        named = sorted(
            ((texts.get(g[0], ""), *g[1:]) for g in groups), key=lambda g: (-g[3], g[0])
        )[:limit]
        return [
            NameTotal(
                name=name,
                launches=int(n),
                total_ns=int(t),
                precision=precision,
                tensor_core=None if tc is None else bool(tc),
                evidence=ev,
            )
            for name, _, n, t, precision, tc, ev in named
        ]

    def kernel_groups(self, run_id: int, in_iterations: bool = False) -> list[KernelGroup]:
        """A run's rows grouped by (kind, name, launching operator, precision): launches, summed
        time, tensor-core time, family and short name (the least of each group's). What a
        diff aligns; a run has far fewer of these than launches. ``in_iterations``: only rows
        launched inside a measured-iteration range (``<tag>.iterN``)."""
        from ..rows import KernelGroup

        where, paths = self._iterations_filter(in_iterations)
        args: list[Any] = [run_id, *paths]
        # Grouped on ids in one pass over kernel_rows; the few groups are named and merged here.
        q = f"""select kind, name_id, op_id, coalesce(precision, 'unknown'), short_name_id, family_id, min(first_launch),
                       sum(launches), sum(time_ns), sum(case when tensor_core = 1 then time_ns else 0 end)
                from kernel_aggs where run_id = ?{where}
                group by kind, name_id, op_id, coalesce(precision, 'unknown'), short_name_id, family_id"""
        rows = self.execute(q, args).fetchall()
        texts = self._texts({i for r in rows for i in (r[1], r[2], r[4], r[5]) if i is not None})
        # per (kind, name, op, precision): [first launch, group], groups merged as they come
        merged: dict[tuple[str, str, str | None, str], tuple[int, KernelGroup]] = {}
        for kind, name, op, precision, short, family, first, calls, time_ns, tc_ns in rows:
            key = (kind, texts.get(name, ""), texts.get(op), precision)
            seen = merged.get(key)
            if seen is None:
                merged[key] = (
                    first,
                    KernelGroup(
                        kind=kind,
                        name=key[1],
                        op=key[2],
                        short_name=texts.get(short),
                        family=texts.get(family),
                        calls=int(calls),
                        time_ns=int(time_ns),
                        tc_time_ns=int(tc_ns),
                        precision=precision,
                    ),
                )
                continue
            was_first, g = seen
            merged[key] = (
                min(was_first, first),
                replace(
                    g,
                    calls=g.calls + calls,
                    time_ns=g.time_ns + time_ns,
                    tc_time_ns=g.tc_time_ns + tc_ns,
                    short_name=_least(g.short_name, texts.get(short)),
                    family=_least(g.family, texts.get(family)),
                ),
            )
        return [g for _, g in sorted(merged.values(), key=lambda fg: fg[0])]

    def module_groups(
        self, run_id: int, in_iterations: bool = False, kind: str = "kernel"
    ) -> list[ModuleGroup]:
        """A run's kernels (``kind`` cpu_op: a CPU run's operator calls) grouped by (module, phase,
        precision, family, tensor-core verdict): launches, summed time, distinct operators, most
        time first. Every kernel is in one group (module None where the capture does not say),
        so the groups' time is the run's kernel time. ``in_iterations``: only kernels launched in
        a measured iteration."""
        from ..rows import ModuleGroup

        where, paths = self._iterations_filter(in_iterations)
        q = f"""select module_id, min(module_type_id), phase_id, coalesce(precision, 'unknown'), family_id,
                       tensor_core, sum(launches), sum(time_ns), count(distinct op_id)
                from kernel_aggs where run_id = ? and kind = ?{where}
                group by module_id, phase_id, coalesce(precision, 'unknown'), family_id, tensor_core
                order by 8 desc"""
        rows = self.execute(q, [run_id, kind, *paths]).fetchall()
        texts = self._texts({i for r in rows for i in (r[0], r[1], r[2], r[4]) if i is not None})
        return [
            ModuleGroup(
                module=texts.get(m) if m is not None else None,
                module_type=texts.get(mt),
                phase=texts.get(ph),
                precision=prec,
                family=texts.get(fam),
                tensor_core=None if tc is None else bool(tc),
                launches=int(n),
                time_ns=int(t),
                ops=int(ops),
            )
            for m, mt, ph, prec, fam, tc, n, t, ops in rows
        ]

    def shape_groups(
        self, run_id: int, families: Sequence[str], by: str = "family"
    ) -> list[ShapeGroup]:
        """A run's kernels of ``families`` (``by`` "op": launched by these operators) grouped by
        (name, operator, input shapes, input types, module, precision, tensor-core verdict):
        launches and summed time, most time first."""
        from ..rows import ShapeGroup

        column = {"family": "family_id", "op": "op_id"}[by]
        fam = self._texts_ids(families)
        if not fam:
            return []
        q = f"""select name_id, min(short_name_id), op_id, shapes_id, input_types_id, module_id,
                       coalesce(precision, 'unknown'), family_id, tensor_core, sum(launches), sum(time_ns)
                from kernel_aggs where run_id = ? and kind = 'kernel' and {column} in ({", ".join("?" * len(fam))})
                group by name_id, op_id, shapes_id, input_types_id, module_id, coalesce(precision, 'unknown'),
                         family_id, tensor_core
                order by 11 desc"""
        rows = self.execute(q, [run_id, *fam]).fetchall()
        texts = self._texts({i for r in rows for i in (*r[:6], r[7]) if i is not None})
        return [
            ShapeGroup(
                name=texts.get(n, ""),
                short_name=texts.get(sn),
                op=texts.get(op),
                shapes=texts.get(sh),
                input_types=texts.get(ty),
                module=texts.get(m) if m is not None else None,
                precision=p,
                family=texts.get(f),
                tensor_core=None if tc is None else bool(tc),
                launches=int(c),
                time_ns=int(t),
            )
            for n, sn, op, sh, ty, m, p, f, tc, c, t in rows
        ]

    def _texts_ids(self, texts: Sequence[str]) -> list[int]:
        """The ids in ``strings`` of those of ``texts`` it holds."""
        if not texts:
            return []
        return [
            int(r[0])
            for r in self.execute(
                f"select id from strings where text in ({', '.join('?' * len(texts))})", list(texts)
            )
        ]

    def name_groups(self, run_id: int, kind: str) -> list[NameGroup]:
        """A run's rows of one kind grouped by (name, precision), most time first: launches,
        summed/min/max duration, launches on and off tensor cores, family, and the distinct
        evidence kinds and details behind the verdicts (JSON lists). What the report's kernel
        table shows."""
        from ..rows import NameGroup

        # The aggregates in first-launch order, named: the distinct evidences and details keep
        # the order of their first launch, as the row-based json_group_array(distinct ...) did.
        q = """select n.text as name, a.precision, sn.text as short_name, f.text as family, a.launches, a.time_ns,
                      a.min_ns, a.max_ns, a.tensor_core, a.evidence, d.text as detail, o.text as op, a.first_launch
               from kernel_aggs a left join strings n on n.id = a.name_id left join strings sn on sn.id = a.short_name_id
               left join strings f on f.id = a.family_id left join strings d on d.id = a.evidence_detail_id
               left join strings o on o.id = a.op_id
               where a.run_id = ? and a.kind = ? order by a.first_launch"""
        acc: dict[tuple[str | None, str | None], dict[str, Any]] = {}
        for r in self.query(q, [run_id, kind]):
            g = acc.get((r["name"], r["precision"]))
            if g is None:
                g = acc[(r["name"], r["precision"])] = {
                    "name": r["name"],
                    "precision": r["precision"],
                    "short_name": None,
                    "family": None,
                    "calls": 0,
                    "time_ns": 0,
                    "min_ns": None,
                    "max_ns": None,
                    "tc_calls": 0,
                    "cuda_calls": 0,
                    "evidences": [],
                    "details": [],
                    "op": None,
                    "first": r["first_launch"],
                }
            g["calls"] += r["launches"]
            g["time_ns"] += r["time_ns"]
            g["tc_calls"] += r["launches"] if r["tensor_core"] == 1 else 0
            g["cuda_calls"] += r["launches"] if r["tensor_core"] == 0 else 0
            for col, pick in (
                ("short_name", min),
                ("family", min),
                ("op", min),
                ("min_ns", min),
                ("max_ns", max),
            ):
                v = r[col]
                if v is not None:
                    g[col] = v if g[col] is None else pick(g[col], v)
            if r["evidence"] is not None and r["evidence"] not in g["evidences"]:
                g["evidences"].append(r["evidence"])
            if r["detail"] and r["detail"] not in g["details"]:
                g["details"].append(r["detail"])
        # by time, most first, then name; (name, precision) as SQLite's GROUP BY gave them (NULL first) before that
        ordered = sorted(
            acc.values(),
            key=lambda g: (
                g["name"] is not None,
                g["name"] or "",
                g["precision"] is not None,
                g["precision"] or "",
            ),
        )
        ordered.sort(key=lambda g: (-g["time_ns"], g["name"] is not None, g["name"] or ""))
        return [NameGroup(**g) for g in ordered]

    def first_launches(self, run_id: int, kind: str, per_group: int) -> list[Launch]:
        """The first ``per_group`` launches of each (name, precision) group of one kind, in
        launch order: where and how each ran (no counters)."""
        from dataclasses import fields

        from ..rows import Launch

        # How many each group lists (its aggregates say how many launches it has), then the
        # run's rows in launch order, three integer columns each, until every group has its
        # first ones (a capture repeats its iterations: that is its first few); then those
        # launches' columns, each read by its key.
        want: dict[tuple[int | None, str | None], int] = {}
        for name_id, precision, launches in self.execute(
            "select name_id, precision, sum(launches) from kernel_aggs where run_id = ? and kind = ? "
            "group by name_id, precision",
            [run_id, kind],
        ):
            want[(name_id, precision)] = min(int(launches), per_group)
        left = sum(want.values())
        chosen: list[int] = []
        cur = self.execute(
            "select launch_id, name_id, precision from kernel_rows where run_id = ? and kind = ? "
            "order by launch_id",
            [run_id, kind],
        )
        while left and (batch := cur.fetchmany(20000)):
            for launch_id, name_id, precision in batch:
                n = want.get((name_id, precision))
                if n:
                    want[(name_id, precision)] = n - 1
                    chosen.append(launch_id)
                    left -= 1
                    if not left:
                        break
        cur.close()
        cols = tuple(f.name for f in fields(Launch))  # the kernel table's columns the record holds
        out: list[Launch] = []
        for i in range(0, len(chosen), 500):
            chunk = chosen[i : i + 500]
            q = (
                f"select {', '.join(cols)} from kernels where run_id = ? and launch_id in "
                f"({', '.join('?' * len(chunk))}) order by launch_id"
            )
            out.extend(
                Launch(
                    **{**dict(zip(cols, r)), "tensor_core": _verdict(r[cols.index("tensor_core")])}
                )
                for r in self.execute(q, [run_id, *chunk])
            )
        return out

    def metric_sums(self, run_id: int, metrics: Sequence[str]) -> list[MetricSums]:
        """Per kernel (name, precision) with any of ``metrics`` non-zero: launches, summed
        duration of the launches that have the counters, and each metric's sum."""
        from ..rows import MetricSums

        if (
            not metrics
            or not self.execute(
                "select 1 from kernel_aggs where run_id = ? and kind = 'kernel' "
                "and metric_launches > 0 limit 1",
                [run_id],
            ).fetchone()
        ):
            return []  # a timeline capture's millions of launches have no counters
        sums = ", ".join(
            f"coalesce(sum(json_extract(metrics, ?)), 0) as m{i}" for i in range(len(metrics))
        )
        q = f"""select name, precision, min(short_name) as short_name, count(*) as calls,
                       coalesce(sum(duration_ns), 0) as time_ns, {sums}
                from kernels where run_id = ? and kind = 'kernel' and metrics != '{{}}'
                group by name, precision order by time_ns desc, name"""
        paths = [f'$."{m}"' for m in metrics]
        out = []
        for row in self.execute(q, [*paths, run_id]):
            name, precision, short, calls, time_ns, *values = row
            found = {m: float(v) for m, v in zip(metrics, values) if v}
            if found:
                out.append(
                    MetricSums(
                        name=name,
                        precision=precision,
                        short_name=short,
                        calls=int(calls),
                        time_ns=int(time_ns),
                        metrics=found,
                    )
                )
        return out

    def timeline(
        self, run_id: int, start_ns: int | None, end_ns: int | None, limit: int
    ) -> tuple[list[TimelineOp], int]:
        """GPU rows that started in [start_ns, end_ns) on the capture's clock (either bound may
        be None: open), launched by any thread, in start order, at most ``limit``; and how many
        there were."""
        from ..rows import TimelineOp

        # On the launches' own table: no group looked up per launch. Their groups chosen first
        # (a few), where the run has CPU operators' rows too.
        cpu, gpu = self.execute(
            "select count(*) filter (where kind = 'cpu_op'), count(*) filter (where kind != 'cpu_op') "
            "from kernel_groups where run_id = ?",
            [run_id],
        ).fetchone()
        if not gpu:
            return [], 0
        where = "run_id = ? and start_ns is not null"
        args: list[Any] = [run_id]
        if cpu:
            where += " and group_id in (select id from kernel_groups where run_id = ? and kind != 'cpu_op')"
            args.append(run_id)
        if start_ns is not None:
            where += " and start_ns >= ?"
            args.append(start_ns)
        if end_ns is not None:
            where += " and start_ns < ?"
            args.append(end_ns)
        cols = (
            "launch_id",
            "kind",
            "name",
            "short_name",
            "stream",
            "device",
            "rank",
            "start_ns",
            "duration_ns",
            "precision",
            "tensor_core",
            "family",
        )
        # The first ``limit`` chosen on the launches' own columns, then only those named (the
        # view names every row it reads).
        rows = [
            TimelineOp(**{**dict(zip(cols, r)), "tensor_core": _verdict(r[-2])})
            for r in self.execute(
                f"select {', '.join(cols)} from kernels where run_id = ? and launch_id in (select launch_id from launches "
                f"where {where} order by start_ns, launch_id limit ?) order by start_ns, launch_id",
                [run_id, *args, limit],
            )
        ]
        if len(rows) < limit:  # all of them: no second pass to count them
            return rows, len(rows)
        return rows, int(
            self.execute(f"select count(*) from launches where {where}", args).fetchone()[0]
        )

    # ------------------------------------------------------------------ reading ranges
    def ranges(self, run_id: int) -> list[RangeRow]:
        """The ranges a timeline capture recorded, in start order."""
        return [
            {k: r[k] for k in RANGE_COLUMNS}  # type: ignore[misc]
            for r in self.query("select * from ranges where run_id = ? order by range_id", [run_id])
        ]

    def host_syncs(self, run_id: int) -> list[HostSyncRow]:
        """The runtime calls that blocked the host in a timeline capture, in start order."""
        return [
            {k: r[k] for k in HOST_SYNC_COLUMNS}  # type: ignore[misc]
            for r in self.query(
                "select * from host_syncs where run_id = ? order by sync_id", [run_id]
            )
        ]

    def kernel_paths(self, run_id: int) -> list[PathTotals]:
        """Per NVTX stack the launches were made in (first launch first): the innermost range's
        name, the launching thread, kernels (or CPU operators), GPU operations and the kernels'
        summed time (CPU self time)."""
        from ..rows import PathTotals

        q = """select nvtx_path_id, min(first_launch) as first, min(r.text) as name, min(min_thread) as thread_id,
                      sum(case when kind in ('kernel', 'cpu_op') then launches else 0 end) as kernels,
                      sum(launches) as gpu_ops,
                      sum(case when kind in ('kernel', 'cpu_op') then time_ns else 0 end) as gpu_time_ns
               from path_aggs left join strings r on r.id = nvtx_range_id
               where run_id = ? and nvtx_path_id is not null group by nvtx_path_id order by first"""
        rows = list(self.query(q, [run_id]))
        texts = self._texts({r["nvtx_path_id"] for r in rows})
        return [
            PathTotals(
                nvtx_path=texts[r["nvtx_path_id"]],
                name=r["name"],
                thread_id=r["thread_id"],
                kernels=int(r["kernels"]),
                gpu_ops=int(r["gpu_ops"]),
                gpu_time_ns=int(r["gpu_time_ns"] or 0),
            )
            for r in rows
        ]

    # ------------------------------------------------------------------ reading ranks (distributed runs)
    def _string_id(self, text: str) -> int:
        row = self.execute("select id from strings where text = ?", [text]).fetchone()
        return int(row[0]) if row else -1

    def rank_totals(self, run_id: int, kind: str, family: str) -> list[RankTotals]:
        """Per rank (in order) of a run's rows of one kind: launches, summed duration, the
        launches and time of ``family`` (communication), and the devices they ran on."""
        from ..rows import RankTotals

        fid = self._string_id(family)
        q = """select rank, sum(launches), sum(time_ns), sum(case when family_id = ? then launches else 0 end),
                      sum(case when family_id = ? then time_ns else 0 end), group_concat(distinct device)
               from kernel_aggs where run_id = ? and kind = ? and rank is not null group by rank order by rank"""
        return [
            RankTotals(
                rank=int(r),
                kernels=int(n),
                time_ns=int(t),
                family_kernels=int(fn),
                family_ns=int(ft),
                devices=sorted({int(d) for d in (devs or "").split(",") if d}),
            )
            for r, n, t, fn, ft, devs in self.execute(q, [fid, fid, run_id, kind])
        ]

    def rank_intervals(
        self, run_id: int, family: str
    ) -> Iterator[tuple[int, int | None, int, int, bool]]:
        """(rank, device, start_ns, duration_ns, of ``family``) of a run's kernels that have a
        start time, ordered by rank, device and start: streamed."""
        fid = self._string_id(family)
        cur = self.execute(
            """select rank, device, start_ns, coalesce(duration_ns, 0), family_id = ? from kernel_rows
                              where run_id = ? and kind = 'kernel' and rank is not null and start_ns is not null
                              order by rank, device, start_ns""",
            [fid, run_id],
        )
        while batch := cur.fetchmany(5000):
            for rank, device, start, duration, of_family in batch:
                yield int(rank), device, int(start), int(duration), bool(of_family)

    def rank_path_times(self, run_id: int, kind: str, family: str) -> list[RankPathTime]:
        """Per rank and NVTX stack of a run's rows of one kind: launches, summed duration and
        the time of ``family``."""
        from ..rows import RankPathTime

        fid = self._string_id(family)
        rows = self.execute(
            """select rank, nvtx_path_id, sum(launches), sum(time_ns),
                                      sum(case when family_id = ? then time_ns else 0 end)
                               from path_aggs where run_id = ? and kind = ? and rank is not null
                               group by rank, nvtx_path_id""",
            [fid, run_id, kind],
        ).fetchall()
        texts = self._texts({r[1] for r in rows if r[1] is not None})
        return [
            RankPathTime(
                rank=int(r),
                nvtx_path=texts.get(p) if p is not None else None,
                kernels=int(n),
                time_ns=int(t),
                family_ns=int(ft),
            )
            for r, p, n, t, ft in rows
        ]

    def rank_name_counts(self, run_id: int, kind: str) -> list[tuple[int, str, str, int]]:
        """(rank, name, precision, launches) of a run's rows of one kind."""
        rows = self.execute(
            """select rank, name_id, coalesce(precision, 'unknown'), sum(launches) from kernel_aggs
                               where run_id = ? and kind = ? and rank is not null group by rank, name_id, precision""",
            [run_id, kind],
        ).fetchall()
        texts = self._texts({r[1] for r in rows if r[1] is not None})
        return [(int(r), texts.get(n, ""), p, int(c)) for r, n, p, c in rows]


def _verdict(tensor_core: int | None) -> bool | None:
    """A stored tensor-core verdict (1, 0 or NULL) as bool or None."""
    return None if tensor_core is None else bool(tensor_core)


def _least(have: str | None, other: str | None) -> str | None:
    """The lesser of two texts where both are known, else the known one."""
    return other if other is not None and (have is None or other < have) else have
