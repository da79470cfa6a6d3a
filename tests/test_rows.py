"""Issue 22, typed seams: the store's queries return typed rows (``profkit.rows``), and what
the analyses hand the report and the command holds no untyped dicts."""

from __future__ import annotations

import typing
from dataclasses import fields, is_dataclass

import profkit
from profkit import rows
from profkit.analyze.findings import FindingKernel, findings
from profkit.records import LaunchCountDifference, PrecisionDifference
from profkit.store.queries import Queries

from .conftest import NCU_DATA

QUERIES = {
    "totals": rows.KindTotals,
    "top_names": rows.NameTotal,
    "kernel_groups": rows.KernelGroup,
    "name_groups": rows.NameGroup,
    "first_launches": rows.Launch,
    "metric_sums": rows.MetricSums,
    "timeline": rows.TimelineOp,
    "kernel_paths": rows.PathTotals,
    "rank_totals": rows.RankTotals,
    "rank_path_times": rows.RankPathTime,
}


def _hints(fn):
    """A query's type hints; the rows are imported where they are made (not at the top of
    store/queries.py, so that `profkit runs` does not pay for them), so resolved with them."""
    import profkit.store.queries as module

    return typing.get_type_hints(fn, globalns={**vars(module), **vars(rows)})


def test_every_query_row_is_a_frozen_record():
    for name, record in QUERIES.items():
        hint = _hints(getattr(Queries, name))["return"]
        assert record.__name__ in str(hint), (name, hint)
        assert is_dataclass(record) and record.__dataclass_params__.frozen  # type: ignore[attr-defined]
    # no query of the analyses hands out a dict of untyped values
    for name in vars(Queries):
        if not name.startswith("_") and callable(getattr(Queries, name)):
            hint = str(_hints(getattr(Queries, name)).get("return", ""))
            assert "typing.Any" not in hint, (name, hint)


def test_queries_return_their_records_on_a_real_capture(tmp_path, diff_dir):
    db = profkit.open_db(tmp_path / "q.db")
    run = db.import_file(diff_dir / "r18_fp16_eager_torch.json.gz", name="eager")
    store = db.store
    groups = store.kernel_groups(run.id)
    assert groups and all(isinstance(g, rows.KernelGroup) for g in groups)
    # one precision per group, a field of its own (the rows' `precisions` key held one value)
    assert "precision" in {f.name for f in fields(rows.KernelGroup)} and not hasattr(
        groups[0], "precisions"
    )
    assert all(isinstance(g.precision, str) for g in groups)
    kernels = [g for g in groups if g.kind == "kernel"]
    assert (
        sum(g.calls for g in kernels) == run.kernel_count
        and sum(g.time_ns for g in kernels) == run.gpu_time_ns
    )
    totals = store.totals(run.id, "kernel")
    assert isinstance(totals, rows.KindTotals) and totals.count == run.kernel_count
    assert all(isinstance(r, rows.NameTotal) for r in store.top_names(run.id, "kernel", 5))
    named = store.name_groups(run.id, "kernel")
    assert named and all(isinstance(g, rows.NameGroup) for g in named)
    launches = store.first_launches(run.id, "kernel", 2)
    assert launches and all(
        isinstance(r, rows.Launch) and r.tensor_core in (True, False, None) for r in launches
    )
    ops, total = store.timeline(run.id, None, None, 10)
    assert total >= len(ops) == 10 and all(isinstance(r, rows.TimelineOp) for r in ops)
    paths = store.kernel_paths(run.id)
    assert paths and all(
        isinstance(p, rows.PathTotals) and isinstance(p.gpu_time_ns, int) for p in paths
    )


def test_findings_and_counters_are_typed(tmp_path):
    db = profkit.open_db(tmp_path / "f.db")
    run = db.import_file(NCU_DATA / "resnet18_fp16_eager.raw.csv.gz", name="r18")
    found = findings(db.store, run)
    with_kernels = [f for f in found if f.kernels]
    assert with_kernels and all(
        isinstance(k, FindingKernel) for f in with_kernels for k in f.kernels
    )
    # the JSON keeps its keys and order
    assert list(with_kernels[0].to_dict()["kernels"][0]) == [
        "name",
        "launches",
        "time_ns",
        "precision",
        "family",
    ]
    sums = db.store.metric_sums(run.id, run.metrics)
    assert all(isinstance(s, rows.MetricSums) for s in sums)


def test_rank_differences_are_typed():
    from profkit.analyze.ranks import _differences

    (d,) = _differences([(0, "a", "fp16", 2), (1, "a", "fp32", 2)])
    assert all(isinstance(k, LaunchCountDifference) for k in d.kernels)
    assert d.precisions == [PrecisionDifference("a", ["fp32"], ["fp16"])]
