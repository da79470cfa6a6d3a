"""Two ncu runs of the same workload compared launch by launch (issue 25): a run that took its
counters from the database against the run that counted them (or a fresh count). Prints one
JSON object: each run's strategy, functions counted / taken from the cache, profiled launches,
profiled wall, and the launches whose verdict (name, precision, tensor cores, family,
evidence) differs (there should be none).

    python benchmarks/counter_cache_check.py DB RUN REFERENCE_RUN
"""

import json
import sys

from profkit.api import open_db


def main() -> None:
    db, new, ref = sys.argv[1:4]
    d = open_db(db, create=False)
    a, b = d.run(new), d.run(ref)

    def verdicts(run):
        return [
            (k["name"], k["precision"], k["tensor_core"], k["family"], k["evidence"])
            for k in run.iter_kernels()
        ]

    va, vb = verdicts(a), verdicts(b)
    diffs = [
        {"launch": i, "run": x, "reference": y} for i, (x, y) in enumerate(zip(va, vb)) if x != y
    ]

    def plan(run):
        p = run.info.get("ncu_plan", {})
        c = p.get("counters", {})
        return {
            "strategy": c.get("strategy"),
            "cached": c.get("cached"),
            "counted": c.get("counted"),
            "kept": c.get("kept"),
            "profiled_launches": p.get("profiled_launches"),
            "profiled_wall_s": run.profiled_wall_s,
            "wall_s": p.get("wall_s"),
        }

    print(
        json.dumps(
            {
                "workload": a.workload,
                "mode": a.mode,
                "run": new,
                "reference": ref,
                "launches": len(va),
                "launches_reference": len(vb),
                "mismatches": len(diffs) + abs(len(va) - len(vb)),
                "first_mismatches": diffs[:5],
                "plan": plan(a),
                "plan_reference": plan(b),
            }
        )
    )


if __name__ == "__main__":
    main()
