"""The torch.profiler (Kineto) importer, profkit.parse.kineto: real traces, from the H100 and
from this kind of GPU-less machine, against the traces' own events and torch.profiler's own
per-operator table; verdicts from names and input types; bad traces."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest

from profkit.classify import classify, rules
from profkit.parse import load

from .conftest import DATA, cli, cli_json, kernel_table, one_line_error

TORCH = DATA / "torch"
GPU_TRACE = TORCH / "kineto_resnet18_fp16.json.gz"
CPU_TRACES = ["cpu_resnet18_fp32", "cpu_resnet18_bf16", "cpu_resnet18_train_fp32"]


def raw_events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


# ------------------------------------------------------------------ a GPU trace (H100)
def test_gpu_trace_kernels_match_the_traces_own_kernel_events():
    events = raw_events(GPU_TRACE)
    kernel_events = [e for e in events if e.get("cat") == "kernel"]
    c = load(GPU_TRACE)
    k = kernel_table(None, c)
    # 326 CUDA-device events by torch.profiler's own count = 324 kernels + 2 gpu_user_annotation.
    assert (
        len(kernel_events) == 324
        and sum(e.get("cat") == "gpu_user_annotation" for e in events) == 2
    )
    assert len(k) == 324 and set(k["kind"]) == {"kernel"}
    assert sorted(k["duration_ns"]) == sorted(round(e["dur"] * 1000) for e in kernel_events)
    assert sorted(k["name"]) == sorted(e["name"] for e in kernel_events)
    by_corr = {e["args"]["correlation"]: e for e in kernel_events}
    assert len(by_corr) == 324
    first = k.iloc[0]
    assert [first.grid_x, first.grid_y, first.grid_z] == [784, 2, 1] and [
        first.block_x,
        first.block_y,
        first.block_z,
    ] == [8, 8, 1]
    assert (c.gpu_name, c.compute_capability, c.tool) == ("NVIDIA H100 80GB HBM3", "9.0", "torch")
    # Every kernel's launch ran on the main thread inside one of the two record_function ranges.
    assert k["nvtx_range"].value_counts().to_dict() == {
        "resnet18.fp16.eager.iter0": 162,
        "resnet18.fp16.eager.iter1": 162,
    }
    assert k["thread_id"].notna().all() and k["stream"].notna().all()
    assert [
        (r["name"], r["kernels"], r["gpu_ops"], r["other_thread_kernels"]) for r in c.ranges
    ] == [("resnet18.fp16.eager.iter0", 162, 162, 0), ("resnet18.fp16.eager.iter1", 162, 162, 0)]
    assert sum(r["gpu_time_ns"] for r in c.ranges) == int(k["duration_ns"].sum())


def test_gpu_trace_classified_by_name():
    k = classify(kernel_table(GPU_TRACE))
    assert set(k["evidence"]) <= {"name", "none"}
    tc = k[k["tensor_core"].fillna(False)]
    assert len(tc) > 0 and set(tc["precision"]) == {"fp16"}
    assert (
        not k[k["family"].isin(["elementwise", "layout", "pooling", "norm"])]["tensor_core"]
        .fillna(False)
        .any()
    )


def test_training_trace_made_by_profkit_run_tool_torch():
    """`profkit run resnet18_train --tool torch --precision amp` on the H100: the backward pass
    runs on autograd's thread, outside the main thread's record_function range. profkit's
    iteration range is the process's: it holds the whole step, both threads' kernels (nsys saw
    the same step launch 179 + 234 kernels: tests/data/nsys/nsys_run_resnet18_train_amp)."""
    c = load(TORCH / "torch_run_resnet18_train_amp.json.gz")
    k = kernel_table(None, c)
    outer = c.ranges[0]
    assert (outer["name"], outer["kernels"], outer["gpu_ops"], outer["other_thread_kernels"]) == (
        "resnet18_train.amp.eager.iter0",
        179 + 234,
        182 + 237,
        0,
    )
    assert [(r["name"], r["depth"], r["kernels"], r["path"]) for r in c.ranges[1:]] == [
        (
            "Optimizer.zero_grad#SGD.zero_grad",
            1,
            0,
            "resnet18_train.amp.eager.iter0/Optimizer.zero_grad#SGD.zero_grad",
        ),
        ("Optimizer.step#SGD.step", 1, 3, "resnet18_train.amp.eager.iter0/Optimizer.step#SGD.step"),
    ]
    threads = k["thread_id"].value_counts()
    assert len(threads) == 2 and k["nvtx_range"].notna().all()
    backward = k[k["thread_id"] != outer["thread_id"]]
    assert (backward["nvtx_range"] == outer["name"]).all()
    assert backward[backward["kind"] == "kernel"].shape[0] == 234
    # record_shapes: a kernel carries the tensor types of the operator that launched it
    assert k["input_types"].notna().sum() > 300 and "c10::Half" in set(k["input_types"].dropna())


# ------------------------------------------------------------------ CPU traces (no GPU)
@pytest.mark.parametrize("name", CPU_TRACES)
def test_cpu_operators_match_torch_profilers_own_table(name):
    c = load(TORCH / f"{name}.json.gz")
    k = kernel_table(None, c)
    assert set(k["kind"]) == {"cpu_op"} and c.gpu_name is None
    mine = k.groupby("name")["duration_ns"].agg(["size", "sum"])
    oracle = {r["name"]: r for r in csv.DictReader(open(TORCH / f"{name}.key_averages.csv"))}
    ops = {n: r for n, r in oracle.items() if n in set(k["name"])}
    ranges = {r["name"] for r in c.ranges}
    assert set(oracle) == set(ops) | ranges  # everything else in torch's table is a range
    for op, r in ops.items():
        assert mine.loc[op, "size"] == int(r["calls"]), op
        assert abs(mine.loc[op, "sum"] - float(r["self_cpu_time_total_us"]) * 1000) <= 1, op
    for r in c.ranges:
        assert r["wall_ns"] == pytest.approx(
            float(oracle[r["name"]]["cpu_time_total_us"]) * 1000, abs=1
        )


def test_cpu_ranges_nest_and_own_their_operators():
    c = load(TORCH / "cpu_resnet18_train_fp32.json.gz")
    k = kernel_table(None, c)
    by_name = {r["name"]: r for r in c.ranges}
    step = by_name["Optimizer.step#SGD.step"]
    assert (
        step["depth"] == 1
        and step["path"] == "resnet18_train.fp32.eager.iter0/Optimizer.step#SGD.step"
    )
    outer = by_name["resnet18_train.fp32.eager.iter0"]
    assert outer["kernels"] == len(k) and step["gpu_ops"] is None
    assert (k["nvtx_range"] == "Optimizer.step#SGD.step").sum() == step["kernels"] > 0


def test_cpu_operator_verdicts_come_from_input_types():
    k = classify(kernel_table(TORCH / "cpu_resnet18_bf16.json.gz"))
    assert not k["tensor_core"].any()
    conv = k[k["name"] == "aten::mkldnn_convolution"]
    assert (
        set(conv["precision"]) == {"bf16"}
        and set(conv["evidence"]) == {"dtypes"}
        and set(conv["family"]) == {"conv"}
    )
    empty = k[k["name"] == "aten::empty"]
    assert set(empty["precision"]) == {"unknown"} and set(empty["evidence"]) == {"none"}
    fp32 = classify(kernel_table(TORCH / "cpu_resnet18_fp32.json.gz"))
    assert set(fp32[fp32["family"] == "conv"]["precision"]) == {"fp32"}


def test_op_rule_examples_are_real():
    names: set[str] = set()
    for n in CPU_TRACES:
        names |= {r["name"] for r in load(TORCH / f"{n}.json.gz").rows}
    # a data-parallel step's collectives (gloo)
    for f in (DATA / "ddp").glob("cpu_*.rank*.json.gz"):
        names |= {r["name"] for r in load(f).rows}
    for rule in rules().op_rules:
        assert rule.examples, rule.id
        for ex in rule.examples:
            assert ex in names, (rule.id, ex)
            first = next(r for r in rules().op_rules if r.regex.search(ex))
            assert first.id == rule.id, (ex, first.id)


def test_import_cpu_trace_cli(db):
    r = cli("import", str(TORCH / "cpu_resnet18_fp32.json.gz"), db=db)
    assert r.exit_code == 0, r.output
    name = r.stdout.strip().splitlines()[-1]
    assert name == "cpu_resnet18_fp32" and "CPU operator calls" in r.stderr
    run = json.loads(cli("runs", "-f", "json", db=db).stdout)[0]
    assert (run["activity"], run["device"], run["tool"], run["workload"]) == (
        "cpu_op",
        "cpu",
        "torch",
        "resnet18",
    )
    s = json.loads(cli("summary", name, "-f", "json", db=db).stdout)
    assert s["activity"] == "cpu_op" and s["kernels"] == 850 and s["tensor_core_time_pct"] == 0
    table = " ".join(cli("summary", name, db=db).stdout.split())
    assert "CPU operator calls" in table and "not GPU kernels" in table


def test_import_gpu_trace_cli(db):
    r = cli("import", str(GPU_TRACE), "--name", "k", db=db)
    assert r.exit_code == 0, r.output
    s = json.loads(cli("summary", "k", "-f", "json", db=db).stdout)
    assert s["activity"] == "kernel" and s["kernels"] == 324 and s["tensor_core_time_pct"] > 0
    ks = json.loads(cli("kernels", "k", "-f", "json", db=db).stdout)
    assert len(ks) == 324 and {k["kind"] for k in ks} == {"kernel"}


def test_bad_traces_one_line_each(tmp_path, db):
    cli("import", str(GPU_TRACE), "--name", "keep", db=db)
    (tmp_path / "notjson.json").write_text("{nope")
    (tmp_path / "other.json").write_text('{"a": 1}')
    (tmp_path / "nothing.json").write_text('{"traceEvents": [{"ph": "M", "name": "process_name"}]}')
    (tmp_path / "badts.json").write_text(
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "x"}]}'
    )
    (tmp_path / "trunc.json.gz").write_bytes(GPU_TRACE.read_bytes()[:500])
    cases = {
        "notjson.json": "not a readable JSON trace",
        "other.json": "not a Chrome/Kineto trace",
        "nothing.json": "no GPU kernels and no CPU operators",
        "badts.json": "ts/dur 'x' is not a number",
        "trunc.json.gz": "not a readable JSON trace",
    }
    for f, message in cases.items():
        one_line_error(cli("import", str(tmp_path / f), db=db), message)
    assert len(cli_json("runs", db=db)) == 1
