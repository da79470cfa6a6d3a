"""Issue 25: a run's aggregates (``kernel_aggs``, ``path_aggs``, written at import) give every
grouped query the answer its rows give. ``Rows`` keeps the row-based SQL each query of
``profkit.store.queries`` ran before the aggregates (over ``kernel_rows`` or the ``kernels``
view) as the reference; every committed capture that imports here is imported into one
database, and every query's answer from the aggregates must equal the reference's, in value
and order. Also: an old database gets its aggregates in the migration; a failed import leaves
none; a deleted run takes its own with it."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from profkit.ingest import import_file, store_capture
from profkit.parse.kineto import read_kineto
from profkit.parse.nsys_sqlite import read_nsys_sqlite
from profkit.parse.ranks import merge_ranks
from profkit.store import Store
from profkit.store.layout import INTERNED
from profkit.store.queries import Queries, _least, _verdict

from .conftest import DATA, cli, cli_json, one_line_error

if TYPE_CHECKING:  # the reference's annotations: the rows each query gives
    from profkit.rows import (
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
from .where_data import CATALOG, CATALOG_RUNS, RUNS, import_where

DDP = DATA / "ddp"


class Rows(Store):
    """The store with the row-based queries the aggregates replaced (the reference)."""

    def count_by_kind(self, run_id: int) -> dict[str, int]:
        return {
            k: int(n)
            for k, n in self.execute(
                "select kind, count(*) from kernels where run_id = ? group by kind order by kind",
                [run_id],
            )
        }

    def totals(self, run_id: int, kind: str) -> KindTotals:
        from profkit.rows import KindTotals

        count, total, tc_count, tc_time, unknown_time = self.execute(
            "select count(*), coalesce(sum(duration_ns), 0), coalesce(sum(tensor_core = 1), 0), "
            "coalesce(sum(case when tensor_core = 1 then duration_ns else 0 end), 0), "
            "coalesce(sum(case when tensor_core is null then duration_ns else 0 end), 0) "
            "from kernels where run_id = ? and kind = ?",
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
        from profkit.rows import FamilyTotals

        where, args = self._iterations_filter(in_iterations)
        rows = self.execute(
            f"""select family_id, count(*), coalesce(sum(duration_ns), 0),
                                       coalesce(sum(case when tensor_core = 1 then duration_ns else 0 end), 0),
                                       coalesce(sum(case when tensor_core is null then duration_ns else 0 end), 0)
                                from kernel_rows where run_id = ? and kind = ?{where} group by family_id""",
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
        if not in_iterations:
            return "", []
        paths = [
            r[0] for r in self.execute("select id from strings where text glob '*.iter[0-9]*'")
        ]
        return (
            f" and nvtx_path_id in ({', '.join('?' * len(paths))})" if paths else " and 0"
        ), paths

    GROUPABLE = ("precision", "family", "evidence", "kind", "name", "short_name")

    def breakdown(
        self,
        run_id: int,
        bys: Sequence[str],
        kinds: Iterable[str],
        missing: str | dict[str, str] = "unknown",
    ) -> dict[str, list[tuple[str, int, int]]]:
        bad = [b for b in bys if b not in self.GROUPABLE]
        if bad:
            raise ValueError(f"cannot group kernels by {bad[0]!r}")
        kinds = list(kinds)
        cols = [f"{b}_id" if b in INTERNED else b for b in bys]
        q = f"""select {", ".join(cols)}, count(*), coalesce(sum(duration_ns), 0) from kernel_rows
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
        # One min() aggregate: SQLite takes the bare columns from the group's first launch.
        from profkit.rows import NameTotal

        q = """select name_id, min(launch_id), count(*) as n, coalesce(sum(duration_ns), 0) as t, precision,
                      tensor_core, evidence
               from kernel_rows where run_id = ? and kind = ? group by name_id, precision"""
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
        from profkit.rows import KernelGroup

        where, paths = self._iterations_filter(in_iterations)
        args: list[Any] = [run_id, *paths]
        # Grouped on ids in one pass over kernel_rows; the few groups are named and merged here.
        q = f"""select kind, name_id, op_id, coalesce(precision, 'unknown'), short_name_id, family_id, min(launch_id),
                       count(*), coalesce(sum(duration_ns), 0),
                       coalesce(sum(case when tensor_core = 1 then duration_ns else 0 end), 0)
                from kernel_rows where run_id = ?{where}
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

    def module_groups(self, run_id: int, in_iterations: bool = False) -> list[ModuleGroup]:
        from profkit.rows import ModuleGroup

        where, paths = self._iterations_filter(in_iterations)
        q = f"""select module_id, min(module_type_id), phase_id, coalesce(precision, 'unknown'), family_id,
                       tensor_core, count(*), coalesce(sum(duration_ns), 0), count(distinct op_id)
                from kernel_rows where run_id = ? and kind = 'kernel'{where}
                group by module_id, phase_id, coalesce(precision, 'unknown'), family_id, tensor_core
                order by 8 desc"""
        rows = self.execute(q, [run_id, *paths]).fetchall()
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

    def shape_groups(self, run_id: int, families: Sequence[str]) -> list[ShapeGroup]:
        from profkit.rows import ShapeGroup

        fam = self._texts_ids(families)
        if not fam:
            return []
        q = f"""select name_id, min(short_name_id), op_id, shapes_id, input_types_id, module_id,
                       coalesce(precision, 'unknown'), family_id, tensor_core, count(*), coalesce(sum(duration_ns), 0)
                from kernel_rows where run_id = ? and kind = 'kernel' and family_id in ({", ".join("?" * len(fam))})
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

    def name_groups(self, run_id: int, kind: str) -> list[NameGroup]:
        from profkit.rows import NameGroup

        q = """select name, precision, min(short_name) as short_name, min(family) as family, count(*) as calls,
                      coalesce(sum(duration_ns), 0) as time_ns, min(duration_ns) as min_ns, max(duration_ns) as max_ns,
                      coalesce(sum(tensor_core = 1), 0) as tc_calls, coalesce(sum(tensor_core = 0), 0) as cuda_calls,
                      json_group_array(distinct evidence) as evidences,
                      json_group_array(distinct evidence_detail) as details, min(op) as op, min(launch_id) as first
               from kernels where run_id = ? and kind = ? group by name, precision order by time_ns desc, name"""
        return [
            NameGroup(
                **{
                    **r,
                    "evidences": [e for e in json.loads(r["evidences"]) if e is not None],
                    "details": [d for d in json.loads(r["details"]) if d],
                }
            )
            for r in self.query(q, [run_id, kind])
        ]

    def first_launches(self, run_id: int, kind: str, per_group: int) -> list[Launch]:
        from dataclasses import fields

        from profkit.rows import Launch

        cols = tuple(f.name for f in fields(Launch))  # the kernel table's columns the record holds
        q = f"""select {", ".join(cols)} from (
                  select {", ".join(cols)}, row_number() over (partition by name, precision order by launch_id) as nth
                  from kernels where run_id = ? and kind = ?)
               where nth <= ? order by launch_id"""
        return [
            Launch(**{**dict(zip(cols, r)), "tensor_core": _verdict(r[cols.index("tensor_core")])})
            for r in self.execute(q, [run_id, kind, per_group])
        ]

    def metric_sums(self, run_id: int, metrics: Sequence[str]) -> list[MetricSums]:
        from profkit.rows import MetricSums

        if not metrics:
            return []
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
        from profkit.rows import TimelineOp

        where = "run_id = ? and start_ns is not null and kind != 'cpu_op'"
        args: list[Any] = [run_id]
        if start_ns is not None:
            where += " and start_ns >= ?"
            args.append(start_ns)
        if end_ns is not None:
            where += " and start_ns < ?"
            args.append(end_ns)
        total = int(self.execute(f"select count(*) from kernels where {where}", args).fetchone()[0])
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
        rows = [
            TimelineOp(**{**dict(zip(cols, r)), "tensor_core": _verdict(r[-2])})
            for r in self.execute(
                f"select {', '.join(cols)} from kernels where {where} order by start_ns, launch_id limit ?",
                [*args, limit],
            )
        ]
        return rows, total

    def kernel_paths(self, run_id: int) -> list[PathTotals]:
        from profkit.rows import PathTotals

        q = """select nvtx_path, min(launch_id) as first, min(nvtx_range) as name, min(thread_id) as thread_id,
                      sum(kind in ('kernel', 'cpu_op')) as kernels, count(*) as gpu_ops,
                      sum(case when kind in ('kernel', 'cpu_op') then duration_ns else 0 end) as gpu_time_ns
               from kernels where run_id = ? and nvtx_path is not null group by nvtx_path order by first"""
        return [
            PathTotals(
                nvtx_path=r["nvtx_path"],
                name=r["name"],
                thread_id=r["thread_id"],
                kernels=int(r["kernels"]),
                gpu_ops=int(r["gpu_ops"]),
                gpu_time_ns=int(r["gpu_time_ns"] or 0),
            )
            for r in self.query(q, [run_id])
        ]

    def rank_totals(self, run_id: int, kind: str, family: str) -> list[RankTotals]:
        from profkit.rows import RankTotals

        fid = self._string_id(family)
        q = """select rank, count(*), coalesce(sum(duration_ns), 0), coalesce(sum(family_id = ?), 0),
                      coalesce(sum(case when family_id = ? then duration_ns else 0 end), 0),
                      group_concat(distinct device)
               from kernel_rows where run_id = ? and kind = ? and rank is not null group by rank order by rank"""
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

    def rank_path_times(self, run_id: int, kind: str, family: str) -> list[RankPathTime]:
        from profkit.rows import RankPathTime

        fid = self._string_id(family)
        rows = self.execute(
            """select rank, nvtx_path_id, count(*), coalesce(sum(duration_ns), 0),
                                      coalesce(sum(case when family_id = ? then duration_ns else 0 end), 0)
                               from kernel_rows where run_id = ? and kind = ? and rank is not null
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
        rows = self.execute(
            """select rank, name_id, coalesce(precision, 'unknown'), count(*) from kernel_rows
                               where run_id = ? and kind = ? and rank is not null group by rank, name_id, precision""",
            [run_id, kind],
        ).fetchall()
        texts = self._texts({r[1] for r in rows if r[1] is not None})
        return [(int(r), texts.get(n, ""), p, int(c)) for r, n, p, c in rows]


# ------------------------------------------------------------------ every committed capture, in one database
def _files() -> list[Path]:
    """The committed captures `profkit import` reads (ncu-rep needs ncu's Python module: left out)."""
    out = []
    for folder in ("ncu", "attention", "diff", "report", "steps", "ncu_plan", "nsys", "torch"):
        for f in sorted((DATA / folder).iterdir()):
            if (
                f.name.endswith(
                    (
                        ".raw.csv.gz",
                        ".sqlite.gz",
                        ".json.gz",
                        ".raw-autounits.csv",
                        ".raw-autounits.csv.gz",
                    )
                )
                and "kernel_times" not in f.name
                and "raw-mangled" not in f.name
            ):
                out.append(f)
    return out


@pytest.fixture(scope="module")
def every_capture(tmp_path_factory) -> tuple[Path, list[str]]:
    """One database holding every committed capture that imports here, and the runs' names."""
    tmp = tmp_path_factory.mktemp("aggs")
    db = tmp / "all.db"
    store = Store(db)
    names = []
    for f in _files():
        path = f
        if f.name.endswith(".sqlite.gz"):  # the importer reads an nsys export plain
            path = tmp / f.name[:-3]
            path.write_bytes(gzip.decompress(f.read_bytes()))
        name = f"{f.parent.name}-{f.name.split('.')[0]}-{len(names)}"
        import_file(store, path, name)
        names.append(name)
    for base, runs in ((DATA / "where", RUNS), (CATALOG, CATALOG_RUNS)):
        for name in runs:
            names.append(import_where(store, name, base).name)
    # A distributed run of two ranks under nsys, and under torch.profiler (merged ranks).
    export = tmp / "ddp.sqlite"
    export.write_bytes(
        gzip.decompress((DDP / "nsys_resnet50_ddp_train_amp.sqlite.gz").read_bytes())
    )
    pids = {}
    for r in (0, 1):
        info = json.loads((DDP / f"nsys_resnet50_ddp_train_amp.harness.rank{r}.json").read_text())
        pids[info["pid"]] = info["rank"]
    traces = {r: DDP / f"torch_resnet50_ddp_train_amp.rank{r}.json.gz" for r in (0, 1)}
    cpu = {r: DDP / f"cpu_resnet50_ddp_train_fp32.rank{r}.json.gz" for r in (0, 1)}
    for name, capture in (
        ("ddp-nsys", read_nsys_sqlite(export, ranks=pids)),
        ("ddp-torch", merge_ranks({r: read_kineto(t) for r, t in traces.items()})),
        ("ddp-cpu", merge_ranks({r: read_kineto(t) for r, t in cpu.items()})),
    ):
        fields = {
            "name": name,
            "source": "run",
            "workload": "resnet50_ddp_train",
            "device": "cuda",
            "info": {"world_size": 2},
        }
        reserved = store.reserve(None, name, fields, status="running")  # type: ignore[arg-type]
        names.append(store_capture(store, capture, fields, reserved).name)  # type: ignore[arg-type]
    store.close()
    return db, names


def _answers(store: Queries, run_id: int, activity: str) -> dict[str, object]:
    """Every grouped query's answer for one run (as the analyses ask them)."""
    kinds = ("kernel", "memcpy", "memset", "cpu_op")
    families = sorted({g.family for g in store.kernel_groups(run_id) if g.family})
    out: dict[str, object] = {
        "count_by_kind": store.count_by_kind(run_id),
        "totals": [store.totals(run_id, k) for k in kinds],
        "family_totals": [store.family_totals(run_id, k, i) for k in kinds for i in (False, True)],
        "breakdown": [
            store.breakdown(run_id, Queries.GROUPABLE, ks, {"evidence": "none"})
            for ks in ([activity], ["memcpy", "memset"], kinds)
        ],
        "top_names": [store.top_names(run_id, k, n) for k in kinds for n in (3, 1000)],
        "kernel_groups": [store.kernel_groups(run_id, i) for i in (False, True)],
        "module_groups": [store.module_groups(run_id, i) for i in (False, True)],
        "shape_groups": [
            store.shape_groups(run_id, families),
            store.shape_groups(run_id, families[:1]),
        ],
        "name_groups": [store.name_groups(run_id, k) for k in kinds],
        "first_launches": [store.first_launches(run_id, k, n) for k in kinds for n in (1, 25)],
        "metric_sums": store.metric_sums(
            run_id,
            [
                "sm__inst_executed_pipe_tensor.sum",
                "dram__bytes.sum",
                "gpu__time_duration.sum",
                "sm__cycles_elapsed.avg",
            ],
        ),
        "timeline": [
            store.timeline(run_id, None, None, 3000),
            store.timeline(run_id, None, None, 7),
        ],
        "kernel_paths": store.kernel_paths(run_id),
        "rank_totals": [store.rank_totals(run_id, k, "communication") for k in kinds],
        "rank_path_times": [store.rank_path_times(run_id, k, "communication") for k in kinds],
        "rank_name_counts": [store.rank_name_counts(run_id, k) for k in kinds],
    }
    starts = [op.start_ns for op in store.timeline(run_id, None, None, 100000)[0]]
    if starts:
        mid = starts[len(starts) // 2]
        out["timeline_window"] = [
            store.timeline(run_id, mid, None, 50),
            store.timeline(run_id, starts[1 % len(starts)], mid, 3000),
        ]
    return out


def test_every_query_gives_from_the_aggregates_what_the_rows_give(every_capture):
    db, names = every_capture
    aggs, rows = Store(db), Rows(db)
    assert len(names) >= 80
    checked = set()
    for name in names:
        run = aggs.get_run(name)
        assert run.status == "ok"
        mine, reference = _answers(aggs, run.id, run.activity), _answers(rows, run.id, run.activity)
        for query, answer in reference.items():
            assert mine[query] == answer, f"{name}: {query}"
            if answer and answer != [[]] * len(answer) if isinstance(answer, list) else answer:
                checked.add(query)
    # every query was compared on some run where it has an answer
    assert checked >= set(reference) - {"timeline_window"}, set(reference) - checked


def test_the_aggregates_hold_every_launch_once(every_capture):
    """Per run: the aggregates' launches and time are the rows', and a run's first launch of each
    group is a launch of the run; runs without measured-iteration ranges have nothing in_iter."""
    db, names = every_capture
    con = sqlite3.connect(db)
    for run_id, n, t in con.execute(
        "select run_id, count(*), coalesce(sum(duration_ns), 0) from kernel_rows group by run_id"
    ):
        assert con.execute(
            "select sum(launches), sum(time_ns) from kernel_aggs where run_id = ?", [run_id]
        ).fetchone() == (n, t)
        assert con.execute(
            "select sum(launches), sum(time_ns) from path_aggs where run_id = ?", [run_id]
        ).fetchone() == (n, t)
    assert con.execute("select count(distinct run_id) from kernel_aggs").fetchone()[0] == len(names)


# ------------------------------------------------------------------ an earlier database, a failed import, a deleted run
@pytest.mark.parametrize("schema", [5, 7])
def test_an_earlier_database_gets_its_aggregates_in_the_migration(tmp_path, schema):
    """The committed schema 5 and 7 databases, opened: each run with rows gets its aggregates,
    and every query's answer from them is what the rows give."""
    path = tmp_path / f"schema{schema}.db"
    path.write_bytes(gzip.decompress((DATA / "store" / f"schema{schema}.db.gz").read_bytes()))
    old = sqlite3.connect(path)
    with_rows = {r for (r,) in old.execute("select distinct run_id from kernels")}
    old.close()
    aggs, rows = Store(path), Rows(path)
    assert (
        with_rows
        and {r for (r,) in aggs.execute("select distinct run_id from kernel_aggs")} == with_rows
    )
    for run in aggs.runs():
        if run.id in with_rows:
            assert _answers(aggs, run.id, run.activity or "kernel") == _answers(
                rows, run.id, run.activity or "kernel"
            )


def _aggregate_rows(db: Path) -> int:
    con = sqlite3.connect(db)
    try:
        return sum(
            con.execute(f"select count(*) from {t}").fetchone()[0]
            for t in ("kernel_aggs", "path_aggs")
        )
    finally:
        con.close()


def test_an_import_that_fails_leaves_no_aggregates(tmp_path, monkeypatch, report_dir):
    """Writing the aggregates fails (a full disk, after they were written): one line, and the
    database is as it was, without the run's rows or aggregates; a bad capture leaves none."""
    from profkit.store.writes import Writes

    db = tmp_path / "p.db"
    assert (
        cli("import", DATA / "ncu" / "precision_zoo.raw.csv.gz", "--name", "good", db=db).exit_code
        == 0
    )
    before, aggs = cli_json("runs", db=db), _aggregate_rows(db)
    assert aggs
    original = Writes.write_aggregates

    def full_disk(self, run_id):
        original(self, run_id)
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Writes, "write_aggregates", full_disk)
    for capture in (
        DATA / "ncu" / "resnet18_fp16_eager.raw.csv.gz",
        report_dir / "r50_fp16_b64_nsys.sqlite",
    ):
        one_line_error(
            cli("import", capture, "--name", "bad", db=db), "the disk is full: cannot write"
        )
        assert cli_json("runs", db=db) == before and _aggregate_rows(db) == aggs
    monkeypatch.undo()
    bad = tmp_path / "bad.sqlite"
    shutil.copy(report_dir / "r50_fp16_b64_nsys.sqlite", bad)
    con = sqlite3.connect(bad)
    con.execute("update CUPTI_ACTIVITY_KIND_KERNEL set end = start - 100 where rowid = 3")
    con.commit()
    con.close()
    one_line_error(cli("import", bad, "--name", "bad", db=db), "ends before it starts")
    assert cli_json("runs", db=db) == before and _aggregate_rows(db) == aggs


def test_a_deleted_run_takes_its_aggregates_with_it(tmp_path):
    db = tmp_path / "p.db"
    for name in ("a", "b"):
        assert (
            cli(
                "import", DATA / "ncu" / "precision_zoo.raw.csv.gz", "--name", name, db=db
            ).exit_code
            == 0
        )
    store = Store(db)
    a, b = store.get_run("a"), store.get_run("b")
    assert _answers(store, a.id, "kernel") == _answers(store, b.id, "kernel")
    store.delete_run(a.id)
    assert {
        r
        for (r,) in store.execute(
            "select distinct run_id from kernel_aggs union select distinct run_id from path_aggs"
        )
    } == {b.id}
