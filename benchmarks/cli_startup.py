"""How long `profkit --help` and `import profkit` take, as a user starts them, and which heavy
modules each start-up imports.

    python benchmarks/cli_startup.py [N]              # this checkout, N runs each (default 30)
    python benchmarks/cli_startup.py [N] --compare REF

With --compare, REF (a commit) is checked out into a temporary git worktree and each command
runs alternately from both trees (PYTHONPATH points at the tree), so drift in the machine's
load falls on both alike. Prints the median and spread (min, max) of wall time in ms.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "pandas", "numpy", "sqlite_utils", "ncu_report", "rich.table")
CASES = {
    "profkit --help": ["-m", "profkit", "--help"],
    "profkit runs --help": ["-m", "profkit", "runs", "--help"],
    "import profkit": ["-c", "import profkit"],
    "interpreter alone": ["-c", "pass"],
}


def once(tree: Path, args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env, cwd=tempfile.gettempdir())
    return (time.perf_counter() - t0) * 1000


def heavy(tree: Path) -> str:
    code = ("import sys; from typer.testing import CliRunner; from profkit.cli import app; "
            "CliRunner().invoke(app, ['--help']); print(','.join(m for m in %r if m in sys.modules))" % (HEAVY,))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tempfile.gettempdir()).stdout
    return out.strip() or "none"


def main() -> None:
    args = sys.argv[1:]
    ref = None
    if "--compare" in args:
        i = args.index("--compare")
        ref = args[i + 1]
        del args[i:i + 2]
    n = int(args[0]) if args else 30
    trees = {"this checkout": ROOT}
    tmp = None
    if ref:
        tmp = Path(tempfile.mkdtemp()) / "ref"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tmp), ref], check=True,
                       capture_output=True)
        trees = {ref: tmp, "this checkout": ROOT}
    try:
        for tree in trees.values():
            once(tree, CASES["profkit --help"])  # warm the file cache
        times: dict[tuple[str, str], list[float]] = {(t, c): [] for t in trees for c in CASES}
        for _ in range(n):
            for case, argv in CASES.items():
                for label, tree in trees.items():
                    times[(label, case)].append(once(tree, argv))
        print(f"{'tree':16} {'command':24} {'median ms':>10} {'min':>7} {'max':>7}")
        for (label, case), t in times.items():
            print(f"{label:16} {case:24} {statistics.median(t):10.1f} {min(t):7.1f} {max(t):7.1f}")
        for label, tree in trees.items():
            print(f"heavy modules imported by --help ({label}): {heavy(tree)}")
    finally:
        if tmp is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp)], check=False)


if __name__ == "__main__":
    main()
