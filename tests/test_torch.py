"""The torch.profiler path: Kineto traces (real ones, from the H100 and from this kind of
GPU-less machine) against the traces' own events and torch.profiler's own per-operator
table; ``--tool auto``; and ``profkit run --device cpu`` end to end."""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from profkit import launch
from profkit.cli import app
from profkit.classify import classify, rules
from profkit.errors import UsageError
from profkit.parse import load
from profkit.tools import ncu

from .conftest import DATA, needs_torch

TORCH = DATA / "torch"
GPU_TRACE = TORCH / "kineto_resnet18_fp16.json.gz"
CPU_TRACES = ["cpu_resnet18_fp32", "cpu_resnet18_bf16", "cpu_resnet18_train_fp32"]
runner = CliRunner()


def cli(*args, db=None):
    return runner.invoke(app, list(args) + (["--db", str(db)] if db else []))


def raw_events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


# ------------------------------------------------------------------ a GPU trace (H100)
def test_gpu_trace_kernels_match_the_traces_own_kernel_events():
    events = raw_events(GPU_TRACE)
    kernel_events = [e for e in events if e.get("cat") == "kernel"]
    c = load(GPU_TRACE)
    k = c.kernels
    # 326 CUDA-device events by torch.profiler's own count = 324 kernels + 2 gpu_user_annotation.
    assert len(kernel_events) == 324 and sum(e.get("cat") == "gpu_user_annotation" for e in events) == 2
    assert len(k) == 324 and set(k["kind"]) == {"kernel"}
    assert sorted(k["duration_ns"]) == sorted(round(e["dur"] * 1000) for e in kernel_events)
    assert sorted(k["name"]) == sorted(e["name"] for e in kernel_events)
    by_corr = {e["args"]["correlation"]: e for e in kernel_events}
    assert len(by_corr) == 324
    first = k.iloc[0]
    assert [first.grid_x, first.grid_y, first.grid_z] == [784, 2, 1] and [first.block_x, first.block_y, first.block_z] == [8, 8, 1]
    assert (c.gpu_name, c.compute_capability, c.tool) == ("NVIDIA H100 80GB HBM3", "9.0", "torch")
    # Every kernel's launch ran on the main thread inside one of the two record_function ranges.
    assert k["nvtx_range"].value_counts().to_dict() == {"resnet18.fp16.eager.iter0": 162, "resnet18.fp16.eager.iter1": 162}
    assert k["thread_id"].notna().all() and k["stream"].notna().all()
    assert [(r["name"], r["kernels"], r["gpu_ops"], r["other_thread_kernels"]) for r in c.ranges] == [
        ("resnet18.fp16.eager.iter0", 162, 162, 0), ("resnet18.fp16.eager.iter1", 162, 162, 0)]
    assert sum(r["gpu_time_ns"] for r in c.ranges) == int(k["duration_ns"].sum())


def test_gpu_trace_classified_by_name():
    k = classify(load(GPU_TRACE).kernels)
    assert set(k["evidence"]) <= {"name", "none"}
    tc = k[k["tensor_core"].fillna(False)]
    assert len(tc) > 0 and set(tc["precision"]) == {"fp16"}
    assert not k[k["family"].isin(["elementwise", "layout", "pooling", "norm"])]["tensor_core"].fillna(False).any()


def test_training_trace_made_by_profkit_run_tool_torch():
    """`profkit run resnet18_train --tool torch --precision amp` on the H100: the backward pass
    runs on autograd's thread, outside the main thread's record_function range; nsys saw the
    same step the same way (tests/data/nsys/nsys_run_resnet18_train_amp: 179 + 234 kernels)."""
    c = load(TORCH / "torch_run_resnet18_train_amp.json.gz")
    k = c.kernels
    outer = c.ranges[0]
    assert (outer["name"], outer["kernels"], outer["gpu_ops"], outer["other_thread_kernels"]) == (
        "resnet18_train.amp.eager.iter0", 179, 182, 234)
    assert [(r["name"], r["depth"], r["kernels"]) for r in c.ranges[1:]] == [
        ("Optimizer.zero_grad#SGD.zero_grad", 1, 0), ("Optimizer.step#SGD.step", 1, 3)]
    threads = k["thread_id"].value_counts()
    assert len(threads) == 2 and k[k["thread_id"] == outer["thread_id"]]["nvtx_range"].notna().all()
    assert k[k["thread_id"] != outer["thread_id"]]["nvtx_range"].isna().all()
    assert (k[(k["kind"] == "kernel") & (k["thread_id"] != outer["thread_id"])].shape[0]) == 234
    # record_shapes: a kernel carries the tensor types of the operator that launched it
    assert k["input_types"].notna().sum() > 300 and "c10::Half" in set(k["input_types"].dropna())


# ------------------------------------------------------------------ CPU traces (no GPU)
@pytest.mark.parametrize("name", CPU_TRACES)
def test_cpu_operators_match_torch_profilers_own_table(name):
    c = load(TORCH / f"{name}.json.gz")
    k = c.kernels
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
        assert r["wall_ns"] == pytest.approx(float(oracle[r["name"]]["cpu_time_total_us"]) * 1000, abs=1)


def test_cpu_ranges_nest_and_own_their_operators():
    c = load(TORCH / "cpu_resnet18_train_fp32.json.gz")
    by_name = {r["name"]: r for r in c.ranges}
    step = by_name["Optimizer.step#SGD.step"]
    assert step["depth"] == 1 and step["path"] == "resnet18_train.fp32.eager.iter0/Optimizer.step#SGD.step"
    outer = by_name["resnet18_train.fp32.eager.iter0"]
    assert outer["kernels"] == len(c.kernels) and step["gpu_ops"] is None
    assert (c.kernels["nvtx_range"] == "Optimizer.step#SGD.step").sum() == step["kernels"] > 0


def test_cpu_operator_verdicts_come_from_input_types():
    k = classify(load(TORCH / "cpu_resnet18_bf16.json.gz").kernels)
    assert not k["tensor_core"].any()
    conv = k[k["name"] == "aten::mkldnn_convolution"]
    assert set(conv["precision"]) == {"bf16"} and set(conv["evidence"]) == {"dtypes"} and set(conv["family"]) == {"conv"}
    empty = k[k["name"] == "aten::empty"]
    assert set(empty["precision"]) == {"unknown"} and set(empty["evidence"]) == {"none"}
    fp32 = classify(load(TORCH / "cpu_resnet18_fp32.json.gz").kernels)
    assert set(fp32[fp32["family"] == "conv"]["precision"]) == {"fp32"}


def test_op_rule_examples_are_real():
    names: set[str] = set()
    for n in CPU_TRACES:
        names |= set(load(TORCH / f"{n}.json.gz").kernels["name"])
    for rule in rules()["op_rules"]:
        assert rule.examples, rule.id
        for ex in rule.examples:
            assert ex in names, (rule.id, ex)
            first = next(r for r in rules()["op_rules"] if r.regex.search(ex))
            assert first.id == rule.id, (ex, first.id)


def test_import_cpu_trace_cli(db):
    r = cli("import", str(TORCH / "cpu_resnet18_fp32.json.gz"), db=db)
    assert r.exit_code == 0, r.output
    name = r.stdout.strip().splitlines()[-1]
    assert name == "cpu_resnet18_fp32" and "CPU operator calls" in r.stderr
    run = json.loads(cli("runs", "-f", "json", db=db).stdout)[0]
    assert (run["activity"], run["device"], run["tool"], run["workload"]) == ("cpu_op", "cpu", "torch", "resnet18")
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
    (tmp_path / "badts.json").write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "x"}]}')
    (tmp_path / "trunc.json.gz").write_bytes(GPU_TRACE.read_bytes()[:500])
    cases = {"notjson.json": "not a readable JSON trace", "other.json": "not a Chrome/Kineto trace",
             "nothing.json": "no GPU kernels and no CPU operators", "badts.json": "no numeric ts",
             "trunc.json.gz": "not a readable JSON trace"}
    for f, message in cases.items():
        r = cli("import", str(tmp_path / f), db=db)
        assert r.exit_code == 1 and r.stderr.count("\n") == 1 and message in r.stderr, (f, r.stderr)
    assert len(json.loads(cli("runs", "-f", "json", db=db).stdout)) == 1


# ------------------------------------------------------------------ --tool auto
def test_auto_picks_torch_for_cpu():
    assert launch.choose_tool("cpu")[0] == "torch"


def test_auto_order(monkeypatch):
    from profkit.errors import ToolNotFound
    from profkit.tools import nsys

    def missing():
        raise ToolNotFound("nope")

    monkeypatch.setattr(launch, "DRIVER_DIR", Path("/"))
    monkeypatch.setattr(ncu, "find", lambda: "/x/ncu")
    monkeypatch.setattr(nsys, "find", lambda: "/x/nsys")
    monkeypatch.setattr(ncu, "counters_readable", lambda: (True, "counters readable"))
    assert launch.choose_tool("cuda") == ("ncu", "Nsight Compute is at /x/ncu and counters readable")
    monkeypatch.setattr(ncu, "counters_readable", lambda: (False, "restricted"))
    tool, why = launch.choose_tool("cuda")
    assert tool == "nsys" and "ncu is installed but restricted" in why
    monkeypatch.setattr(nsys, "find", missing)
    tool, why = launch.choose_tool("cuda")
    assert tool == "torch" and "nsys is not installed" in why
    monkeypatch.setattr(ncu, "find", missing)
    assert launch.choose_tool("cuda")[1].startswith("ncu is not installed")


def test_auto_without_a_gpu(monkeypatch):
    monkeypatch.setattr(launch, "DRIVER_DIR", Path("/nonexistent-driver"))
    monkeypatch.setattr(launch.gpu, "query", lambda: None)
    with pytest.raises(UsageError) as exc:
        launch.choose_tool("cuda")
    assert "no NVIDIA GPU" in exc.value.one_line() and "--device cpu" in exc.value.one_line()


def test_counter_permission_from_the_driver(tmp_path):
    params = tmp_path / "params"
    params.write_text("ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\n")
    assert ncu.counters_readable(params, euid=1000)[0] is False
    assert ncu.counters_readable(params, euid=0)[0] is True
    params.write_text("RmProfilingAdminOnly: 0\n")
    assert ncu.counters_readable(params, euid=1000) == (True, "the driver lets every user read GPU performance counters (RmProfilingAdminOnly: 0)")
    assert ncu.counters_readable(tmp_path / "absent", euid=1000)[0] is True


def test_missing_tool_before_any_database(tmp_path, monkeypatch):
    from profkit.errors import ToolNotFound
    from profkit.tools import nsys

    def missing():
        raise ToolNotFound("Nsight Systems (nsys) is not installed or not on PATH", "Install it.")

    monkeypatch.setattr(nsys, "find", missing)
    db = tmp_path / "fresh.db"
    r = cli("run", "resnet18", "--tool", "nsys", db=db)
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "nsys) is not installed" in r.stderr
    assert not db.exists()


def test_bad_run_options_before_any_database(tmp_path):
    db = tmp_path / "fresh.db"
    for argv, message in [
        (["run", "resnet18", "--device", "cpu", "--tool", "ncu"], "needs --tool torch"),
        (["run", "resnet18", "--device", "cpu", "--tool", "nsys"], "needs --tool torch"),
        (["run", "resnet18", "--tool", "torch", "--metrics", "time"], "collects none"),
        (["run", "resnet18", "--device", "cpu", "--metrics", "time"], "--tool auto chose torch"),
        (["run", "resnet18", "--tool", "perf"], "unknown tool"),
        (["run", "resnet18", "--device", "tpu"], "unknown device"),
        (["run", "resnet18", "--tool", "torch", "--cpu-sampling"], "nsys options"),
        (["run", "resnet18", "--device", "cpu", "--context-switches"], "--tool auto chose torch"),
    ]:
        r = cli(*argv, db=db)
        assert r.exit_code == 2 and r.stderr.count("\n") == 1 and message in r.stderr, (argv, r.stderr)
    assert not db.exists()


# ------------------------------------------------------------------ end to end on the CPU
@needs_torch
def test_run_on_cpu_then_summary_and_kernels(db):
    r = cli("run", "resnet18", "--device", "cpu", "--iters", "1", "--batch-size", "2", db=db)
    assert r.exit_code == 0, r.output
    assert "tool: torch (--device cpu" in r.stderr and "CPU operator calls" in r.stdout
    name = "resnet18-fp32-eager-cpu"
    s = json.loads(cli("summary", name, "-f", "json", db=db).stdout)
    ks = json.loads(cli("kernels", name, "-f", "json", db=db).stdout)
    assert s["kernels"] == len(ks) > 100 and s["gpu_time_ns"] == sum(k["duration_ns"] for k in ks)
    contract = json.loads(cli("kernels", name, "-f", "json", db=db).stdout)[0].keys()
    ncu_run = cli("import", str(DATA / "ncu" / "resnet18_fp16_eager.raw.csv.gz"), "--name", "n", db=db)
    assert ncu_run.exit_code == 0
    assert json.loads(cli("kernels", "n", "-f", "json", db=db).stdout)[0].keys() == contract
    assert set(json.loads(cli("summary", "n", "-f", "json", db=db).stdout)) == set(s)
    assert {k["kind"] for k in ks} == {"cpu_op"} and {k["nvtx_range"] for k in ks} == {"resnet18.fp32.eager.iter0"}
    assert {k["precision"] for k in ks if k["family"] == "conv"} == {"fp32"}
    assert not any(k["tensor_core"] for k in ks)
    assert cli("kernels", name, "--limit", "5", db=db).exit_code == 0
    assert cli("summary", name, "-f", "csv", db=db).exit_code == 0
    run = json.loads(cli("runs", "-f", "json", db=db).stdout)[0]
    assert (run["device"], run["tool"], run["activity"], run["gpu_name"]) == ("cpu", "torch", "cpu_op", None)
    assert (Path(str(db)).parent / "profkit-runs" / name / "trace.json.gz").exists()


@needs_torch
def test_readme_main_job_command_runs_on_a_machine_without_gpu(tmp_path):
    """The README's first command, minus its pip install (CI has just run that), as a user types it."""
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    line = next(l for l in readme.splitlines() if l.startswith("pip install") and "profkit run" in l)
    install, command = line.split(" && ", 1)
    assert install == "pip install -e '.[torch]'"
    env = {k: v for k, v in os.environ.items() if k != "PROFKIT_DB"}
    p = subprocess.run(shlex.split(command), cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "CPU operator calls" in p.stdout and (tmp_path / "profkit.db").exists()
    name = re.search(r"run stored as (\S+) in", p.stdout).group(1)
    for sub in (["summary", name], ["kernels", name, "--limit", "3"]):
        q = subprocess.run([sys.executable, "-m", "profkit", *sub], cwd=tmp_path, capture_output=True, text=True, env=env)
        assert q.returncode == 0, q.stderr
