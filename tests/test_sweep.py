"""profkit sweep (profkit.cluster): a matrix of runs on Dask's local mode with 2 workers, one
database written by one writer, failed jobs stored with their logs, cells a workload does not
support skipped, the same jobs in turn without Dask, and one line for every bad input."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from profkit import cluster

from .conftest import cli, needs_torch, one_line_error

WORKLOADS = Path(__file__).parent / "workloads"
TINY = str(WORKLOADS / "tiny_classifier.py")  # fails in bf16, at run time
CPU = ("--device", "cpu", "--batch-size", "2", "--iters", "1", "--warmup", "1", "--tools", "torch")


def runs(db: Path) -> list[dict]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    return [
        dict(r)
        for r in con.execute(
            "select name, status, kernel_count, raw_files, info from runs order by name"
        )
    ]


@needs_torch
def test_a_sweep_on_dask_local_mode_with_two_workers(tmp_path):
    pytest.importorskip("distributed")
    db = tmp_path / "s.db"
    r = cli(
        "sweep",
        "--workloads",
        f"{TINY},resnet18_train",
        "--precisions",
        "fp32,bf16",
        *CPU,
        "--workers",
        "2",
        "-f",
        "json",
        db=db,
    )
    assert r.exit_code == 1, r.output  # one job failed: the others went on
    out = json.loads(r.stdout)
    assert out["engine"] == "dask (local, 2 CPU workers)"
    by = {(Path(j["workload"]).stem, j["precision"]): j for j in out["jobs"]}
    assert (
        by[("resnet18_train", "bf16")]["status"] == "skipped"
        and "supports fp32, amp" in by[("resnet18_train", "bf16")]["error"]
    )
    assert (
        by[("tiny_classifier", "bf16")]["status"] == "failed"
        and "no bf16 kernel" in by[("tiny_classifier", "bf16")]["error"]
    )
    # The job's process called the library, and its error came back typed.
    assert by[("tiny_classifier", "bf16")]["error_type"] == "WorkloadError"
    assert by[("tiny_classifier", "fp32")]["error_type"] is None
    assert (
        by[("tiny_classifier", "fp32")]["status"]
        == by[("resnet18_train", "fp32")]["status"]
        == "ok"
    )
    # Progress came as the jobs ended, on stderr.
    assert sum(line.startswith("[") and "/3] " in line for line in r.stderr.splitlines()) == 3
    stored = {x["name"]: x for x in runs(db)}
    assert set(stored) == {
        "tiny_classifier-fp32-eager-cpu",
        "tiny_classifier-bf16-eager-cpu",
        "resnet18_train-fp32-eager-cpu",
    }
    ok = stored["resnet18_train-fp32-eager-cpu"]
    assert ok["status"] == "ok" and ok["kernel_count"] > 0
    for path in json.loads(ok["raw_files"]).values():  # the job's files, moved beside the database
        assert (
            Path(path).is_file()
            and Path(path).parent == tmp_path / "s-runs" / "resnet18_train-fp32-eager-cpu"
        )
    failed = stored["tiny_classifier-bf16-eager-cpu"]
    assert failed["status"] == "failed" and "no bf16 kernel" in json.loads(failed["info"])["error"]
    logs = json.loads(failed["raw_files"])
    assert "torch.log" in logs and Path(logs["torch.log"]).is_file()
    # The runs read as any run does.
    assert cli("summary", "resnet18_train-fp32-eager-cpu", db=db).exit_code == 0


@needs_torch
def test_without_dask_the_jobs_run_in_turn_and_say_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "_dask", lambda: None)
    db = tmp_path / "s.db"
    r = cli(
        "sweep",
        "--workloads",
        TINY,
        "--precisions",
        "fp32",
        "--modes",
        "eager,torchscript",
        *CPU,
        db=db,
    )
    assert r.exit_code == 0, r.output
    assert "pip install 'profkit[cluster]'" in r.stderr and "one after another" in r.stderr
    assert [(x["name"], x["status"]) for x in runs(db)] == [
        ("tiny_classifier-fp32-eager-cpu", "ok"),
        ("tiny_classifier-fp32-torchscript-cpu", "ok"),
    ]
    assert "2 ok, 0 failed, 0 skipped; in turn" in r.stdout


def test_moved_paths_follow_the_raw_folder(tmp_path):
    files = {"log": "/tmp/profkit-sweep-x1/job-runs/r1/torch.log", "other": "/elsewhere/file"}
    moved = cluster._moved(files, Path("/tmp/whatever/job.db"), "r1", tmp_path / "s-runs" / "r1-2")
    assert moved == {
        "log": str(tmp_path / "s-runs" / "r1-2" / "torch.log"),
        "other": "/elsewhere/file",
    }


BAD = {  # (arguments, message, exit status: 2 for usage, 1 for what the workload or machine says)
    "unknown precision": (["--workloads", "resnet18", "--precisions", "fp64"], "--precisions", 2),
    "unknown tool": (["--workloads", "resnet18", "--tools", "vtune"], "--tools", 2),
    "empty workloads": (["--workloads", ","], "--workloads", 2),
    "unknown workload": (["--workloads", "nosuch"], "unknown workload 'nosuch'", 1),
    "bad file": (["--workloads", "/nonexistent/model.py"], "workload file not found", 1),
    "nothing can run": (
        ["--workloads", "resnet18_train", "--precisions", "fp16"],
        "no cell of the sweep's matrix can run",
        2,
    ),
    "workers 0": (
        ["--workloads", "resnet18", "--workers", "0", "--device", "cpu"],
        "--workers must be at least 1",
        2,
    ),
    "ncu on the CPU": (
        ["--workloads", "resnet18", "--tools", "ncu", "--device", "cpu"],
        "ncu profiles GPU work",
        2,
    ),
    "workers with address": (
        ["--workloads", "resnet18", "--workers", "2", "--address", "tcp://127.0.0.1:1"],
        "--workers sizes the local cluster; with --address",
        2,
    ),
    # A run option no cell would take: said, not silently dropped.
    "compile mode, no compile cell": (
        ["--workloads", "resnet18", "--compile-mode", "max-autotune"],
        "--compile-mode max-autotune is torch.compile's: it needs compile among the --modes",
        2,
    ),
    "metrics, no ncu cell": (
        ["--workloads", "resnet18", "--metrics", "full", "--tools", "nsys"],
        "--metrics chooses ncu counters: it needs ncu among the --tools",
        2,
    ),
    "cpu sampling, no nsys cell": (
        ["--workloads", "resnet18", "--cpu-sampling"],
        "--cpu-sampling is an nsys option: it needs nsys among the --tools",
        2,
    ),
    "keep bn, no half cell": (
        ["--workloads", "resnet18", "--keep-bn-fp32"],
        "--keep-bn-fp32 keeps BatchNorm in fp32 in a model cast to fp16 or bf16: it needs fp16 "
        "or bf16 among the --precisions",
        2,
    ),
    "bad timeout": (
        ["--workloads", "resnet18", "--timeout", "0.5"],
        "--timeout must be a number of seconds",
        2,
    ),
    "cudnn benchmark on the cpu": (
        ["--workloads", "resnet18", "--cudnn-benchmark", "--device", "cpu"],
        "--cudnn-benchmark chooses cuDNN's algorithms",
        2,
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_inputs_are_one_line_and_store_nothing(case, tmp_path):
    args, message, code = BAD[case]
    db = tmp_path / "s.db"
    one_line_error(cli("sweep", *args, db=db), message, code)
    assert not db.exists()


def test_an_address_without_dask_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "_dask", lambda: None)
    one_line_error(
        cli(
            "sweep",
            "--workloads",
            TINY,
            *CPU,
            "--address",
            "tcp://127.0.0.1:1",
            db=tmp_path / "s.db",
        ),
        "pip install 'profkit[cluster]'",
        2,
    )
    assert not (tmp_path / "s.db").exists()


def test_a_scheduler_whose_workers_offer_no_gpu_is_refused_before_any_job(tmp_path):
    """`--address` of a Dask scheduler whose workers do not offer the resource GPU: GPU jobs
    could never start there, so the sweep says so at once (one line) instead of waiting."""
    distributed = pytest.importorskip("distributed")
    db = tmp_path / "s.db"
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None) as local:
        one_line_error(
            cli(
                "sweep",
                "--workloads",
                "resnet18",
                "--tools",
                "nsys",
                "--address",
                local.scheduler_address,
                db=db,
            ),
            "offers the resource GPU",
            2,
        )
    assert not db.exists() or runs(db) == []


def test_an_address_where_nothing_speaks_dask_is_one_line(tmp_path, monkeypatch):
    """A service that takes the connection and never answers (not a Dask scheduler) would hold
    Dask's handshake forever: the sweep gives up after its own deadline, with one line."""
    pytest.importorskip("distributed")
    import socket
    import threading
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    held: list = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                pass

    threading.Thread(target=accept, daemon=True).start()
    monkeypatch.setattr(cluster, "CONNECT_S", 1)
    t0 = time.monotonic()
    try:
        r = cli(
            "sweep",
            "--workloads",
            TINY,
            *CPU,
            "--address",
            f"tcp://127.0.0.1:{server.getsockname()[1]}",
            db=tmp_path / "s.db",
        )
    finally:
        stop.set()
        server.close()
    one_line_error(r, "as a Dask scheduler within 6 s", 2)
    assert time.monotonic() - t0 < 30 and not (tmp_path / "s.db").exists()


@needs_torch
def test_an_auto_cell_that_chooses_a_tool_the_sweep_names_runs_once(tmp_path, monkeypatch):
    # in turn: the same planning, no cluster to start
    monkeypatch.setattr(cluster, "_dask", lambda: None)
    db = tmp_path / "s.db"
    r = cli(
        "sweep",
        "--workloads",
        TINY,
        "--device",
        "cpu",
        "--batch-size",
        "2",
        "--iters",
        "1",
        "--warmup",
        "1",
        "--tools",
        "auto,torch",
        "-f",
        "json",
        db=db,
    )
    assert r.exit_code == 0, r.output
    jobs = {j["tool"]: j for j in json.loads(r.stdout)["jobs"]}
    assert {t: j["status"] for t, j in jobs.items()} == {"torch": "ok", "auto": "skipped"}
    assert "auto chooses torch here" in jobs["auto"]["error"]
    assert [x["name"] for x in runs(db)] == ["tiny_classifier-fp32-eager-cpu"]


@needs_torch
def test_ctrl_c_ends_a_sweep_at_once_with_one_line(tmp_path):
    """A terminal's Ctrl-C reaches the sweep and its local cluster's workers alike: the sweep
    stops every job and the cluster, says so in one line (no worker's traceback), and leaves no
    process and no scratch folder; the runs finished before it stay."""
    pytest.importorskip("distributed")
    import sys

    from .conftest import ctrl_c, processes_mentioning

    code, err, took = ctrl_c(
        [
            sys.executable,
            "-m",
            "profkit",
            "--db",
            str(tmp_path / "s.db"),
            "sweep",
            "--workloads",
            "resnet18,resnet50",
            "--precisions",
            "fp32,bf16",
            "--tools",
            "torch",
            "--device",
            "cpu",
            "--batch-size",
            "2",
            "--iters",
            "1",
            "--warmup",
            "1",
            "--workers",
            "2",
        ],
        tmp_path,
        after_s=0,
        after_line="[1/4]",  # one job done, three to go: however quick the machine
    )
    assert code == 130 and err.strip().splitlines()[-1] == "profkit: interrupted", err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert took < 30
    assert processes_mentioning(str(tmp_path)) == []
    assert not list((tmp_path / "s-runs").glob(".sweep-*"))


def test_on_two_gpus_the_jobs_run_on_both(tmp_path):
    """On a machine with 2 GPUs (and nsys): the local cluster has a worker per GPU and the jobs
    run on both, each stored with its kernels."""
    pytest.importorskip("distributed")
    from profkit import gpu

    from .conftest import has_cuda, has_nsys

    if not (has_cuda() and has_nsys()) or gpu.count() < 2:
        pytest.skip("needs 2 GPUs and nsys")
    db = tmp_path / "s.db"
    r = cli(
        "sweep",
        "--workloads",
        "resnet18",
        "--precisions",
        "fp32,fp16",
        "--tools",
        "nsys,torch",
        "--iters",
        "1",
        "--batch-size",
        "4",
        "-f",
        "json",
        db=db,
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["engine"].startswith("dask (local, 2 GPUs")
    assert all(j["status"] == "ok" for j in out["jobs"]) and len(out["jobs"]) == 4
    assert {j["worker"].rsplit(" ", 1)[-1] for j in out["jobs"]} == {"0", "1"}
    assert all(x["status"] == "ok" and x["kernel_count"] > 0 for x in runs(db))


def test_the_sweep_takes_every_run_option_that_applies_to_a_job():
    """Every option of `profkit run` is one of `profkit sweep`'s, with the same flags, but those
    the sweep sets itself (its matrix: precisions, modes, tools; its run names) and the ranks of
    one job (a sweep's job is one process on one GPU)."""
    import typer.main

    from profkit.cli import app
    from profkit.options import RunOptions, for_command

    commands = typer.main.get_command(app).commands

    def params(command: str) -> dict[str, list[str]]:
        return {
            p.name: list(p.opts) for p in commands[command].params if p.param_type_name == "option"
        }

    run, sweep = params("run"), params("sweep")
    own = {"report"}  # run's own, not a run option: the sweep writes no report per job
    not_in_sweep = {k for k in run if k not in sweep} - own - {"help", "_click_default_help"}
    # A program's own options (issue 35): a sweep runs workloads.
    assert not_in_sweep == {
        "tool",
        "precision",
        "mode",
        "name",
        "nproc_per_node",
        "step",
        "run_to_end",
    }
    assert set(cluster.SET_BY_SWEEP) == not_in_sweep
    assert all(sweep[k] == v for k, v in run.items() if k in sweep and k != "db")
    assert [f.name for f in for_command("sweep")] == [
        f
        for f in (
            "compile_mode",
            "batch_size",
            "iters",
            "warmup",
            "device",
            "keep_bn_fp32",
            "channels_last",
            "cudnn_benchmark",
            "tf32",
            "fused_optimizer",
            "cudnn_attention",
            "sdpa_attention",
            "metrics",
            "fresh_counters",
            "timeout_s",
            "cpu_sampling",
            "context_switches",
            "attribution",
        )
    ]
    assert {f.name for f in for_command("run")} == set(RunOptions.__dataclass_fields__)


@needs_torch
def test_a_sweeps_options_reach_its_jobs(tmp_path, monkeypatch):
    """--channels-last and --timeout reach every job (in its run's name and record); the library's
    own parameter names are refused by the library as they are by the command line."""
    monkeypatch.setattr(cluster, "_dask", lambda: None)
    db = tmp_path / "s.db"
    r = cli(
        "sweep",
        "--workloads",
        "resnet18",
        "--precisions",
        "fp32,amp",
        "--channels-last",
        "--timeout",
        "600",
        *CPU,
        "-f",
        "json",
        db=db,
    )
    assert r.exit_code == 0, r.output
    names = [j["run"] for j in json.loads(r.stdout)["jobs"]]
    assert names == ["resnet18-fp32-cl-eager-cpu", "resnet18-amp-cl-eager-cpu"]
    for x in runs(db):
        assert x["status"] == "ok" and json.loads(x["info"])["options"] == {"channels_last": True}
    from profkit import api
    from profkit.errors import UsageError

    # Each value is checked before the cells are made (none silently turned into a switch or dropped).
    for bad in (
        {"precision": "fp16"},
        {"nproc_per_node": 2},
        {"chanels_last": True},
        {"keep_bn_fp32": 1},
        {"keep_bn_fp32": "yes", "precisions": "amp"},
        {"cpu_sampling": "yes"},
        {"compile_mode": "bogus"},
        {"metrics": 5},
    ):
        option = next(k for k in bad if k != "precisions")
        with pytest.raises(UsageError, match=f"`{option}`"):
            api.sweep("resnet18", device="cpu", tools="torch", db=tmp_path / "x.db", **bad)
    assert not (tmp_path / "x.db").exists()


@needs_torch
def test_a_jobs_error_reads_in_flags_on_the_command_line_and_typed_in_json(tmp_path):
    """The job's process hands its error back in the library's words; the command names the
    parameters as its flags, as `profkit run` does, and keeps the error's class."""
    pytest.importorskip("distributed")
    r = cli(
        "sweep",
        "--workloads",
        TINY,
        *CPU,
        "--channels-last",
        "--workers",
        "1",
        "-f",
        "json",
        db=tmp_path / "s.db",
    )
    assert r.exit_code == 1, r.output
    job = json.loads(r.stdout)["jobs"][0]
    assert (
        job["error_type"] == "WorkloadError"
        and "--channels-last" in job["error"]
        and "`" not in job["error"]
    )
    assert "FAILED: --channels-last lays out 4-D image tensors" in r.stderr


def test_an_outcome_never_written_says_how_the_job_ended():
    from profkit.sweep_job import read_outcome

    missing = Path("/nonexistent/outcome.json")
    status, error, kind = read_outcome(
        missing, -9, ["profkit: profiling tiny (fp32, eager) with torch.profiler"]
    )
    assert (status, kind) == ("failed", None)
    # no progress line
    assert error == "the job's process was killed by SIGKILL before it said how its run ended"
    _, error, _ = read_outcome(
        missing, 1, ["Traceback (most recent call last):", "MemoryError: out of memory"]
    )
    assert (
        error
        == "the job's process exited with status 1 before it said how its run ended: MemoryError: out of memory"
    )


def test_a_job_file_that_is_not_one_is_one_line(tmp_path):
    import subprocess
    import sys

    for text in (
        "{not json",
        json.dumps({"workload": "resnet18"}),
        json.dumps(
            {"workload": "resnet18", "options": {"itres": 2}, "db": "x.db", "outcome": "o.json"}
        ),
    ):
        (tmp_path / "job.json").write_text(text)
        p = subprocess.run(
            [sys.executable, "-m", "profkit.sweep_job", str(tmp_path / "job.json")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (
            p.returncode == 2
            and p.stderr.startswith("profkit: error: ")
            and len(p.stderr.splitlines()) == 1
        ), p.stderr
        assert "Traceback" not in p.stderr and not (tmp_path / "o.json").exists()


@needs_torch
def test_a_terminated_job_says_so_in_its_outcome(tmp_path):
    """SIGTERM of a job's process (its sweep stopping): the run is marked, and the outcome says
    'terminated (SIGTERM)', not a Ctrl-C."""
    import signal
    import subprocess
    import sys
    import time

    from profkit.options import RunOptions
    from profkit.sweep_job import JobFile, read_outcome

    slow = tmp_path / "slow.py"
    slow.write_text("import time\n\ndef build(spec):\n    time.sleep(120)\n")
    JobFile(
        str(slow),
        RunOptions(device="cpu", tool="torch", batch_size=1),
        str(tmp_path / "j.db"),
        str(tmp_path / "o.json"),
    ).write(tmp_path / "job.json")
    p = subprocess.Popen(
        [sys.executable, "-m", "profkit.sweep_job", str(tmp_path / "job.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("j-runs/*/job.json")) and time.monotonic() < deadline:
        time.sleep(0.2)  # the run reserved, its harness starting
    time.sleep(1)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, out
    assert read_outcome(tmp_path / "o.json", p.returncode, []) == (
        "failed",
        "terminated (SIGTERM)",
        "ProfkitError",
    )
    assert [(x["name"], x["status"]) for x in runs(tmp_path / "j.db")] == [
        ("slow-fp32-eager-cpu", "interrupted")
    ]
