"""ncu's counters kept across runs (issue 25): a kernel function's counters read by one run's ncu
stand for it in the next run of the same environment, and the verdict they give is the one a
fresh count gives, launch by launch. Real per-function captures made by `profkit run` on an
H100 (tests/data/ncu_plan, tests/data/where and tests/data/catalog's ncu runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from profkit import code_versions, ncu_counters
from profkit.analyze.throughput import throughput
from profkit.ingest import now, store_capture
from profkit.options import RunOptions
from profkit.parse.ncu_plan import (
    DETAIL_KEPT,
    Counted,
    kernel_times,
    ncu_functions,
    read_timed,
    timed_functions,
)
from profkit.records import CountedFunction, RunInfo
from profkit.store import Store
from profkit.tools import ncu

from .conftest import DATA, needs_torch

PLAN = DATA / "ncu_plan"
WORKLOAD = Path(__file__).resolve().parents[1] / "workloads" / "resnet50.py"


def _captures() -> list[tuple[str, Path, Path, Path, str, dict[int, int], bool]]:
    """(label, raw CSV, mangled CSV, kernel times, run tag, thread ids, process-wide) of every
    committed per-function capture."""
    out = [
        (
            w,
            PLAN / f"{w}_fp16.raw.csv.gz",
            PLAN / f"{w}_fp16.raw-mangled.csv.gz",
            PLAN / f"{w}_fp16.kernel_times.json.gz",
            f"{w}.fp16.eager",
            {},
            False,
        )
        for w in ("vgg16", "mnv2")
    ]
    for base in (DATA / "where", DATA / "catalog"):
        for folder in sorted(base.iterdir()):
            if not (folder / "kernel_times.json.gz").exists():
                continue
            job = json.loads((folder / "job.json").read_text())
            times = json.loads((folder / "harness-times.json").read_text())
            ids = {int(k): int(v) for k, v in (times.get("thread_ids") or {}).items()}
            out.append(
                (
                    folder.name,
                    folder / "raw.csv.gz",
                    folder / "raw-mangled.csv.gz",
                    folder / "kernel_times.json.gz",
                    job["tag"],
                    ids,
                    True,
                )
            )
    return out


CAPTURES = _captures()
KEY = ("NVIDIA H100 80GB HBM3 (sm 9.0)", "environment-digest", "full:digest", "signature-digest")
# What a run's timing process reports of the code it ran (process.common.code_environment).
PROCESS = {
    "native_libraries": "212 files, 0123456789abcdef",
    "workload_sources": "1 files, fedcba9876543210",
}


def _verdicts(rows):
    return [
        (
            r["launch_id"],
            r["name"],
            r["short_name"],
            r["precision"],
            r["tensor_core"],
            r["family"],
            r["evidence"],
            r["duration_ns"],
            r["op"],
            r["module"],
        )
        for r in rows
    ]


@pytest.mark.parametrize(
    "label, raw, mangled, times, tag, ids, process_wide", CAPTURES, ids=[c[0] for c in CAPTURES]
)
def test_a_kept_verdict_equals_the_one_it_stands_for(
    tmp_path, label, raw, mangled, times, tag, ids, process_wide
):
    """Counters kept in the database from one run, read back for the next, give every launch
    the verdict this run's own ncu report gives it; each launch names the run they came from."""
    functions, profiled = ncu_functions(raw, mangled)
    fresh_capture = read_timed(times, functions, tag, "profkit", ids, process_wide)
    fresh = list(fresh_capture.rows)
    first = fresh_capture.counted_launches
    assert first and set(first) <= set(functions)
    store = Store(tmp_path / "p.db")
    configs = fresh_capture.counted_configs
    written = store.keep_counters(
        KEY,
        [
            CountedFunction(
                m,
                "",
                configs[m],
                f.name,
                f.short_name,
                f.metrics,
                f.metric_units,
                7,
                "earlier-run",
                first[m],
            )
            for m, f in functions.items()
            if m in first
        ],
    )
    assert written == len(first)
    timed = timed_functions(kernel_times(times))
    # the first launch's configuration, as the timed run sees it
    assert {m: timed[m] for m in first} == configs
    found = store.counted(KEY, [(m, "", config) for m, config in timed.items()])
    kept = {
        m: Counted(f.name, f.short_name, f.metrics, f.metric_units, kept=f)
        for (m, _, _), f in found.items()
    }
    assert set(kept) == set(first)  # every function timed and counted is found again
    again_capture = read_timed(times, kept, tag, "profkit", ids, process_wide)
    again = list(again_capture.rows)
    assert _verdicts(again) == _verdicts(fresh)
    # nothing counted by this run's ncu: nothing to keep again
    assert again_capture.counted_launches == {}
    for a, f in zip(again, fresh):
        # on the same launch
        assert bool(a["metrics"]) == bool(f["metrics"]) and a["metrics"] == f["metrics"]
        if a["evidence"] == "metrics":
            assert "of run 'earlier-run', kept across runs" in a["evidence_detail"]
            launch = (
                first[next(m for m, c in kept.items() if c.name == a["name"])]
                if a["metrics"]
                else None
            )
            if launch is not None:
                assert a["evidence_detail"].startswith(f"counters of launch {launch} of run")
            assert f["evidence_detail"].endswith(a["evidence_detail"].split("): ", 1)[1])
    assert any("kept from earlier runs" in n for n in again_capture.notes)


R50 = DATA / "catalog" / "resnet50-fp16-eager-ncu"


def _run_of(store, plan, name, workload, raw, mangled, times, tag, ids, process_wide):
    """One ncu run of the per-function plan as ``launch`` makes it, stored, its counters kept: the
    timing process's report learned; a timed-first run looks its functions up and takes the
    functions not found from its own ncu export (``raw``/``mangled``: what ncu counts then)."""
    plan.learn(dict(PROCESS))
    counted, _ = ncu_functions(raw, mangled)
    if plan.strategy == ncu_counters.TIMED_FIRST:
        functions = plan.look_up(timed_functions(kernel_times(times)))
        functions.update({m: f for m, f in counted.items() if m not in functions})
    else:
        functions = counted
    capture = read_timed(times, functions, tag, "profkit", ids, process_wide)
    fields = {
        "name": name,
        "source": "run",
        "tool": "ncu",
        "started_at": now(),
        "workload": workload,
        "info": RunInfo(ncu_plan={"counters": plan.use()}),
    }
    run = store_capture(store, capture, fields, store.reserve(name, name, fields, status="running"))
    plan.keep(run, capture, functions)
    return run


@pytest.mark.parametrize(
    "between", [("mobilenet_v2", 8), ("resnet50", 32)], ids=["another-workload", "another-batch"]
)
def test_a_repeat_run_shows_its_own_launch_counts_not_those_of_another_workload_or_batch(
    tmp_path, between
):
    """Issue 34: ResNet-50 counted, then MobileNetV2 (or ResNet-50 at another batch size: the
    committed MobileNetV2 capture stands for its launches), whose cuDNN and CUTLASS functions are
    ResNet-50's with other op counts; ResNet-50 again takes the kept counters. Each launch of the
    repeat carries ResNet-50's own counters, and its tensor throughput is the first run's
    (the review saw 27.3 -> 2.7 TFLOP/s: MobileNetV2's op counts over ResNet-50's times)."""
    store = Store(tmp_path / "p.db")
    gpu = ("NVIDIA H100 80GB HBM3", "9.0")

    def plan(workload, batch):
        return ncu_counters.plan(
            store,
            RunOptions.make(precision="fp16", batch_size=batch),
            workload,
            WORKLOAD,
            gpu,
            "580.159.04",
            "2025.3.1",
            "full",
            ["sm__ops_path_tensor_src_fp16.sum"],
        )

    r50 = json.loads((R50 / "job.json").read_text())
    timer = json.loads((R50 / "harness-times.json").read_text())
    ids = {int(k): int(v) for k, v in (timer.get("thread_ids") or {}).items()}
    r50_files = (
        R50 / "raw.csv.gz",
        R50 / "raw-mangled.csv.gz",
        R50 / "kernel_times.json.gz",
        r50["tag"],
        ids,
        True,
    )
    mnv2_files = (
        PLAN / "mnv2_fp16.raw.csv.gz",
        PLAN / "mnv2_fp16.raw-mangled.csv.gz",
        PLAN / "mnv2_fp16.kernel_times.json.gz",
        "mnv2.fp16.eager",
        {},
        False,
    )
    r50_functions, mnv2_functions = (
        ncu_functions(*r50_files[:2])[0],
        ncu_functions(*mnv2_files[:2])[0],
    )
    shared = {m for m in r50_functions if m.startswith("_Z")} & set(mnv2_functions)
    assert len(shared) >= 3  # the same C++ functions, launched with other shapes

    counted = plan("resnet50", 8)
    first = _run_of(store, counted, "r50", "resnet50", *r50_files)
    _run_of(store, plan(*between), "other", between[0], *mnv2_files)
    again = plan("resnet50", 8)
    assert again.strategy == ncu_counters.TIMED_FIRST
    repeat = _run_of(store, again, "r50-again", "resnet50", *r50_files)
    # every function found again, nothing counted
    assert again.cached == counted.kept > 0 and again.kept == 0

    def launches(run):
        return [(k["launch_id"], k["name"], k["metrics"]) for k in store.iter_kernels(run.id)]

    assert launches(repeat) == launches(first)
    names = {f.name for m, f in r50_functions.items() if m in shared}
    details = [k["evidence_detail"] for k in store.iter_kernels(repeat.id) if k["name"] in names]
    assert details and all("of run 'r50', kept across runs" in d for d in details)
    rates = [throughput(store, store.get_run(r.name)) for r in (first, repeat)]
    assert rates[0] is not None and rates[1] is not None
    assert rates[1].run_rate == pytest.approx(rates[0].run_rate) and rates[0].run_rate["fp16"] > 0


def test_only_the_same_key_scope_and_launch_configuration_finds_counters(tmp_path):
    functions, _ = ncu_functions(
        PLAN / "vgg16_fp16.raw.csv.gz", PLAN / "vgg16_fp16.raw-mangled.csv.gz"
    )
    m, f = next(iter(functions.items()))
    config = "grid 1568x1x1 block 128x1x1"
    store = Store(tmp_path / "p.db")
    store.keep_counters(
        KEY,
        [
            CountedFunction(
                m, "", config, f.name, f.short_name, f.metrics, f.metric_units, 1, "a", 0
            )
        ],
    )
    assert store.counted(KEY, [(m, "", config)])[(m, "", config)].metrics == f.metrics
    assert store.counted((KEY[0], "another-environment", *KEY[2:]), [(m, "", config)]) == {}
    assert store.counted(("NVIDIA A100-SXM4-80GB (sm 8.0)", *KEY[1:]), [(m, "", config)]) == {}
    assert store.counted((*KEY[:3], "another-workload-or-batch"), [(m, "", config)]) == {}
    assert store.counted(KEY, [(m, "source:digest-of-a-generated-kernel", config)]) == {}
    assert store.counted(KEY, [(m, "", "grid 784x1x1 block 128x1x1")]) == {}
    # Counted again at the same launch: the latest count stands; at another, both are kept.
    store.keep_counters(
        KEY,
        [
            CountedFunction(m, "", config, f.name, f.short_name, {"x": 1.0}, {}, 2, "b", 5),
            CountedFunction(
                m, "", "grid 2x1x1 block 32x1x1", f.name, f.short_name, {"x": 2.0}, {}, 2, "b", 9
            ),
        ],
    )
    again = store.counted(KEY, [(m, "", config)])[(m, "", config)]
    assert (again.metrics, again.run_name, again.launch_id) == ({"x": 1.0}, "b", 5)
    assert (
        store.counted(KEY, [(m, "", "grid 2x1x1 block 32x1x1")])[
            (m, "", "grid 2x1x1 block 32x1x1")
        ].launch_id
        == 9
    )


def test_a_run_of_the_same_kind_in_this_environment_makes_the_next_run_timed_first(tmp_path):
    """The strategy: counted (ncu beside the timer) until a run of the same workload, precision,
    batch, device, options and kernel source completed in this environment; then timed first.
    TorchScript launches ATen's kernels as eager does; compile and another precision do not
    follow from an eager run; --fresh-counters always counts."""
    store = Store(tmp_path / "p.db")
    gpu = ("NVIDIA H100 80GB HBM3", "9.0")

    def plan(**given):
        return ncu_counters.plan(
            store,
            RunOptions.make(**given),
            "resnet50",
            WORKLOAD,
            gpu,
            "580.159.04",
            "2025.3.1",
            "full",
            ["m1", "m2"],
        )

    first = plan(precision="fp16")
    assert first.strategy == ncu_counters.COUNTED
    capture = read_timed(
        PLAN / "vgg16_fp16.kernel_times.json.gz",
        ncu_functions(PLAN / "vgg16_fp16.raw.csv.gz", PLAN / "vgg16_fp16.raw-mangled.csv.gz")[0],
        "vgg16.fp16.eager",
        "profkit",
    )
    fields = {
        "name": "earlier",
        "source": "run",
        "tool": "ncu",
        "started_at": now(),
        "workload": "resnet50",
        "info": RunInfo(ncu_plan={"counters": first.use()}),
    }
    store_capture(
        store, capture, fields, store.reserve("earlier", "earlier", fields, status="running")
    )
    assert plan(precision="fp16").strategy == ncu_counters.TIMED_FIRST
    # Its kernels carry ncu's names (kept or read now), whether or not ncu wrote files this time:
    # diff matches them by exact name against ncu runs.
    from profkit.analyze.diff import _dialect

    assert (
        "ncu-csv" not in store.get_run("earlier").raw_files
        and _dialect(store.get_run("earlier")) == "ncu-csv"
    )
    assert plan(precision="fp16", mode="torchscript").strategy == ncu_counters.TIMED_FIRST
    assert plan(precision="fp16", mode="compile").strategy == ncu_counters.COUNTED
    assert plan(precision="fp32").strategy == ncu_counters.COUNTED
    assert plan(precision="fp16", batch_size=16).strategy == ncu_counters.COUNTED
    assert plan(precision="fp16", channels_last=True).strategy == ncu_counters.COUNTED
    assert plan(precision="fp16", fresh_counters=True).strategy == ncu_counters.FRESH
    other_driver = ncu_counters.plan(
        store,
        RunOptions.make(precision="fp16"),
        "resnet50",
        WORKLOAD,
        gpu,
        "590.1",
        "2025.3.1",
        "full",
        ["m1", "m2"],
    )
    assert other_driver.strategy == ncu_counters.COUNTED and other_driver.key[1] != first.key[1]
    # The workload's file changed (its own kernels may have): counted again.
    edited = tmp_path / "resnet50.py"
    edited.write_text(WORKLOAD.read_text() + "\n# edited\n")
    changed = ncu_counters.plan(
        store,
        RunOptions.make(precision="fp16"),
        "resnet50",
        edited,
        gpu,
        "580.159.04",
        "2025.3.1",
        "full",
        ["m1", "m2"],
    )
    assert changed.strategy == ncu_counters.COUNTED


def test_every_function_is_kept_for_its_signature_only(tmp_path):
    """Op counts are a launch's: a C++ function's counters (its mangled name spells its template
    arguments) are kept per signature as any other's are, so an fp16 run does not take an fp32
    run's; a torch.compile kernel's where its source is the same, within the signature too."""
    store = Store(tmp_path / "p.db")
    gpu = ("NVIDIA H100 80GB HBM3", "9.0")

    def plan(precision):
        p = ncu_counters.plan(
            store,
            RunOptions.make(precision=precision),
            "resnet50",
            WORKLOAD,
            gpu,
            "580.159.04",
            "2025.3.1",
            "full",
            ["m1"],
        )
        p.learn(dict(PROCESS))
        return p

    fp16, fp32 = plan("fp16"), plan("fp32")
    assert fp16.key[:3] == fp32.key[:3] and fp16.key[3] != fp32.key[3]
    assert fp16.scope("_ZN2at6native18elementwise_kernelEv") == fp16.scope("_attn_fwd") == ""
    fp16.learn({**PROCESS, "generated_kernels": {"triton_poi_fused_add_0": "abc"}})
    assert fp16.scope("triton_poi_fused_add_0") == "source:abc"
    config = "grid 8x1x1 block 128x1x1"
    for name in ("_attn_fwd", "_ZN2at6native18elementwise_kernelEv"):
        kept = CountedFunction(name, "", config, name, name, {"x": 1.0}, {}, 1, "fp32", 0)
        store.keep_counters(fp32.key, [kept])
        assert plan("fp32").look_up({name: config}) and fp16.look_up({name: config}) == {}


def test_nothing_is_looked_up_or_kept_where_the_process_did_not_say_what_it_ran(tmp_path):
    """A timing process that reported no native libraries or sources (it died first, or maps
    could not be read): its run neither takes kept counters nor keeps its own."""
    store = Store(tmp_path / "p.db")
    p = ncu_counters.plan(
        store,
        RunOptions.make(precision="fp16"),
        "resnet50",
        WORKLOAD,
        ("NVIDIA H100 80GB HBM3", "9.0"),
        "580.159.04",
        "2025.3.1",
        "full",
        ["m1"],
    )
    config = "grid 8x1x1 block 128x1x1"
    p.learn(dict(PROCESS))
    store.keep_counters(
        p.key, [CountedFunction("_Z1kv", "", config, "k", "k", {"x": 1.0}, {}, 1, "a", 0)]
    )
    assert p.look_up({"_Z1kv": config})
    p.learn({"native_libraries": "unknown", "workload_sources": PROCESS["workload_sources"]})
    assert not p.known and p.look_up({"_Z1kv": config}) == {}
    p.learn({})
    assert not p.known and p.look_up({"_Z1kv": config}) == {}


def test_the_filter_names_only_the_functions_never_counted():
    assert ncu.per_function_argv() == ncu.PER_FUNCTION
    argv = ncu.per_function_argv(
        ["_Z6kernelPf", "triton_poi_fused_add_0", "_ZN2at6native.part.0$x"]
    )
    assert (
        argv[:3] == ["--kernel-name-base", "mangled", "--kernel-id"] and argv[4:] == ncu.COUNTS_ONLY
    )
    assert argv[3] == r"::regex:^(_Z6kernelPf|triton_poi_fused_add_0|_ZN2at6native\.part\.0\$x)$:1"
    # a colon would end --kernel-id's name part
    assert ncu.per_function_argv(["a:b"]) == ncu.PER_FUNCTION


def test_a_generated_kernel_is_kept_under_its_source_digest():
    """torch.compile's kernel names repeat across models: two output code files defining the same
    name with different code give different digests, the same code the same one."""
    from profkit import annotate

    def code(body: str) -> str:
        return (
            f"triton_poi_fused_add_0 = async_compile.triton('triton_poi_fused_add_0', '''\n{body}\n''')\n"
            "triton_poi_fused_mul_1 = async_compile.triton('triton_poi_fused_mul_1', '''\nx * y\n''')\n"
        )

    digests = {}
    for label, body in (("a", "x + y"), ("b", "x + 2 * y"), ("c", "x + y")):
        annotate._output_code_sources = lambda body=body: iter([code(body)])  # type: ignore[assignment]
        digests[label] = annotate.generated_kernel_digests()
    assert digests["a"]["triton_poi_fused_add_0"] != digests["b"]["triton_poi_fused_add_0"]
    assert digests["a"] == digests["c"]


def test_the_detail_of_a_kept_verdict_names_the_run():
    assert DETAIL_KEPT.format(launch=3, run="resnet50-fp16-eager-ncu", detail="HGMMA fp16") == (
        "counters of launch 3 of run 'resnet50-fp16-eager-ncu', kept across runs (same GPU, libraries, workload, "
        "options and launch configuration): HGMMA fp16"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("--tool", "nsys", "--fresh-counters"),
            "--fresh-counters counts ncu's counters again; --tool nsys collects none",
        ),
        (("--tool", "torch", "--fresh-counters"), "--tool torch collects none"),
        (
            ("--tool", "ncu", "--metrics", "full", "--fresh-counters"),
            "with --metrics every launch is profiled",
        ),
    ],
)
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
    assert (
        options.cell("fp16", "eager", "ncu").fresh_counters
        and not options.cell("fp16", "eager", "nsys").fresh_counters
    )


def _maps(*lines: str) -> str:
    return "".join(
        f"7f0000000000-7f0000001000 {perms} 00000000 fe:00 1{' ' * 20}{path}\n"
        for perms, path in (line.split(" ", 1) for line in lines)
    )


def test_the_native_libraries_are_every_mapped_librarys_path_size_and_time(tmp_path):
    """Issue 34: cuDNN or cuBLAS from conda or LD_LIBRARY_PATH is no Python package: the
    libraries a process mapped (/proc/self/maps) are in the key, each by path, size and time.
    Another library, the same library at another path, or one rebuilt in place changes it; data
    files, deleted files, profkit's own profiler libraries and the run-time compilers a cache
    may spare a run (the PTX JIT, NVRTC) do not."""
    for name in (
        "libcudnn.so.9",
        "libcublasLt.so.12",
        "libcupti.so.12",
        "libnvperf_host.so",
        "libcuda.so.580.159.04",
        "libnvidia-ptxjitcompiler.so.580.159.04",
        "libnvrtc-builtins.so.13.0",
        "weights.bin",
    ):
        (tmp_path / name).write_bytes(b"\x7fELF" + name.encode())
    (tmp_path / "conda").mkdir()
    (tmp_path / "conda" / "libcudnn.so.9").write_bytes((tmp_path / "libcudnn.so.9").read_bytes())
    maps = tmp_path / "maps"

    def digest(*lines: str) -> str:
        maps.write_text(_maps(*lines))
        return code_versions.native_libraries(maps)

    base = [f"r-xp {tmp_path}/libcudnn.so.9", f"r--p {tmp_path}/libcudnn.so.9", "rw-p [heap]"]
    first = digest(*base)
    assert first.startswith("1 files, ") and digest(*base) == first
    assert (
        digest(
            *base,
            f"r--p {tmp_path}/weights.bin",
            f"r-xp {tmp_path}/libcupti.so.12",
            f"r-xp {tmp_path}/libnvperf_host.so",
            # run-time compilers: a cold JIT or jiterator cache maps them, a warm one does not
            f"r-xp {tmp_path}/libnvidia-ptxjitcompiler.so.580.159.04",
            f"r-xp {tmp_path}/libnvrtc-builtins.so.13.0",
            f"r-xp {tmp_path}/gone.so (deleted)",
            "r-xp /dev/zero",
            "r-xp [vdso]",
        )
        == first
    )
    assert digest(*base, f"r-xp {tmp_path}/libcublasLt.so.12").startswith("2 files, ")
    # the user-mode driver stays (cuda-compat's differs from the kernel driver's version)
    assert digest(*base, f"r-xp {tmp_path}/libcuda.so.580.159.04").startswith("2 files, ")
    assert digest(f"r-xp {tmp_path}/conda/libcudnn.so.9") != first  # the same bytes found elsewhere
    os.utime(tmp_path / "libcudnn.so.9", ns=(1, 10**18))
    assert digest(*base) != first  # rebuilt in place
    assert code_versions.native_libraries(tmp_path / "no-maps") == "unknown"
    assert code_versions.native_libraries().split(" files, ")[0].isdigit()  # this process's own


def test_the_workload_sources_are_its_file_and_its_own_modules(tmp_path):
    """Issue 34: a module the workload file imports from outside the installed packages (a
    Triton kernel in the user's own file) is in the key by content; installed packages,
    profkit's own modules and torch.compile's output code are not."""
    import types

    import pytest as installed

    workload, helper, generated = tmp_path / "w.py", tmp_path / "my_layers.py", tmp_path / "c3x.py"
    workload.write_text("import my_layers\n")
    helper.write_text("def kernel(): return 1\n")
    generated.write_text("# output code\n")

    def module(name, path):
        m = types.ModuleType(name)
        m.__file__ = str(path)
        return m

    mine = [module("my_layers", helper)]
    others = [installed, code_versions, module("c3x", generated), types.ModuleType("builtin_like")]
    first = code_versions.workload_sources(workload, mine + others, generated=[str(generated)])
    assert first.startswith("2 files, ")  # the workload file and my_layers
    assert code_versions.workload_sources(workload, mine) == first
    generated.write_text("# other output code\n")
    assert (
        code_versions.workload_sources(workload, mine + others, generated=[str(generated)]) == first
    )
    helper.write_text("def kernel(): return 2\n")
    assert code_versions.workload_sources(workload, mine) != first
    assert code_versions.workload_sources(workload, []) != first
    os.mkfifo(tmp_path / "fifo.py")  # put in a module's place: read as unreadable, not waited on
    assert code_versions.workload_sources(
        workload, [module("fifo", tmp_path / "fifo.py")]
    ).startswith("2 files, ")


def test_another_process_environment_is_another_key(tmp_path):
    """What the timing process reported is in the counters' key: counters kept where it mapped
    other libraries or ran other workload sources are not found."""
    store = Store(tmp_path / "p.db")

    def plan(**process):
        p = ncu_counters.plan(
            store,
            RunOptions.make(precision="fp16"),
            "resnet50",
            WORKLOAD,
            ("NVIDIA H100 80GB HBM3", "9.0"),
            "580.159.04",
            "2025.3.1",
            "full",
            ["m1"],
        )
        p.learn({**PROCESS, **process})
        return p

    config = "grid 8x1x1 block 128x1x1"
    kept = plan()
    store.keep_counters(
        kept.key, [CountedFunction("_Z1kv", "", config, "k", "k", {"x": 1.0}, {}, 1, "a", 0)]
    )
    assert plan().look_up({"_Z1kv": config})
    for process in (
        {"native_libraries": "213 files, 00000000000000aa"},
        {"workload_sources": "2 files, 00000000000000bb"},
    ):
        other = plan(**process)
        assert other.machine_key == kept.machine_key and other.key != kept.key
        assert other.look_up({"_Z1kv": config}) == {}
        assert other.use()["environment"][next(iter(process))] == next(iter(process.values()))


@needs_torch
def test_the_timing_harness_reports_its_libraries_and_sources(tmp_path):
    """The run's timing harness (kernel_times_path in its job) reports its native libraries and
    workload sources after its measured iterations: the same in two runs of the same code; other
    where LD_LIBRARY_PATH picks the same library from another folder, or where a module the
    workload imports changed."""
    import _ctypes

    workload = tmp_path / "w.py"
    workload.write_text(
        "import ctypes, os, sys\nsys.path.insert(0, os.path.dirname(__file__))\nimport my_layers\n"
        "def build(spec):\n    ctypes.CDLL('libprofkit_test_native.so')\n    return my_layers.step\n"
    )
    (tmp_path / "my_layers.py").write_text("def step():\n    return 1\n")
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "libprofkit_test_native.so").write_bytes(
            Path(_ctypes.__file__).read_bytes()
        )

    def harness(libs: str) -> dict:
        job = {
            "spec": {"batch_size": 1, "device": "cpu"},
            "workload_path": str(workload),
            "warmup": 1,
            "iters": 1,
            "tag": "w.fp32.eager",
            "info_path": str(tmp_path / "info.json"),
            "kernel_times_path": str(tmp_path / "kernel_times.json"),
        }
        (tmp_path / "job.json").write_text(json.dumps(job))
        env = {**os.environ, "LD_LIBRARY_PATH": str(tmp_path / libs)}
        p = subprocess.run(
            [sys.executable, "-m", "profkit.harness", str(tmp_path / "job.json")],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 0, p.stderr
        return json.loads((tmp_path / "info.json").read_text())

    first, again, elsewhere = harness("a"), harness("a"), harness("b")
    parts = ("native_libraries", "workload_sources")
    assert all(first[k] != "unknown" for k in parts)
    assert [again[k] for k in parts] == [first[k] for k in parts]
    assert elsewhere["native_libraries"] != first["native_libraries"]
    assert elsewhere["workload_sources"] == first["workload_sources"]
    (tmp_path / "my_layers.py").write_text("def step():\n    return 2\n")
    edited = harness("a")
    assert edited["workload_sources"] != first["workload_sources"]
    assert edited["native_libraries"] == first["native_libraries"]
