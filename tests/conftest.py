"""Shared fixtures, and the markers (gpu, ncu, nsys, torch) that select and skip the tests that
need a GPU, a profiler or PyTorch."""

from __future__ import annotations

import functools
import gzip
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir
from typer.testing import CliRunner

DATA = Path(__file__).parent / "data"
NCU_DATA = DATA / "ncu"
CHECKOUT = Path(__file__).parents[1]

# Hypothesis keeps no example database and its caches in a temporary folder (not .hypothesis/
# in the checkout); the examples it draws are the same every run (derandomize), on every worker.
_HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="profkit-tests-hypothesis-")
set_hypothesis_home_dir(_HYPOTHESIS_HOME)
settings.register_profile("profkit", database=None, derandomize=True)
settings.load_profile("profkit")
# What profkit keeps in the user's cache (the report's compiled template) goes to a temporary
# folder too, not the home of whoever runs the tests (each worker process its own).
_CACHE_HOME = tempfile.mkdtemp(prefix="profkit-tests-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE_HOME


@functools.cache
def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def has_tool(module) -> bool:
    from profkit.errors import ToolNotFound

    try:
        module.find()
    except ToolNotFound:
        return False
    return True


def has_ncu() -> bool:
    from profkit.tools import ncu

    return has_tool(ncu)


def has_nsys() -> bool:
    from profkit.tools import nsys

    return has_tool(nsys)


def has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


# What each marker of pyproject.toml needs, cheapest check first (has_cuda imports torch). A
# test with the marker is skipped, when it is set up, where that is missing; so a marker is
# both what `pytest -m gpu` / `-m "not gpu"` select by and the skip rule.
REQUIREMENTS = {
    "ncu": (has_ncu, "Nsight Compute (ncu)"),
    "nsys": (has_nsys, "Nsight Systems (nsys)"),
    "torch": (has_torch, "PyTorch"),
    "gpu": (has_cuda, "a CUDA GPU"),
}


def pytest_runtest_setup(item):
    for marker, (present, what) in REQUIREMENTS.items():
        if item.get_closest_marker(marker) is not None and not present():
            pytest.skip(f"needs {what}")


def needs(*markers: str):
    """A decorator that marks a test with ``markers`` (gpu, ncu, nsys, torch), and so skips it
    where one of them is missing (pytest_runtest_setup)."""
    marks = [getattr(pytest.mark, m) for m in markers]
    assert set(markers) <= set(REQUIREMENTS), markers

    def apply(test):
        for mark in marks:
            test = mark(test)
        return test

    return apply


needs_torch = needs("torch")
needs_gpu = needs("gpu", "torch")  # CUDA through PyTorch
needs_gpu_ncu = needs("gpu", "ncu", "torch")
needs_gpu_nsys = needs("gpu", "nsys", "torch")
needs_gpu_ncu_nsys = needs("gpu", "ncu", "nsys", "torch")


@pytest.fixture
def db(tmp_path):
    return tmp_path / "profkit.db"


@pytest.fixture(autouse=True)
def _outside_the_checkout(tmp_path_factory, monkeypatch):
    """Every test runs in a folder of its own: what a command writes where it runs (``reports/``,
    ``profkit.db``, ``profkit-runs/``) lands there, never in the checkout."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


def _untracked(root: Path) -> set[str] | None:
    """The checkout's untracked and ignored files (Python's bytecode caches left out), or None
    where ``root`` is no git checkout (an unpacked sdist)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--ignored", "--untracked-files=all"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return {
        line[3:]
        for line in out.stdout.splitlines()
        if "__pycache__/" not in line and line[:2] in ("??", "!!")
    }


def pytest_sessionstart(session):
    session.config.stash[_BEFORE] = _untracked(CHECKOUT)


def pytest_sessionfinish(session, exitstatus):
    """The suite writes nothing into the checkout: a file that appeared there during the session
    fails it (checked once, by the process that ran the session, not by each parallel worker)."""
    shutil.rmtree(_HYPOTHESIS_HOME, ignore_errors=True)
    shutil.rmtree(_CACHE_HOME, ignore_errors=True)
    if hasattr(session.config, "workerinput"):
        return
    before = session.config.stash.get(_BEFORE, None)
    after = _untracked(CHECKOUT)
    if before is None or after is None:
        return
    new = sorted(after - before)
    if new:
        session.config.get_terminal_writer().line(
            f"the tests wrote into the checkout: {', '.join(new[:10])}", red=True
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BEFORE = pytest.StashKey[set[str] | None]()


@pytest.fixture(autouse=True)
def _progress_held_back(monkeypatch):
    """A command run in-process says its stages only once it has run for ``cli.QUIET_S``
    (issue 24). On a loaded machine a quick failure (a torch.compile error, a rank that dies)
    can take longer than that and print a stage line before its one error line, which the tests
    of one-line errors would take for a second line: here the quiet period is an hour. Tests of
    the stage lines set it themselves (tests/test_names_repr.py)."""
    from profkit import cli as cli_module

    monkeypatch.setattr(cli_module, "QUIET_S", 3600.0)


@pytest.fixture(autouse=True)
def _signal_handlers_kept():
    """A command run in-process that was stopped leaves its stop signals ignored (the exit
    status is chosen: cli._ignore_signals), which the real command does just before its process
    ends. In the test process they are put back after each test: an ignored SIGTERM is inherited
    by every process a later test starts, whose multiprocessing then cannot stop its daemonic
    workers at exit, and the harness waits for them (a CI run timed out on it)."""
    import signal

    from profkit.processes import TERMINATING

    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, *TERMINATING)}
    yield
    for sig, handler in kept.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)


_runner = CliRunner()


def cli(*args, db=None, env=None):
    """Invoke ``profkit ARGS [--db DB]`` in-process; the result has exit_code, stdout, stderr.
    ``env`` adds environment variables (``COLUMNS``, ``TTY_COMPATIBLE``: a terminal's size)."""
    from profkit.cli import app

    return _runner.invoke(app, [str(a) for a in args] + (["--db", str(db)] if db else []), env=env)


def help_words(text: str) -> str:
    """A help as Typer draws it, its words one space apart, without the panels' borders."""
    import re

    return " ".join(re.sub("[\u2500-\u257f]", " ", text).split())


def cli_json(*args, db=None):
    """``profkit ARGS --format json``, parsed; fails the test on a non-zero exit."""
    import json

    r = cli(*args, "-f", "json", db=db)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def one_line_error(result, message: str, code: int = 1) -> None:
    """The way every bad input must end: exit ``code``, one line on stderr naming the problem,
    no traceback."""
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("profkit: error:") and message in lines[0], (
        result.stderr
    )
    assert "Traceback" not in result.output
    assert "`" not in lines[0], lines[0]  # the library's `param` marks became flags


@pytest.fixture(scope="session")
def ncu_rep_dir(tmp_path_factory):
    """The committed .ncu-rep.gz captures, decompressed (the report reader needs a plain file)."""
    out = tmp_path_factory.mktemp("ncu-rep")
    for gz in NCU_DATA.glob("*.ncu-rep.gz"):
        (out / gz.name[:-3]).write_bytes(gzip.decompress(gz.read_bytes()))
    return out


NSYS_DATA = DATA / "nsys"


@pytest.fixture(scope="session")
def nsys_dir(tmp_path_factory):
    """The committed nsys SQLite exports (.sqlite.gz), decompressed."""
    out = tmp_path_factory.mktemp("nsys")
    for gz in NSYS_DATA.glob("*.sqlite.gz"):
        (out / gz.name[:-3]).write_bytes(gzip.decompress(gz.read_bytes()))
    return out


def kernel_table(path, capture=None):
    """The kernel table (a DataFrame, not yet classified) of a capture file, or of a capture
    already loaded from it; its ranges are complete afterwards."""
    from profkit.parse import load
    from profkit.parse.schema import frame

    return frame((capture or load(path)).rows)


DIFF_DATA = DATA / "diff"


def _unpacked(src: Path, out: Path) -> Path:
    """A copy of a tests/data folder with its nsys SQLite exports (.sqlite.gz) decompressed
    (the importer reads them plain); the other files as they are."""
    import shutil

    for f in src.iterdir():
        if f.name.endswith(".sqlite.gz"):
            (out / f.name[:-3]).write_bytes(gzip.decompress(f.read_bytes()))
        elif f.is_file():
            shutil.copy(f, out / f.name)
    return out


@pytest.fixture(scope="session")
def diff_dir(tmp_path_factory):
    """tests/data/diff, nsys SQLite exports decompressed."""
    return _unpacked(DIFF_DATA, tmp_path_factory.mktemp("diff"))


REPORT_DATA = DATA / "report"


@pytest.fixture(scope="session")
def report_dir(tmp_path_factory):
    """tests/data/report's captures, nsys SQLite exports decompressed."""
    return _unpacked(REPORT_DATA, tmp_path_factory.mktemp("report"))


def processes_mentioning(text: str) -> list[str]:
    """Command lines of this machine's processes that mention ``text`` (a test's temporary
    folder) or run in a folder under it (Dask's workers, started from the test's folder, name
    no path): what a run or sweep left running."""
    import os

    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if (text in args or cwd.startswith(text)) and proc.name != str(os.getpid()):
            found.append(args)
    return found


def ctrl_c(
    argv: list[str], cwd, after_s: float, timeout: float = 90.0, after_line: str | None = None
):
    """Start ``argv`` as a terminal would (a process group of its own, SIGINT not ignored),
    then press Ctrl-C: SIGINT to the whole group after ``after_s``, or, with ``after_line``,
    once a line of its stderr holds that text (however long that takes: a quick machine's
    command is still running then). Returns (exit status, stderr, seconds it took to end after
    the signal)."""
    import os
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    said = ""
    if after_line is None:
        time.sleep(after_s)
    else:
        assert proc.stderr is not None
        while line := proc.stderr.readline():
            said += line
            if after_line in line:
                break
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    return proc.returncode, said + err, time.monotonic() - t0


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium for the module's tests (skipped where there is none)."""
    from . import chromium

    if chromium.available():
        pytest.skip(chromium.available())
    with chromium.browser() as b:
        yield b


# nsys as profkit calls it to export a report: a committed export (FAKE_NSYS_EXPORT, gzipped)
# written where --output says, with only the tables --tables names; each call logged (one line
# of its arguments) to FAKE_NSYS_LOG. Regular expressions over a call's arguments: one matching
# FAKE_NSYS_REFUSE exits 1 (an nsys that lacks an option or cannot export), FAKE_NSYS_EMPTY
# exits 0 having written nothing, FAKE_NSYS_STALL first sleeps a minute ignoring SIGINT.
FAKE_NSYS = """#!{python}
import gzip, os, re, signal, sqlite3, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_NSYS_LOG"], "a", errors="surrogateescape") as log:
    log.write(" ".join(args) + "\\n")
def matches(name):
    return os.environ.get(name) and re.search(os.environ[name], " ".join(args))
if matches("FAKE_NSYS_REFUSE"):
    sys.exit("nsys: cannot do " + " ".join(args[:4]))
if matches("FAKE_NSYS_EMPTY"):
    sys.exit(0)
if matches("FAKE_NSYS_STALL"):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    time.sleep(60)
out = args[args.index("--output") + 1]
with open(out, "wb") as f:
    f.write(gzip.decompress(open(os.environ["FAKE_NSYS_EXPORT"], "rb").read()))
if "--tables" in args:
    keep = [re.compile(p) for p in args[args.index("--tables") + 1].split(",")]
    con = sqlite3.connect(out)
    tables = con.execute("select name from sqlite_master where type = 'table'").fetchall()
    for (name,) in tables:
        if not any(p.search(name) for p in keep):
            con.execute(f'drop table "{{name}}"')
    con.commit()
    con.execute("vacuum")
    con.close()
"""


def fake_nsys(
    folder: Path, monkeypatch, export: Path, refuse: str = "", empty: str = "", stall: str = ""
) -> Path:
    """An ``nsys`` on PATH that stands in for Nsight Systems' export (FAKE_NSYS): it writes
    ``export`` (a committed .sqlite.gz) as nsys would, trimmed to --tables; ``refuse``,
    ``empty`` and ``stall`` as FAKE_NSYS_REFUSE, _EMPTY and _STALL. Returns its log."""
    import sys

    bin_dir = folder / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "nsys"
    fake.write_text(FAKE_NSYS.format(python=sys.executable))
    fake.chmod(0o755)
    log = folder / "fake-nsys.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NSYS_LOG", str(log))
    monkeypatch.setenv("FAKE_NSYS_EXPORT", str(export))
    monkeypatch.setenv("FAKE_NSYS_REFUSE", refuse)
    monkeypatch.setenv("FAKE_NSYS_EMPTY", empty)
    monkeypatch.setenv("FAKE_NSYS_STALL", stall)
    return log
