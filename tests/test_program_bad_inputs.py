"""Bad input to ``profkit run -- PROGRAM`` (issue 35): each one line and a non-zero exit, no run
stored where nothing ran, and nothing of the program left running."""

from __future__ import annotations

import shutil
import time

import pytest

from .conftest import cli, one_line_error, processes_mentioning
from .test_program_scripts import OWN, profkit


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    return tmp_path


@pytest.mark.parametrize(
    "argv, message, code",
    [
        (["--", "nosuch.py"], "no such script: nosuch.py", 2),
        (["--", "python", "nosuch.py"], "no such script: nosuch.py", 2),
        (["--", "python"], "'python' is given no script", 2),
        (["--"], "no program after --", 2),
        (["--", "python", "-c", "print(1)"], "profkit runs the program with its own Python", 2),
        (["--", "python", "-"], "not code from standard input", 2),
        (["--", "ls", "-l"], "'ls' is not Python", 2),
        (
            ["--", "definitely-no-such-program-here"],
            "no program or script named definitely-no-such-program-here",
            2,
        ),
        (["--iters", "0", "--", "train.py"], "iters", 2),
        (["--warmup", "-1", "--", "train.py"], "warmup", 2),
        (["--step", "bogus", "--", "train.py"], "is not a way to find steps", 2),
        (["--step", "forward:1x", "--", "train.py"], "is no class name", 2),
        (
            ["--precision", "fp16", "--", "train.py"],
            "--precision is asked of a workload file's build(spec)",
            2,
        ),
        (
            ["--batch-size", "4", "--", "train.py"],
            "--batch-size is asked of a workload file's build(spec)",
            2,
        ),
        (["--step", "backward", "resnet18"], "--step concerns a program run as it is", 2),
        (["--run-to-end", "resnet18"], "--run-to-end concerns a program run as it is", 2),
        (["resnet18", "--", "train.py"], "give a workload or a program after --, not both", 2),
        ([], "nothing to run", 2),
    ],
)
def test_bad_program_command_lines(here, argv, message, code):
    # nothing after the program's words
    r = cli("run", *argv, env={"PROFKIT_DB": str(here / "profkit.db")})
    one_line_error(r, message, code)
    assert not (here / "profkit.db").exists()  # nothing ran: nothing stored


def test_a_directory_is_no_script(here):
    (here / "pkg").mkdir()
    one_line_error(
        cli("run", "--", "python", "pkg", env={"PROFKIT_DB": str(here / "profkit.db")}),
        "pkg is not a file",
        2,
    )


def ended_with_one_error(r, message: str, code: int) -> None:
    """The run's end: exit ``code`` and one error line of profkit's (the program's own output
    above it), no traceback of profkit's."""
    assert r.returncode == code, (r.returncode, r.stderr)
    errors = [line for line in r.stderr.splitlines() if line.startswith("profkit: error:")]
    assert len(errors) == 1 and message in errors[0], r.stderr
    assert r.stderr.strip().splitlines()[-1] == errors[0]
    assert "profkit/" not in r.stderr  # no frame of profkit's


@pytest.mark.torch
def test_a_step_that_never_fires(tmp_path):
    shutil.copy(OWN / "marked.py", tmp_path)
    r = profkit(
        tmp_path, "run", "--step", "forward:Generator", "--no-report", "--", "python", "marked.py"
    )
    ended_with_one_error(
        r,
        "the script ended (exit status 0) and no step was found by --step forward:Generator "
        "(it never fired)",
        1,
    )


@pytest.mark.torch
def test_a_window_larger_than_the_script(tmp_path):
    shutil.copy(OWN / "marked.py", tmp_path)
    r = profkit(
        tmp_path, "run", "--warmup", "45", "--iters", "10", "--no-report", "--", "marked.py"
    )
    ended_with_one_error(
        r,
        "the script ended (exit status 0) after 50 steps (each profkit.step() in the script), "
        "before the window's end: --warmup 45 + --iters 10 needs 55",
        1,
    )
    import profkit as pk

    assert [x.status for x in pk.open_db(tmp_path / "profkit.db").list_runs()] == ["failed"]


@pytest.mark.torch
def test_a_script_with_dataloader_workers_that_ends_too_soon_leaves_nothing_running(tmp_path):
    """DataLoader num_workers 2, four steps where the window needs five: one line, and the
    script's worker processes are gone with it."""
    shutil.copy(OWN / "amp_train.py", tmp_path)
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
        "amp_train.py",
        "--steps",
        "4",
        "--workers",
        "2",
    )
    ended_with_one_error(r, "after 4 steps", 1)
    time.sleep(1)
    assert processes_mentioning(str(tmp_path)) == []


@pytest.mark.torch
def test_a_script_with_dataloader_workers_stopped_after_its_window_leaves_nothing_running(tmp_path):
    shutil.copy(OWN / "amp_train.py", tmp_path)
    r = profkit(
        tmp_path,
        "run",
        "--warmup",
        "2",
        "--iters",
        "1",
        "--no-report",
        "--",
        "python",
        "amp_train.py",
        "--workers",
        "2",
    )
    assert r.returncode == 0, r.stderr
    time.sleep(1)
    assert processes_mentioning(str(tmp_path)) == []


SCRIPTS = {
    # A forward call before the optimizer exists (a lazy module's first call): steps are the optimizer's.
    "lazy.py": """import torch
from torch import nn
model = nn.Sequential(nn.LazyLinear(16), nn.ReLU(), nn.Linear(16, 4))
model(torch.randn(1, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(30):
    loss = model(torch.randn(4, 8)).sum(); opt.zero_grad(); loss.backward(); opt.step()
""",
    # No module, no optimizer: each backward() ends a step, the first one too.
    "manual.py": """import torch
w = torch.randn(8, 1, requires_grad=True)
for i in range(30):
    loss = (torch.randn(4, 8) @ w).pow(2).sum(); loss.backward()
    with torch.no_grad(): w -= 0.01 * w.grad; w.grad = None
""",
    # A helper process left in the background holding the output: it does not hold profkit up.
    "background.py": """import subprocess, torch
subprocess.Popen(["sleep", "60"])
m = torch.nn.Linear(8, 2); opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(50):
    m(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad()
""",
    # Ends with status 4 before the window is done.
    "exit4.py": """import sys, torch
m = torch.nn.Linear(8, 2); opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(4):
    m(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad()
sys.exit(4)
""",
    # Ends without a word of its own inside the window.
    "os_exit.py": """import os, torch
m = torch.nn.Linear(8, 2); opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(10):
    m(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad()
    if i == 3:
        os._exit(3)
""",
}


@pytest.mark.torch
@pytest.mark.parametrize(
    "script, args, said",
    [
        ("lazy.py", ["--warmup", "2"], "each SGD.step()"),
        ("manual.py", ["--warmup", "1"], "each backward()"),
        ("background.py", ["--warmup", "0", "--iters", "1"], "each SGD.step()"),
    ],
)
def test_steps_are_found_in_awkward_scripts(tmp_path, script, args, said):
    (tmp_path / script).write_text(SCRIPTS[script])
    t0 = time.monotonic()
    r = profkit(tmp_path, "run", *args, "--no-report", "--", "python", script)
    assert r.returncode == 0, r.stderr
    assert f"profkit: steps: {said}" in r.stderr
    assert time.monotonic() - t0 < 40  # not held up by the background process
    time.sleep(1.5)
    # The script's own processes (its background `sleep 60` among them) run in its folder: none is
    # left. (Not every `sleep 60` of the machine: a parallel worker's test may run one now.)
    assert processes_mentioning(str(tmp_path)) == []


@pytest.mark.torch
def test_the_scripts_exit_status_is_passed_on(tmp_path):
    (tmp_path / "exit4.py").write_text(SCRIPTS["exit4.py"])
    r = profkit(tmp_path, "run", "--warmup", "2", "--iters", "5", "--no-report", "--", "exit4.py")
    ended_with_one_error(r, "the script ended (exit status 4) after 4 steps", 4)
    (tmp_path / "os_exit.py").write_text(SCRIPTS["os_exit.py"])
    r = profkit(tmp_path, "run", "--warmup", "2", "--iters", "5", "--no-report", "--", "os_exit.py")
    ended_with_one_error(
        r,
        "the script exited with status 3 before its window was done, without an error of its own",
        3,
    )


@pytest.mark.torch
def test_run_to_end_keeps_a_whole_window_whatever_the_end(tmp_path):
    (tmp_path / "exit4.py").write_text(SCRIPTS["exit4.py"])
    r = profkit(
        tmp_path,
        "run",
        "--warmup",
        "1",
        "--iters",
        "2",
        "--run-to-end",
        "--no-report",
        "--",
        "exit4.py",
    )
    assert r.returncode == 0, r.stderr
    assert "the program ran to its end (exit status 4 after its window)" in r.stderr


def test_a_script_given_without_dashes_is_not_run_as_a_workload(here):
    """`profkit run train.py` on a training script (top-level code, no build): refused before it
    runs, with the way to run it as it is."""
    (here / "loop.py").write_text("import sys\nfor i in range(3):\n    print(i)\nsys.exit(4)\n")
    r = cli("run", "--device", "cpu", "loop.py", env={"PROFKIT_DB": str(here / "profkit.db")})
    one_line_error(
        r,
        "defines no build(spec) function. To profile it as it is, give it after --: "
        "profkit run -- python loop.py",
        1,
    )
    assert not (here / "profkit.db").exists()


@pytest.mark.torch
def test_a_script_running_torch_profiler_itself(tmp_path):
    (tmp_path / "ownprof.py").write_text("""import torch
from torch.profiler import profile, schedule
m = torch.nn.Linear(8, 2); opt = torch.optim.SGD(m.parameters(), lr=0.1)
with profile(schedule=schedule(wait=1, warmup=1, active=2)) as prof:
    for i in range(20):
        m(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad(); prof.step()
""")
    r = profkit(
        tmp_path,
        "run",
        "--tool",
        "torch",
        "--warmup",
        "2",
        "--iters",
        "2",
        "--no-report",
        "--",
        "ownprof.py",
    )
    ended_with_one_error(
        r,
        "the script runs torch.profiler itself, which cannot run beside profkit's: profile it "
        "with --tool nsys or ncu",
        1,
    )


def test_a_module_that_is_nowhere(here):
    one_line_error(
        cli(
            "run",
            "--",
            "python",
            "-m",
            "nosuchmod.sub",
            env={"PROFKIT_DB": str(here / "profkit.db")},
        ),
        "no module named nosuchmod (for -m nosuchmod.sub)",
        2,
    )
    assert not (here / "profkit.db").exists()
