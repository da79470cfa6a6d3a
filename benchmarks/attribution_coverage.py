"""How much of each stored run's kernel time has an operator and a module (issue 23's
attribution), and how its precision verdicts were reached.

    python benchmarks/attribution_coverage.py DB [RUN ...]

Per run: kernel time, the share with an operator, with a module, with shapes; the time per
phase; the share whose precision is unknown; and the time each kind of evidence decided.
"""

from __future__ import annotations

import sys
from collections import defaultdict

import profkit


def main(argv: list[str]) -> int:
    db, names = argv[0], argv[1:]
    database = profkit.open_db(db, create=False)
    for run in database.list_runs():
        if names and run.name not in names:
            continue
        run = database.run(run.name)
        total = 0
        by: dict[str, float] = defaultdict(float)
        for k in run.iter_kernels():
            if k["kind"] != "kernel":
                continue
            t = k["duration_ns"] or 0
            total += t
            by["op"] += t if k["op"] else 0
            by["module"] += t if k["module"] is not None else 0
            by["shapes"] += t if k["shapes"] else 0
            by[f"phase {k['phase']}"] += t
            by[f"precision {k['precision']}"] += t
            by[f"evidence {k['evidence']}"] += t
        if not total:
            continue
        pct = {key: round(100 * v / total, 2) for key, v in sorted(by.items())}
        print(
            f"{run.name} ({run.tool}): {total / 1e6:.3f} ms of kernels; "
            + ", ".join(f"{k} {v}%" for k, v in pct.items())
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
