"""How long `profkit --help` (and `python -c 'import profkit'`) take, as a user starts them.

Runs each command N times in a fresh process and prints the median and spread (min, max)
of the wall time in milliseconds, plus the heavy modules each start-up imported.
Usage: python benchmarks/cli_startup.py [N]
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time

HEAVY = ("torch", "pandas", "numpy", "sqlite_utils", "ncu_report", "rich.table")


def timed(argv: list[str], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def heavy_imports(code: str) -> str:
    probe = code + "; import sys; print(','.join(m for m in %r if m in sys.modules))" % (HEAVY,)
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() or "none"


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    exe = shutil.which("profkit") or "profkit"
    cases = {
        "profkit --help": [exe, "--help"],
        "python -m profkit --help": [sys.executable, "-m", "profkit", "--help"],
        "python -c 'import profkit'": [sys.executable, "-c", "import profkit"],
        "python -c 'pass' (interpreter alone)": [sys.executable, "-c", "pass"],
    }
    timed(cases["profkit --help"], 2)  # warm the file cache
    print(f"{'command':40} {'median ms':>10} {'min':>7} {'max':>7}")
    for label, argv in cases.items():
        t = timed(argv, n)
        print(f"{label:40} {statistics.median(t):10.1f} {min(t):7.1f} {max(t):7.1f}")
    help_code = ("from typer.testing import CliRunner; from profkit.cli import app; "
                 "CliRunner().invoke(app, ['--help'])")
    print("heavy modules imported by --help:", heavy_imports(help_code))
    print("heavy modules imported by 'import profkit':", heavy_imports("import profkit"))


if __name__ == "__main__":
    main()
