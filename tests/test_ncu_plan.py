"""ncu's per-function plan (issue 12): the first launch of each kernel function counted by ncu,
every launch timed by CUPTI in a second harness. Real captures made by `profkit run` on an
H100 (benchmarks/ncu_plan.sh), beside the same workload profiled on every launch with the
7-pass `full` preset: the verdicts must agree launch by launch."""

from __future__ import annotations

from collections import Counter

import pytest

from profkit.classify import classified
from profkit.parse.ncu_csv import read_ncu_csv
from profkit.parse.ncu_plan import read_per_function
from profkit.tools import ncu

from .conftest import DATA

PLAN = DATA / "ncu_plan"


def per_function(workload: str, thread_ids=None):
    return read_per_function(
        PLAN / f"{workload}_fp16.raw.csv.gz",
        PLAN / f"{workload}_fp16.raw-mangled.csv.gz",
        PLAN / f"{workload}_fp16.kernel_times.json.gz",
        f"{workload}.fp16.eager",
        "profkit",
        thread_ids,
    )


@pytest.mark.parametrize("workload, launches, functions", [("vgg16", 90, 16), ("mnv2", 265, 24)])
def test_verdicts_equal_the_7_pass_preset_launch_by_launch(workload, launches, functions):
    capture = per_function(workload)
    rows = list(classified(capture).rows)
    every = list(
        classified(read_ncu_csv(PLAN / f"{workload}_fp16_full_every_launch.raw.csv.gz")).rows
    )
    assert len(rows) == len(every) == launches
    assert [(r["name"], r["precision"], r["tensor_core"]) for r in rows] == [
        (r["name"], r["precision"], r["tensor_core"]) for r in every
    ]
    # counters or, off the tensor cores, a name
    assert [r["evidence"] for r in rows] == [r["evidence"] for r in every]
    assert {r["evidence"] for r in rows if r["tensor_core"]} == {"metrics"}
    counted = [r for r in rows if r["metrics"]]
    assert len(counted) == functions == len({r["name"] for r in rows})
    # Every other launch says whose counters decided it, and that launch is its function's first.
    first = {r["name"]: r["launch_id"] for r in counted}
    for r in rows:
        if not r["metrics"]:
            assert r["evidence_detail"].startswith(
                f"counters of launch {first[r['name']]} (the first of this kernel"
            )


def test_times_and_ranges_come_from_cupti():
    capture = per_function("vgg16", thread_ids=None)
    rows = list(capture.rows)
    assert all(r["duration_ns"] and r["start_ns"] for r in rows)
    # one stream: launch order
    assert [r["start_ns"] for r in rows] == sorted(r["start_ns"] for r in rows)
    (iteration,) = capture.ranges
    assert iteration["name"] == "vgg16.fp16.eager.iter0" and iteration["kernels"] == 90
    assert iteration["gpu_time_ns"] == sum(r["duration_ns"] for r in rows)
    assert (
        iteration["start_ns"] <= rows[0]["start_ns"]
        and rows[-1]["start_ns"] <= iteration["start_ns"] + iteration["wall_ns"]
    )
    assert {r["nvtx_path"] for r in rows} == {"profkit@vgg16.fp16.eager.iter0"}
    assert Counter(r["grid_x"] is not None for r in rows)[True] == 90


def test_thread_ids_become_os_thread_ids():
    """CUPTI names the launching thread by its pthread id; the harness maps its own to the OS id."""
    pthread = next(iter({r["thread_id"] for r in per_function("vgg16", {}).rows} - {None}), None)
    assert pthread is None  # without a mapping no thread id is claimed
    import gzip
    import json

    times = json.loads(gzip.decompress((PLAN / "vgg16_fp16.kernel_times.json.gz").read_bytes()))
    main = Counter(k["thread"] for k in times["kernels"]).most_common(1)[0][0]
    rows = list(per_function("vgg16", {main: 4242}).rows)
    assert {r["thread_id"] for r in rows} <= {4242, None} and rows[0]["thread_id"] == 4242


def test_progress_lines_with_a_kernel_id_filter():
    """With --kernel-id ncu names each profiled kernel by its id, with no launch index."""
    lines = [
        l
        for l in (PLAN / "vgg16_fp16.ncu.log").read_text().splitlines()
        if l.startswith("==PROF== Profiling")
    ]
    parsed = [ncu.parse_progress(l) for l in lines]
    assert len(parsed) == 16 and all(p and p[0] is None and p[2] == 7 for p in parsed)
    assert parsed[0][1].startswith("_Z23implicit_convolve_sgemm")


def test_the_plan_is_per_chip_data():
    from profkit.classify import per_function_plan

    assert per_function_plan("9.0") and not per_function_plan("8.0") and not per_function_plan(None)
    assert ncu.PER_FUNCTION == [
        "--kernel-name-base",
        "mangled",
        "--kernel-id",
        "::regex:.:1",
        "--cache-control",
        "none",
        "--clock-control",
        "none",
    ]


def test_a_stored_per_function_run_has_a_timeline_and_compares_with_timelines(tmp_path):
    """Its durations are CUPTI's, as the kernels ran: the report draws its iteration, and a diff
    against ncu's replayed durations (every launch profiled) says they do not compare."""
    import profkit
    from profkit.report.model import timeline

    db = profkit.open_db(tmp_path / "p.db")
    store = db.store
    plan = {"durations": "cupti", "profiled_launches": 16}
    run = store.add_run(
        {"name": "plan", "source": "run", "tool": "ncu", "info": {"ncu_plan": plan}},
        classified(per_function("vgg16")),
    )
    every = store.add_run(
        {"name": "every", "source": "run", "tool": "ncu"},
        classified(read_ncu_csv(PLAN / "vgg16_fp16_full_every_launch.raw.csv.gz")),
    )
    drawn = timeline(db.store, db.run(run.name))
    assert len(drawn["bars"]) == 90 and drawn["note"].startswith(
        "iteration vgg16.fp16.eager.iter0: 90"
    )
    assert timeline(db.store, db.run(every.name))["bars"] == []
    d = db.diff("plan", "every")
    assert any("not comparable" in n for n in d.totals.notes)
    # same kernels, same calls: status from calls alone
    assert {r.status for r in d.rows} == {"same"}


@pytest.mark.parametrize(
    "damage",
    ["not json", "[]", '{"marks": [], "kernels": [1]}', "record without start", "grid none"],
)
def test_a_damaged_kernel_times_file_is_one_clear_error(tmp_path, damage):
    import gzip
    import json

    from profkit.errors import BadExport

    times = json.loads(gzip.decompress((PLAN / "vgg16_fp16.kernel_times.json.gz").read_bytes()))
    if damage == "record without start":
        damage = json.dumps({"marks": times["marks"], "kernels": [{"name": "x"}]})
    elif damage == "grid none":
        damage = json.dumps(
            {"marks": times["marks"], "kernels": [{**times["kernels"][0], "grid": None}]}
        )
    path = tmp_path / "kernel_times.json"
    path.write_text(damage)
    with pytest.raises(BadExport, match="kernel-times file|kernel record"):
        read_per_function(
            PLAN / "vgg16_fp16.raw.csv.gz",
            PLAN / "vgg16_fp16.raw-mangled.csv.gz",
            path,
            "vgg16.fp16.eager",
            "profkit",
        )


def test_a_function_ncu_did_not_count_is_demangled_and_judged_by_name():
    """Launches of a function ncu did not profile (another thread's, or another kernel choice)
    get the C++ runtime's demangling of CUPTI's name and a verdict from the name rules."""
    import gzip
    import json

    from profkit.names import demangle, short_name
    from profkit.parse.ncu_plan import _join, _windows, ncu_functions

    mangled = list(read_ncu_csv(PLAN / "vgg16_fp16.raw-mangled.csv.gz").rows)
    demangled = list(read_ncu_csv(PLAN / "vgg16_fp16.raw.csv.gz").rows)
    functions, _ = ncu_functions(
        PLAN / "vgg16_fp16.raw.csv.gz", PLAN / "vgg16_fp16.raw-mangled.csv.gz"
    )
    dropped = mangled[1]["name"]  # PyTorch's elementwise add in fp16
    del functions[dropped]
    times = json.loads(gzip.decompress((PLAN / "vgg16_fp16.kernel_times.json.gz").read_bytes()))
    notes: list[str] = []
    rows, _, _ = _join(
        times["kernels"],
        _windows([tuple(m) for m in times["marks"]]),
        functions,
        "vgg16.fp16.eager",
        "profkit",
        {},
        notes,
    )
    mine = [
        r
        for r in rows
        if r["evidence"] == "name"
        and not r["evidence_detail"].startswith(("tensor-path", "counters"))
    ]
    assert mine and {r["name"] for r in mine} == {demangle(dropped)} != {dropped}
    assert short_name(demangle(dropped)) == demangled[1]["short_name"] == "elementwise_kernel"
    assert {(r["precision"], r["tensor_core"], r["family"]) for r in mine} == {
        ("fp16", False, "elementwise")
    }
