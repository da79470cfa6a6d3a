"""Distributed runs (``profkit run --nproc-per-node N``): every rank's kernels in one run with a
``rank``, and the per-rank figures (GPU time, NCCL time and its overlap with compute,
iteration skew, rank differences).

Captures in tests/data/ddp are real: `profkit run resnet50_ddp_train --precision amp
--nproc-per-node 2 --iters 1 --batch-size 8` on two H200s (nsys, and torch.profiler: one trace
per rank), with each rank's harness file (its pid) and `nsys stats`' kernel summary as the
oracle; and the same workload on this machine's CPU with gloo under torch.profiler. The live
CPU test runs two gloo ranks here."""

from __future__ import annotations

import csv
import gzip
import json
import re
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from profkit.analyze.ranks import _differences, _intersection, rank_report
from profkit.ingest import store_capture
from profkit.parse.kineto import read_kineto
from profkit.parse.nsys_sqlite import read_nsys_sqlite
from profkit.parse.ranks import merge_ranks
from profkit.parse.schema import frame
from profkit.records import PrecisionDifference
from profkit.store import Store

from .conftest import DATA, cli, cli_json, needs_gpu_nsys, needs_torch, one_line_error

DDP = DATA / "ddp"
NSYS = "nsys_resnet50_ddp_train_amp"
TORCH = "torch_resnet50_ddp_train_amp"


def _pids(prefix: str) -> dict[int, int]:
    infos = [json.loads((DDP / f"{prefix}.harness.rank{r}.json").read_text()) for r in (0, 1)]
    return {i["pid"]: i["rank"] for i in infos}


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ddp") / f"{NSYS}.sqlite"
    out.write_bytes(gzip.decompress((DDP / f"{NSYS}.sqlite.gz").read_bytes()))
    return out


def _store(db: Path, capture, name: str, world_size: int = 2):
    store = Store(db)
    fields = {
        "name": name,
        "source": "run",
        "workload": "resnet50_ddp_train",
        "precision": "amp",
        "mode": "eager",
        "device": "cuda",
        "info": {"world_size": world_size},
    }
    reserved = store.reserve(None, name, fields, status="running")  # type: ignore[arg-type]
    return store, store_capture(store, capture, fields, reserved)  # type: ignore[arg-type]


def _oracle(export: Path) -> dict[int, dict[str, int]]:
    """Per process of the export (SQL): kernels, their summed time and the NCCL kernels' time."""
    con = sqlite3.connect(export)
    out = {}
    for pid, n, t, nccl in con.execute(
        "select (k.globalPid >> 24) & 16777215, count(*), sum(k.end - k.start), "
        "sum(case when s.value like 'nccl%' then k.end - k.start else 0 end) "
        "from CUPTI_ACTIVITY_KIND_KERNEL k join StringIds s on s.id = k.shortName group by 1"
    ):
        out[pid] = {"kernels": n, "time_ns": t, "nccl_ns": nccl}
    con.close()
    return out


def test_an_nsys_capture_of_every_rank_gets_each_kernel_its_rank(export, db):
    pids = _pids(NSYS)
    oracle = _oracle(export)
    assert set(oracle) == set(pids)  # the capture holds both ranks' processes, and only them
    streamed = frame(read_nsys_sqlite(export, ranks=pids).rows)
    for pid, rank in pids.items():
        mine = streamed[streamed["rank"] == rank]
        kernels = mine[mine["kind"] == "kernel"]
        assert (
            len(kernels) == oracle[pid]["kernels"]
            and int(kernels["duration_ns"].sum()) == oracle[pid]["time_ns"]
        )
    assert streamed["rank"].notna().all()
    # nsys stats' own kernel summary of the report: the same kernels and time over both ranks.
    with open(DDP / f"{NSYS}_cuda_gpu_kern_sum.csv") as f:
        stats = list(csv.DictReader(f))
    kernels = streamed[streamed["kind"] == "kernel"]
    assert sum(int(r["Instances"]) for r in stats) == len(kernels)
    assert sum(int(r["Total Time (ns)"]) for r in stats) == int(kernels["duration_ns"].sum())
    # The SQL bulk path writes the same rows as the streamed one, rank included.
    store, run = _store(db, read_nsys_sqlite(export, ranks=pids), "ddp")
    stored = frame(store.iter_kernels(run.id), classified=True)
    assert stored["rank"].tolist() == streamed["rank"].tolist()
    assert stored["launch_id"].tolist() == streamed["launch_id"].tolist()
    ranges = store.ranges(run.id)
    iterations = [r for r in ranges if r["name"].endswith(".iter0")]
    assert sorted(r["rank"] for r in iterations) == [0, 1] and all(
        r["rank"] is not None for r in ranges
    )


def test_nccl_kernels_are_communication_on_the_cuda_cores(export, db):
    store, run = _store(db, read_nsys_sqlite(export, ranks=_pids(NSYS)), "ddp")
    k = frame(store.iter_kernels(run.id), classified=True)
    nccl = k[k["name"].str.startswith("nccl")]
    assert len(nccl) and set(nccl["family"]) == {"communication"} and not nccl["tensor_core"].any()
    reduce = nccl[nccl["name"].str.contains("AllReduce_Sum_f32")]
    assert set(reduce["precision"]) == {"fp32"}  # AMP's gradients are the parameters' fp32
    assert set(nccl[nccl["name"].str.contains("Broadcast")]["precision"]) == {"unknown"}
    # AMP's all-reduce in fp32 is not a missed cast: the fp32 finding leaves NCCL out.
    findings = {
        f.id: f for f in __import__("profkit.analyze.findings", fromlist=["x"]).findings(store, run)
    }
    fp32 = findings.get("fp32_in_half_run")
    assert fp32 is None or not any(x.name.startswith("nccl") for x in fp32.kernels)


def _union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _overlap_brute(kernels) -> int:
    """Time an NCCL kernel and a compute kernel ran at once on one GPU, by elementary segments."""
    total = 0
    for _, g in kernels.groupby("device"):
        spans = [
            (int(s), int(s) + int(d), f == "communication")
            for s, d, f in zip(g["start_ns"], g["duration_ns"], g["family"].fillna(""))
        ]
        points = sorted({p for s, e, _ in spans for p in (s, e)})
        for a, b in zip(points, points[1:]):
            comm = any(s <= a and e >= b for s, e, c in spans if c)
            compute = any(s <= a and e >= b for s, e, c in spans if not c)
            if comm and compute:
                total += b - a
    return total


def test_rank_figures_agree_with_the_kernel_table(export, db):
    pids = _pids(NSYS)
    store, run = _store(db, read_nsys_sqlite(export, ranks=pids), "ddp")
    report = rank_report(store, run)
    assert (
        report is not None and report.world_size == 2 and [f.rank for f in report.ranks] == [0, 1]
    )
    k = frame(store.iter_kernels(run.id), classified=True)
    k = k[k["kind"] == "kernel"]
    oracle = _oracle(export)
    for f in report.ranks:
        mine = k[k["rank"] == f.rank]
        pid = next(p for p, r in pids.items() if r == f.rank)
        assert f.devices == [f.rank]  # each rank on the GPU of its local rank
        assert (f.kernels, f.gpu_time_ns, f.comm_time_ns) == (
            oracle[pid]["kernels"],
            oracle[pid]["time_ns"],
            oracle[pid]["nccl_ns"],
        )
        assert f.compute_time_ns == f.gpu_time_ns - f.comm_time_ns and f.comm_kernels > 0
        assert f.comm_overlap_ns == _overlap_brute(mine) and 0 < f.comm_overlap_ns < f.comm_time_ns
        assert f.comm_overlap_pct == round(100 * f.comm_overlap_ns / f.comm_time_ns, 1)
    # The iteration, from NVTX's own start/end events of each process.
    con = sqlite3.connect(export)
    spans = {
        pids[(g >> 24) & 0xFFFFFF]: (s, e)
        for s, e, g in con.execute(
            "select start, end, globalTid from NVTX_EVENTS where eventType = 60"
        )
    }
    con.close()
    (it,) = report.iterations
    assert it.start_skew_ns == abs(spans[0][0] - spans[1][0]) and it.end_skew_ns == abs(
        spans[0][1] - spans[1][1]
    )
    assert [(p.rank, p.start_ns, p.wall_ns) for p in it.ranks] == [
        (r, s, e - s) for r, (s, e) in sorted(spans.items())
    ]
    comm = {p.rank: p.comm_time_ns for p in it.ranks}
    assert it.waited_for == min(comm, key=lambda r: comm[r]) and it.wait_ns == max(
        comm.values()
    ) - min(comm.values())
    # every kernel of the capture is in its rank's iteration
    assert sum(p.kernels for p in it.ranks) == len(k)
    assert report.same_kernels and report.differences == []


def test_torch_profiler_traces_of_each_rank_merge_into_one_run(db, export):
    traces = {r: DDP / f"{TORCH}.rank{r}.json.gz" for r in (0, 1)}
    alone = {r: frame(read_kineto(t).rows) for r, t in traces.items()}
    merged = merge_ranks({r: read_kineto(t) for r, t in traces.items()})
    store, run = _store(db, merged, "ddp-torch")
    k = frame(store.iter_kernels(run.id), classified=True)
    assert k["launch_id"].tolist() == list(range(len(k)))
    for r, rows in alone.items():
        mine = k[k["rank"] == r]
        # each rank's rows, in its own launch order
        assert mine["name"].tolist() == rows["name"].tolist()
        assert mine["duration_ns"].tolist() == rows["duration_ns"].tolist()
    ranges = store.ranges(run.id)
    assert sorted(r["rank"] for r in ranges if r["name"].endswith(".iter0")) == [0, 1]
    assert [r["range_id"] for r in ranges] == list(range(len(ranges)))
    # The same step under nsys: every rank launched the same kernels, as many.
    nsys = frame(read_nsys_sqlite(export, ranks=_pids(NSYS)).rows)
    for r in (0, 1):
        assert (
            k[(k["rank"] == r) & (k["kind"] == "kernel")].shape[0]
            == nsys[(nsys["rank"] == r) & (nsys["kind"] == "kernel")].shape[0]
        )
    report = rank_report(store, run)
    assert report is not None and report.same_kernels and all(f.comm_kernels for f in report.ranks)


def test_rank_differences_name_the_kernels_and_precisions():
    counts = [
        (0, "gemm_a", "fp16", 4),
        (0, "gemm_b", "fp16", 2),
        (0, "add", "fp32", 10),
        (1, "gemm_a", "fp16", 4),
        (1, "gemm_b", "fp32", 2),
        (1, "add", "fp32", 9),
    ]
    (d,) = _differences(counts)
    assert d.rank == 1 and d.vs == 0
    assert d.precisions == [
        PrecisionDifference(name="gemm_b", precisions=["fp32"], vs_precisions=["fp16"])
    ]
    assert {(x.name, x.precision, x.launches, x.vs_launches) for x in d.kernels} == {
        ("add", "fp32", 9, 10),
        ("gemm_b", "fp16", 0, 2),
        ("gemm_b", "fp32", 2, 0),
    }
    assert _differences([(0, "a", "fp16", 1), (1, "a", "fp16", 1)]) == []


def test_interval_intersection():
    assert _intersection(_union([(0, 10), (20, 30)]), _union([(5, 25)])) == 10
    assert _intersection([], [[0, 5]]) == 0


def test_a_single_process_run_has_no_rank_report(db):
    store, run = _store(db, read_kineto(DDP / f"{TORCH}.rank0.json.gz"), "one", world_size=1)
    assert rank_report(store, run) is None
    assert cli_json("summary", "one", db=db)["ranks"] is None


@pytest.mark.parametrize("page", ["summary", "ranges", "report"])
def test_what_the_commands_show_of_the_ranks(export, db, tmp_path, page):
    _store(db, read_nsys_sqlite(export, ranks=_pids(NSYS)), "ddp")
    if page == "summary":
        s = cli_json("summary", "ddp", db=db)
        assert [r["rank"] for r in s["ranks"]["ranks"]] == [0, 1]
        text = cli("summary", "ddp", db=db).stdout
        assert "2 ranks" in text and "overlapped" in text and "waited for" in text
        assert "every rank launched the same kernels" in text
    elif page == "ranges":
        rows = cli_json("ranges", "ddp", db=db)
        assert all(r["rank"] in (0, 1) for r in rows)
        text = cli("ranges", "ddp", db=db).stdout
        assert "iterations across ranks" in text and "start skew" in text
    else:
        out = tmp_path / "ddp.html"
        r = cli("report", "ddp", "--output", out, db=db)
        assert r.exit_code == 0, r.output
        html = out.read_text()
        assert 'id="ranks"' in html and 'id="iteration-skew"' in html and 'id="rank-same"' in html


@needs_torch
def test_two_gloo_ranks_on_the_cpu_under_torch_profiler(db, tmp_path):
    """The acceptance's CPU test: the DDP workload as two processes (torchrun, gloo) under
    torch.profiler, stored as one run with both ranks."""
    r = cli(
        "run",
        "resnet50_ddp_train",
        "--device",
        "cpu",
        "--tool",
        "torch",
        "--nproc-per-node",
        2,
        "--batch-size",
        1,
        "--iters",
        1,
        "--warmup",
        1,
        "--no-report",
        db=db,
    )
    assert r.exit_code == 0, r.output
    name = "resnet50_ddp_train-fp32-eager-cpu-2ranks"
    k = cli_json("kernels", name, db=db)
    per_rank = Counter(row["rank"] for row in k)
    assert set(per_rank) == {0, 1} and per_rank[0] == per_rank[1]
    collectives = [row for row in k if row["family"] == "communication"]
    assert {row["rank"] for row in collectives} == {0, 1}
    assert {row["name"] for row in collectives} >= {"c10d::allreduce_"}
    s = cli_json("summary", name, db=db)
    ranks = s["ranks"]
    assert ranks["world_size"] == 2 and [f["rank"] for f in ranks["ranks"]] == [0, 1]
    # gloo's all-reduce ranges
    assert all(f["comm_kernels"] and f["comm_time_ns"] > 0 for f in ranks["ranks"])
    assert len(ranks["iterations"]) == 1 and ranks["iterations"][0]["start_skew_ns"] is not None
    runs = cli_json("runs", db=db)
    assert runs[0]["kernel_count"] == len(k)
    run = Store(db).get_run(name)
    assert run.info["world_size"] == 2 and [x["rank"] for x in run.info["harness"]["ranks"]] == [
        0,
        1,
    ]
    assert {"kineto-json-rank0", "kineto-json-rank1"} <= set(run.raw_files)


@pytest.mark.parametrize(
    "args, message",
    [
        (("--nproc-per-node", 0), "--nproc-per-node must be"),
        (("--nproc-per-node", 65, "--device", "cpu"), "--nproc-per-node is at most 64"),
        (("--nproc-per-node", 2, "--tool", "ncu"), "ncu profiles one process's kernels one by one"),
        (
            ("--nproc-per-node", 2, "--metrics", "full"),
            "ncu profiles one process's kernels one by one",
        ),
        (
            ("--nproc-per-node", 2, "--device", "cpu", "--mode", "torchscript"),
            "TorchScript cannot trace",
        ),
    ],
)
def test_bad_rank_requests_are_one_line_and_make_no_database(db, args, message):
    one_line_error(cli("run", "resnet50_ddp_train", *args, db=db), message, code=2)
    assert not db.exists()


def test_more_ranks_than_gpus_is_refused(db, monkeypatch):
    from profkit import gpu

    monkeypatch.setattr(gpu, "count", lambda: 1)
    one_line_error(
        cli("run", "resnet50_ddp_train", "--nproc-per-node", 2, "--tool", "torch", db=db),
        "runs a rank on each of 2 GPUs, but this machine has 1",
        code=2,
    )
    assert not db.exists()


@needs_gpu_nsys
def test_on_two_gpus_a_ddp_step_under_nsys_and_torch(tmp_path):
    """On a machine with 2 GPUs: both tools see both ranks, the same kernels per rank, NCCL."""
    from profkit import gpu

    if gpu.count() < 2:
        pytest.skip("needs 2 GPUs")
    db = tmp_path / "gpu.db"
    for tool in ("nsys", "torch"):
        r = cli(
            "run",
            "resnet50_ddp_train",
            "--precision",
            "amp",
            "--nproc-per-node",
            2,
            "--tool",
            tool,
            "--iters",
            2,
            "--batch-size",
            16,
            "--no-report",
            db=db,
        )
        assert r.exit_code == 0, r.output
    counts = {}
    for tool in ("nsys", "torch"):
        s = cli_json("summary", f"resnet50_ddp_train-amp-eager-{tool}-2ranks", db=db)["ranks"]
        assert [f["devices"] for f in s["ranks"]] == [[0], [1]]
        assert all(f["comm_kernels"] > 0 and f["comm_overlap_ns"] is not None for f in s["ranks"])
        assert len(s["iterations"]) == 2 and s["same_kernels"]
        counts[tool] = [f["kernels"] for f in s["ranks"]]
    assert counts["nsys"] == counts["torch"]


@needs_torch
def test_a_rank_that_fails_is_named_and_the_others_are_stopped(db, tmp_path):
    """One rank's workload error ends the job (torchrun stops the rank waiting for it): one
    line naming the rank and the error, and the run kept as failed."""
    workload = tmp_path / "half_broken.py"
    workload.write_text(
        "def build(spec):\n"
        "    import torch, torch.distributed as dist\n"
        "    if dist.get_rank() == 1:\n"
        "        raise RuntimeError('rank one cannot build')\n"
        "    return torch.nn.Linear(4, 4), (torch.randn(spec.batch_size, 4),)\n"
    )
    r = cli(
        "run",
        workload,
        "--device",
        "cpu",
        "--tool",
        "torch",
        "--nproc-per-node",
        2,
        "--batch-size",
        2,
        "--no-report",
        "--timeout",
        120,
        db=db,
    )
    one_line_error(r, "rank 1: ", code=1)
    assert "rank one cannot build" in r.stderr
    (run,) = Store(db).runs()
    assert run.status == "failed" and "rank 1" in run.info["error"]


def test_the_ranks_section_in_chromium(export, db, tmp_path):
    """The report of a two-rank nsys run as a person sees it: a row and a bar per rank (compute,
    NCCL overlapped, NCCL exposed, as long as the figures say), the iteration skew, and the
    timeline with a lane per rank and stream."""
    from . import chromium

    if chromium.available():
        pytest.skip(chromium.available())
    store, run = _store(db, read_nsys_sqlite(export, ranks=_pids(NSYS)), "ddp")
    out = tmp_path / "ddp.html"
    assert cli("report", "ddp", "--output", out, db=db).exit_code == 0
    report = rank_report(store, run)
    assert report is not None
    with chromium.browser() as b:
        opened = chromium.open_report(b, out)
        assert opened.errors == [] and opened.requests == []
        page = opened.page
        rows = page.locator("#rank-table tbody tr")
        assert rows.count() == 2
        longest = max(f.gpu_time_ns for f in report.ranks)
        for i, f in enumerate(report.ranks):
            row = rows.nth(i)
            assert row.is_visible() and row.get_attribute("data-rank") == str(f.rank)
            assert int(row.get_attribute("data-comm-ns") or 0) == f.comm_time_ns
            assert int(row.get_attribute("data-overlap-ns") or 0) == f.comm_overlap_ns
            cells = row.locator("td").all_inner_texts()
            assert (
                cells[0] == str(f.rank)
                and cells[1] == str(f.devices[0])
                and f"{f.comm_overlap_pct:.1f}%" in cells[6]
            )
            bar = row.locator(".rankbar").bounding_box()
            assert bar is not None
            for cls, ns in (
                ("b-compute", f.compute_time_ns),
                ("b-overlap", f.comm_overlap_ns),
                ("b-exposed", f.comm_time_ns - (f.comm_overlap_ns or 0)),
            ):
                box = row.locator(f".{cls}").bounding_box()
                width = box["width"] if box else 0.0
                assert abs(width - bar["width"] * ns / longest) <= 1.5, (f.rank, cls)
        skew = page.locator("#iteration-skew tbody tr")
        assert skew.count() == 1 and "rank" in skew.nth(0).inner_text()
        assert page.locator("#rank-same").is_visible()
        lanes = page.evaluate(
            "() => Chart.getChart(document.getElementById('chart-timeline')).data.labels"
        )
        assert {lane.split(" · ")[0] for lane in lanes} == {"rank 0", "rank 1"}
        page.locator("#ranks").screenshot(path=str(tmp_path / "ranks.png"))


def _stuck_on_rank_1(folder: Path) -> None:
    """stuck.py: a workload whose rank 1 never finishes building (rank 0 waits for it in the
    barrier); deadlock.py: one whose ranks both wait to receive from the other in a measured
    iteration (blocked in gloo, never back in Python)."""
    (folder / "stuck.py").write_text(
        "def build(spec):\n"
        "    import time, torch, torch.distributed as dist\n"
        "    if dist.get_rank() == 1:\n"
        "        time.sleep(600)\n"
        "    return torch.nn.Linear(4, 4), (torch.randn(spec.batch_size, 4),)\n"
    )
    (folder / "deadlock.py").write_text(
        "def build(spec):\n"
        "    import torch, torch.distributed as dist\n"
        "    calls = [0]\n"
        "    def step():\n"
        "        calls[0] += 1\n"
        "        if calls[0] > 1:\n"
        "            dist.recv(torch.zeros(1, device=spec.device), src=1 - dist.get_rank())\n"
        "    return step\n"
    )


@needs_torch
@pytest.mark.parametrize("workload", ["stuck.py", "deadlock.py"])
def test_ctrl_c_stops_every_rank_and_marks_the_run(tmp_path, workload):
    """A terminal's Ctrl-C during a two-rank run (one rank stuck in its build and the other
    waiting for it, or both blocked in a collective): torchrun's ranks are in sessions of their
    own, and still all of them end at once; the run is marked interrupted, with one line and no
    traceback."""
    import sys

    from .conftest import ctrl_c, processes_mentioning

    _stuck_on_rank_1(tmp_path)
    code, err, took = ctrl_c(
        [
            sys.executable,
            "-m",
            "profkit",
            "--db",
            str(tmp_path / "p.db"),
            "run",
            workload,
            "--device",
            "cpu",
            "--tool",
            "torch",
            "--nproc-per-node",
            "2",
            "--batch-size",
            "2",
            "--no-report",
        ],
        tmp_path,
        after_s=8,
    )
    assert (
        code == 130
        and err.strip().splitlines()[-1] == "profkit: interrupted"
        and "Traceback" not in err
    ), err
    assert took < 15
    assert processes_mentioning(str(tmp_path)) == []
    (run,) = Store(tmp_path / "p.db").runs()
    assert run.status == "interrupted"


@needs_torch
@pytest.mark.parametrize("workload", ["stuck.py", "deadlock.py"])
def test_a_timeout_stops_every_rank(tmp_path, db, workload):
    _stuck_on_rank_1(tmp_path)
    from .conftest import processes_mentioning

    r = cli(
        "run",
        tmp_path / workload,
        "--device",
        "cpu",
        "--tool",
        "torch",
        "--nproc-per-node",
        2,
        "--batch-size",
        2,
        "--warmup",
        1,
        "--iters",
        2,
        "--no-report",
        "--timeout",
        8,
        db=db,
    )
    one_line_error(r, "ran past 8 s and was stopped", code=1)
    assert processes_mentioning(str(tmp_path)) == []
    (run,) = Store(db).runs()
    assert run.status == "failed"


def test_a_rank_without_kernels_is_not_the_same(export, db):
    """Rank 1's process left out of the mapping (its rows have no rank): the report says rank 1
    launched nothing and differs by everything, never that every rank launched the same."""
    only0 = {p: r for p, r in _pids(NSYS).items() if r == 0}
    store, run = _store(db, read_nsys_sqlite(export, ranks=only0), "only0")
    report = rank_report(store, run)
    assert report is not None and [f.rank for f in report.ranks] == [0]
    assert not report.same_kernels and "no kernels from rank 1 of 2" in report.notes[0]
    (d,) = report.differences
    assert d.rank == 1 and all(x.launches == 0 and x.vs_launches > 0 for x in d.kernels)
    assert "every rank launched the same" not in cli("summary", "only0", db=db).stdout


def test_the_iteration_table_keeps_its_columns_when_a_rank_misses_an_iteration(db, tmp_path):
    """A rank without an iteration's range: the report's iteration table still has a wall and
    a collectives cell per rank in every row (dashes where the rank has none)."""
    cpu = DDP / "cpu_resnet50_ddp_train_fp32"
    store, run = _store(
        db, merge_ranks({r: read_kineto(Path(f"{cpu}.rank{r}.json.gz")) for r in (0, 1)}), "cpu"
    )
    con = sqlite3.connect(db)
    con.execute(
        "delete from ranges where run_id = ? and rank = 0 and name like '%.iter0'", [run.id]
    )
    con.commit()
    con.close()
    out = tmp_path / "cpu.html"
    assert cli("report", "cpu", "--output", out, db=db).exit_code == 0
    html = out.read_text()
    table = html[html.index('id="iteration-skew"') :]
    table = table[: table.index("</table>")]
    head = table[: table.index("</thead>")]
    columns = len(re.findall(r"<th[ >]", head))
    # iteration, skews, wall and collectives per rank, waited for, wait
    assert columns == 3 + 2 * 2 + 2
    rows = table[table.index("<tbody>") :].split("<tr>")[1:]
    assert len(rows) == 1 and all(len(re.findall(r"<td[ >]", row)) == columns for row in rows)


@needs_torch
def test_a_ddp_script_that_joins_the_group_itself_runs(db, tmp_path):
    """A workload written as DDP scripts are (it calls init_process_group first thing) runs as
    ranks: the group is joined already, and its call does nothing. The CPU ranks share the
    machine's cores (torchrun alone would give each one thread)."""
    (tmp_path / "own_init.py").write_text(
        "import os\n"
        "import torch\n"
        "import torch.distributed as dist\n"
        "from torch.distributed import init_process_group\n\n"
        "def build(spec):\n"
        "    init_process_group('gloo')\n"
        "    dist.init_process_group(backend='gloo', init_method='env://')\n"
        "    from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "    model = DDP(torch.nn.Linear(8, 8))\n"
        "    x = torch.randn(spec.batch_size, 8)\n"
        "    threads = os.environ.get('OMP_NUM_THREADS')\n"
        "    def step():\n"
        "        assert threads == str(max(1, (os.cpu_count() or 1) // 2)), threads\n"
        "        model(x).sum().backward()\n"
        "    return step\n"
    )
    r = cli(
        "run",
        tmp_path / "own_init.py",
        "--device",
        "cpu",
        "--tool",
        "torch",
        "--nproc-per-node",
        2,
        "--batch-size",
        2,
        "--warmup",
        1,
        "--no-report",
        db=db,
    )
    assert r.exit_code == 0, r.output
    s = cli_json("summary", "own_init-fp32-eager-cpu-2ranks", db=db)["ranks"]
    assert [f["rank"] for f in s["ranks"]] == [0, 1] and s["same_kernels"]


def test_ranks_beyond_the_visible_gpus_are_refused(db, monkeypatch):
    from profkit import gpu

    monkeypatch.setattr(gpu, "count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    one_line_error(
        cli("run", "resnet50_ddp_train", "--nproc-per-node", 2, "--tool", "torch", db=db),
        "CUDA_VISIBLE_DEVICES shows 1 of this machine's 2",
        code=2,
    )
    assert not db.exists()


def test_every_process_profkit_starts_has_nvlink_multicast_off(tmp_path, monkeypatch):
    """Single-process runs, bench and tools included: the runner sets it for every child (over
    whatever this environment says)."""
    import sys

    from profkit.tools import runner

    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    code = (
        "import os; print(' '.join(os.environ.get(k, '-') for k in ('NCCL_NVLS_ENABLE', "
        "'TORCH_SYMM_MEM_DISABLE_MULTICAST', 'NVSHMEM_DISABLE_NVLS')))"
    )
    assert runner.capture([sys.executable, "-c", code]).split() == ["0", "1", "1"]
    lines: list[str] = []
    runner.stream([sys.executable, "-c", code], on_line=lines.append)
    assert lines == ["0 1 1"]
    log = tmp_path / "bg.log"
    with runner.Background([sys.executable, "-c", code], log) as child:
        child.wait(timeout=60)
    assert log.read_text().split() == ["0", "1", "1"]


@needs_gpu_nsys
def test_on_two_gpus_a_timeout_under_nsys_leaves_nothing_running(tmp_path, db):
    """Both ranks waiting on each other in NCCL under nsys: the timeout ends nsys, torchrun dies
    with it and its ranks with torchrun; nothing is left holding the GPUs."""
    from profkit import gpu

    from .conftest import processes_mentioning

    if gpu.count() < 2:
        pytest.skip("needs 2 GPUs")
    _stuck_on_rank_1(tmp_path)
    r = cli(
        "run",
        tmp_path / "deadlock.py",
        "--tool",
        "nsys",
        "--nproc-per-node",
        2,
        "--batch-size",
        2,
        "--warmup",
        1,
        "--iters",
        2,
        "--no-report",
        "--timeout",
        30,
        db=db,
    )
    assert r.exit_code == 1 and "ran past 30 s" in r.stderr, r.output
    import time

    time.sleep(3)
    assert processes_mentioning(str(tmp_path)) == []


@pytest.mark.parametrize("width", [80, 120, 200])
def test_the_rank_tables_fit_a_terminal_and_keep_their_figures(export, db, width):
    """The ranks and iterations tables at 80, 120 and 200 columns (issue 24): no line wider,
    every figure column there and whole."""
    from .test_tables import screen

    _store(db, read_nsys_sqlite(export, ranks=_pids(NSYS)), f"ddp{width}")
    text = screen("summary", f"ddp{width}", db=db, width=width)
    for col in (
        "rank",
        "kernels",
        "GPU time",
        "compute",
        "NCCL",
        "overlapped",
        "start skew",
        "end skew",
        "rank 0 wall",
        "rank 1 wall",
    ):
        assert col in text, (width, col)
    s = cli_json("summary", f"ddp{width}", db=db)
    for r in s["ranks"]["ranks"]:
        assert re.search(rf"^\s*{r['rank']}\s.*\b{r['kernels']}\b", text, re.M), (width, r["rank"])
