"""profkit.kernel_counter without a GPU: its ctypes layouts against CUPTI's own headers (the
ones torch's CUDA wheels install), and a clear refusal where there is nothing to count on.
Counting itself runs in tests/test_gpu_ncu.py on the GPU machine."""

from __future__ import annotations

import ctypes as C
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from profkit import kernel_counter as kc

# profkit's struct -> (the header's struct, the header that declares it)
STRUCTS = {
    "_Init": ("CUpti_Profiler_Initialize_Params", "cupti_profiler_target.h"),
    "_Chip": ("CUpti_Device_GetChipName_Params", "cupti_target.h"),
    "_Avail": ("CUpti_Profiler_GetCounterAvailability_Params", "cupti_profiler_target.h"),
    "_HostInit": ("CUpti_Profiler_Host_Initialize_Params", "cupti_profiler_host.h"),
    "_Host": ("CUpti_Profiler_Host_Deinitialize_Params", "cupti_profiler_host.h"),
    "_AddMetrics": ("CUpti_Profiler_Host_ConfigAddMetrics_Params", "cupti_profiler_host.h"),
    "_ConfigSize": ("CUpti_Profiler_Host_GetConfigImageSize_Params", "cupti_profiler_host.h"),
    "_Config": ("CUpti_Profiler_Host_GetConfigImage_Params", "cupti_profiler_host.h"),
    "_Passes": ("CUpti_Profiler_Host_GetNumOfPasses_Params", "cupti_profiler_host.h"),
    "_Enable": ("CUpti_RangeProfiler_Enable_Params", "cupti_range_profiler.h"),
    "_Object": ("CUpti_RangeProfiler_Start_Params", "cupti_range_profiler.h"),
    "_DataSize": ("CUpti_RangeProfiler_GetCounterDataSize_Params", "cupti_range_profiler.h"),
    "_DataInit": (
        "CUpti_RangeProfiler_CounterDataImage_Initialize_Params",
        "cupti_range_profiler.h",
    ),
    "_SetConfig": ("CUpti_RangeProfiler_SetConfig_Params", "cupti_range_profiler.h"),
    "_Stop": ("CUpti_RangeProfiler_Stop_Params", "cupti_range_profiler.h"),
    "_Decode": ("CUpti_RangeProfiler_DecodeData_Params", "cupti_range_profiler.h"),
    "_DataInfo": ("CUpti_RangeProfiler_GetCounterDataInfo_Params", "cupti_range_profiler.h"),
    "_Evaluate": ("CUpti_Profiler_Host_EvaluateToGpuValues_Params", "cupti_profiler_host.h"),
    "_PushRange": ("CUpti_RangeProfiler_PushRange_Params", "cupti_range_profiler.h"),
}


def _cupti_include() -> Path | None:
    try:
        import nvidia  # the namespace package of torch's CUDA wheels
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for found in Path(root).glob("*/include/cupti_range_profiler.h"):
            return found.parent
    return None


def test_the_params_structs_have_cuptis_sizes_and_field_offsets(tmp_path):
    include, cxx = _cupti_include(), shutil.which("g++")
    if include is None or cxx is None:
        pytest.skip("needs CUPTI's headers (torch's CUDA wheels) and g++")
    lines = []
    for ours, (theirs, _) in STRUCTS.items():
        cls = getattr(kc, ours)
        fields = [f[0] for f in cls._fields_]
        lines.append(f'printf("{ours} size %zu\\n", (size_t){theirs}_STRUCT_SIZE);')
        lines += [f'printf("{ours} {f} %zu\\n", offsetof({theirs}, {f}));' for f in fields]
    headers = sorted({h for _, h in STRUCTS.values()})
    source = tmp_path / "sizes.cpp"
    source.write_text(
        "#include <cstdio>\n#include <cstddef>\n"
        + "".join(f"#include <{h}>\n" for h in headers)
        + "int main() {\n"
        + "\n".join(lines)
        + "\nreturn 0;\n}\n"
    )
    exe = tmp_path / "sizes"
    subprocess.run(
        [cxx, "-I", str(include), str(source), "-o", str(exe)], check=True, capture_output=True
    )
    theirs = subprocess.run(
        [str(exe)], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    mine = []
    for ours in STRUCTS:
        cls = getattr(kc, ours)
        mine.append(f"{ours} size {cls.STRUCT_SIZE}")
        mine += [f"{ours} {f[0]} {getattr(cls, f[0]).offset}" for f in cls._fields_]
    assert mine == theirs


def test_the_launch_callback_ids_are_cuptis():
    """The launch calls whose callbacks place the ranges: their domains and ids as CUPTI's
    headers number them (a wrong id would leave a launch API unseen). Read from the headers'
    text: cupti_callbacks.h needs CUDA's compiler headers, which the wheels do not carry."""
    include = _cupti_include()
    if include is None:
        pytest.skip("needs CUPTI's headers (torch's CUDA wheels)")
    text = "".join(
        (include / h).read_text()
        for h in ("cupti_callbacks.h", "cupti_driver_cbid.h", "cupti_runtime_cbid.h")
    )

    def value(symbol):
        found = re.search(rf"\b{symbol}\s*=\s*(\d+)", text)
        assert found, symbol
        return int(found.group(1))

    for name, (domain, cbid) in kc.LAUNCH_CALLBACKS.items():
        driver = not name.startswith(("cuda", "__cuda"))
        assert domain == value(
            "CUPTI_CB_DOMAIN_DRIVER_API" if driver else "CUPTI_CB_DOMAIN_RUNTIME_API"
        ), name
        assert cbid == value(
            ("CUPTI_DRIVER_TRACE_CBID_" if driver else "CUPTI_RUNTIME_TRACE_CBID_") + name
        ), name
    assert kc.API_ENTER == value("CUPTI_API_ENTER")


class _FakeCupti:
    """What the launch callbacks ask of CUPTI, recorded."""

    def __init__(self, fail_on: str | None = None):
        self.calls: list[str] = []
        self.fail_on = fail_on

    def __call__(self, fn, p):
        if fn == self.fail_on:
            raise kc.CounterUnavailable(f"{fn} failed: CUPTI_ERROR_INVALID_OPERATION (3)")
        self.calls.append(f"push {p.pRangeName.decode()}" if fn.endswith("PushRange") else "pop")
        return p


def _call(selector, site, symbol=None):
    """One callback as CUPTI makes it: its CUpti_CallbackData, the site and the kernel's name."""
    data = kc._CallbackData(callbackSite=site, symbolName=symbol)
    selector.callback(None, kc.RUNTIME_API, 211, C.cast(C.pointer(data), C.c_void_p))


def _launch(selector, nested=False, symbol=None):
    _call(selector, kc.API_ENTER, symbol)
    if nested:  # the runtime's call through the driver's: the same launch
        _call(selector, kc.API_ENTER, symbol)
        _call(selector, 1, symbol)
    _call(selector, 1, symbol)


ORDER = [("a", 1), ("b", 2), ("a", 1), ("c", 3), ("b", 2)]


def test_the_callbacks_range_only_each_functions_first_launch_and_count_every_launch():
    cu = _FakeCupti()
    sel = kc._FirstLaunches(cu, None, ORDER)  # type: ignore[arg-type]
    assert sel.counted == [0, 1, 3]
    for i, (name, _) in enumerate(ORDER):
        _launch(sel, nested=i == 1, symbol=name.encode())
    assert cu.calls == ["push 0", "pop", "push 1", "pop", "push 3", "pop"]
    assert (sel.seen, sel.named, sel.matched, sel.error, sel.differs) == (
        len(ORDER),
        5,
        5,
        None,
        None,
    )
    kc._check_pass(sel, len(ORDER))  # a pass that repeats the timed step
    # a launch call on another thread, while this thread's is open, is a launch of its own
    # (its range nests in this one: the thread-block check then refuses the step)
    sel.new_pass()
    cu.calls = []
    _call(sel, kc.API_ENTER)
    worker = threading.Thread(target=_launch, args=(sel,))
    worker.start()
    worker.join()
    _call(sel, 1)
    assert sel.seen == 2 and sel.named == 0 and cu.calls == ["push 0", "push 1", "pop", "pop"]
    # an exit with no enter (a call open when the callbacks were subscribed) counts nothing after
    sel.new_pass()
    cu.calls = []
    _call(sel, 1)
    _launch(sel)
    assert sel.seen == 1 and cu.calls == ["push 0", "pop"]


def _pass(symbols, order=ORDER):
    sel = kc._FirstLaunches(_FakeCupti(), None, order)  # type: ignore[arg-type]
    for symbol in symbols:
        _launch(sel, symbol=symbol)
    return sel


def test_a_pass_that_does_not_repeat_the_timed_step_is_refused_or_counted_launch_by_launch():
    names = [n.encode() for n, _ in ORDER]
    # another kernel at one place (the names matched elsewhere): refused
    other = names[:2] + [b"d"] + names[3:]
    with pytest.raises(kc.CounterUnavailable) as caught:
        kc._check_pass(_pass(other), len(ORDER))
    assert not isinstance(
        caught.value, kc._LaunchesMissed
    ) and "launch 2 ran d where the timed step ran a" in str(caught.value)
    # more launches than timed: refused
    with pytest.raises(kc.CounterUnavailable) as caught:
        kc._check_pass(_pass(names + [b"a"]), len(ORDER))
    assert not isinstance(caught.value, kc._LaunchesMissed) and "launched 6 kernels" in str(
        caught.value
    )
    # fewer (a launch call the callbacks do not cover), or names never alike: every launch a range
    for symbols, words in (
        (names[:4], "saw 4 launches of the 5"),
        ([b"_Z" + n for n in names], "names are not"),
    ):
        with pytest.raises(kc._LaunchesMissed, match=words):
            kc._check_pass(_pass(symbols), len(ORDER))
    # a launch the callback does not name is counted, not checked
    sel = _pass([None] * len(ORDER))
    kc._check_pass(sel, len(ORDER))
    assert sel.named == 0 and sel.seen == len(ORDER)


def test_a_failing_range_call_has_every_launch_counted_instead():
    sel = kc._FirstLaunches(_FakeCupti(fail_on="cuptiRangeProfilerPushRange"), None, [("a", 1)])  # type: ignore[arg-type]
    _launch(sel)
    assert sel.error and "PushRange" in sel.error and sel.seen == 1
    with pytest.raises(kc._LaunchesMissed, match="a range around a launch failed"):
        kc._check_pass(sel, 1)


def _cuda_include() -> Path | None:
    """Headers with CUDA's compiler part (crt/), which cupti_callbacks.h includes and the wheels
    do not carry: a CUDA toolkit's."""
    for found in sorted(Path("/usr/local").glob("cuda*/include/crt/host_defines.h")):
        if (found.parent.parent / "cupti_callbacks.h").exists():
            return found.parent.parent
    return None


def test_the_callback_data_fields_are_at_cuptis_offsets(tmp_path):
    include, cxx = _cuda_include(), shutil.which("g++")
    if include is None or cxx is None:
        pytest.skip("needs a CUDA toolkit's headers (cupti_callbacks.h and crt/) and g++")
    fields = [f[0] for f in kc._CallbackData._fields_]
    source = tmp_path / "cb.cpp"
    source.write_text(
        "#include <cstdio>\n#include <cstddef>\n#include <cupti_callbacks.h>\nint main() {\n"
        + "\n".join(f'printf("{f} %zu\\n", offsetof(CUpti_CallbackData, {f}));' for f in fields)
        + "\nreturn 0;\n}\n"
    )
    exe = tmp_path / "cb"
    subprocess.run(
        [cxx, "-I", str(include), str(source), "-o", str(exe)], check=True, capture_output=True
    )
    theirs = subprocess.run(
        [str(exe)], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert [f"{f} {getattr(kc._CallbackData, f).offset}" for f in fields] == theirs


def test_a_step_of_many_launches_is_counted_by_its_functions():
    """The limit is on the ranges counted: a step of more launches than that, of few functions,
    is still counted (here it goes on to find no GPU); with every launch a range it is refused."""
    order = [(f"k{i % 3}", 1) for i in range(kc.MAX_RANGES + 10)]
    with pytest.raises(kc.CounterUnavailable) as caught:
        kc.count_step(
            lambda: None, lambda: None, ["gpu__time_duration.sum"], order, 0, ranges="first"
        )
    assert "ranges counted" not in str(caught.value)
    with pytest.raises(
        kc.CounterUnavailable, match=f"launches {kc.MAX_RANGES + 10} kernels, more than the"
    ):
        kc.count_step(
            lambda: None, lambda: None, ["gpu__time_duration.sum"], order, 0, ranges="all"
        )
    many = [(f"k{i}", 1) for i in range(kc.MAX_RANGES + 1)]
    with pytest.raises(
        kc.CounterUnavailable, match=f"launches {kc.MAX_RANGES + 1} kernel functions"
    ):
        kc.count_step(lambda: None, lambda: None, ["gpu__time_duration.sum"], many, 0)


def test_counting_without_a_gpu_is_refused_in_words():
    with pytest.raises(kc.CounterUnavailable) as caught:
        kc.count_step(lambda: None, lambda: None, ["gpu__time_duration.sum"], [], 0)
    assert str(caught.value) and "\n" not in str(caught.value)


def _job(tmp_path):
    from profkit.harness import HarnessJob
    from profkit.options import Spec

    return HarnessJob(
        spec=Spec(),
        workload_path="w.py",
        warmup=1,
        iters=2,
        tag="t",
        info_path=str(tmp_path / "i.json"),
        count_metrics=["gpu__time_duration.sum"],
        counts_path=str(tmp_path / "counts.json"),
    )


def test_the_harness_counts_only_a_step_that_holds_every_timed_function(tmp_path, monkeypatch):
    """What the harness hands the Range Profiler (``harness._count``): nothing where its timer
    failed (the parent says why), an empty count where no kernel ran, a refusal where an earlier
    measured iteration ran a function the last did not (one more step would not count it)."""
    import json

    from profkit import harness

    job, counts = _job(tmp_path), tmp_path / "counts.json"
    called = []
    monkeypatch.setattr(
        kc,
        "count_step",
        lambda *a: called.append(a) or {"functions": {}, "passes": 7, "launches": 1, "wall_s": 0.1},
    )

    def count(step_kernels, functions, info):
        counts.unlink(missing_ok=True)
        harness._count(
            job,
            lambda: None,
            lambda: None,
            info,
            type("T", (), {"cuda": type("C", (), {"current_device": staticmethod(lambda: 0)})}),
            harness.StepLaunches(step_kernels, functions),
        )
        return json.loads(counts.read_text()) if counts.exists() else None

    info: dict = {"kernel_timer_error": "CUPTI unavailable"}
    assert (
        count([("k", 4)], {"k"}, info) is None and "kernel_counter_error" not in info and not called
    )
    info = {}
    assert (
        count([], set(), info) == {"functions": {}, "passes": 0, "launches": 0, "wall_s": 0.0}
        and not called
    )
    info = {}
    assert count([("a", 4)], {"a", "b"}, info) is None and not called
    assert (
        "1 kernel functions of the earlier measured iterations are not in the last (first: b)"
        in info["kernel_counter_error"]
    )
    info = {}
    assert count([("a", 4), ("a", 8)], {"a"}, info)["passes"] == 7
    assert called[-1][3] == [("a", 4), ("a", 8)] and called[-1][2] == ["gpu__time_duration.sum"]


def test_counted_metrics_take_the_units_ncus_raw_page_gives_them():
    """Counters read in the run's process carry the units ncu's export gives the same metrics
    (a committed mobilenet_v2 AMP capture of the full set), so kept counters look alike."""
    import csv
    import gzip

    from profkit import classify
    from profkit.parse.ncu_plan import ncu_unit as _ncu_unit

    path = (
        Path(__file__).parent
        / "data"
        / "catalog"
        / "mobilenet_v2-amp-eager-ncu"
        / "raw-mangled.csv.gz"
    )
    with gzip.open(path, "rt", newline="") as f:
        rows = csv.reader(f)
        header, units = next(rows), next(rows)
    theirs = dict(zip(header, units))
    _, metrics = classify.metric_set("full", "9.0")
    assert all(m in theirs for m in metrics)
    assert {m: _ncu_unit(m) for m in metrics} == {m: theirs[m] for m in metrics}
