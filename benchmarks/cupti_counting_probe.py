"""Whether a first run could count in the timing process itself (issue 25): CUPTI's Range
Profiler (hardware counters, CUDA 12.6+) and its SASS Metrics API, through ctypes, in one
process, against the cost of a step.

    python3 benchmarks/cupti_counting_probe.py WORKLOAD [PRECISION] [BATCH] [--replay user|kernel] [--json OUT]

Builds the workload as the harness does, runs 3 warm-up steps, times one step, then counts
profkit's counter set (rules.toml's ``full`` preset for sm_90, the tensor-path and time
metrics; each SASS-patched metric tried alone to learn whether the Range Profiler takes it)
over one more step with one range per kernel launch (auto range), the step replayed by
this script once per pass (user replay) or each kernel by CUPTI (kernel replay). Prints the
wall time of each part, the passes, and per range (kernel launch, in order) its name and
values; lists the SASS Metrics API's metrics for the chip. A probe: nothing in profkit uses it.
"""

from __future__ import annotations

import argparse
import ctypes as C
import json
import sys
import time

from profkit import classify, workloads
from profkit import kernel_counter as kc
from profkit.options import Spec

# profkit's own ctypes layouts and CUPTI wrapper (tested against CUPTI's headers in
# tests/test_kernel_counter.py), under the probe's short names; the probe adds the structs
# profkit does not use (a range's name, the SASS Metrics API's list).
P, SZ = kc._P, kc._SZ
params, new, Cupti = kc._params, kc._new, kc._Cupti
InitP, ChipP, AvailP, HostInitP, HostObjP = kc._Init, kc._Chip, kc._Avail, kc._HostInit, kc._Host
AddP, CfgSizeP, CfgP, PassesP = kc._AddMetrics, kc._ConfigSize, kc._Config, kc._Passes
EnableP, ObjP, DataSizeP, DataInitP, SetCfgP = (
    kc._Enable,
    kc._Object,
    kc._DataSize,
    kc._DataInit,
    kc._SetConfig,
)
StopP, DecodeP, InfoP, EvalP = kc._Stop, kc._Decode, kc._DataInfo, kc._Evaluate
RangeP = params(
    "RangeP",
    [
        ("pCounterDataImage", P),
        ("counterDataImageSize", SZ),
        ("rangeIndex", SZ),
        ("rangeDelimiter", C.c_char_p),
        ("rangeName", C.c_char_p),
    ],
)


class SassDetails(C.Structure):
    _fields_ = [
        ("metricId", C.c_uint64),
        ("pMetricName", C.c_char_p),
        ("pMetricDescription", C.c_char_p),
    ]


SassNumP = params("SassNumP", [("pChipName", C.c_char_p), ("numOfMetrics", SZ)])
SassListP = params(
    "SassListP",
    [("pChipName", C.c_char_p), ("numOfMetrics", SZ), ("pMetricsList", C.POINTER(SassDetails))],
)

RANGE_PROFILER, AUTO_RANGE, USER_REPLAY = kc.RANGE_PROFILER, kc.AUTO_RANGE, kc.USER_REPLAY
KERNEL_REPLAY = 2  # CUpti_ProfilerReplayMode: CUPTI replays each kernel itself


def names_array(names: list[str]) -> C.Array[C.c_char_p]:
    return (C.c_char_p * len(names))(*[n.encode() for n in names])


def count(cu: kc._Cupti, host, ctx, step, torch, label: str, replay: str, max_ranges: int) -> dict:
    out: dict = {"set": label, "replay": replay}
    t0 = t = time.monotonic()
    _, wanted = classify.metric_set(label, "9.0")
    taken, refused = [], {}
    for m in wanted:
        h = host()
        try:
            arr = names_array([m])
            cu(
                "cuptiProfilerHostConfigAddMetrics",
                new(AddP, pHostObject=h, ppMetricNames=arr, numMetrics=1),
            )
            taken.append(m)
        except RuntimeError as exc:
            refused[m] = str(exc)
        finally:
            cu("cuptiProfilerHostDeinitialize", new(HostObjP, pHostObject=h))
    out["metrics_taken"], out["metrics_refused"] = taken, refused
    h = host()
    arr = names_array(taken)
    cu(
        "cuptiProfilerHostConfigAddMetrics",
        new(AddP, pHostObject=h, ppMetricNames=arr, numMetrics=len(taken)),
    )
    size = cu("cuptiProfilerHostGetConfigImageSize", new(CfgSizeP, pHostObject=h)).configImageSize
    config = (C.c_uint8 * size)()
    cu(
        "cuptiProfilerHostGetConfigImage",
        new(CfgP, pHostObject=h, configImageSize=size, pConfigImage=C.cast(config, P)),
    )
    out["passes"] = cu(
        "cuptiProfilerHostGetNumOfPasses",
        new(PassesP, configImageSize=size, pConfigImage=C.cast(config, P)),
    ).numOfPasses
    out["setup_s"] = round(time.monotonic() - t, 3)
    t = time.monotonic()
    obj = P(cu("cuptiRangeProfilerEnable", new(EnableP, ctx=ctx)).pRangeProfilerObject)
    ds = cu(
        "cuptiRangeProfilerGetCounterDataSize",
        new(
            DataSizeP,
            pRangeProfilerObject=obj,
            pMetricNames=arr,
            numMetrics=len(taken),
            maxNumOfRanges=max_ranges,
            maxNumRangeTreeNodes=max_ranges,
        ),
    ).counterDataSize
    data = (C.c_uint8 * ds)()
    cu(
        "cuptiRangeProfilerCounterDataImageInitialize",
        new(DataInitP, pRangeProfilerObject=obj, counterDataSize=ds, pCounterData=C.cast(data, P)),
    )
    cu(
        "cuptiRangeProfilerSetConfig",
        new(
            SetCfgP,
            pRangeProfilerObject=obj,
            configSize=size,
            pConfig=C.cast(config, P),
            counterDataImageSize=ds,
            pCounterDataImage=C.cast(data, P),
            range=AUTO_RANGE,
            replayMode=USER_REPLAY if replay == "user" else KERNEL_REPLAY,
            maxRangesPerPass=max_ranges,
            numNestingLevels=1,
            minNestingLevel=1,
            passIndex=0,
            targetNestingLevel=1,
        ),
    )
    out["enable_s"] = round(time.monotonic() - t, 3)
    t = time.monotonic()
    steps = 0
    while True:
        marks = [time.monotonic()]
        cu("cuptiRangeProfilerStart", new(ObjP, pRangeProfilerObject=obj))
        marks.append(time.monotonic())
        step()
        marks.append(time.monotonic())
        torch.cuda.synchronize()
        marks.append(time.monotonic())
        stop = cu("cuptiRangeProfilerStop", new(StopP, pRangeProfilerObject=obj))
        marks.append(time.monotonic())
        if steps < 2:  # start, step, sync, stop
            out.setdefault("first_passes_parts_s", []).append(
                [round(b - a, 3) for a, b in zip(marks, marks[1:])]
            )
        out.setdefault("pass_s", []).append(round(time.monotonic() - t, 3))
        steps += 1
        if stop.isAllPassSubmitted or steps > 64:
            break
    out["counted_steps"], out["count_s"] = steps, round(time.monotonic() - t, 3)
    t = time.monotonic()
    out["ranges_dropped"] = cu(
        "cuptiRangeProfilerDecodeData", new(DecodeP, pRangeProfilerObject=obj)
    ).numOfRangeDropped
    n = cu(
        "cuptiRangeProfilerGetCounterDataInfo",
        new(InfoP, pCounterDataImage=C.cast(data, P), counterDataImageSize=ds),
    ).numTotalRanges
    values = (C.c_double * len(taken))()
    ranges = []
    for i in range(n):
        name = cu(
            "cuptiRangeProfilerCounterDataGetRangeInfo",
            new(
                RangeP,
                pCounterDataImage=C.cast(data, P),
                counterDataImageSize=ds,
                rangeIndex=i,
                rangeDelimiter=b"/",
            ),
        ).rangeName
        cu(
            "cuptiProfilerHostEvaluateToGpuValues",
            new(
                EvalP,
                pHostObject=h,
                pCounterDataImage=C.cast(data, P),
                counterDataImageSize=ds,
                rangeIndex=i,
                ppMetricNames=arr,
                numMetrics=len(taken),
                pMetricValues=values,
            ),
        )
        ranges.append(
            {"name": (name or b"").decode(errors="replace"), **dict(zip(taken, list(values)))}
        )
    out["decode_s"] = round(time.monotonic() - t, 3)
    out["ranges"] = len(ranges)
    t = time.monotonic()
    cu("cuptiRangeProfilerDisable", new(ObjP, pRangeProfilerObject=obj))
    out["disable_s"] = round(time.monotonic() - t, 3)
    cu("cuptiProfilerHostDeinitialize", new(HostObjP, pHostObject=h))
    out["range_values"] = ranges
    out["total_s"] = round(time.monotonic() - t0, 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("precision", nargs="?", default="fp16")
    ap.add_argument("batch", nargs="?", type=int, default=8)
    ap.add_argument("--replay", default="user", help="user, kernel or both: user,kernel")
    ap.add_argument(
        "--sets", default="full", help="rules.toml presets, in turn: e.g. full,tensor,full"
    )
    ap.add_argument("--max-ranges", type=int, default=8192)
    ap.add_argument("--json")
    a = ap.parse_args()
    out: dict = {"workload": a.workload, "replay": a.replay}
    t0 = time.monotonic()
    import torch

    spec = Spec(batch_size=a.batch, precision=a.precision)
    module = workloads.load_module(workloads.resolve(a.workload)[1])
    torch.manual_seed(0)
    step = workloads.prepare(module, spec)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    out["built_and_warm_s"] = round(time.monotonic() - t0, 3)
    t = time.monotonic()
    step()
    torch.cuda.synchronize()
    out["step_s"] = round(time.monotonic() - t, 4)

    cu = Cupti()
    cuda = C.CDLL("libcuda.so.1")
    ctx = P()
    assert cuda.cuCtxGetCurrent(C.byref(ctx)) == 0 and ctx.value, "no current CUDA context"
    t = time.monotonic()
    cu("cuptiProfilerInitialize", new(InitP))
    chip = cu(
        "cuptiDeviceGetChipName", new(ChipP, deviceIndex=torch.cuda.current_device())
    ).pChipName
    out["chip"] = chip.decode()
    av = cu("cuptiProfilerGetCounterAvailability", new(AvailP, ctx=ctx))
    avail = (C.c_uint8 * av.counterAvailabilityImageSize)()
    cu(
        "cuptiProfilerGetCounterAvailability",
        new(
            AvailP,
            ctx=ctx,
            counterAvailabilityImageSize=C.sizeof(avail),
            pCounterAvailabilityImage=C.cast(avail, P),
        ),
    )

    def host() -> C.c_void_p:
        return P(
            cu(
                "cuptiProfilerHostInitialize",
                new(
                    HostInitP,
                    profilerType=RANGE_PROFILER,
                    pChipName=chip,
                    pCounterAvailabilityImage=C.cast(avail, P),
                ),
            ).pHostObject
        )

    results = []
    for label in a.sets.split(","):
        for replay in a.replay.split(","):
            results.append(count(cu, host, ctx, step, torch, label, replay, a.max_ranges))
    out["counts"] = [{k: v for k, v in r.items() if k != "range_values"} for r in results]
    ranges = results[0]["range_values"]
    try:
        k = cu("cuptiSassMetricsGetNumOfMetrics", new(SassNumP, pChipName=chip)).numOfMetrics
        lst = (SassDetails * k)()
        cu(
            "cuptiSassMetricsGetMetrics",
            new(SassListP, pChipName=chip, numOfMetrics=k, pMetricsList=lst),
        )
        out["sass_metrics"] = [d.pMetricName.decode() for d in lst]
    except RuntimeError as exc:
        out["sass_metrics_error"] = str(exc)
    brief = {k: v for k, v in out.items() if k != "sass_metrics"}
    print(json.dumps(brief, indent=1))
    print(
        "sass metrics:",
        len(out.get("sass_metrics", [])),
        [m for m in out.get("sass_metrics", []) if "op_" in m][:60],
    )
    for r in ranges[:12]:
        print({k: (round(v) if isinstance(v, float) else v[:90]) for k, v in r.items()})
    out["range_values"] = ranges
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
