"""profkit bench (profkit.benchmark, profkit.api.bench, the store's benches): the grid of modes x
precisions on this GPU-less machine, the JSON rows, what is stored, agreement with fp32 eager
(none for a training step), a combination that fails at run time, and one line with nothing
stored for every bad input. Small test workloads keep each harness process to a few seconds."""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from profkit import render
from profkit.errors import UsageError
from profkit.records import BenchRecord, BenchRow
from profkit.store import Store

from .conftest import cli, needs_gpu, needs_torch, one_line_error

WORKLOADS = Path(__file__).parent / "workloads"
TINY = str(WORKLOADS / "tiny_classifier.py")  # fails in bf16, at run time
TRAIN = str(WORKLOADS / "tiny_train_step.py")  # builds its own step
CPU = ("--device", "cpu", "--batch-size", "4", "--iters", "3", "--warmup", "1")


def bench_count(db: Path) -> int:
    return sqlite3.connect(db).execute("select count(*) from benches").fetchone()[0]


def stored_rows(db: Path, bench_id: int) -> list[dict]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    return [
        dict(r)
        for r in con.execute("select * from bench_rows where bench_id = ? order by seq", [bench_id])
    ]


@pytest.fixture(scope="module")
def grid_db(tmp_path_factory):
    """tiny_classifier in fp32 and fp16, eager and torchscript, on the CPU: (db, JSON printed)."""
    pytest.importorskip("torch")
    db = tmp_path_factory.mktemp("bench") / "profkit.db"
    r = cli(
        "bench",
        TINY,
        "--precisions",
        "fp32,fp16",
        "--modes",
        "eager,torchscript",
        *CPU,
        "-f",
        "json",
        db=db,
    )
    assert r.exit_code == 0, r.output
    return db, json.loads(r.stdout)


@needs_torch
def test_json_rows_agreement_and_what_is_stored(grid_db):
    db, out = grid_db
    assert (
        out["workload"] == "tiny_classifier" and out["device"] == "cpu" and out["gpu_name"] is None
    )
    assert (out["batch_size"], out["iters"], out["warmup"]) == (4, 3, 1) and out["torch_version"]
    assert "interquartile" in out["spread"]
    rows = out["rows"]
    assert [(r["precision"], r["mode"]) for r in rows] == [
        ("fp32", "eager"),
        ("fp16", "eager"),
        ("fp32", "torchscript"),
        ("fp16", "torchscript"),
    ]
    for r in rows:
        assert r["status"] == "ok" and r["error"] is None and not r["reference_only"]
        assert len(r["iter_ns"]) == 3 and all(isinstance(t, int) and t > 0 for t in r["iter_ns"])
        assert r["min_ms"] <= r["p25_ms"] <= r["median_ms"] <= r["p75_ms"] <= r["max_ms"]
        assert r["spread_ms"] == pytest.approx((r["p75_ms"] - r["p25_ms"]) / 2, abs=1e-6)
        assert r["items_per_s"] == pytest.approx(4 / (r["median_ms"] / 1e3), rel=1e-4)
        assert r["s_per_item"] == pytest.approx(r["median_ms"] / 1e3 / 4, rel=1e-4)
        assert r["peak_memory_bytes"] is None  # CPU
        assert 0 <= r["max_abs_diff"] < 0.05 and 0 <= r["top1_agreement"] <= 1
    # fp32 eager against itself; the same weights and inputs in every process (torch seeded).
    assert (rows[0]["max_abs_diff"], rows[0]["top1_agreement"], rows[0]["note"]) == (
        0.0,
        1.0,
        "the reference",
    )
    assert rows[2]["max_abs_diff"] < 1e-5 and rows[2]["top1_agreement"] == 1.0
    assert rows[1]["max_abs_diff"] > 0  # fp16 rounds
    # Stored: the benchmark and a row per combination, as printed.
    assert bench_count(db) == 1
    stored = stored_rows(db, out["id"])
    assert [(r["precision"], r["mode"], r["status"]) for r in stored] == [
        (r["precision"], r["mode"], "ok") for r in rows
    ]
    assert [json.loads(r["iter_ns"]) for r in stored] == [r["iter_ns"] for r in rows]
    assert (
        stored[1]["median_ms"] == rows[1]["median_ms"]
        and stored[1]["top1_agreement"] == rows[1]["top1_agreement"]
    )
    # Read back through the API and the command, the same.
    import profkit

    again = profkit.open_db(db).bench(out["id"])
    assert again.to_dict() == out
    r = cli("bench", "--show", out["id"], "-f", "json", db=db)
    assert r.exit_code == 0 and json.loads(r.stdout) == out


@needs_torch
def test_the_grid_people_make_by_hand(grid_db):
    db, out = grid_db
    r = cli("bench", "--show", out["id"], db=db, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert (
        lines[0].startswith("tiny_classifier, batch 4, on CPU, torch ")
        and "3 timed iterations after 1 warm-up" in lines[0]
    )
    head = lines.index(next(l for l in lines if l.split()[:3] == ["mode", "fp32", "fp16"]))
    eager, script = lines[head + 1].split(), lines[head + 2].split()
    assert eager[0] == "eager" and script[0] == "torchscript"
    fp16 = next(x for x in out["rows"] if (x["precision"], x["mode"]) == ("fp16", "torchscript"))
    assert lines[head + 2].rstrip().endswith(render._bench_ms(fp16["median_ms"], fp16["spread_ms"]))
    assert re.fullmatch(
        r"[0-9.,]+ ms \(±[0-9.,]+\)", render._bench_ms(fp16["median_ms"], fp16["spread_ms"])
    )
    # each combination's times, then its throughput, memory and agreement (two tables)
    detail = [l.split() for l in lines if l.strip().startswith(("fp32 ", "fp16 "))]
    assert [d[:2] for d in detail] == 2 * [
        ["fp32", "eager"],
        ["fp16", "eager"],
        ["fp32", "torchscript"],
        ["fp16", "torchscript"],
    ]
    assert detail[4][-2:] == ["0", "100.0%"]  # fp32 eager against itself
    listed = cli("bench", "--list", db=db)
    assert listed.exit_code == 0 and "tiny_classifier" in listed.stdout and "4/4" in listed.stdout
    assert json.loads(cli("bench", "--list", "-f", "json", db=db).stdout)[0]["rows"] == out["rows"]


@needs_torch
def test_a_failing_combination_is_recorded_and_the_others_go_on(tmp_path):
    """bf16 fails in the warm-up: its row says why, fp16 is timed and compared with the fp32
    eager reference (run only for that: in the rows, not in the grid), and the command exits 1
    after printing and storing the table."""
    db = tmp_path / "p.db"
    r = cli("bench", TINY, "--precisions", "fp16,bf16", *CPU, db=db, env={"COLUMNS": "200"})
    assert r.exit_code == 1, r.output
    assert (
        "this model has no bf16 kernel" in r.stdout
        and "bf16 eager failed: the warm-up failed" in r.stdout
    )
    assert (
        r.stderr.strip().splitlines()[-1]
        == "profkit: error: 1 of 2 combinations failed (stored as benchmark 1)"
    )
    grid = next(l for l in r.stdout.splitlines() if l.split()[:1] == ["eager"]).split()
    # fp16's cell, bf16's; no fp32 column
    assert grid[-1] == "failed" and grid[2] == "ms" and len(grid) == 5
    assert "fp32 eager (reference)" in r.stdout
    rows = stored_rows(db, 1)
    assert [(x["precision"], x["mode"], x["status"], x["reference_only"]) for x in rows] == [
        ("fp16", "eager", "ok", 0),
        ("bf16", "eager", "failed", 0),
        ("fp32", "eager", "ok", 1),
    ]
    assert rows[1]["error"].startswith(
        "the warm-up failed for tiny_classifier in bf16, eager: RuntimeError"
    )
    assert rows[1]["median_ms"] is None and rows[0]["median_ms"] > 0
    assert (
        0 < rows[0]["max_abs_diff"] < 0.05
        and rows[2]["max_abs_diff"] == 0.0
        and rows[2]["top1_agreement"] == 1.0
    )


@needs_torch
def test_a_training_step_has_no_agreement_and_no_reference(tmp_path):
    import profkit

    b = profkit.bench(TRAIN, device="cpu", batch_size=4, iters=2, warmup=1, db=tmp_path / "p.db")
    # no fp32 eager reference run for a step function
    assert b.ok and b.id == 1 and len(b.rows) == 1
    (row,) = b.rows
    assert row.status == "ok" and row.median_ms > 0 and len(row.iter_ns) == 2
    assert (
        row.max_abs_diff is None
        and row.top1_agreement is None
        and row.note.startswith("n/a: the workload builds")
    )
    r = cli("bench", "--show", "1", db=tmp_path / "p.db", env={"COLUMNS": "200"})
    assert [l for l in r.stdout.splitlines() if l.startswith("fp32 eager")][-1].split()[-2:] == [
        "n/a",
        "n/a",
    ]
    assert "agreement with fp32 eager: n/a: the workload builds its own step" in r.stdout


# ------------------------------------------------------------------ figures
def test_stats_median_quartiles_and_spread():
    from profkit.benchmark import stats

    s = stats([4_000_000, 1_000_000, 3_000_000, 2_000_000])
    assert s == {
        "median_ms": 2.5,
        "spread_ms": 0.75,
        "p25_ms": 1.75,
        "p75_ms": 3.25,
        "min_ms": 1.0,
        "max_ms": 4.0,
    }
    assert stats([5_000_000]) == {
        "median_ms": 5.0,
        "spread_ms": 0.0,
        "p25_ms": 5.0,
        "p75_ms": 5.0,
        "min_ms": 5.0,
        "max_ms": 5.0,
    }


@needs_torch
def test_agreement():
    import torch

    from profkit.benchmark import agreement

    ref = torch.tensor([[0.1, 0.9, 0.0], [0.5, 0.2, 0.3]])
    assert agreement(ref.clone(), ref) == (0.0, 1.0, None)
    diff, top1, note = agreement(torch.tensor([[0.1, 0.9, 0.0], [0.2, 0.5, 0.3]]), ref)
    assert diff == pytest.approx(0.3) and top1 == 0.5 and note is None
    assert (
        agreement(torch.zeros(2, 4), ref)[2]
        == "n/a: output shape (2, 4) differs from fp32 eager's (2, 3)"
    )
    assert agreement(ref * float("nan"), ref)[2] == "n/a: the output holds NaN or infinity"
    assert agreement(torch.ones(3, 1), torch.zeros(3, 1)) == (1.0, None, None)


# ------------------------------------------------------------------ bad input: one line, nothing stored
def _bench(bench_id: int | None = None) -> BenchRecord:
    return BenchRecord(
        id=bench_id,
        workload="w",
        batch_size=1,
        device="cpu",
        iters=1,
        warmup=0,
        precisions=["fp32"],
        modes=["eager"],
        created_at="2026-01-01T00:00:00+00:00",
        rows=[BenchRow("fp32", "eager", "ok", median_ms=1.0, iter_ns=[1_000_000])],
    )


@pytest.fixture
def seeded(tmp_path):
    """A database holding one benchmark (stored directly: no process runs)."""
    db = tmp_path / "p.db"
    Store(db).add_bench(_bench())
    return db


BAD = {
    "unknown precision": (["--precisions", "fp32,fp8"], "unknown --precisions 'fp8'", 2),
    "unknown mode": (["--modes", "eager,jit"], "unknown --modes 'jit'", 2),
    "no precision": (["--precisions", ","], "--precisions needs at least one value", 2),
    "batch 0": (["--batch-size", "0"], "--batch-size must be at least 1, not 0", 2),
    "iters 0": (["--iters", "0"], "--iters must be at least 1, not 0", 2),
    "rounds 0": (["--rounds", "0"], "--rounds must be at least 1, not 0", 2),
    "rounds 21": (["--rounds", "21"], "--rounds must be at most 20, not 21", 2),
    "rounds two": (["--rounds", "two"], "Invalid value for '--rounds'", 2),
    "compile without warm-up": (
        ["--modes", "compile", "--warmup", "0"],
        "--warmup must be at least 1",
        2,
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_options_are_one_line_and_store_nothing(seeded, case):
    args, message, code = BAD[case]
    one_line_error(cli("bench", TINY, "--device", "cpu", *args, db=seeded), message, code)
    assert bench_count(seeded) == 1


@pytest.mark.parametrize(
    "workload, args, message",
    [
        ("nosuch", [], "unknown workload 'nosuch'"),
        (
            "resnet18_train",
            ["--precisions", "fp32,bf16"],
            "workload resnet18_train does not support precision 'bf16'. It supports fp32, amp",
        ),
        (
            "precision_zoo",
            ["--modes", "torchscript"],
            "workload precision_zoo does not support mode 'torchscript'",
        ),
        (str(WORKLOADS / "absent.py"), [], "workload file not found"),
    ],
)
def test_unknown_workloads_and_unsupported_combinations_are_refused_first(
    seeded, workload, args, message
):
    one_line_error(cli("bench", workload, "--device", "cpu", *args, db=seeded), message)
    assert bench_count(seeded) == 1


def test_what_this_machine_cannot_do_is_refused_first(seeded, monkeypatch):
    from profkit import benchmark, launch

    monkeypatch.setattr(benchmark, "compiler", lambda device: None)
    one_line_error(
        cli("bench", TINY, "--device", "cpu", "--modes", "eager,compile", db=seeded),
        "--modes compile needs a C++ compiler for Inductor's CPU code, and none was found",
        2,
    )
    monkeypatch.setattr(launch, "DRIVER_DIR", Path("/nonexistent-driver"))
    monkeypatch.setattr(benchmark.gpu, "query", lambda: None)
    one_line_error(
        cli("bench", TINY, db=seeded),
        "no NVIDIA GPU or driver found here. Benchmark on the CPU with --device cpu",
        2,
    )
    assert bench_count(seeded) == 1


def test_a_database_that_cannot_be_written_is_refused_before_anything_runs(
    tmp_path, seeded, monkeypatch
):
    one_line_error(
        cli("bench", TINY, "--device", "cpu", db=tmp_path / "no" / "p.db"), "does not exist"
    )
    one_line_error(cli("bench", TINY, "--device", "cpu", db=tmp_path), "is a folder")
    text = tmp_path / "notes.txt"
    text.write_text("not a database")
    one_line_error(cli("bench", TINY, "--device", "cpu", db=text), "not a usable SQLite database")
    assert text.read_text() == "not a database" and not (tmp_path / "no").exists()
    # Another process holds the write lock past the busy timeout: refused now, not after the run.
    monkeypatch.setenv("PROFKIT_BUSY_TIMEOUT", "0.2")
    other = sqlite3.connect(seeded, isolation_level=None)
    other.execute("begin immediate")
    try:
        one_line_error(
            cli("bench", TINY, "--device", "cpu", db=seeded), "is locked by another process"
        )
    finally:
        other.execute("rollback")
    assert bench_count(seeded) == 1


@pytest.mark.parametrize(
    "args, named",
    [
        (["--list", "--rounds", "3"], "--rounds is"),
        (["--show", "1", "--iters", "5", "--device", "cpu"], "--iters, --device are"),
        (["--list", "--precisions", "fp16", "--tf32"], "--tf32, --precisions are"),
    ],
)
def test_list_and_show_refuse_what_only_a_new_benchmark_takes(seeded, args, named):
    one_line_error(
        cli("bench", *args, db=seeded),
        f"--list and --show read stored benchmarks: {named} for a new one",
        2,
    )


def test_list_and_show(seeded):
    one_line_error(cli("bench", "--show", "7", db=seeded), "no benchmark '7'")
    one_line_error(
        cli("bench", TINY, "--list", db=seeded), "--list and --show read stored benchmarks", 2
    )
    one_line_error(cli("bench", db=seeded), "give the WORKLOAD to benchmark", 2)
    assert "w" in cli("bench", "--list", db=seeded).stdout.split()
    assert (
        json.loads(cli("bench", "--show", "1", "-f", "json", db=seeded).stdout)["rows"][0][
            "median_ms"
        ]
        == 1.0
    )
    assert bench_count(seeded) == 1


# ------------------------------------------------------------------ store
def test_benches_round_trip_and_store_in_one_transaction(tmp_path):
    store = Store(tmp_path / "p.db")
    b = store.add_bench(_bench())
    assert b == _bench(1) and store.benches() == [b] and store.get_bench("1") == b
    with pytest.raises(UsageError, match="one row per precision and mode"):  # nothing of it stays
        store.add_bench(replace(_bench(), rows=[_bench().rows[0], _bench().rows[0]]))
    assert store.benches() == [b]


def test_a_schema_6_database_gets_the_bench_tables(tmp_path):
    from profkit.store.database import SCHEMA_VERSION

    path = tmp_path / "p.db"
    Store(path).add_bench(_bench())
    con = sqlite3.connect(path)
    # a schema 6 database
    con.executescript(
        "drop table bench_rows; drop table benches; drop table _sqlite_migrations; "
        "update meta set value = '6' where key = 'schema_version';"
    )
    con.close()
    store = Store(path)
    assert store.benches() == [] and SCHEMA_VERSION >= 7
    assert sqlite3.connect(path).execute(
        "select value from meta where key = 'schema_version'"
    ).fetchone() == (str(SCHEMA_VERSION),)
    assert store.add_bench(_bench()).id == 1


@needs_gpu
def test_on_the_gpu_cuda_events_peak_memory_and_agreement(tmp_path):
    """On a GPU: CUDA-event times, peak memory per combination, fp16 agreeing with fp32 eager."""
    db = tmp_path / "g.db"
    r = cli(
        "bench",
        "resnet18",
        "--precisions",
        "fp32,fp16",
        "--modes",
        "eager,torchscript",
        "--batch-size",
        "2",
        "--iters",
        "5",
        "--warmup",
        "2",
        "-f",
        "json",
        db=db,
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    assert {(x["precision"], x["mode"]) for x in rows} == {
        ("fp32", "eager"),
        ("fp16", "eager"),
        ("fp32", "torchscript"),
        ("fp16", "torchscript"),
    }
    for x in rows:
        assert x["status"] == "ok" and x["median_ms"] > 0 and x["peak_memory_bytes"] > 0
        assert x["max_abs_diff"] is not None and x["top1_agreement"] >= 0.5


@needs_torch
def test_the_cpu_gets_small_defaults():
    """Left out, batch size, timed and warm-up iterations are the device's: small on the CPU."""
    pytest.importorskip("torch")
    from profkit import benchmark

    p = benchmark.plan("resnet18", device="cpu")
    assert (
        (p.requests[0].spec.batch_size, p.iters, p.warmup) == benchmark.DEFAULTS["cpu"] == (1, 3, 1)
    )
    p = benchmark.plan("resnet18", device="cpu", batch_size=4, iters=7, warmup=0)
    assert (p.requests[0].spec.batch_size, p.iters, p.warmup) == (4, 7, 0)


@needs_torch
def test_layout_and_library_options_apply_to_every_combination(tmp_path):
    """--channels-last and --keep-bn-fp32 (fp16/bf16 combinations only; the fp32 eager reference
    keeps its BatchNorm as it is) are recorded with the benchmark and shown in its header;
    --keep-bn-fp32 with no half precision asked is refused first."""
    db = tmp_path / "b.db"
    r = cli(
        "bench",
        "resnet18",
        "--precisions",
        "bf16",
        "--channels-last",
        "--keep-bn-fp32",
        "--device",
        "cpu",
        "--iters",
        "1",
        "--warmup",
        "0",
        db=db,
    )
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0].startswith(
        "resnet18, BatchNorm fp32, channels-last, batch 1, on CPU"
    )
    shown = json.loads(cli("bench", "--show", "1", "-f", "json", db=db).stdout)
    assert shown["info"]["options"] == {"channels_last": True, "keep_bn_fp32": True}
    assert [(x["precision"], x["reference_only"], x["status"]) for x in shown["rows"]] == [
        ("bf16", False, "ok"),
        ("fp32", True, "ok"),
    ]
    one_line_error(
        cli("bench", "resnet18", "--keep-bn-fp32", "--device", "cpu", db=tmp_path / "c.db"),
        "needs fp16 or bf16 among the --precisions",
        2,
    )
    assert not (tmp_path / "c.db").exists()


def test_rounds_time_each_combination_in_as_many_processes(tmp_path, monkeypatch, capsys):
    """--rounds 3: every combination timed in 3 processes, a round of them after another; its
    figures from all their steps together, each process's median in the record's info, the
    heading says so, only the first round's output saved; a combination that fails in a later
    round is failed (saying which round), left out of the medians and not run again."""
    from profkit import benchmark

    calls: list[tuple[str, str]] = []
    saved: list[bool] = []
    steps = {"fp32": [[10, 11, 12], [20, 21, 22], [30, 31, 32]], "fp16": [[5, 6, 7]]}

    def measure(p, req, folder, progress, save_output=True):
        precision, mode = req.spec.precision, req.spec.mode
        calls.append((precision, folder.name))
        saved.append(save_output)
        n = sum(1 for c in calls if c[0] == precision)
        if precision == "fp16" and n == 2:
            return BenchRow(precision, mode, "failed", error="out of memory in round 2"), {}, None
        times = [t * 1_000_000 for t in steps[precision][n - 1]]
        return benchmark._timed_row(req, times, 1000 * n), {"model": "m"}, None

    monkeypatch.setattr(benchmark, "measure", measure)
    monkeypatch.setattr(benchmark.launch, "require_torch", lambda why: None)
    import profkit

    record = profkit.bench(
        TINY, precisions="fp32,fp16", rounds=3, db=tmp_path / "p.db", device="cpu"
    )
    # round by round; fp16 failed in round 2 and was not run in round 3
    assert calls == [
        ("fp32", "0-0"),
        ("fp16", "1-0"),
        ("fp32", "0-1"),
        ("fp16", "1-1"),
        ("fp32", "0-2"),
    ]
    assert saved == [True, True, False, False, False]
    fp32, fp16 = record.rows[:2]
    assert fp32.iter_ns == [t * 1_000_000 for r in steps["fp32"] for t in r]
    assert fp32.median_ms == 21.0 and fp32.peak_memory_bytes == 3000
    assert fp16.status == "failed" and fp16.error == "round 2 of 3: out of memory in round 2"
    assert record.info["rounds"] == 3
    assert record.info["round_medians_ms"] == {"fp32 eager": [11.0, 21.0, 31.0]}
    assert "in each of 3 processes" in render._bench_heading(record)
    render.bench(record, "table", wide=True)
    out = capsys.readouterr().out
    assert "  fp32 eager: 11, 21, 31\n" in out and "fp16 eager: 6" not in out
    assert "fp16 eager failed: round 2 of 3: out of memory in round 2" in out
    stored = profkit.open_db(tmp_path / "p.db").bench(record.id)
    assert stored.info["round_medians_ms"]["fp32 eager"] == [11.0, 21.0, 31.0]


def test_rounds_time_the_reference_in_as_many_processes(tmp_path, monkeypatch):
    """The fp32 eager reference a benchmark adds for the outputs is timed in every round too,
    its figures pooled and its medians kept, its output saved once."""
    from profkit import benchmark

    calls: list[tuple[str, bool]] = []

    def measure(p, req, folder, progress, save_output=True):
        calls.append((folder.name, save_output))
        k = len(calls)
        row = benchmark._timed_row(req, [k * 1_000_000, k * 1_000_000], None)
        return row, {"model": "m"}, None

    monkeypatch.setattr(benchmark, "measure", measure)
    monkeypatch.setattr(benchmark.launch, "require_torch", lambda why: None)
    import profkit

    record = profkit.bench(TINY, precisions="fp16", rounds=2, db=tmp_path / "p.db", device="cpu")
    assert calls == [("0-0", True), ("0-1", False), ("reference-0", True), ("reference-1", False)]
    fp16, reference = record.rows
    assert reference.reference_only and len(reference.iter_ns) == 4
    assert record.info["round_medians_ms"] == {
        "fp16 eager": [1.0, 2.0],
        "fp32 eager (reference)": [3.0, 4.0],
    }


def test_rounds_are_checked_by_the_library_before_anything_runs(tmp_path):
    import profkit

    for bad, message in ((0, "at least 1"), (21, "at most 20"), ("2", "whole number")):
        with pytest.raises(UsageError, match=message):
            profkit.bench(TINY, rounds=bad, db=tmp_path / "p.db", device="cpu")
    assert not (tmp_path / "p.db").exists()


@needs_torch
@pytest.mark.slow
def test_rounds_run_each_combination_in_processes_of_its_own(tmp_path):
    """--rounds 2 on the CPU, for real: two harness processes, each in its own folder, their
    steps pooled (3 + 3), each one's median kept, the heading saying so."""
    db = tmp_path / "p.db"
    r = cli("bench", TINY, *CPU, "--rounds", "2", "-f", "json", db=db)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    (row,) = out["rows"]
    assert row["status"] == "ok" and len(row["iter_ns"]) == 6
    medians = out["info"]["round_medians_ms"]["fp32 eager"]
    assert out["info"]["rounds"] == 2 and len(medians) == 2 and all(m > 0 for m in medians)
    shown = cli("bench", "--show", "1", db=db, env={"COLUMNS": "200"})
    assert "3 timed iterations after 1 warm-up, in each of 2 processes" in shown.stdout
    lines = shown.stdout.splitlines()
    at = lines.index("each process's median, round by round (ms):")
    assert lines[at + 1] == "  fp32 eager: " + ", ".join(f"{m:.4g}" for m in medians)
