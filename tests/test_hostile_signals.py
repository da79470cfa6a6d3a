"""However profkit ends, nothing it started goes on (issue 21, item 1; the sweep's security,
item 5). Every case runs real processes and sends real signals: SIGTERM to a profkit whose
SIGINT is ignored (a shell's background job), SIGHUP and SIGQUIT, SIGKILL of profkit itself,
and a sweep stopped by SIGTERM or SIGKILL; then no process of the run may be left within 15 s,
and the run is stored as interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import has_cuda, has_ncu, has_nsys, needs_gpu, needs_torch

WORKLOADS = Path(__file__).parent / "workloads"
STUBBORN = str(WORKLOADS / "stubborn.py")  # ignores SIGINT and never finishes building
PROFKIT = [sys.executable, "-m", "profkit"]
LEFT_S = 15  # nothing may be left this long after any signal


def _processes() -> dict[int, tuple[int, str]]:
    out = subprocess.run(
        ["ps", "-e", "-ww", "-o", "pid=,ppid=,args="], capture_output=True, text=True
    ).stdout
    procs = {}
    for line in out.splitlines():
        pid, ppid, *args = line.split(None, 2)
        procs[int(pid)] = (int(ppid), args[0] if args else "")
    return procs


def _tree(root: int) -> set[int]:
    """``root`` and every process below it now."""
    procs, found, todo = _processes(), set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo += [p for p, (ppid, _) in procs.items() if ppid == pid and p not in found]
    return found & set(procs)


def _alive(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            out.add(pid)
    return out


def _all_gone(pids: set[int], seconds: float = LEFT_S) -> set[int]:
    """The processes of ``pids`` still running after ``seconds`` (none, we hope)."""
    deadline = time.monotonic() + seconds
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _alive(pids)


def _wait_for(check, what: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        hit = check()
        if hit:
            return hit
        time.sleep(0.2)
    raise AssertionError(f"{what} never happened")


def _harnesses(folder: Path) -> set[int]:
    """The profiled (harness) processes of runs under ``folder``: their job file is there."""
    return {
        pid
        for pid, (_, args) in _processes().items()
        if "profkit.harness" in args and str(folder) in args
    }


def _sig_ignored(pid: int, sig: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    raise AssertionError("no SigIgn line")


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path):
    """Whatever a failing test leaves running (its profkit and everything below it, and any
    harness of its folder) is killed at the end, so that it cannot load the machine for hours."""
    started: list[subprocess.Popen] = []
    real = subprocess.Popen

    class Tracked(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            started.append(self)

    subprocess.Popen = Tracked  # type: ignore[misc]
    try:
        yield
    finally:
        subprocess.Popen = real  # type: ignore[misc]
        left = set()
        for p in started:
            left |= _tree(p.pid) if p.poll() is None else set()
        left |= _harnesses(tmp_path)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _runs(db: Path) -> dict[str, str]:
    out = subprocess.run(
        [*PROFKIT, "--db", str(db), "runs", "-f", "json"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return {r["name"]: r["status"] for r in json.loads(out.stdout)}


def _kept(db: Path) -> bool:
    """The interrupted run kept its raw folder with its job file and the profiler's log."""
    out = subprocess.run(
        [*PROFKIT, "--db", str(db), "runs", "-f", "json"], capture_output=True, text=True
    )
    run = json.loads(out.stdout)[0]
    folder = db.parent / f"{db.stem}-runs" / (run.get("folder") or run["name"])
    return (folder / "job.json").is_file() and any(folder.glob("*.log"))


def _start_run(
    db: Path,
    workload: str,
    *extra: str,
    ignore: tuple[int, ...] = (),
    where: tuple[str, ...] = ("--device", "cpu", "--tool", "torch"),
) -> subprocess.Popen:
    """``profkit run`` as a shell would start it, with the signals ``ignore``d (a background job
    of a non-interactive shell ignores SIGINT)."""

    def ignoring() -> None:
        for sig in ignore:
            signal.signal(sig, signal.SIG_IGN)

    return subprocess.Popen(
        [
            *PROFKIT,
            "--db",
            str(db),
            "run",
            workload,
            *where,
            "--batch-size",
            "2",
            "--no-report",
            "--name",
            "cut",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ignoring,
        start_new_session=True,
    )


@needs_torch
def test_sigterm_with_sigint_ignored_stops_the_run_and_its_children_get_default_signals(tmp_path):
    """`profkit run W &` from a script, then `kill -TERM`: profkit ignores SIGINT, its harness
    must not (it starts with the default), so the run stops at once and is kept interrupted."""
    db = tmp_path / "p.db"
    p = _start_run(db, "resnet18", "--warmup", "100000", ignore=(signal.SIGINT,))
    harness = _wait_for(lambda: _harnesses(tmp_path), "the harness starting")
    pid = next(iter(harness))
    assert not _sig_ignored(pid, signal.SIGINT) and not _sig_ignored(pid, signal.SIGHUP)
    tree = _tree(p.pid)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=LEFT_S)
    assert p.returncode == 143, err
    assert (
        err.strip().splitlines()[-1] == "profkit: terminated (SIGTERM)" and "Traceback" not in err
    )
    assert _all_gone(tree) == set()
    assert _runs(db) == {"cut": "interrupted"} and _kept(db)


@needs_torch
@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT], ids=["term", "hup", "quit"]
)
def test_a_child_that_ignores_sigint_is_killed_after_the_grace_period(tmp_path, sig):
    """Whatever the workload does with SIGINT, a stop ends in SIGKILL of the whole group: SIGHUP
    (the terminal closed) and SIGQUIT stop profkit as SIGTERM does, with exit 128 + signal."""
    db = tmp_path / "p.db"
    p = _start_run(db, STUBBORN, ignore=(signal.SIGINT,))
    harness = _wait_for(lambda: _harnesses(tmp_path), "the harness starting")
    _wait_for(
        lambda: all(_sig_ignored(h, signal.SIGINT) for h in harness), "the workload ignoring SIGINT"
    )
    tree = _tree(p.pid)
    p.send_signal(sig)
    out, err = p.communicate(timeout=LEFT_S)
    assert p.returncode == 128 + sig, err
    assert err.strip().splitlines()[-1] == f"profkit: terminated ({signal.Signals(sig).name})", err
    assert _all_gone(tree) == set()
    assert _runs(db) == {"cut": "interrupted"} and _kept(db)


@needs_torch
def test_nohup_keeps_sighup_ignored(tmp_path):
    """`nohup profkit run ...`: SIGHUP is ignored and the run goes on (stopped here by SIGTERM)."""
    db = tmp_path / "p.db"
    p = _start_run(db, "resnet18", "--warmup", "100000", ignore=(signal.SIGHUP,))
    _wait_for(lambda: _harnesses(tmp_path), "the harness starting")
    tree = _tree(p.pid)
    p.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    assert p.poll() is None and _alive(tree) == tree
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=LEFT_S)
    assert p.returncode == 143 and _all_gone(tree) == set()


@needs_torch
@pytest.mark.parametrize("workload", ["resnet18", STUBBORN], ids=["resnet18", "stubborn"])
def test_sigkill_of_profkit_ends_its_harness(tmp_path, workload):
    """SIGKILL (or the OOM killer) on `profkit run`: its harness, in a session of its own, dies
    with it (the lifeline), and the next profkit to open the database marks the run."""
    db = tmp_path / "p.db"
    p = _start_run(db, workload, "--warmup", "100000")
    harness = _wait_for(lambda: _harnesses(tmp_path), "the harness starting")
    tree = _tree(p.pid) | harness
    p.kill()
    p.communicate()
    assert _all_gone(tree) == set()
    assert _runs(db) == {"cut": "interrupted"} and _kept(db)


def test_a_child_whose_lifeline_was_closed_watches_the_pid(tmp_path):
    """A launcher between profkit and its harness (ncu, nsys) may close the lifeline's pipe: the
    harness then watches profkit's pid instead. Here a shell closes every inherited descriptor
    above 2 before starting a child that watches, and the parent is killed."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "from profkit.tools import runner\n"
        "child = ('import time\\nfrom profkit.tools.runner import watch_lifeline\\n'\n"
        "         'import os, signal\\nassert watch_lifeline(lambda: os.kill(os.getpid(), signal.SIGKILL), poll_s=0.1)\\n'\n"
        "         'time.sleep(600)\\n')\n"
        "fd, _ = runner.lifeline()\n"
        "p = subprocess.Popen(['bash', '-c', f'exec {fd}<&- ; exec \"$0\" -c \"$1\"', sys.executable, child],\n"
        "                     env=runner.child_env(), pass_fds=(fd,))\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    time.sleep(1.0)
    assert _alive({child}) == {child}
    parent.kill()
    parent.communicate()
    assert _all_gone({child}, 5) == set()


def _lifeline_kept(pid: int) -> bool:
    """Whether process ``pid`` still holds its lifeline's pipe (a launcher may close it)."""
    env = dict(
        item.split("=", 1)
        for item in Path(f"/proc/{pid}/environ").read_text().split("\0")
        if "=" in item
    )
    fd, inode, _ = env["PROFKIT_LIFELINE"].split(":")
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}") == f"pipe:[{inode}]"
    except OSError:
        return False


@needs_gpu
@pytest.mark.parametrize(
    "tool",
    [pytest.param("ncu", marks=pytest.mark.ncu), pytest.param("nsys", marks=pytest.mark.nsys)],
)
@pytest.mark.parametrize("case", ["term-int-ignored", "hup-stubborn", "kill"])
def test_signals_under_a_profiler_on_the_gpu(tmp_path, tool, case):
    """The same cases under ncu and nsys on a GPU: SIGTERM to a profkit that ignores SIGINT,
    SIGHUP with a workload that ignores SIGINT, SIGKILL of profkit. Nothing of the run (profiler,
    harness) is left within 15 s, and the run is stored as interrupted."""
    if not has_cuda() or not (has_ncu() if tool == "ncu" else has_nsys()):
        pytest.skip(f"needs a CUDA GPU and {tool}")
    db = tmp_path / "p.db"
    workload = STUBBORN if case == "hup-stubborn" else "resnet18"
    p = _start_run(
        db,
        workload,
        "--warmup",
        "100000",
        "--precision",
        "fp16",
        ignore=(signal.SIGINT,) if case != "kill" else (),
        where=("--device", "cuda", "--tool", tool),
    )
    harness = _wait_for(lambda: _harnesses(tmp_path), "the harness starting", timeout=180)
    time.sleep(3.0)  # well inside the warm-up: the profiler attached, the GPU in use
    pid = next(iter(harness))
    print(f"{tool}: the harness {'kept' if _lifeline_kept(pid) else 'lost'} the lifeline's pipe")
    tree = _tree(p.pid) | harness
    sig = {
        "term-int-ignored": signal.SIGTERM,
        "hup-stubborn": signal.SIGHUP,
        "kill": signal.SIGKILL,
    }[case]
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    if sig != signal.SIGKILL:
        assert p.returncode == 128 + sig, err
        assert "Traceback" not in err, err
    assert _all_gone(tree) == set()
    assert _runs(db) == {"cut": "interrupted"} and _kept(db)


def test_a_child_whose_starter_died_before_it_watched_still_goes(tmp_path):
    """profkit killed before its child got to watch the lifeline (the child is no longer its
    descendant then): the pipe, already closed, still ends the child."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import subprocess, sys\n"
        "from profkit.tools import runner\n"
        "child = ('import time, os, signal\\ntime.sleep(2)\\nfrom profkit.tools.runner import watch_lifeline\\n'\n"
        "         'assert watch_lifeline(lambda: os.kill(os.getpid(), signal.SIGKILL))\\ntime.sleep(600)\\n')\n"
        "fd, _ = runner.lifeline()\n"
        "p = subprocess.Popen([sys.executable, '-c', child], env=runner.child_env(), pass_fds=(fd,),\n"
        "                     start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(p.pid, flush=True)\n"
    )
    parent = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60
    )
    child = int(parent.stdout)
    assert _alive({child}) == {child}  # the parent is gone, the child not yet watching
    assert _all_gone({child}, 10) == set()


# ------------------------------------------------------------------------------------ sweeps
def _start_sweep(db: Path, workloads: str, workers: int = 1) -> subprocess.Popen:
    return subprocess.Popen(
        [
            *PROFKIT,
            "--db",
            str(db),
            "sweep",
            "--workloads",
            workloads,
            "--device",
            "cpu",
            "--tools",
            "torch",
            "--batch-size",
            "2",
            "--iters",
            "1",
            "--warmup",
            "100000",
            "--workers",
            str(workers),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@needs_torch
@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["term", "int", "kill"]
)
def test_a_stopped_sweep_leaves_nothing_running(tmp_path, sig):
    """A sweep stopped while its jobs profile (SIGTERM, Ctrl-C or SIGKILL): its Dask workers, the
    jobs' `profkit run` processes and their harnesses (one of them ignores SIGINT) are all gone
    within 15 s, and no scratch folder is removed under a live job."""
    pytest.importorskip("distributed")
    db = tmp_path / "s.db"
    p = _start_sweep(db, f"resnet18,{STUBBORN}", workers=2)
    _wait_for(lambda: len(_harnesses(tmp_path)) == 2, "both jobs' harnesses starting", timeout=180)
    tree = _tree(p.pid) | _harnesses(tmp_path)
    assert len(tree) >= 7  # the sweep, 2 workers, 2 jobs, 2 harnesses (and Dask's helpers)
    if sig == signal.SIGINT:
        os.killpg(p.pid, sig)  # as a terminal sends it: to the whole foreground group
    else:
        p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    if sig != signal.SIGKILL:
        assert p.returncode == 128 + sig, err
        assert "Traceback" not in err, err
        assert _all_gone(tree, 1) == set()  # the sweep itself waited for every job
        assert not list((tmp_path / "s-runs").glob(".sweep-*"))  # and removed its folder after them
    else:
        assert _all_gone(tree) == set()


def test_the_local_cluster_takes_work_only_from_the_sweep(tmp_path):
    """Another user of this machine can reach 127.0.0.1, so the local cluster speaks mutual TLS
    with a key only the sweep holds: a client without it (plain TCP, or TLS with a certificate
    of its own) cannot connect, and no process of the cluster serves HTTP."""
    distributed = pytest.importorskip("distributed")
    import http.client

    from profkit import cluster

    with cluster._client(distributed, None, 1, "cpu") as (client, engine, per_gpu):
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        port = int(address.rsplit(":", 1)[1])
        assert client.submit(lambda: 41 + 1).result() == 42  # the sweep's own client works
        for attempt in (f"tcp://127.0.0.1:{port}", address):
            kwargs = (
                {"security": distributed.security.Security.temporary()}
                if attempt.startswith("tls")
                else {}
            )
            with pytest.raises((OSError, TimeoutError, ValueError)):
                distributed.Client(attempt, timeout="3s", **kwargs)
        # every listening TCP port of this process and the workers: none answers HTTP
        import psutil

        pids = {os.getpid(), *(c.pid for c in psutil.Process().children(recursive=True))}
        ports = {
            c.laddr.port
            for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.pid in pids
        }
        assert port in ports
        for each in ports:
            conn = http.client.HTTPConnection("127.0.0.1", each, timeout=3)
            with pytest.raises((http.client.HTTPException, OSError)):
                conn.request("GET", "/health")
                conn.getresponse()
            conn.close()


# ------------------------------------------------------------ a lifeline that is not a parent's
@pytest.mark.parametrize(
    "value",
    [
        "3:1:999999",
        "99999999999999999999:1:1",
        "3:1:99999999999999999999",
        "x:y:z",
        "1:2",
        "0:0:OWN_PID",
    ],
)
def test_a_stale_or_forged_lifeline_is_ignored(tmp_path, value):
    """PROFKIT_LIFELINE inherited by a process profkit did not start for it (a shell opened from
    a workload), stale or forged: profkit works as ever, and a harness given it kills no one (a
    process beside it in its group lives on). Only an ancestor's lifeline is watched."""
    # OWN_PID: this test process's own pid (put in here, so parallel workers collect the same ids)
    env = {**os.environ, "PROFKIT_LIFELINE": value.replace("OWN_PID", str(os.getpid()))}
    out = subprocess.run(
        [*PROFKIT, "workloads"], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr
    script = tmp_path / "group.sh"
    script.write_text(
        f"sleep 30 &\n{sys.executable} -m profkit.harness {tmp_path / 'none.json'}\necho harness $?\n"
        "kill %1\n"
    )
    out = subprocess.run(
        ["setsid", "bash", str(script)], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0 and "harness 1" in out.stdout, (out.stdout, out.stderr)


def test_a_stop_signal_during_start_up_is_one_line(monkeypatch, capsys):
    """SIGTERM before a command's own handling is in place (while the CLI starts): one line and
    128 + the signal, not a traceback."""
    from profkit import cli
    from profkit.processes import Terminated

    def stopped() -> None:
        raise Terminated(signal.SIGTERM)

    monkeypatch.setattr(cli, "app", stopped)
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 143
    assert capsys.readouterr().err == "profkit: terminated (SIGTERM)\n"
    # main() left them ignored, as a stopped command does
    for sig in (
        signal.SIGINT,
        *cli.TERMINATING,
    ):
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
