"""ncu's counters kept across runs (issue 25): a kernel function's counters read by one run's ncu
stand for it in the next run of the same environment, and the verdict they give is the one a
fresh count gives, launch by launch. Real per-function captures made by `profkit run` on an
H100 (tests/data/ncu_plan, tests/data/where and tests/data/catalog's ncu runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profkit import ncu_counters
from profkit.ingest import now, store_capture
from profkit.options import RunOptions
from profkit.parse.ncu_plan import DETAIL_KEPT, Counted, ncu_functions, read_timed, timed_functions, kernel_times
from profkit.records import CountedFunction, RunInfo
from profkit.store import Store
from profkit.tools import ncu

from .conftest import DATA

PLAN = DATA / "ncu_plan"
WORKLOAD = Path(__file__).resolve().parents[1] / "workloads" / "resnet50.py"


def _captures() -> list[tuple[str, Path, Path, Path, str, dict[int, int], bool]]:
    """(label, raw CSV, mangled CSV, kernel times, run tag, thread ids, process-wide) of every
    committed per-function capture."""
    out = [(w, PLAN / f"{w}_fp16.raw.csv.gz", PLAN / f"{w}_fp16.raw-mangled.csv.gz",
            PLAN / f"{w}_fp16.kernel_times.json.gz", f"{w}.fp16.eager", {}, False) for w in ("vgg16", "mnv2")]
    for base in (DATA / "where", DATA / "catalog"):
        for folder in sorted(base.iterdir()):
            if not (folder / "kernel_times.json.gz").exists():
                continue
            job = json.loads((folder / "job.json").read_text())
            times = json.loads((folder / "harness-times.json").read_text())
            ids = {int(k): int(v) for k, v in (times.get("thread_ids") or {}).items()}
            out.append((folder.name, folder / "raw.csv.gz", folder / "raw-mangled.csv.gz",
                        folder / "kernel_times.json.gz", job["tag"], ids, True))
    return out


CAPTURES = _captures()
KEY = ("NVIDIA H100 80GB HBM3 (sm 9.0)", "environment-digest", "full:digest")


def _verdicts(rows):
    return [(r["launch_id"], r["name"], r["short_name"], r["precision"], r["tensor_core"], r["family"], r["evidence"],
             r["duration_ns"], r["op"], r["module"]) for r in rows]


@pytest.mark.parametrize("label, raw, mangled, times, tag, ids, process_wide", CAPTURES, ids=[c[0] for c in CAPTURES])
def test_a_kept_verdict_equals_the_one_it_stands_for(tmp_path, label, raw, mangled, times, tag, ids, process_wide):
    """Counters kept in the database from one run, read back for the next, give every launch
    the verdict this run's own ncu report gives it; each launch names the run they came from."""
    functions, profiled = ncu_functions(raw, mangled)
    fresh_capture = read_timed(times, functions, tag, "profkit", ids, process_wide)
    fresh = list(fresh_capture.rows)
    first = fresh_capture.counted_launches
    assert first and set(first) <= set(functions)
    store = Store(tmp_path / "p.db")
    written = store.keep_counters(KEY, [CountedFunction(m, "", f.name, f.short_name, f.metrics, f.metric_units, 7,
                                                        "earlier-run", first[m])
                                        for m, f in functions.items() if m in first])
    assert written == len(first)
    found = store.counted(KEY, [(m, "") for m in timed_functions(kernel_times(times))])
    kept = {m: Counted(f.name, f.short_name, f.metrics, f.metric_units, kept=f) for (m, _), f in found.items()}
    assert set(kept) == set(first)  # every function timed and counted is found again
    again_capture = read_timed(times, kept, tag, "profkit", ids, process_wide)
    again = list(again_capture.rows)
    assert _verdicts(again) == _verdicts(fresh)
    assert again_capture.counted_launches == {}  # nothing counted by this run's ncu: nothing to keep again
    for a, f in zip(again, fresh):
        assert bool(a["metrics"]) == bool(f["metrics"]) and a["metrics"] == f["metrics"]  # on the same launch
        if a["evidence"] == "metrics":
            assert "of run 'earlier-run', kept across runs" in a["evidence_detail"]
            launch = first[next(m for m, c in kept.items() if c.name == a["name"])] if a["metrics"] else None
            if launch is not None:
                assert a["evidence_detail"].startswith(f"counters of launch {launch} of run")
            assert f["evidence_detail"].endswith(a["evidence_detail"].split("): ", 1)[1])
    assert any("kept from earlier runs" in n for n in again_capture.notes)


def test_only_the_same_key_and_scope_finds_counters(tmp_path):
    functions, _ = ncu_functions(PLAN / "vgg16_fp16.raw.csv.gz", PLAN / "vgg16_fp16.raw-mangled.csv.gz")
    m, f = next(iter(functions.items()))
    store = Store(tmp_path / "p.db")
    store.keep_counters(KEY, [CountedFunction(m, "", f.name, f.short_name, f.metrics, f.metric_units, 1, "a", 0)])
    assert store.counted(KEY, [(m, "")])[(m, "")].metrics == f.metrics
    assert store.counted((KEY[0], "another-environment", KEY[2]), [(m, "")]) == {}
    assert store.counted(("NVIDIA A100-SXM4-80GB (sm 8.0)", *KEY[1:]), [(m, "")]) == {}
    assert store.counted(KEY, [(m, "digest-of-a-generated-kernel")]) == {}
    # Counted again: the latest count stands.
    store.keep_counters(KEY, [CountedFunction(m, "", f.name, f.short_name, {"x": 1.0}, {}, 2, "b", 5)])
    again = store.counted(KEY, [(m, "")])[(m, "")]
    assert (again.metrics, again.run_name, again.launch_id) == ({"x": 1.0}, "b", 5)


def test_a_run_of_the_same_kind_in_this_environment_makes_the_next_run_timed_first(tmp_path):
    """The strategy: counted (ncu beside the timer) until a run of the same workload, precision,
    batch, device, options and kernel source completed in this environment; then timed first.
    TorchScript launches ATen's kernels as eager does; compile and another precision do not
    follow from an eager run; --fresh-counters always counts."""
    store = Store(tmp_path / "p.db")
    gpu = ("NVIDIA H100 80GB HBM3", "9.0")

    def plan(**given):
        return ncu_counters.plan(store, RunOptions.make(**given), "resnet50", WORKLOAD, gpu, "580.159.04", "2025.3.1",
                                 "full", ["m1", "m2"])

    first = plan(precision="fp16")
    assert first.strategy == ncu_counters.COUNTED
    capture = read_timed(PLAN / "vgg16_fp16.kernel_times.json.gz",
                         ncu_functions(PLAN / "vgg16_fp16.raw.csv.gz", PLAN / "vgg16_fp16.raw-mangled.csv.gz")[0],
                         "vgg16.fp16.eager", "profkit")
    fields = {"name": "earlier", "source": "run", "tool": "ncu", "started_at": now(), "workload": "resnet50",
              "info": RunInfo(ncu_plan={"counters": first.use()})}
    store_capture(store, capture, fields, store.reserve("earlier", "earlier", fields, status="running"))
    assert plan(precision="fp16").strategy == ncu_counters.TIMED_FIRST
    # Its kernels carry ncu's names (kept or read now), whether or not ncu wrote files this time:
    # diff matches them by exact name against ncu runs.
    from profkit.analyze.diff import _dialect

    assert "ncu-csv" not in store.get_run("earlier").raw_files and _dialect(store.get_run("earlier")) == "ncu-csv"
    assert plan(precision="fp16", mode="torchscript").strategy == ncu_counters.TIMED_FIRST
    assert plan(precision="fp16", mode="compile").strategy == ncu_counters.COUNTED
    assert plan(precision="fp32").strategy == ncu_counters.COUNTED
    assert plan(precision="fp16", batch_size=16).strategy == ncu_counters.COUNTED
    assert plan(precision="fp16", channels_last=True).strategy == ncu_counters.COUNTED
    assert plan(precision="fp16", fresh_counters=True).strategy == ncu_counters.FRESH
    other_driver = ncu_counters.plan(store, RunOptions.make(precision="fp16"), "resnet50", WORKLOAD, gpu, "590.1",
                                     "2025.3.1", "full", ["m1", "m2"])
    assert other_driver.strategy == ncu_counters.COUNTED and other_driver.key[1] != first.key[1]
    # The workload's file changed (its own kernels may have): counted again.
    edited = tmp_path / "resnet50.py"
    edited.write_text(WORKLOAD.read_text() + "\n# edited\n")
    changed = ncu_counters.plan(store, RunOptions.make(precision="fp16"), "resnet50", edited, gpu, "580.159.04",
                                "2025.3.1", "full", ["m1", "m2"])
    assert changed.strategy == ncu_counters.COUNTED


def test_a_name_that_does_not_spell_its_types_is_kept_for_its_signature_only(tmp_path):
    """A C++ function's mangled name spells its template arguments: its counters hold in every
    run of the environment. Any other name (Triton, extern "C") may be compiled for other types
    under the same name: its counters hold for runs of the same signature (an fp16 run does not
    take an fp32 run's); a torch.compile kernel's, where its source is the same."""
    store = Store(tmp_path / "p.db")
    gpu = ("NVIDIA H100 80GB HBM3", "9.0")

    def plan(precision):
        return ncu_counters.plan(store, RunOptions.make(precision=precision), "resnet50", WORKLOAD, gpu, "580.159.04",
                                 "2025.3.1", "full", ["m1"])

    fp16, fp32 = plan("fp16"), plan("fp32")
    assert fp16.scope("_ZN2at6native18elementwise_kernelEv") == fp32.scope("_ZN2at6native18elementwise_kernelEv") == ""
    assert fp16.scope("_attn_fwd") != fp32.scope("_attn_fwd") and fp16.scope("_attn_fwd").startswith("signature:")
    fp16.scopes = {"triton_poi_fused_add_0": "abc"}
    fp32.scopes = {"triton_poi_fused_add_0": "abc"}
    assert fp16.scope("triton_poi_fused_add_0") == fp32.scope("triton_poi_fused_add_0") == "source:abc"
    kept = CountedFunction("_attn_fwd", fp32.scope("_attn_fwd"), "_attn_fwd", "_attn_fwd", {"x": 1.0}, {}, 1, "fp32", 0)
    store.keep_counters(fp32.key, [kept])
    assert fp32.look_up(["_attn_fwd"]) and fp16.look_up(["_attn_fwd"]) == {}


def test_the_filter_names_only_the_functions_never_counted():
    assert ncu.per_function_argv() == ncu.PER_FUNCTION
    argv = ncu.per_function_argv(["_Z6kernelPf", "triton_poi_fused_add_0", "_ZN2at6native.part.0$x"])
    assert argv[:3] == ["--kernel-name-base", "mangled", "--kernel-id"] and argv[4:] == ncu.COUNTS_ONLY
    assert argv[3] == r"::regex:^(_Z6kernelPf|triton_poi_fused_add_0|_ZN2at6native\.part\.0\$x)$:1"
    assert ncu.per_function_argv(["a:b"]) == ncu.PER_FUNCTION  # a colon would end --kernel-id's name part


def test_a_generated_kernel_is_kept_under_its_source_digest():
    """torch.compile's kernel names repeat across models: two output code files defining the same
    name with different code give different digests, the same code the same one."""
    from profkit import annotate

    def code(body: str) -> str:
        return (f"triton_poi_fused_add_0 = async_compile.triton('triton_poi_fused_add_0', '''\n{body}\n''')\n"
                "triton_poi_fused_mul_1 = async_compile.triton('triton_poi_fused_mul_1', '''\nx * y\n''')\n")

    digests = {}
    for label, body in (("a", "x + y"), ("b", "x + 2 * y"), ("c", "x + y")):
        annotate._output_code_sources = lambda body=body: iter([code(body)])  # type: ignore[assignment]
        digests[label] = annotate.generated_kernel_digests()
    assert digests["a"]["triton_poi_fused_add_0"] != digests["b"]["triton_poi_fused_add_0"]
    assert digests["a"] == digests["c"]


def test_the_detail_of_a_kept_verdict_names_the_run():
    assert DETAIL_KEPT.format(launch=3, run="resnet50-fp16-eager-ncu", detail="HGMMA fp16") == (
        "counters of launch 3 of run 'resnet50-fp16-eager-ncu', kept across runs (same GPU, driver, CUDA, PyTorch "
        "and packages): HGMMA fp16")


@pytest.mark.parametrize("args, message", [
    (("--tool", "nsys", "--fresh-counters"), "--fresh-counters counts ncu's counters again; --tool nsys collects none"),
    (("--tool", "torch", "--fresh-counters"), "--tool torch collects none"),
    (("--tool", "ncu", "--metrics", "full", "--fresh-counters"), "with --metrics every launch is profiled"),
])
def test_fresh_counters_where_nothing_is_kept_is_one_line(tmp_path, args, message):
    """Refused before anything runs (no GPU needed), the database untouched."""
    from .conftest import cli, one_line_error

    db = tmp_path / "p.db"
    one_line_error(cli("run", "resnet18", *args, db=db), message, code=2)
    assert not db.exists()


def test_a_grid_without_ncu_refuses_fresh_counters():
    from profkit.errors import UsageError

    with pytest.raises(UsageError, match="it needs ncu among the `tools`"):
        RunOptions.make(fresh_counters=True).check_grid(["fp16"], ["eager"], ["nsys", "torch"])
    options = RunOptions.make(fresh_counters=True)
    assert options.cell("fp16", "eager", "ncu").fresh_counters and not options.cell("fp16", "eager", "nsys").fresh_counters
