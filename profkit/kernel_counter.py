"""Hardware counters of every kernel launch of one step, counted in the profiled process itself
through CUPTI's Range Profiler (CUDA 12.6+; ctypes over the libcupti torch loaded, as
``profkit.kernel_timer``).

The first run of ncu's per-function plan counts its kernel functions here instead of in a
second process under ncu: ncu's own process (its start-up, its interception of the model's
build, its replays and exit) cost more than the bare run's half on its own (issue 25,
benchmarks/RESULTS.md). One range per kernel launch (auto range); the step is run once per
pass of the counter set (user replay: the profiler asks for it again until every pass is
collected), each range named by the kernel the last timed step launched at that place (CUPTI's
activity records, ``profkit.kernel_timer``) and held to it: its thread blocks, counted beside,
must be that launch's grid, and the ranges as many as the launches, or the step is refused.
SASS-patched metrics (``smsp__sass_*``) are taken by the Range Profiler too. Imports nothing
heavy itself.
"""

from __future__ import annotations

import ctypes as C
import time
from typing import Any, Callable

from .kernel_timer import CuptiUnavailable, _libcupti

_P = C.c_void_p
_SZ = C.c_size_t


class CounterUnavailable(RuntimeError):
    """The Range Profiler cannot count this step; the message says why."""


def _params(name: str, fields: list[tuple[str, Any]]) -> type[C.Structure]:
    """A CUPTI params struct (structSize and pPriv first); STRUCT_SIZE as the headers define it
    (the last field's offset plus its size)."""
    cls = type(name, (C.Structure,), {"_fields_": [("structSize", _SZ), ("pPriv", _P), *fields]})
    last = cls._fields_[-1]  # type: ignore[attr-defined]
    cls.STRUCT_SIZE = getattr(cls, last[0]).offset + C.sizeof(last[1])  # type: ignore[attr-defined]
    return cls


_NAMES = C.POINTER(C.c_char_p)
_Init = _params("Init", [])
_Chip = _params("Chip", [("deviceIndex", _SZ), ("pChipName", C.c_char_p)])
_Avail = _params("Avail", [("ctx", _P), ("counterAvailabilityImageSize", _SZ), ("pCounterAvailabilityImage", _P)])
_HostInit = _params("HostInit", [("profilerType", C.c_int), ("pChipName", C.c_char_p),
                                 ("pCounterAvailabilityImage", _P), ("pHostObject", _P)])
_Host = _params("Host", [("pHostObject", _P)])
_AddMetrics = _params("AddMetrics", [("pHostObject", _P), ("ppMetricNames", _NAMES), ("numMetrics", _SZ)])
_ConfigSize = _params("ConfigSize", [("pHostObject", _P), ("configImageSize", _SZ)])
_Config = _params("Config", [("pHostObject", _P), ("configImageSize", _SZ), ("pConfigImage", _P)])
_Passes = _params("Passes", [("configImageSize", _SZ), ("pConfigImage", _P), ("numOfPasses", _SZ)])
_Enable = _params("Enable", [("ctx", _P), ("pRangeProfilerObject", _P)])
_Object = _params("Object", [("pRangeProfilerObject", _P)])
_DataSize = _params("DataSize", [("pRangeProfilerObject", _P), ("pMetricNames", _NAMES), ("numMetrics", _SZ),
                                 ("maxNumOfRanges", _SZ), ("maxNumRangeTreeNodes", C.c_uint32),
                                 ("counterDataSize", _SZ)])
_DataInit = _params("DataInit", [("pRangeProfilerObject", _P), ("counterDataSize", _SZ), ("pCounterData", _P)])
_SetConfig = _params("SetConfig", [("pRangeProfilerObject", _P), ("configSize", _SZ), ("pConfig", _P),
                                   ("counterDataImageSize", _SZ), ("pCounterDataImage", _P), ("range", C.c_int),
                                   ("replayMode", C.c_int), ("maxRangesPerPass", _SZ),
                                   ("numNestingLevels", C.c_uint16), ("minNestingLevel", C.c_uint16),
                                   ("passIndex", _SZ), ("targetNestingLevel", C.c_uint16)])
_Stop = _params("Stop", [("pRangeProfilerObject", _P), ("passIndex", _SZ), ("targetNestingLevel", _SZ),
                         ("isAllPassSubmitted", C.c_uint8)])
_Decode = _params("Decode", [("pRangeProfilerObject", _P), ("numOfRangeDropped", _SZ)])
_DataInfo = _params("DataInfo", [("pCounterDataImage", _P), ("counterDataImageSize", _SZ), ("numTotalRanges", _SZ)])
_Evaluate = _params("Evaluate", [("pHostObject", _P), ("pCounterDataImage", _P), ("counterDataImageSize", _SZ),
                                 ("rangeIndex", _SZ), ("ppMetricNames", _NAMES), ("numMetrics", _SZ),
                                 ("pMetricValues", C.POINTER(C.c_double))])

RANGE_PROFILER = 0  # CUpti_ProfilerType
AUTO_RANGE = 1      # CUpti_ProfilerRange: one range per kernel launch
USER_REPLAY = 3     # CUpti_ProfilerReplayMode: the caller runs the work once per pass
MAX_PASSES = 64     # a counter set no chip takes in fewer is refused, not looped on
MAX_LAUNCHES = 4096  # a step's launches counted here at most: the profiler's start and stop grow with them
CTAS = "sm__ctas_launched.sum"  # thread blocks a launch ran: checked against the timed launch's grid


def _new(cls: type[C.Structure], **fields: Any) -> Any:
    s = cls(**fields)
    s.structSize = cls.STRUCT_SIZE
    return s


class _Cupti:
    def __init__(self) -> None:
        try:
            self.lib = _libcupti()
        except CuptiUnavailable as exc:
            raise CounterUnavailable(str(exc)) from None
        self.lib.cuptiGetResultString.argtypes = [C.c_int, C.POINTER(C.c_char_p)]

    def __call__(self, fn: str, p: Any) -> Any:
        func = getattr(self.lib, fn, None)
        if func is None:
            raise CounterUnavailable(f"this libcupti has no {fn} (CUDA 12.6 or later has the Range Profiler)")
        rc = func(C.byref(p))
        if rc:
            text = C.c_char_p()
            self.lib.cuptiGetResultString(rc, C.byref(text))
            raise CounterUnavailable(f"{fn} failed: {(text.value or b'?').decode(errors='replace')} ({rc})")
        return p


def count_step(step: Callable[[], Any], sync: Callable[[], None], metrics: list[str],
               order: list[tuple[str, int]], device_index: int) -> dict[str, Any]:
    """Count ``metrics`` on every kernel launch of ``step`` on the current CUDA context, its
    ranges named by ``order``: (mangled name, thread blocks in its grid) of each kernel the
    last timed step launched, in launch order. Each range's thread blocks, counted too
    (``CTAS``), must be its launch's: a step that launches other kernels, or another number of
    them, is refused. Returns ``functions``: per mangled name, the counters of its first launch;
    with ``passes``, ``launches`` and ``wall_s``. Raises CounterUnavailable where CUPTI cannot
    count."""
    if len(order) > MAX_LAUNCHES:
        raise CounterUnavailable(f"the step launches {len(order)} kernels, more than {MAX_LAUNCHES} counted in "
                                 "the run's process (the counter data grows with them)")
    wanted = set(metrics)
    metrics = list(metrics) + ([CTAS] if CTAS not in wanted else [])
    began = time.perf_counter()
    cu = _Cupti()
    ctx = _P()
    try:
        cuda = C.CDLL("libcuda.so.1")
    except OSError as exc:
        raise CounterUnavailable(f"no CUDA driver to count on ({exc})") from None
    if cuda.cuCtxGetCurrent(C.byref(ctx)) != 0 or not ctx.value:
        raise CounterUnavailable("no current CUDA context to count on")
    cu("cuptiProfilerInitialize", _new(_Init))
    host = obj = None
    try:
        chip = cu("cuptiDeviceGetChipName", _new(_Chip, deviceIndex=device_index)).pChipName
        size = cu("cuptiProfilerGetCounterAvailability", _new(_Avail, ctx=ctx)).counterAvailabilityImageSize
        avail = (C.c_uint8 * size)()
        cu("cuptiProfilerGetCounterAvailability", _new(_Avail, ctx=ctx, counterAvailabilityImageSize=size,
                                                      pCounterAvailabilityImage=C.cast(avail, _P)))
        host = _P(cu("cuptiProfilerHostInitialize", _new(_HostInit, profilerType=RANGE_PROFILER, pChipName=chip,
                                                           pCounterAvailabilityImage=C.cast(avail, _P))).pHostObject)
        names = (C.c_char_p * len(metrics))(*[m.encode() for m in metrics])
        cu("cuptiProfilerHostConfigAddMetrics", _new(_AddMetrics, pHostObject=host, ppMetricNames=names,
                                                     numMetrics=len(metrics)))
        size = cu("cuptiProfilerHostGetConfigImageSize", _new(_ConfigSize, pHostObject=host)).configImageSize
        config = (C.c_uint8 * size)()
        cu("cuptiProfilerHostGetConfigImage", _new(_Config, pHostObject=host, configImageSize=size,
                                                   pConfigImage=C.cast(config, _P)))
        passes = cu("cuptiProfilerHostGetNumOfPasses", _new(_Passes, configImageSize=size,
                                                            pConfigImage=C.cast(config, _P))).numOfPasses
        if not 0 < passes <= MAX_PASSES:
            raise CounterUnavailable(f"the counter set takes {passes} passes")
        obj = _P(cu("cuptiRangeProfilerEnable", _new(_Enable, ctx=ctx)).pRangeProfilerObject)
        # The counter data's size grows with the ranges it holds, and so do the profiler's
        # start and stop (8,192 ranges cost 7 s a pass on an H100): room for this step's
        # launches and as many again.
        room = max(64, 2 * len(order) + 16)
        data_size = cu("cuptiRangeProfilerGetCounterDataSize", _new(
            _DataSize, pRangeProfilerObject=obj, pMetricNames=names, numMetrics=len(metrics), maxNumOfRanges=room,
            maxNumRangeTreeNodes=room)).counterDataSize
        data = (C.c_uint8 * data_size)()
        cu("cuptiRangeProfilerCounterDataImageInitialize", _new(_DataInit, pRangeProfilerObject=obj,
                                                                counterDataSize=data_size, pCounterData=C.cast(data, _P)))
        cu("cuptiRangeProfilerSetConfig", _new(
            _SetConfig, pRangeProfilerObject=obj, configSize=size, pConfig=C.cast(config, _P),
            counterDataImageSize=data_size, pCounterDataImage=C.cast(data, _P), range=AUTO_RANGE,
            replayMode=USER_REPLAY, maxRangesPerPass=room, numNestingLevels=1, minNestingLevel=1, passIndex=0,
            targetNestingLevel=1))
        done = False
        for _ in range(MAX_PASSES):
            cu("cuptiRangeProfilerStart", _new(_Object, pRangeProfilerObject=obj))
            step()
            sync()
            done = bool(cu("cuptiRangeProfilerStop", _new(_Stop, pRangeProfilerObject=obj)).isAllPassSubmitted)
            if done:
                break
        if not done:
            raise CounterUnavailable(f"the counter set was not collected in {MAX_PASSES} steps")
        dropped = cu("cuptiRangeProfilerDecodeData", _new(_Decode, pRangeProfilerObject=obj)).numOfRangeDropped
        total = cu("cuptiRangeProfilerGetCounterDataInfo", _new(_DataInfo, pCounterDataImage=C.cast(data, _P),
                                                                counterDataImageSize=data_size)).numTotalRanges
        if dropped or total != len(order):
            raise CounterUnavailable(f"CUPTI counted {total} launches ({dropped} dropped) in a step that launched "
                                     f"{len(order)} when timed: the step does not repeat")
        values = (C.c_double * len(metrics))()
        functions: dict[str, dict[str, float | int]] = {}
        for i, (name, ctas) in enumerate(order):
            cu("cuptiProfilerHostEvaluateToGpuValues", _new(
                _Evaluate, pHostObject=host, pCounterDataImage=C.cast(data, _P), counterDataImageSize=data_size,
                rangeIndex=i, ppMetricNames=names, numMetrics=len(metrics), pMetricValues=values))
            got = dict(zip(metrics, values))
            if round(got[CTAS]) != ctas:
                raise CounterUnavailable(f"launch {i} of the counted step ran {round(got[CTAS])} thread blocks where the "
                                         f"timed step's ran {ctas}: the step does not repeat its kernels")
            if name not in functions:
                functions[name] = {m: (int(v) if float(v).is_integer() else float(v)) for m, v in got.items()
                                   if m != CTAS or CTAS in wanted}
        return {"functions": functions, "passes": int(passes), "launches": len(order),
                "wall_s": round(time.perf_counter() - began, 3)}
    finally:
        if obj is not None:
            cu.lib.cuptiRangeProfilerDisable(C.byref(_new(_Object, pRangeProfilerObject=obj)))
        if host is not None:
            cu.lib.cuptiProfilerHostDeinitialize(C.byref(_new(_Host, pHostObject=host)))
        cu.lib.cuptiProfilerDeInitialize(C.byref(_new(_Init)))
