"""profkit.analyze.summary over stored real captures: every figure of the Summary equals the
same figure computed independently from the run's kernel table (pandas), for an ncu run
(counter verdicts), an nsys run (memcpy/memset beside the kernels) and a CPU run."""

from __future__ import annotations

import pytest

from profkit.analyze.summary import summarize
from profkit.ingest import import_file
from profkit.records import Summary
from profkit.store import Store

from .conftest import DATA, NCU_DATA

# issue 23: the GPU time by module (None without module attribution)
CONTRACT = {
    "run",
    "activity",
    "kernels",
    "gpu_time_ns",
    "tensor_core_kernels",
    "tensor_core_time_ns",
    "tensor_core_time_pct",
    "unclassified_time_ns",
    "time_by_precision_ns",
    "kernels_by_precision",
    "time_by_family_ns",
    "evidence",
    "time_by_evidence_ns",  # issue 23: time per evidence
    "top_kernels",
    "memory_ops",
    "ranks",
    "matrix_work",  # issue 23: the tensor-core coverage of matrix work
    "modules",
    "tuning",  # issue 38: the run's latest tuning (profkit tune), null where it has none
}


def stored(db, path):
    store = Store(db)
    run = import_file(store, path)
    from profkit.parse.schema import frame

    return store, run, frame(store.iter_kernels(run.id), classified=True)


def check_against_table(s: Summary, k, activity: str) -> None:
    main = k[k["kind"] == activity]
    total = int(main["duration_ns"].sum())
    assert (s.activity, s.kernels, s.gpu_time_ns) == (activity, len(main), total)
    tc = main[main["tensor_core"].fillna(False)]
    assert s.tensor_core_kernels == len(tc) and s.tensor_core_time_ns == int(
        tc["duration_ns"].sum()
    )
    assert s.tensor_core_time_pct == pytest.approx(100 * s.tensor_core_time_ns / total, abs=0.005)
    assert s.unclassified_time_ns == int(main[main["tensor_core"].isna()]["duration_ns"].sum())
    by_p = main.groupby("precision")["duration_ns"].agg(["sum", "size"])
    assert s.time_by_precision_ns == {p: int(by_p.loc[p, "sum"]) for p in s.time_by_precision_ns}
    assert (
        set(s.time_by_precision_ns) == set(by_p.index)
        and sum(s.time_by_precision_ns.values()) == total
    )
    assert list(s.time_by_precision_ns.values()) == sorted(
        s.time_by_precision_ns.values(), reverse=True
    )
    assert s.kernels_by_precision == {p: int(by_p.loc[p, "size"]) for p in s.kernels_by_precision}
    fam = main["family"].fillna("unknown")
    assert s.time_by_family_ns == {
        f: int(main[fam == f]["duration_ns"].sum()) for f in s.time_by_family_ns
    }
    assert set(s.time_by_family_ns) == set(fam)
    assert s.evidence == main["evidence"].value_counts().to_dict()
    top = (
        main.groupby(["name", "precision"])["duration_ns"]
        .agg(["sum", "size"])
        .sort_values("sum", ascending=False)
    )
    assert [(t.name, t.precision, t.total_ns, t.launches) for t in s.top_kernels[:3]] == [
        (n, p, int(r["sum"]), int(r["size"])) for (n, p), r in top.head(3).iterrows()
    ]
    assert set(s.to_dict()) == CONTRACT


def test_ncu_run(db):
    store, run, k = stored(db, NCU_DATA / "resnet18_fp16_eager.raw.csv.gz")
    s = summarize(store, run)
    check_against_table(s, k, "kernel")
    # Counters decided every launch's tensor cores; off them a name rule the precision (issue 23).
    assert sum(s.evidence.values()) == 162 and set(s.evidence) == {"metrics", "name"}
    assert s.memory_ops == {} and len(s.top_kernels) == 10
    assert summarize(store, run, top=3).top_kernels == s.top_kernels[:3]


def test_nsys_run_counts_copies_apart(db, nsys_dir):
    store, run, k = stored(db, nsys_dir / "nsys_resnet18_train_amp.sqlite")
    s = summarize(store, run)
    check_against_table(s, k, "kernel")
    for kind in ("memcpy", "memset"):
        rows = k[k["kind"] == kind]
        assert (s.memory_ops[kind].count, s.memory_ops[kind].time_ns) == (
            len(rows),
            int(rows["duration_ns"].sum()),
        )


def test_cpu_run(db):
    store, run, k = stored(db, DATA / "torch" / "cpu_resnet18_bf16.json.gz")
    s = summarize(store, run)
    check_against_table(s, k, "cpu_op")
    assert (
        s.tensor_core_kernels == 0
        and "bf16" in s.time_by_precision_ns
        and s.evidence.keys() <= {"dtypes", "none"}
    )
