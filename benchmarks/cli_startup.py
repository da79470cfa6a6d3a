"""How long the everyday commands take as a user starts them (`profkit --help`, and `summary`,
`runs` and `kernels` on a 90-launch run), and which heavy modules each one imports.

    python benchmarks/cli_startup.py [N]              # this checkout, N runs each (default 30)
    python benchmarks/cli_startup.py [N] --compare REF   # REF's tree and this checkout, interleaved
                                                       # (issue 37: REF 6dd9b09, the command on plain Click)
    python benchmarks/cli_startup.py [N] --tty        # standard output a terminal (a pty)

The run is tests/data/ncu/vgg16_fp16_eager.raw.csv.gz, imported by each tree's own
`profkit import` into a database in a temporary folder. Every command is started as
`sys.executable -m profkit ...` with PYTHONPATH pointing at the tree, its standard output a
pipe read to the end (or, with --tty, a pseudo-terminal 200 columns wide), and timed from
start to exit. Bytecode caches are allowed (PYTHONDONTWRITEBYTECODE is dropped) and a warm-up
run writes them, as an installed package has its modules compiled; without them every
profkit module is compiled again on each start.

With --compare, REF (a commit) is exported with `git archive` into a temporary folder (the
repository is not touched) and each command runs alternately from both trees, so drift in the
machine's load falls on both alike. Prints the median and spread (min, max) of wall time in ms,
and the median CPU time (user + system) of the command's process, which other jobs on a shared
machine inflate less than its wall time.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "tests" / "data" / "ncu" / "vgg16_fp16_eager.raw.csv.gz"
HEAVY = (
    "torch",
    "pandas",
    "numpy",
    "sqlite_utils",
    "ncu_report",
    "pydantic",
    "typer",
    "typer.rich_utils",
    "rich.console",
    "rich.table",
    "rich.text",
)
RUN = "vgg16"
# (label, arguments after `python`); DB stands for the tree's database.
CASES = [
    ("profkit --help", ["-m", "profkit", "--help"]),
    ("profkit summary RUN", ["-m", "profkit", "summary", RUN, "--db", "DB"]),
    ("profkit runs", ["-m", "profkit", "runs", "--db", "DB"]),
    ("profkit kernels RUN", ["-m", "profkit", "kernels", RUN, "--db", "DB"]),
    ("profkit runs --help", ["-m", "profkit", "runs", "--help"]),
    ("import profkit", ["-c", "import profkit"]),
    ("interpreter alone", ["-c", "pass"]),
]


def environment(tree: Path, tty: bool) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "PYTHONDONTWRITEBYTECODE",
            "PROFKIT_DB",
            "COLUMNS",
            "LINES",
            "TTY_COMPATIBLE",
            "TTY_INTERACTIVE",
            "FORCE_COLOR",
        )
    }
    env["PYTHONPATH"] = str(tree)
    if tty:
        env["COLUMNS"] = "200"
    return env


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except OSError:  # the pty's other end closed
        pass


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's ended children so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


CPU_MS: list[float] = []  # each once()'s CPU time, in ms (the last one's last)


def once(
    tree: Path, args: list[str], db: Path, tty: bool = False, importtime: bool = False
) -> tuple[float, str]:
    """Wall time in ms of one start of ``python ARGS`` from ``tree``, and its stderr (its CPU
    time appended to CPU_MS)."""
    cpu0 = _children_cpu()
    argv = [
        sys.executable,
        *(["-X", "importtime"] if importtime else []),
        *(str(db) if a == "DB" else a for a in args),
    ]
    env = environment(tree, tty)
    if not tty:
        t0 = time.perf_counter()
        p = subprocess.run(argv, capture_output=True, env=env, cwd=tempfile.gettempdir())
        elapsed = (time.perf_counter() - t0) * 1000
        CPU_MS.append((_children_cpu() - cpu0) * 1000)
        if p.returncode != 0:
            raise SystemExit(
                f"{' '.join(args)} failed ({p.returncode}): {p.stderr.decode()[-2000:]}"
            )
        return elapsed, p.stderr.decode()
    import pty

    master, slave = pty.openpty()
    reader = threading.Thread(target=_drain, args=(master,), daemon=True)
    reader.start()
    try:
        t0 = time.perf_counter()
        p = subprocess.run(
            argv, stdout=slave, stderr=subprocess.PIPE, env=env, cwd=tempfile.gettempdir()
        )
        elapsed = (time.perf_counter() - t0) * 1000
        CPU_MS.append((_children_cpu() - cpu0) * 1000)
    finally:
        os.close(slave)
        reader.join(timeout=5)
        os.close(master)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
    return elapsed, p.stderr.decode()


def heavy(tree: Path, args: list[str], db: Path, tty: bool) -> str:
    """The HEAVY modules that one start imports (from ``python -X importtime``)."""
    _, err = once(tree, args, db, tty, importtime=True)
    imported = set(re.findall(r"^import time:.*\|\s*([\w.]+)\s*$", err, re.M))
    return ", ".join(m for m in HEAVY if m in imported) or "none"


def prepare(tree: Path, folder: Path) -> Path:
    """Import the capture into a fresh database with the tree's own profkit."""
    db = folder / "profkit.db"
    p = subprocess.run(
        [sys.executable, "-m", "profkit", "import", str(CAPTURE), "--name", RUN, "--db", str(db)],
        capture_output=True,
        text=True,
        env=environment(tree, False),
        cwd=tempfile.gettempdir(),
    )
    if p.returncode != 0:
        raise SystemExit(f"import into {db} failed: {p.stderr}")
    return db


def main() -> None:
    args = sys.argv[1:]
    ref = None
    if "--compare" in args:
        i = args.index("--compare")
        ref = args[i + 1]
        del args[i : i + 2]
    tty = "--tty" in args
    if tty:
        args.remove("--tty")
    n = int(args[0]) if args else 30
    work = Path(tempfile.mkdtemp(prefix="profkit-bench-"))
    try:
        trees = {"this checkout": ROOT}
        if ref:
            base = work / "ref"
            base.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
            trees = {ref: base, "this checkout": ROOT}
        dbs = {}
        for label, tree in trees.items():
            folder = work / f"db{len(dbs)}"
            folder.mkdir()
            dbs[label] = prepare(tree, folder)
            for _, argv in CASES:  # warm the file cache and write the bytecode caches
                once(tree, argv, dbs[label], tty)
        times: dict[tuple[str, str], list[float]] = {(t, c): [] for t in trees for c, _ in CASES}
        cpu: dict[tuple[str, str], list[float]] = {(t, c): [] for t in trees for c, _ in CASES}
        for _ in range(n):
            for case, argv in CASES:
                for label, tree in trees.items():
                    times[(label, case)].append(once(tree, argv, dbs[label], tty)[0])
                    cpu[(label, case)].append(CPU_MS[-1])
        where = "a terminal (pty, 200 columns)" if tty else "a pipe"
        print(f"{n} runs each, standard output {where}, {sys.executable}")
        print(f"{'tree':16} {'command':24} {'median ms':>10} {'min':>7} {'max':>7} {'CPU ms':>7}")
        for (label, case), t in times.items():
            print(
                f"{label:16} {case:24} {statistics.median(t):10.1f} {min(t):7.1f} {max(t):7.1f} "
                f"{statistics.median(cpu[(label, case)]):7.1f}"
            )
        for label, tree in trees.items():
            print(f"heavy modules imported ({label}):")
            for case, argv in CASES[:4]:
                print(f"  {case:24} {heavy(tree, argv, dbs[label], tty)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
