"""Issue 36: each committed capture of tests/data/findings/ (models nobody on the team wrote, under
the default tool, nsys and torch.profiler) imported as `profkit run` imports it, with the figures
the issue's acceptance reads: the share of kernel time of unknown precision, the findings, the
GPU's busy share of the profiled and of the bare iteration, and the share of kernel time with an
operator.  python benchmarks/findings_tools.py [NAME-PREFIX...]"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profkit.analyze.findings import findings  # noqa: E402
from profkit.store import Store  # noqa: E402
from tests.where_data import FINDINGS, FINDINGS_RUNS, import_where  # noqa: E402


def main(prefixes: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "f.db", create=True)
        print(f"{'run':24} {'unknown':>7} {'ops':>5} {'busy':>5} {'bare':>5}  findings")
        for name in FINDINGS_RUNS:
            if prefixes and not any(name.startswith(p) for p in prefixes):
                continue
            run = import_where(store, name, FINDINGS)
            groups = [g for g in store.kernel_groups(run.id) if g.kind == "kernel"]
            total = sum(g.time_ns for g in groups) or 1
            unknown = sum(g.time_ns for g in groups if g.precision == "unknown")
            attributed = sum(g.time_ns for g in groups if g.op)
            harness = run.info.harness or {}
            walls, bare = (
                harness.get("iteration_wall_ns") or [],
                harness.get("bare_iteration_ns") or [],
            )
            per_iter = total / max(1, len(walls))
            busy = 100 * per_iter / (sum(walls) / len(walls)) if walls else float("nan")
            busy_bare = 100 * per_iter / min(bare) if bare else float("nan")
            found = " ".join(f.id for f in findings(store, run))
            print(
                f"{name:24} {100 * unknown / total:6.2f}% {100 * attributed / total:4.0f}% {busy:4.0f}% "
                f"{busy_bare:4.0f}%  {found}"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
