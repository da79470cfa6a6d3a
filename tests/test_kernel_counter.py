"""profkit.kernel_counter without a GPU: its ctypes layouts against CUPTI's own headers (the
ones torch's CUDA wheels install), and a clear refusal where there is nothing to count on.
Counting itself runs in tests/test_gpu_ncu.py on the GPU machine."""

from __future__ import annotations

import shutil
import subprocess
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
    "_DataInit": ("CUpti_RangeProfiler_CounterDataImage_Initialize_Params", "cupti_range_profiler.h"),
    "_SetConfig": ("CUpti_RangeProfiler_SetConfig_Params", "cupti_range_profiler.h"),
    "_Stop": ("CUpti_RangeProfiler_Stop_Params", "cupti_range_profiler.h"),
    "_Decode": ("CUpti_RangeProfiler_DecodeData_Params", "cupti_range_profiler.h"),
    "_DataInfo": ("CUpti_RangeProfiler_GetCounterDataInfo_Params", "cupti_range_profiler.h"),
    "_Evaluate": ("CUpti_Profiler_Host_EvaluateToGpuValues_Params", "cupti_profiler_host.h"),
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
    source.write_text("#include <cstdio>\n#include <cstddef>\n" + "".join(f"#include <{h}>\n" for h in headers)
                      + "int main() {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "sizes"
    subprocess.run([cxx, "-I", str(include), str(source), "-o", str(exe)], check=True, capture_output=True)
    theirs = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
    mine = []
    for ours in STRUCTS:
        cls = getattr(kc, ours)
        mine.append(f"{ours} size {cls.STRUCT_SIZE}")
        mine += [f"{ours} {f[0]} {getattr(cls, f[0]).offset}" for f in cls._fields_]
    assert mine == theirs


def test_counting_without_a_gpu_is_refused_in_words():
    with pytest.raises(kc.CounterUnavailable) as caught:
        kc.count_step(lambda: None, lambda: None, ["gpu__time_duration.sum"], [], 0)
    assert str(caught.value) and "\n" not in str(caught.value)
