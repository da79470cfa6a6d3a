"""Whole training steps under every tool, on real captures (tests/data/steps, H100,
`profkit run WORKLOAD --precision amp --iters 2` with --tool ncu, ncu --metrics time, nsys and
torch): every tool counts the same kernels per step, and that count is every kernel the step
launched, from any thread (the nsys export's launch calls inside each iteration's start/end
range, counted here by SQL, are the oracle)."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from profkit import nvtx_ranges
from profkit.parse.kineto import read_kineto
from profkit.parse.ncu_csv import read_ncu_csv
from profkit.parse.ncu_plan import read_per_function
from profkit.parse.nsys_sqlite import read_nsys_sqlite

from .conftest import DATA, needs_gpu, needs_gpu_ncu_nsys

STEPS = DATA / "steps"
WORKLOADS = sorted({p.name.split("_amp.")[0] for p in STEPS.glob("*_amp.nsys.sqlite.gz")})


def _plain(path: Path, tmp_path: Path) -> Path:
    out = tmp_path / path.name.removesuffix(".gz")
    out.write_bytes(gzip.decompress(path.read_bytes()))
    return out


def _oracle(export: Path) -> list[tuple[int, int]]:
    """Per NVTX start/end range (eventType 60) of the export: (kernels whose launch call, on
    any thread, started inside it; threads that launched them)."""
    con = sqlite3.connect(export)
    out = []
    for start, end in con.execute(
        "select start, end from NVTX_EVENTS where eventType = 60 order by start"
    ):
        out.append(
            con.execute(
                "select count(*), count(distinct r.globalTid) from CUPTI_ACTIVITY_KIND_KERNEL k "
                "join CUPTI_ACTIVITY_KIND_RUNTIME r using (correlationId) where r.start >= ? and r.start < ?",
                (start, end),
            ).fetchone()
        )
    con.close()
    return out


def _per_step(ranges: list[dict], workload: str) -> list[int]:
    tag = nvtx_ranges.tag(workload, "amp", "eager")
    steps = [r for r in ranges if r["depth"] == 0 and r["name"].startswith(tag + ".iter")]
    return [r["kernels"] for r in sorted(steps, key=lambda r: r["name"])]


@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_tool_counts_every_kernel_of_the_step(workload, tmp_path):
    base = STEPS / f"{workload}_amp"
    export = _plain(Path(f"{base}.nsys.sqlite.gz"), tmp_path)
    oracle = _oracle(export)
    # main thread and autograd's
    assert len(oracle) == 2 and all(threads == 2 for _, threads in oracle)
    launched = [n for n, _ in oracle]

    nsys = read_nsys_sqlite(export)
    nsys_rows = list(nsys.rows)
    torch = read_kineto(Path(f"{base}.torch.json.gz"))
    torch_rows = list(torch.rows)
    times = json.loads(Path(f"{base}.ncu.harness-times.json").read_text())
    assert times["iteration_ranges"] == "process"
    ncu = read_per_function(
        Path(f"{base}.ncu.raw.csv.gz"),
        Path(f"{base}.ncu.raw-mangled.csv.gz"),
        Path(f"{base}.ncu.kernel_times.json.gz"),
        nvtx_ranges.tag(workload, "amp", "eager"),
        nvtx_ranges.DOMAIN,
        {int(k): v for k, v in times["thread_ids"].items()},
        process_wide=True,
    )
    ncu_rows = list(ncu.rows)
    every = Counter(
        r["nvtx_range"] for r in read_ncu_csv(Path(f"{base}.ncu-every.raw.csv.gz")).rows
    )

    assert _per_step(nsys.ranges, workload) == launched
    assert _per_step(torch.ranges, workload) == launched
    assert _per_step(ncu.ranges, workload) == launched
    assert [every[k] for k in sorted(every)] == launched
    # Nothing of a step is "another thread's" any more, and each tool saw both threads launch.
    for capture, rows in ((nsys, nsys_rows), (torch, torch_rows), (ncu, ncu_rows)):
        assert all(
            r["other_thread_kernels"] in (0, None) for r in capture.ranges if r["depth"] == 0
        )
        kernels = [r for r in rows if r["kind"] == "kernel"]
        assert len(kernels) == sum(launched) and all(r["nvtx_range"] for r in kernels)
        # (CUPTI names threads by pthread id: ncu's rows carry the OS id of the main thread only.)
        assert len({r["thread_id"] for r in kernels}) == 2 and (
            capture is ncu or None not in {r["thread_id"] for r in kernels}
        )
    # ncu counted every kernel function of the step, the backward pass's included: every
    # launch's tensor cores come from counters (and the precision too where they saw tensor
    # work; off the tensor cores a name rule's, issue 23).
    assert all(
        r["evidence_detail"].startswith(("tensor-path", "counters of launch")) for r in ncu_rows
    )
    assert {r["evidence"] for r in ncu_rows if r["tensor_core"]} == {"metrics"}


@needs_gpu_ncu_nsys
def test_on_the_gpu_every_tool_counts_the_same_step(tmp_path):
    """Live: one AMP ResNet-18 step under ncu (default plan), nsys and torch.profiler: the same
    kernel count per step from each, every kernel of each run inside the step."""
    from .conftest import cli, cli_json

    db = tmp_path / "steps.db"
    counts = {}
    for tool in ("ncu", "nsys", "torch"):
        r = cli(
            "run",
            "resnet18_train",
            "--precision",
            "amp",
            "--batch-size",
            "2",
            "--tool",
            tool,
            "--name",
            tool,
            "--no-report",
            db=db,
        )
        assert r.exit_code == 0, r.output
        steps = [x for x in cli_json("ranges", tool, db=db) if x["depth"] == 0]
        kernels = [k for k in cli_json("kernels", tool, db=db) if k["kind"] == "kernel"]
        assert (
            len(steps) == 1
            and steps[0]["kernels"] == len(kernels)
            and all(k["nvtx_range"] for k in kernels)
        )
        counts[tool] = len(kernels)
    assert len(set(counts.values())) == 1, counts


@needs_gpu
def test_on_the_gpu_layout_and_library_options_run_and_are_recorded(tmp_path):
    """fp16 with BatchNorm kept in fp32, channels-last and cuDNN's benchmark mode, under
    torch.profiler: the run works and records its options; channels-last removes cuDNN's
    NCHW<->NHWC layout kernels."""
    import profkit

    from .conftest import cli

    db = tmp_path / "opts.db"
    r = cli(
        "run",
        "resnet18",
        "--precision",
        "fp16",
        "--tool",
        "torch",
        "--batch-size",
        "2",
        "--keep-bn-fp32",
        "--channels-last",
        "--cudnn-benchmark",
        "--no-report",
        db=db,
    )
    assert r.exit_code == 0, r.output
    r = cli(
        "run",
        "resnet18",
        "--precision",
        "fp16",
        "--tool",
        "torch",
        "--batch-size",
        "2",
        "--no-report",
        db=db,
    )
    assert r.exit_code == 0, r.output
    opts, plain = (
        profkit.open_db(db).run("resnet18-fp16-bnfp32-cl-cudnnbench-eager-torch"),
        profkit.open_db(db).run("resnet18-fp16-eager-torch"),
    )
    assert opts.info["options"] == {
        "keep_bn_fp32": True,
        "channels_last": True,
        "cudnn_benchmark": True,
    }
    layout = lambda run: (run.kernels()["family"] == "layout").sum()  # noqa: E731
    assert layout(opts) < layout(plain)


@pytest.mark.parametrize("edit", ["crossing", "spanning"])
def test_other_ranges_that_cross_or_span_the_steps_leave_them_whole(edit, tmp_path):
    """A user range on autograd's thread that crosses from one step into the next, or spans
    both (torch.profiler), and a start/end range crossing the step boundary (nsys): each step
    stays an outermost range holding its own 420 kernels, counted once."""
    from profkit.parse.nsys_sqlite import read_nsys_sqlite

    trace = json.loads(gzip.decompress((STEPS / "resnet18_train_amp.torch.json.gz").read_bytes()))
    steps = [
        e
        for e in trace["traceEvents"]
        if e.get("cat") == "user_annotation" and ".iter" in e["name"]
    ]
    other = next(
        e["tid"]
        for e in trace["traceEvents"]
        if e.get("cat") == "cuda_runtime" and e["tid"] != steps[0]["tid"]
    )
    start = steps[0]["ts"] + steps[0]["dur"] - 3000 if edit == "crossing" else steps[0]["ts"] - 10
    end = start + 6000 if edit == "crossing" else steps[1]["ts"] + steps[1]["dur"] + 10
    trace["traceEvents"].append(
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "hook",
            "pid": steps[0]["pid"],
            "tid": other,
            "ts": start,
            "dur": end - start,
            "args": {},
        }
    )
    edited = tmp_path / "trace.json"
    edited.write_text(json.dumps(trace))
    capture = read_kineto(edited)
    rows = list(capture.rows)
    assert _per_step(capture.ranges, "resnet18_train") == [420, 420]
    assert (
        sum(1 for r in rows if r["kind"] == "kernel" and ".iter" in (r["nvtx_path"] or "")) == 840
    )

    export = _plain(STEPS / "resnet18_train_amp.nsys.sqlite.gz", tmp_path)
    con = sqlite3.connect(export)
    (s0, e0, g), (s1, e1, _) = con.execute(
        "select start, end, globalTid from NVTX_EVENTS where eventType = 60 order by start"
    ).fetchall()
    span = (e0 - (e0 - s0) // 3, s1 + (e1 - s1) // 3) if edit == "crossing" else (s0 - 10, e1 + 10)
    con.execute(
        "insert into NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) values (?, ?, 60, 'prefetch', ?, 0)",
        [*span, g],
    )
    con.commit()
    con.close()
    nsys = read_nsys_sqlite(export)
    list(nsys.rows)
    steps_seen = [r for r in nsys.ranges if ".iter" in r["name"]]
    assert [r["kernels"] for r in steps_seen] == [420, 420]
    # A range holding both steps is their outer range; one that crosses is neither's.
    assert {r["depth"] for r in steps_seen} == ({0} if edit == "crossing" else {1})
