"""profkit.launch: choosing the tool (``tool`` auto), checking a run's options before anything
is written, and ``profkit run --device cpu`` end to end on this GPU-less machine (the README's
quick start runs it as written: tests/test_docs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profkit import launch
from profkit.errors import UsageError
from profkit.tools import ncu

from .conftest import DATA, cli, cli_json, needs_torch, one_line_error


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
    assert launch.choose_tool("cuda") == (
        "ncu",
        "Nsight Compute is at /x/ncu and counters readable",
    )
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
    # The library names its own parameter; the CLI renders it as its flag.
    assert "no NVIDIA GPU" in exc.value.one_line() and "with `device` cpu" in exc.value.one_line()
    from profkit.cli import flag

    assert "with --device cpu" in exc.value.one_line(flag) and "`" not in exc.value.one_line(flag)


def test_counter_permission_from_the_driver(tmp_path):
    params = tmp_path / "params"
    params.write_text("ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\n")
    assert ncu.counters_readable(params, euid=1000)[0] is False
    assert ncu.counters_readable(params, euid=0)[0] is True
    params.write_text("RmProfilingAdminOnly: 0\n")
    assert ncu.counters_readable(params, euid=1000) == (
        True,
        "the driver lets every user read GPU performance counters (RmProfilingAdminOnly: 0)",
    )
    assert ncu.counters_readable(tmp_path / "absent", euid=1000)[0] is True


def test_missing_tool_before_any_database(tmp_path, monkeypatch):
    from profkit.errors import ToolNotFound
    from profkit.tools import nsys

    def missing():
        raise ToolNotFound("Nsight Systems (nsys) is not installed or not on PATH", "Install it.")

    monkeypatch.setattr(nsys, "find", missing)
    db = tmp_path / "fresh.db"
    one_line_error(cli("run", "resnet18", "--tool", "nsys", db=db), "nsys) is not installed")
    assert not db.exists()


def test_bad_run_options_before_any_database(tmp_path):
    db = tmp_path / "fresh.db"
    for argv, message in [
        (["run", "resnet18", "--device", "cpu", "--tool", "ncu"], "needs --tool torch"),
        (["run", "resnet18", "--device", "cpu", "--tool", "nsys"], "needs --tool torch"),
        (["run", "resnet18", "--tool", "torch", "--metrics", "time"], "collects none"),
        (["run", "resnet18", "--device", "cpu", "--metrics", "time"], "--tool auto chose torch"),
        (
            ["run", "resnet18", "--tool", "perf"],
            "Invalid value for '--tool': 'perf' is not one of 'auto', 'ncu', 'nsys', 'torch'",
        ),
        (["run", "resnet18", "--device", "tpu"], "Invalid value for '--device'"),
        (["run", "resnet18", "--iters", "0"], "--iters must be at least 1, not 0"),
        (["run", "resnet18", "--warmup", "-1"], "--warmup must be at least 0"),
        (
            ["run", "resnet18", "--timeout", "0"],
            "--timeout must be a number of seconds, at least 1",
        ),
        (["run", "resnet18", "--timeout", "nan"], "--timeout must be a number of seconds"),
        (["run", "resnet18", "--name", "12"], "--name '12' is not a usable run name"),
        (["run", "resnet18", "--batch-size", "0"], "--batch-size must be at least 1"),
        (["run", "resnet18", "--tool", "torch", "--cpu-sampling"], "nsys options"),
        (["run", "resnet18", "--device", "cpu", "--context-switches"], "--tool auto chose torch"),
    ]:
        one_line_error(cli(*argv, db=db), message, code=2)
    assert not db.exists()


# ------------------------------------------------------------------ end to end on the CPU
@needs_torch
def test_run_on_cpu_then_summary_and_kernels(db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the run's report goes to ./reports
    r = cli("run", "resnet18", "--device", "cpu", "--iters", "1", "--batch-size", "2", db=db)
    assert r.exit_code == 0, r.output
    assert "tool: torch (--device cpu" in r.stderr and "CPU operator calls" in r.stdout
    name = "resnet18-fp32-eager-cpu"
    assert r.stdout.strip().splitlines()[-1] == f"report: reports/{name}.html"
    assert "CPU operator report" in (tmp_path / "reports" / f"{name}.html").read_text()
    s = json.loads(cli("summary", name, "-f", "json", db=db).stdout)
    ks = json.loads(cli("kernels", name, "-f", "json", db=db).stdout)
    assert s["kernels"] == len(ks) > 100 and s["gpu_time_ns"] == sum(k["duration_ns"] for k in ks)
    contract = json.loads(cli("kernels", name, "-f", "json", db=db).stdout)[0].keys()
    ncu_run = cli(
        "import", str(DATA / "ncu" / "resnet18_fp16_eager.raw.csv.gz"), "--name", "n", db=db
    )
    assert ncu_run.exit_code == 0
    assert json.loads(cli("kernels", "n", "-f", "json", db=db).stdout)[0].keys() == contract
    assert set(json.loads(cli("summary", "n", "-f", "json", db=db).stdout)) == set(s)
    assert {k["kind"] for k in ks} == {"cpu_op"} and {k["nvtx_range"] for k in ks} == {
        "resnet18.fp32.eager.iter0"
    }
    assert {k["precision"] for k in ks if k["family"] == "conv"} == {"fp32"}
    assert not any(k["tensor_core"] for k in ks)
    assert cli("kernels", name, "--limit", "5", db=db).exit_code == 0
    assert cli("summary", name, "-f", "csv", db=db).exit_code == 0
    run = json.loads(cli("runs", "-f", "json", db=db).stdout)[0]
    assert (run["device"], run["tool"], run["activity"], run["gpu_name"]) == (
        "cpu",
        "torch",
        "cpu_op",
        None,
    )
    assert (Path(str(db)).parent / "profkit-runs" / name / "trace.json.gz").exists()


@needs_torch
@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_a_model_that_fails_in_the_warm_up_is_one_line(tmp_path, mode):
    """torch.compile compiles on the first warm-up call: a model it cannot run fails there, in
    one line that names the compiler (or the warm-up) and the error; the run is recorded failed,
    with no kernels."""
    db = tmp_path / "p.db"
    r = cli(
        "run",
        Path(__file__).parent / "workloads" / "forward_fails.py",
        "--device",
        "cpu",
        "--mode",
        mode,
        "--tool",
        "torch",
        "--warmup",
        "1",
        "--batch-size",
        "2",
        db=db,
    )
    expected = (
        "torch.compile (default) failed on forward_fails in fp32"
        if mode == "compile"
        else "the warm-up failed for forward_fails in fp32"
    )
    one_line_error(r, expected)
    assert "same reduction dim" in r.stderr or "cannot be multiplied" in r.stderr
    runs = cli_json("runs", db=db)
    assert [(x["status"], x["kernel_count"]) for x in runs] == [("failed", 0)]


def test_compile_options_checked_before_anything_runs(tmp_path):
    db = tmp_path / "p.db"
    for argv, message in [
        (["run", "resnet18", "--mode", "compile", "--warmup", "0"], "--warmup must be at least 1"),
        (
            ["run", "resnet18", "--compile-mode", "max-autotune"],
            "--compile-mode max-autotune is torch.compile's: it needs --mode compile",
        ),
        (
            ["run", "resnet18", "--mode", "compile", "--compile-mode", "fastest"],
            "Invalid value for '--compile-mode'",
        ),
        (
            [
                "run",
                "resnet18",
                "--mode",
                "compile",
                "--compile-mode",
                "reduce-overhead",
                "--device",
                "cpu",
            ],
            "reduce-overhead replays CUDA graphs: it needs --device cuda",
        ),
        (
            [
                "run",
                "resnet18",
                "--mode",
                "compile",
                "--compile-mode",
                "reduce-overhead",
                "--warmup",
                "2",
            ],
            "--warmup must be at least 3",
        ),
    ]:
        one_line_error(cli(*argv, db=db), message, code=2)
    assert not db.exists()


@needs_torch
def test_workload_output_that_looks_like_an_error_is_not_one(tmp_path):
    db = tmp_path / "p.db"
    r = cli(
        "run",
        Path(__file__).parent / "workloads" / "noisy_stderr.py",
        "--device",
        "cpu",
        "--warmup",
        "1",
        "--no-report",
        "--name",
        "noisy",
        db=db,
    )
    assert r.exit_code == 0, r.output
    assert cli_json("runs", db=db)[0]["status"] == "ok"
