"""``profkit run -- PROGRAM``: real training and inference scripts run unmodified (issue 35).

The scripts under tests/data/programs/pytorch-examples are unmodified copies of
https://github.com/pytorch/examples (SOURCE.md there); those under own/ are ours, written as
people write them (nothing in them knows of profkit but ``marked.py``'s ``profkit.step()``).
Each runs on the CPU under torch.profiler, in a folder of its own with data made there."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import DATA, processes_mentioning

PROGRAMS = DATA / "programs"
EXAMPLES = PROGRAMS / "pytorch-examples"
OWN = PROGRAMS / "own"

pytestmark = pytest.mark.torch


def profkit(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``profkit ARGS`` as a user types it, in ``cwd``, its database there."""
    env = {**os.environ, "PROFKIT_DB": str(cwd / "profkit.db"), "OMP_NUM_THREADS": "2"}
    return subprocess.run(
        [sys.executable, "-m", "profkit", *args],
        cwd=cwd,
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
    )


def stored(cwd: Path, name: str | None = None):
    import profkit as pk

    db = pk.open_db(cwd / "profkit.db")
    runs = db.list_runs()
    return db.run(name) if name else runs[-1]


def module_share(run) -> float:
    k = run.kernels()
    return float(k[k.module.notna()].duration_ns.sum() / k.duration_ns.sum())


def step_ranges(run) -> list[str]:
    return [r for r in run.ranges()["name"] if ".iter" in r]


def fake_mnist(root: Path, train: int = 640, test: int = 64) -> None:
    """MNIST's four idx files, as torchvision reads them, of random images."""
    import numpy as np

    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", train), ("t10k", test)):
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(
            struct.pack(">IIII", 2051, n, 28, 28)
            + rng.integers(0, 255, (n, 28, 28), dtype=np.uint8).tobytes()
        )
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(
            struct.pack(">II", 2049, n) + rng.integers(0, 10, n, dtype=np.uint8).tobytes()
        )


def corpus(folder: Path) -> Path:
    """A small text corpus in word_language_model's layout (train/valid/test.txt)."""
    folder.mkdir(parents=True)
    words = [f"w{i}" for i in range(50)]
    for part, lines in (("train", 400), ("valid", 40), ("test", 40)):
        (folder / f"{part}.txt").write_text(
            "\n".join(" ".join(words[(i * 7 + j) % 50] for j in range(12)) for i in range(lines))
            + "\n"
        )
    return folder


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_amp_dataloader_scheduler_script_stops_after_its_window(tmp_path):
    """A 10,000-step AMP script with a DataLoader and a schedule: stopped after warm-up 3 and 2
    profiled steps, two step ranges, its operators attributed to modules."""
    shutil.copy(OWN / "amp_train.py", tmp_path)
    t0 = time.monotonic()
    r = profkit(
        tmp_path,
        "run",
        "--warmup",
        "3",
        "--iters",
        "2",
        "--attribution",
        "--no-report",
        "--",
        "python",
        "amp_train.py",
        "--steps",
        "10000",
    )
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 120
    run = stored(tmp_path)
    assert run.name == "amp_train-cpu" and run.status == "ok"
    assert len(step_ranges(run)) == 2
    assert module_share(run) >= 0.9
    assert (
        "steps: each AdamW.step() (the first optimizer to step); profiled steps 4-5 after 3 warm-up steps"
        in r.stderr
    )
    assert "stopped by profkit after its window" in r.stderr
    assert "step 100" not in r.stderr  # it never got that far
    info = run.info.program
    assert (
        info["argv"] == ["python", "amp_train.py", "--steps", "10000"]
        and info["steps"]["by"] == "optimizer"
    )


def test_mnist_example_unmodified(tmp_path):
    """pytorch/examples' mnist/main.py (DataLoader, Adadelta, StepLR): 1,000 epochs asked, stopped
    after the window; its own output streams to the terminal."""
    work = copy(EXAMPLES / "mnist", tmp_path / "mnist")
    fake_mnist(tmp_path / "data")
    r = profkit(
        work,
        "run",
        "--warmup",
        "2",
        "--iters",
        "2",
        "--attribution",
        "--no-report",
        "--",
        "python",
        "main.py",
        "--epochs",
        "1000",
        "--log-interval",
        "1",
        "--no-accel",
    )
    assert r.returncode == 0, r.stderr
    assert "Train Epoch: 1 [0/640" in r.stderr  # the script's own print, as it printed it
    run = stored(work)
    assert len(step_ranges(run)) == 2 and module_share(run) >= 0.9
    assert run.info.program["steps"]["said"].startswith("each Adadelta.step()")


def test_dcgan_two_optimizers_one_step_per_cycle(tmp_path):
    """pytorch/examples' dcgan/main.py steps two optimizers (D, then G) each iteration: one
    step per cycle, the first optimizer's."""
    work = copy(EXAMPLES / "dcgan", tmp_path / "dcgan")
    r = profkit(
        work,
        "run",
        "--warmup",
        "1",
        "--iters",
        "2",
        "--no-report",
        "--",
        "main.py",
        "--dataset",
        "fake",
        "--workers",
        "0",
        "--batchSize",
        "4",
        "--ngf",
        "8",
        "--ndf",
        "8",
        "--niter",
        "100",
        "--outf",
        str(work / "out"),
    )
    assert r.returncode == 0, r.stderr
    run = stored(work)
    assert run.info.program["steps"]["said"] == "each Adam.step() (the first optimizer to step)"
    assert len(step_ranges(run)) == 2
    # Two optimizers step in each of the two profiled steps.
    opt_ranges = [r for r in run.ranges()["name"] if r.startswith("Optimizer.step#Adam")]
    assert len(opt_ranges) == 4, opt_ranges


def test_dcgan_with_dataloader_workers_leaves_nothing_running(tmp_path):
    """num_workers 2: the script's worker processes end with it."""
    work = copy(EXAMPLES / "dcgan", tmp_path / "dcgan-w")
    r = profkit(
        work,
        "run",
        "--warmup",
        "1",
        "--iters",
        "1",
        "--no-report",
        "--",
        "python",
        "main.py",
        "--dataset",
        "fake",
        "--workers",
        "2",
        "--batchSize",
        "4",
        "--ngf",
        "8",
        "--ndf",
        "8",
        "--niter",
        "100",
        "--outf",
        str(work / "out"),
    )
    assert r.returncode == 0, r.stderr
    time.sleep(1)
    assert processes_mentioning(str(work)) == []


def test_word_language_model_manual_sgd(tmp_path):
    """pytorch/examples' word_language_model/main.py updates its parameters by hand (no optimizer):
    each call of the model is a step."""
    work = copy(EXAMPLES / "word_language_model", tmp_path / "wlm")
    data = corpus(tmp_path / "corpus")
    r = profkit(
        work,
        "run",
        "--warmup",
        "2",
        "--iters",
        "2",
        "--attribution",
        "--no-report",
        "--",
        "python",
        "main.py",
        "--data",
        str(data),
        "--emsize",
        "16",
        "--nhid",
        "16",
        "--bptt",
        "8",
        "--batch_size",
        "4",
        "--epochs",
        "1000",
        "--log-interval",
        "1000",
    )
    assert r.returncode == 0, r.stderr
    run = stored(work)
    assert run.info.program["steps"]["by"] == "forward"
    assert "each call of the model (RNNModel)" in run.info.program["steps"]["said"]
    assert len(step_ranges(run)) == 2 and module_share(run) >= 0.9


def test_word_language_model_generate_inference_loop(tmp_path):
    """generate.py, an inference loop under no_grad: each call of the model is a step."""
    work = copy(EXAMPLES / "word_language_model", tmp_path / "wlm-gen")
    data = corpus(tmp_path / "corpus")
    subprocess.run(
        [
            sys.executable,
            "main.py",
            "--data",
            str(data),
            "--emsize",
            "16",
            "--nhid",
            "16",
            "--epochs",
            "1",
            "--dry-run",
            "--save",
            "model.pt",
        ],
        cwd=work,
        check=True,
        capture_output=True,
        timeout=300,
    )
    r = profkit(
        work,
        "run",
        "--warmup",
        "5",
        "--iters",
        "3",
        "--no-report",
        "--",
        "python",
        "generate.py",
        "--data",
        str(data),
        "--checkpoint",
        "model.pt",
        "--words",
        "10000",
    )
    assert r.returncode == 0, r.stderr
    run = stored(work)
    assert run.info.program["steps"]["by"] == "forward" and len(step_ranges(run)) == 3
    assert (
        not (work / "generated.txt").exists()
        or (work / "generated.txt").read_text().count(" ") < 10000
    )


def test_marker_and_run_to_end(tmp_path):
    """profkit.step() marks the steps (the script's two modules and manual update are one step);
    --run-to-end lets the script finish."""
    shutil.copy(OWN / "marked.py", tmp_path)
    r = profkit(
        tmp_path,
        "run",
        "--warmup",
        "2",
        "--iters",
        "2",
        "--run-to-end",
        "--no-report",
        "--",
        "marked.py",
    )
    assert r.returncode == 0, r.stderr
    run = stored(tmp_path)
    # Profkit stops watching once the window is done: the hooks go, the script runs on without them.
    assert run.info.program["steps"]["by"] == "marker" and run.info.program["steps"]["seen"] == 4
    assert "ran to its end" in r.stderr and len(step_ranges(run)) == 2


def test_script_that_exits_early(tmp_path):
    """Two steps, then sys.exit(3): one line saying how far it got, exit status 3, run failed."""
    shutil.copy(OWN / "exits_early.py", tmp_path)
    r = profkit(
        tmp_path,
        "run",
        "--warmup",
        "3",
        "--iters",
        "2",
        "--no-report",
        "--",
        "python",
        "exits_early.py",
    )
    assert r.returncode == 3, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("profkit: error: the script ended (exit status 3) after 2 steps"), (
        r.stderr
    )
    assert "needs 5" in last
    assert "giving up" in r.stderr  # its own output came through
    import profkit as pk

    runs = pk.open_db(tmp_path / "profkit.db").list_runs()
    assert [x.status for x in runs] == ["failed"]


def test_script_that_raises(tmp_path):
    """The script's exception: one line, its traceback (its own frames) in the run's log,
    Python's exit status 1."""
    shutil.copy(OWN / "raises.py", tmp_path)
    r = profkit(tmp_path, "run", "--warmup", "3", "--iters", "2", "--no-report", "--", "raises.py")
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "profkit: error: the script raised ValueError: the batch was empty after 3 steps"
    ), last
    log = next((tmp_path / "profkit-runs").glob("*/torch.log")).read_text()
    assert 'raises.py", line 7, in train_step' in log and "runpy" not in log


def test_script_without_steps_is_profiled_whole(tmp_path):
    shutil.copy(OWN / "no_steps.py", tmp_path)
    r = profkit(tmp_path, "run", "--no-report", "--", "python", "no_steps.py")
    assert r.returncode == 0, r.stderr
    assert "warning: the script ended without a step" in r.stderr
    assert "profiling the whole program instead" in r.stderr
    run = stored(tmp_path)
    assert run.info.program["steps"]["whole_program"] is True
    assert (run.kernels().name == "aten::tanh").sum() == 3


def test_ddp_program_two_ranks_on_gloo(tmp_path):
    """--nproc-per-node 2 runs the script under torchrun (gloo on the CPU): one run, a rank on
    every row, each rank's window found by its own optimizer steps."""
    shutil.copy(OWN / "ddp_gloo.py", tmp_path)
    r = profkit(
        tmp_path,
        "run",
        "--nproc-per-node",
        "2",
        "--warmup",
        "2",
        "--iters",
        "2",
        "--no-report",
        "--",
        "python",
        "ddp_gloo.py",
    )
    assert r.returncode == 0, r.stderr
    run = stored(tmp_path)
    k = run.kernels()
    assert sorted(k["rank"].dropna().unique().tolist()) == [0, 1]
    assert run.name == "ddp_gloo-cpu-2ranks" and run.info.world_size == 2
    assert len([x for x in run.ranges()["name"] if ".iter" in x]) == 4  # two steps on each rank
    time.sleep(1)
    assert processes_mentioning(str(tmp_path)) == []


def test_step_names_a_function(tmp_path):
    """--step function:train_step: each return of the script's own function ends a step (the
    function wrapped where the script looks it up, after its first call)."""
    shutil.copy(OWN / "raises.py", tmp_path)
    r = profkit(
        tmp_path,
        "run",
        "--step",
        "function:train_step",
        "--warmup",
        "1",
        "--iters",
        "1",
        "--no-report",
        "--",
        "raises.py",
    )
    assert r.returncode == 0, r.stderr
    run = stored(tmp_path)
    assert run.info.program["steps"]["by"] == "function"
    assert run.info.program["steps"]["said"] == "each return of train_step()"
    assert len(step_ranges(run)) == 1


def test_step_names_a_method(tmp_path):
    """--step function:Net.forward, a method of pytorch/examples' mnist script, by its qualified name."""
    work = copy(EXAMPLES / "mnist", tmp_path / "mnist")
    fake_mnist(tmp_path / "data")
    r = profkit(
        work,
        "run",
        "--step",
        "function:Net.forward",
        "--warmup",
        "2",
        "--iters",
        "1",
        "--no-report",
        "--",
        "python",
        "main.py",
        "--epochs",
        "1000",
        "--no-accel",
    )
    assert r.returncode == 0, r.stderr
    assert stored(work).info.program["steps"]["said"] == "each return of Net.forward()"


def test_ranks_profiled_inside_torchrun_merge_at_import(tmp_path):
    """`torchrun ... -m profkit run -- ddp_gloo.py`: each rank profiles itself, its run named after
    its rank; `profkit import` of the two traces makes one run with both ranks."""
    shutil.copy(OWN / "ddp_gloo.py", tmp_path)
    env = {**os.environ, "PROFKIT_DB": str(tmp_path / "profkit.db"), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "profkit",
            "run",
            "--tool",
            "torch",
            "--warmup",
            "2",
            "--iters",
            "2",
            "--no-report",
            "--",
            "python",
            "ddp_gloo.py",
        ],
        cwd=tmp_path,
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    import profkit as pk

    db = pk.open_db(tmp_path / "profkit.db")
    assert sorted(x.name for x in db.list_runs()) == ["ddp_gloo-cpu-rank0", "ddp_gloo-cpu-rank1"]
    traces = [tmp_path / "profkit-runs" / f"ddp_gloo-cpu-rank{i}" / "trace.json.gz" for i in (0, 1)]
    i = profkit(tmp_path, "import", *map(str, traces), "--name", "both")
    assert i.returncode == 0, i.stderr
    run = stored(tmp_path, "both")
    assert sorted(run.kernels()["rank"].unique().tolist()) == [0, 1] and run.info.world_size == 2
    assert len(step_ranges(run)) == 4
