"""End to end under Nsight Compute. Skipped where there is no GPU or no ncu; run on the GPU
machine before GPU work is called done."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import cli, cli_json, needs_gpu_ncu, one_line_error

HERE = Path(__file__).parent


@needs_gpu_ncu
def test_run_resnet18_fp16_two_iterations(db):
    r = cli(
        "run",
        "resnet18",
        "--tool",
        "ncu",
        "--precision",
        "fp16",
        "--batch-size",
        "2",
        "--iters",
        "2",
        "--name",
        "r18",
        db=db,
    )
    assert r.exit_code == 0, r.output
    s = cli_json("summary", "r18", db=db)
    ks = cli_json("kernels", "r18", db=db)
    assert s["kernels"] == len(ks) > 0
    ranges = {k["nvtx_range"] for k in ks}
    assert ranges == {"resnet18.fp16.eager.iter0", "resnet18.fp16.eager.iter1"}
    per_iter = [sum(k["nvtx_range"].endswith(f"iter{i}") for k in ks) for i in (0, 1)]
    assert per_iter[0] == per_iter[1]
    # Counters decide every launch's tensor cores; the precision of the others is the counters',
    # a name rule's or the launching operator's (issue 23), and attribution is on under ncu.
    assert all(k["evidence"] == "metrics" for k in ks if k["tensor_core"])
    assert {k["evidence"] for k in ks} <= {"metrics", "name", "dtypes"}
    assert all(
        k["evidence_detail"].startswith(("tensor-path", "counters of launch"))
        for k in ks
        if k["evidence"] != "dtypes"
    )
    assert all(k["module"] is not None and k["op"] and k["phase"] == "forward" for k in ks)
    assert s["tensor_core_kernels"] > 0 and 0 < s["tensor_core_time_pct"] < 100
    assert all(k["precision"] == "fp16" for k in ks if k["tensor_core"])
    assert not any(
        k["tensor_core"] for k in ks if k["family"] in ("elementwise", "layout", "pooling", "norm")
    )
    run = cli_json("runs", db=db)[0]
    assert run["gpu_name"] and run["compute_capability"]
    # A first run counts in its own process (CUPTI's Range Profiler): no ncu report, the counts kept.
    import profkit

    plan = profkit.open_db(db).run("r18").info["ncu_plan"]
    assert plan["counted_by"].startswith("CUPTI's Range Profiler") and plan["passes"] > 1
    # one range a kernel function (the launch callbacks), not one a launch
    assert plan["counted_ranges"] == plan["profiled_launches"] < plan["counted_launches"]
    assert "ranges_fallback" not in plan
    folder = Path(str(db)).parent / "profkit-runs" / "r18"
    assert (folder / "kernel_counts.json").exists() and not (folder / "report.ncu-rep").exists()
    # the launch callbacks named the launched kernels as the timed step's records do
    counts = json.loads((folder / "kernel_counts.json").read_text())
    assert counts["range_mode"] == "first" and 0 < counts["named_launches"] <= counts["launches"]


@needs_gpu_ncu
def test_counting_under_ncu_gives_the_same_verdicts(db, monkeypatch):
    """PROFKIT_NCU_COUNTING=ncu: ncu counts in a process of its own (the plan before issue 25's
    in-process counting, and its fallback); its report is small and its verdicts are the
    in-process run's, launch by launch."""
    import profkit

    args = (
        "run",
        "resnet18",
        "--tool",
        "ncu",
        "--precision",
        "fp16",
        "--batch-size",
        "2",
        "--no-report",
    )
    assert cli(*args, "--name", "here", db=db).exit_code == 0
    monkeypatch.setenv("PROFKIT_NCU_COUNTING", "ncu")
    assert cli(*args, "--name", "ncu", "--fresh-counters", db=db).exit_code == 0
    d = profkit.open_db(db)
    assert d.run("here").info["ncu_plan"]["counted_by"].startswith("CUPTI's Range Profiler")
    rep = Path(str(db)).parent / "profkit-runs" / "ncu" / "report.ncu-rep"
    # --import-sass 0: no embedded cubins (a default report of this run would be tens of MB).
    assert rep.exists() and rep.stat().st_size < 15_000_000
    assert "counted_by" not in d.run("ncu").info["ncu_plan"]

    def verdicts(run):
        return [
            (k["precision"], k["tensor_core"], k["family"], k["evidence"], k["metrics"] is None)
            for k in run.iter_kernels()
        ]

    assert len(verdicts(d.run("here"))) > 0 and verdicts(d.run("here")) == verdicts(d.run("ncu"))

    # the same counter values launch by launch, the duration aside (ncu replays it alone; the
    # run's ranges do not count it); names apart: ncu's rows carry ncu's demangling, and ncu
    # adds the SM's warp limits (sm__maximum_warps_*) to every report
    def counters(run):
        return [
            {
                m: v
                for m, v in (k["metrics"] or {}).items()
                if not m.startswith("gpu__time_duration")
            }
            for k in run.iter_kernels()
        ]

    here, ncu = counters(d.run("here")), counters(d.run("ncu"))
    differ = [
        (i, m, a.get(m), b.get(m))
        for i, (a, b) in enumerate(zip(here, ncu))
        for m in sorted(set(a) | set(b))
        if "maximum_warps" not in m and a.get(m) != b.get(m)
    ]
    assert any(here) and len(here) == len(ncu) and not differ, differ[:30]


@needs_gpu_ncu
def test_no_kernels_profiled_is_an_error(db):
    one_line_error(
        cli("run", HERE / "workloads" / "no_gpu_work.py", "--tool", "ncu", db=db),
        "profiled no kernels",
    )
    # recorded as failed, with the error, and no kernels (its log stays in its raw folder)
    assert [(r["status"], r["kernel_count"]) for r in cli_json("runs", db=db)] == [("failed", 0)]


@needs_gpu_ncu
def test_broken_workload_is_one_line(db):
    r = cli("run", HERE / "workloads" / "broken_build.py", db=db)
    # `--tool auto` says which tool it chose, then the one error line (between them, where the
    # run took longer than cli.QUIET_S, its stages: issue 24).
    lines = r.stderr.strip().splitlines()
    note, error = lines[0], lines[-1]
    assert all(not x.startswith("profkit: error") for x in lines[1:-1]), lines
    assert note.startswith("profkit: tool: ") and r.exit_code == 1
    assert (
        error.startswith("profkit: error: ")
        and "weights file missing" in error
        and "Traceback" not in r.output
    )
    assert [(r["status"], r["kernel_count"]) for r in cli_json("runs", db=db)] == [("failed", 0)]


@needs_gpu_ncu
def test_default_plan_counts_each_function_once_and_times_every_launch(db):
    """Hopper's default: ncu counts each kernel function's first launch, a second harness times
    every launch (CUPTI); TorchScript (whose tracing runs the model) waits its turn from the
    start. `--metrics full` profiles every launch instead, with ncu's own durations."""
    import profkit

    r = cli(
        "run",
        "resnet18",
        "--tool",
        "ncu",
        "--precision",
        "fp16",
        "--mode",
        "torchscript",
        "--batch-size",
        "2",
        "--name",
        "ts",
        db=db,
    )
    assert r.exit_code == 0, r.output
    run = profkit.open_db(db).run("ts")
    plan = run.info["ncu_plan"]
    assert plan["durations"] == "cupti" and run.metric_set == "full per function"
    ks = cli_json("kernels", "ts", db=db)
    counted = [k for k in ks if k["metrics"]]
    assert len(counted) == plan["profiled_launches"] == len({k["name"] for k in ks}) < len(ks)
    assert all(k["start_ns"] and k["duration_ns"] for k in ks)
    # off them: counters, names or types
    assert all(k["evidence"] == "metrics" for k in ks if k["tensor_core"])
    # TorchScript: the operators are the scripted graph's; no module hooks run inside it.
    assert all(k["op"] for k in ks) and {k["module"] for k in ks} <= {"", "(outside modules)"}
    assert sum("counters of launch" in k["evidence_detail"] for k in ks) == len(ks) - len(counted)
    assert all(k["nvtx_range"] == "resnet18.fp16.torchscript.iter0" for k in ks)
    # CUPTI's thread, as an OS thread id
    assert len({k["thread_id"] for k in ks}) == 1 and ks[0]["thread_id"]
    assert len(run.range_rows()) == 1 and run.range_rows()[0]["kernels"] == len(ks)

    r = cli(
        "run",
        "resnet18",
        "--tool",
        "ncu",
        "--precision",
        "fp16",
        "--batch-size",
        "2",
        "--metrics",
        "full",
        "--name",
        "every",
        db=db,
    )
    assert r.exit_code == 0, r.output
    every = profkit.open_db(db).run("every")
    assert every.info["ncu_plan"]["durations"] == "ncu" and every.metric_set == "full"
    assert all(k["metrics"] and k["start_ns"] is None for k in cli_json("kernels", "every", db=db))


@needs_gpu_ncu
def test_a_repeated_run_takes_the_kept_counters_and_starts_no_ncu(db):
    """Issue 25: the second run of the same kind in this environment times every launch alone
    and takes each function's counters from the first run (no ncu report); verdicts equal the
    first run's launch by launch. With some kept counters gone, ncu counts only those functions;
    --fresh-counters counts every function again."""
    import sqlite3

    import profkit

    args = (
        "run",
        "resnet18",
        "--tool",
        "ncu",
        "--precision",
        "fp16",
        "--batch-size",
        "2",
        "--no-report",
    )
    for name, extra in (("first", ()), ("repeat", ())):
        r = cli(*args, "--name", name, *extra, db=db)
        assert r.exit_code == 0, r.output
    d = profkit.open_db(db)
    first, repeat = d.run("first"), d.run("repeat")
    plans = [r.info["ncu_plan"] for r in (first, repeat)]
    assert plans[0]["counters"]["strategy"] == "counted" and plans[0]["counters"]["kept"] > 0
    assert plans[1]["counters"]["strategy"] == "timed first" and plans[1]["profiled_launches"] == 0
    assert plans[1]["counters"]["cached"] == plans[0]["counters"]["kept"]
    folder = Path(str(db)).parent / "profkit-runs"
    assert (
        not (folder / "repeat" / "report.ncu-rep").exists()
        and (folder / "first" / "kernel_counts.json").exists()
    )

    # ncu's demangling of a name has differed between its runs ("(Params)", "(T1::Params)")
    def verdicts(
        run,
    ):
        return [
            (k["short_name"], k["precision"], k["tensor_core"], k["family"], k["evidence"])
            for k in run.iter_kernels()
        ]

    assert verdicts(repeat) == verdicts(first)
    assert [k["name"] for k in repeat.iter_kernels()] == [k["name"] for k in first.iter_kernels()]
    assert all(
        "of run 'first', kept across runs" in k["evidence_detail"]
        for k in repeat.iter_kernels()
        if k["evidence"] == "metrics"
    )
    con = sqlite3.connect(db)
    with con:
        gone = con.execute(
            "delete from counters where rowid in (select rowid from counters limit 2)"
        ).rowcount
    con.close()
    assert gone == 2
    assert cli(*args, "--name", "partial", db=db).exit_code == 0
    partial = d.run("partial")
    assert partial.info["ncu_plan"]["counters"]["strategy"] == "timed first"
    assert (
        partial.info["ncu_plan"]["profiled_launches"]
        == 2
        == partial.info["ncu_plan"]["counters"]["kept"]
    )
    assert verdicts(partial) == verdicts(first)
    assert cli(*args, "--name", "fresh", "--fresh-counters", db=db).exit_code == 0
    fresh = d.run("fresh")
    assert fresh.info["ncu_plan"]["counters"]["strategy"] == "fresh"
    assert fresh.info["ncu_plan"]["profiled_launches"] == plans[0]["profiled_launches"]
    assert verdicts(fresh) == verdicts(first)


@needs_gpu_ncu
def test_a_repeated_run_takes_its_own_launch_counts_after_another_batch_size(db):
    """Issue 34: resnet18 at batch 2, then at batch 8 (the same cuDNN and CUTLASS functions with
    other op counts), then at batch 2 again: the repeat takes the first run's counters, launch by
    launch, never the batch-8 run's; its timing process reported the libraries it mapped and its
    workload's sources, the same as the first run's."""
    import profkit

    args = ("run", "resnet18", "--tool", "ncu", "--precision", "fp16", "--no-report")
    for name, batch in (("b2", "2"), ("b8", "8"), ("b2-again", "2")):
        r = cli(*args, "--batch-size", batch, "--name", name, db=db)
        assert r.exit_code == 0, r.output
    d = profkit.open_db(db)
    first, other, again = d.run("b2"), d.run("b8"), d.run("b2-again")
    uses = [r.info["ncu_plan"]["counters"] for r in (first, other, again)]
    assert [u["strategy"] for u in uses] == ["counted", "counted", "timed first"]
    assert all(
        u["environment"]["native_libraries"] != "unknown"
        and u["environment"]["workload_sources"] != "unknown"
        for u in uses
    )
    assert (
        uses[2]["environment"] == uses[0]["environment"]
        and uses[2]["cached"] == uses[0]["kept"] > 0
    )
    assert [(k["name"], k["metrics"]) for k in again.iter_kernels()] == [
        (k["name"], k["metrics"]) for k in first.iter_kernels()
    ]
    assert not any("of run 'b8'" in k["evidence_detail"] for k in again.iter_kernels())
