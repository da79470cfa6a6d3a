"""Compare two ncu runs of the same workload launch by launch: the per-function plan (the
default) against every launch profiled with the 7-pass ``full`` preset. Prints one JSON
object: launches on each side, functions profiled, and every launch whose precision or
tensor-core verdict differs (there should be none).

    python benchmarks/ncu_plan_check.py DB NEW_RUN REF_RUN
"""

import json
import sys

from profkit.api import open_db


def main() -> None:
    db, new, ref = sys.argv[1:4]
    database = open_db(db, create=False)
    a, b = database.run(new), database.run(ref)
    rows_a, rows_b = list(a.iter_kernels()), list(b.iter_kernels())
    diffs = []
    for ra, rb in zip(rows_a, rows_b):
        if (ra["name"], ra["precision"], ra["tensor_core"]) != (
            rb["name"],
            rb["precision"],
            rb["tensor_core"],
        ):
            diffs.append(
                {
                    "launch": ra["launch_id"],
                    "new": [ra["name"][:90], ra["precision"], ra["tensor_core"]],
                    "ref": [rb["name"][:90], rb["precision"], rb["tensor_core"]],
                }
            )
    shared = sum("counters of launch" in (r["evidence_detail"] or "") for r in rows_a)
    print(
        json.dumps(
            {
                "workload": a.workload,
                "new": new,
                "ref": ref,
                "launches_new": len(rows_a),
                "launches_ref": len(rows_b),
                "functions_profiled": a.info.get("ncu_plan", {}).get("profiled_launches"),
                "verdicts_from_another_launch": shared,
                "evidence_new": sorted({r["evidence"] for r in rows_a}),
                "evidence_ref": sorted({r["evidence"] for r in rows_b}),
                "tensor_core_launches": [
                    sum(bool(r["tensor_core"]) for r in rows_a),
                    sum(bool(r["tensor_core"]) for r in rows_b),
                ],
                "gpu_time_ns": [a.gpu_time_ns, b.gpu_time_ns],
                "mismatches": len(diffs) + abs(len(rows_a) - len(rows_b)),
                "first_mismatches": diffs[:5],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
