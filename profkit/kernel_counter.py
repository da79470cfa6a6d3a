"""Hardware counters of the kernel functions of one step, counted in the profiled process itself
through CUPTI's Range Profiler (CUDA 12.6+; ctypes over the libcupti torch loaded, as
``profkit.kernel_timer``).

The first run of ncu's per-function plan counts its kernel functions here instead of in a
second process under ncu: ncu's own process (its start-up, its interception of the model's
build, its replays and exit) cost more than the bare run's half on its own (issue 25,
benchmarks/RESULTS.md). One range per kernel function: CUPTI's callback API on the launch
calls pushes a user range before the first launch of each function in the step and pops it after
(the Range Profiler's cost grows with the ranges it holds and counts: ResNet-50's 347 launches
took 4 s a step, its 26 functions 1 s); where the callbacks cannot be had, or miss launches,
every launch is a range (auto range). The step is run once per pass of the counter set (user
replay: the profiler asks for it again until every pass is collected), each range named by the
kernel the last timed step launched at that place (CUPTI's activity records,
``profkit.kernel_timer``) and held to it: its thread blocks, counted beside, must be that
launch's grid, and the launches as many as the timed step's, or the step is refused.
SASS-patched metrics (``smsp__sass_*``) are taken by the Range Profiler too. Imports nothing
heavy itself.
"""

from __future__ import annotations

import ctypes as C
import os
import threading
import time
from collections.abc import Callable
from typing import Any

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
_Avail = _params(
    "Avail", [("ctx", _P), ("counterAvailabilityImageSize", _SZ), ("pCounterAvailabilityImage", _P)]
)
_HostInit = _params(
    "HostInit",
    [
        ("profilerType", C.c_int),
        ("pChipName", C.c_char_p),
        ("pCounterAvailabilityImage", _P),
        ("pHostObject", _P),
    ],
)
_Host = _params("Host", [("pHostObject", _P)])
_AddMetrics = _params(
    "AddMetrics", [("pHostObject", _P), ("ppMetricNames", _NAMES), ("numMetrics", _SZ)]
)
_ConfigSize = _params("ConfigSize", [("pHostObject", _P), ("configImageSize", _SZ)])
_Config = _params("Config", [("pHostObject", _P), ("configImageSize", _SZ), ("pConfigImage", _P)])
_Passes = _params("Passes", [("configImageSize", _SZ), ("pConfigImage", _P), ("numOfPasses", _SZ)])
_Enable = _params("Enable", [("ctx", _P), ("pRangeProfilerObject", _P)])
_Object = _params("Object", [("pRangeProfilerObject", _P)])
_DataSize = _params(
    "DataSize",
    [
        ("pRangeProfilerObject", _P),
        ("pMetricNames", _NAMES),
        ("numMetrics", _SZ),
        ("maxNumOfRanges", _SZ),
        ("maxNumRangeTreeNodes", C.c_uint32),
        ("counterDataSize", _SZ),
    ],
)
_DataInit = _params(
    "DataInit", [("pRangeProfilerObject", _P), ("counterDataSize", _SZ), ("pCounterData", _P)]
)
_SetConfig = _params(
    "SetConfig",
    [
        ("pRangeProfilerObject", _P),
        ("configSize", _SZ),
        ("pConfig", _P),
        ("counterDataImageSize", _SZ),
        ("pCounterDataImage", _P),
        ("range", C.c_int),
        ("replayMode", C.c_int),
        ("maxRangesPerPass", _SZ),
        ("numNestingLevels", C.c_uint16),
        ("minNestingLevel", C.c_uint16),
        ("passIndex", _SZ),
        ("targetNestingLevel", C.c_uint16),
    ],
)
_Stop = _params(
    "Stop",
    [
        ("pRangeProfilerObject", _P),
        ("passIndex", _SZ),
        ("targetNestingLevel", _SZ),
        ("isAllPassSubmitted", C.c_uint8),
    ],
)
_Decode = _params("Decode", [("pRangeProfilerObject", _P), ("numOfRangeDropped", _SZ)])
_DataInfo = _params(
    "DataInfo", [("pCounterDataImage", _P), ("counterDataImageSize", _SZ), ("numTotalRanges", _SZ)]
)
_PushRange = _params("PushRange", [("pRangeProfilerObject", _P), ("pRangeName", C.c_char_p)])
_Evaluate = _params(
    "Evaluate",
    [
        ("pHostObject", _P),
        ("pCounterDataImage", _P),
        ("counterDataImageSize", _SZ),
        ("rangeIndex", _SZ),
        ("ppMetricNames", _NAMES),
        ("numMetrics", _SZ),
        ("pMetricValues", C.POINTER(C.c_double)),
    ],
)

RANGE_PROFILER = 0  # CUpti_ProfilerType
AUTO_RANGE = 1  # CUpti_ProfilerRange: one range per kernel launch
USER_RANGE = 2  # CUpti_ProfilerRange: a range from push to pop
USER_REPLAY = 3  # CUpti_ProfilerReplayMode: the caller runs the work once per pass
MAX_PASSES = 64  # a counter set no chip takes in fewer is refused, not looped on
MAX_RANGES = 4096  # ranges counted here at most (functions, or launches in auto range): the profiler's cost grows with them
CTAS = (
    "sm__ctas_launched.sum"  # thread blocks a launch ran: checked against the timed launch's grid
)
TIMES = "gpu__time_duration"  # duration counters: not taken in user ranges (see _count)

# The kernel launch calls CUPTI's callback API reports (CUpti_CallbackDomain, CUpti_CallbackId;
# cupti_runtime_cbid.h and cupti_driver_cbid.h): a call made inside another (the runtime's
# through the driver's) is the same launch.
DRIVER_API, RUNTIME_API = 1, 2
API_ENTER = 0  # CUpti_ApiCallbackSite
LAUNCH_CALLBACKS: dict[str, tuple[int, int]] = {
    "cudaLaunchKernel_v7000": (RUNTIME_API, 211),
    "cudaLaunchKernel_ptsz_v7000": (RUNTIME_API, 214),
    "cudaLaunchCooperativeKernel_v9000": (RUNTIME_API, 269),
    "cudaLaunchCooperativeKernel_ptsz_v9000": (RUNTIME_API, 270),
    "cudaLaunchKernelExC_v11060": (RUNTIME_API, 430),
    "cudaLaunchKernelExC_ptsz_v11060": (RUNTIME_API, 431),
    "__cudaLaunchKernel_v13000": (RUNTIME_API, 505),
    "__cudaLaunchKernel_ptsz_v13000": (RUNTIME_API, 506),
    "cuLaunchKernel": (DRIVER_API, 307),
    "cuLaunchKernel_ptsz": (DRIVER_API, 442),
    "cuLaunchCooperativeKernel": (DRIVER_API, 477),
    "cuLaunchCooperativeKernel_ptsz": (DRIVER_API, 478),
    "cuLaunchKernelEx": (DRIVER_API, 652),
    "cuLaunchKernelEx_ptsz": (DRIVER_API, 653),
}
_CALLBACK = C.CFUNCTYPE(None, _P, C.c_int, C.c_uint32, _P)


class _CallbackData(C.Structure):
    """The leading fields of CUPTI's CUpti_CallbackData (cupti_callbacks.h), as far as
    ``symbolName``: the launched kernel's name in launch callbacks."""

    _fields_ = [
        ("callbackSite", C.c_int),
        ("functionName", C.c_char_p),
        ("functionParams", _P),
        ("functionReturnValue", _P),
        ("symbolName", C.c_char_p),
    ]


# Every callback handed to CUPTI, for the process's life: where an unsubscribe failed, or a
# thread was still inside the callback then, CUPTI must not call freed code.
_HELD: list[Any] = []


class _FirstLaunches:
    """Ranges around the first launch of each kernel function only (CUPTI's callback API on
    the launch calls): the Range Profiler's cost grows with the launches it counts, and a
    function's counters are its first launch's. Every launch of a pass is numbered and its
    kernel's name, where CUPTI gives it, held to the timed step's at that place, so that a
    step that launches other kernels, or another number of them, is still refused."""

    def __init__(self, cu: _Cupti, obj: Any, order: list[tuple[str, int]]) -> None:
        firsts: dict[str, int] = {}
        for i, (name, _) in enumerate(order):
            firsts.setdefault(name, i)
        self.counted = sorted(firsts.values())  # range r holds launch counted[r]
        self.names = [name.encode() for name, _ in order]
        self.cu = cu
        # One push per wanted launch, each with a name of its own (ranges of one name are one
        # range), built once and held while CUPTI may read them.
        self.pushes = {
            k: _new(_PushRange, pRangeProfilerObject=obj, pRangeName=str(k).encode())
            for k in self.counted
        }
        self.pop = _new(_Object, pRangeProfilerObject=obj)
        self.seen = self.named = self.matched = 0
        self.error: str | None = None  # a range call failed
        self.differs: str | None = None  # a launch's kernel is not the timed step's
        self.local = threading.local()
        self.lock = threading.Lock()
        self.handle = _P()
        self.callback = _CALLBACK(self._on_call)
        _HELD.append(self.callback)

    def subscribe(self) -> None:
        lib = self.cu.lib
        lib.cuptiSubscribe.argtypes = [C.POINTER(_P), _CALLBACK, _P]
        lib.cuptiEnableCallback.argtypes = [C.c_uint32, _P, C.c_int, C.c_uint32]
        rc = lib.cuptiSubscribe(C.byref(self.handle), self.callback, None)
        if rc:
            raise CounterUnavailable(
                f"cuptiSubscribe failed ({rc}): another CUPTI subscriber holds the process"
            )
        for domain, cbid in LAUNCH_CALLBACKS.values():
            # an id this CUPTI lacks: its launches go unseen
            lib.cuptiEnableCallback(1, self.handle, domain, cbid)

    def unsubscribe(self) -> None:
        if self.handle.value:
            self.cu.lib.cuptiUnsubscribe.argtypes = [_P]
            self.cu.lib.cuptiUnsubscribe(self.handle)  # failing, the callback stays held (_HELD)
            self.handle = _P()

    def new_pass(self) -> None:
        self.seen = self.named = self.matched = 0

    def _on_call(self, _user: Any, _domain: int, _cbid: int, data: Any) -> None:
        try:
            local = self.local
            depth = getattr(local, "depth", 0)
            call = C.cast(data, C.POINTER(_CallbackData)).contents
            if call.callbackSite == API_ENTER:
                local.depth = depth + 1
                if depth:
                    return  # a call inside a launch call: the same launch
                with self.lock:
                    k, self.seen = self.seen, self.seen + 1
                if k >= len(self.names):
                    return  # more launches than timed: the pass refuses the step
                symbol = call.symbolName
                if symbol is not None:
                    self.named += 1
                    if symbol == self.names[k]:
                        self.matched += 1
                    elif self.differs is None:
                        self.differs = (
                            f"launch {k} ran {symbol.decode(errors='replace')[:80]} where the timed step ran "
                            f"{self.names[k].decode(errors='replace')[:80]}"
                        )
                push = self.pushes.get(k)
                if push is not None:
                    self.cu("cuptiRangeProfilerPushRange", push)
                    local.open = True
            else:
                # an exit with no enter (a call open at subscribing): none
                local.depth = max(0, depth - 1)
                if depth == 1 and getattr(local, "open", False):
                    local.open = False
                    self.cu("cuptiRangeProfilerPopRange", self.pop)
        except Exception as exc:  # raised in CUPTI's call: kept for the pass to report
            self.error = self.error or str(exc)


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
            raise CounterUnavailable(
                f"this libcupti has no {fn} (CUDA 12.6 or later has the Range Profiler)"
            )
        rc = func(C.byref(p))
        if rc:
            text = C.c_char_p()
            self.lib.cuptiGetResultString(rc, C.byref(text))
            raise CounterUnavailable(
                f"{fn} failed: {(text.value or b'?').decode(errors='replace')} ({rc})"
            )
        return p


class _LaunchesMissed(CounterUnavailable):
    """The launch callbacks did not see the step's launches: counted again with every launch a range."""


def _check_pass(selector: _FirstLaunches, launches: int) -> None:
    """After a pass of "first": a step that launched more kernels than timed, or ran another
    kernel at some place, is refused; fewer launches seen, names that never match, or a range
    call that failed may be the callbacks' limits: every launch is then a range (auto range)."""
    if selector.seen > launches:
        raise CounterUnavailable(
            f"the counted step launched {selector.seen} kernels where the timed step launched "
            f"{launches}: the step does not repeat"
        )
    if selector.differs and selector.matched:
        raise CounterUnavailable(
            f"the counted step does not repeat the timed one: {selector.differs}"
        )
    if selector.differs:  # no name matched: this CUPTI names kernels otherwise in its callbacks
        raise _LaunchesMissed(
            f"the launch callbacks' kernel names are not the activity records' ({selector.differs})"
        )
    if selector.error:
        raise _LaunchesMissed(f"a range around a launch failed: {selector.error}")
    if selector.seen < launches:
        raise _LaunchesMissed(
            f"the launch callbacks saw {selector.seen} launches of the {launches} timed"
        )


def count_step(
    step: Callable[[], Any],
    sync: Callable[[], None],
    metrics: list[str],
    order: list[tuple[str, int]],
    device_index: int,
    ranges: str | None = None,
) -> dict[str, Any]:
    """Count ``metrics`` on the kernel launches of ``step`` on the current CUDA context, its
    ranges named by ``order``: (mangled name, thread blocks in its grid) of each kernel the
    last timed step launched, in launch order. By default (``ranges`` "first") only the first
    launch of each kernel function is a range (launch callbacks push and pop it); "all" makes
    every launch one, and is what "first" falls back to where the callbacks cannot be had or
    miss launches (``ranges_fallback`` then says why). Each range's thread blocks, counted too
    (``CTAS``), must be its launch's, and with "first" each launch's kernel name (where the
    callback gives it) the timed one's: a step that launches other kernels, or another number of
    them, is refused. Returns ``functions``: per mangled name, the counters of its first launch;
    with ``passes``, ``launches``, ``ranges`` (how many were counted), ``range_mode`` ("first"
    or "all"), ``named_launches`` (launches of the last pass whose names were checked),
    ``uncounted`` (metrics asked for but not counted: durations in user ranges) and ``wall_s``.
    Raises CounterUnavailable where CUPTI cannot count."""
    ranges = ranges or os.environ.get("PROFKIT_COUNT_RANGES") or "first"
    if ranges not in ("first", "all"):
        raise CounterUnavailable(f"unknown range choice {ranges!r} (first or all)")
    functions = len({name for name, _ in order})
    if functions > MAX_RANGES or (ranges == "all" and len(order) > MAX_RANGES):
        what = (
            f"{functions} kernel functions" if functions > MAX_RANGES else f"{len(order)} kernels"
        )
        raise CounterUnavailable(
            f"the step launches {what}, more than the {MAX_RANGES} ranges counted in the run's "
            "process (the counter data grows with them)"
        )
    began = time.perf_counter()
    try:
        counts = _count(step, sync, metrics, order, device_index, ranges)
    except _LaunchesMissed as exc:
        if len(order) > MAX_RANGES:
            raise CounterUnavailable(
                f"{exc}, and its {len(order)} launches are more than the {MAX_RANGES} ranges "
                "counted with every launch a range"
            ) from None
        counts = _count(step, sync, metrics, order, device_index, "all")
        counts["ranges_fallback"] = str(exc)
    counts["wall_s"] = round(time.perf_counter() - began, 3)
    return counts


def _count(
    step: Callable[[], Any],
    sync: Callable[[], None],
    metrics: list[str],
    order: list[tuple[str, int]],
    device_index: int,
    ranges: str,
) -> dict[str, Any]:
    counter = StepCounter(metrics, order, device_index, ranges)
    try:
        counter.begin()
        for _ in range(MAX_PASSES):
            counter.start_pass()
            step()
            sync()
            if counter.end_pass():
                return counter.result()
        raise CounterUnavailable(f"the counter set was not collected in {MAX_PASSES} steps")
    finally:
        counter.close()


class StepCounter:
    """The Range Profiler's session over one step's launches, its passes driven from outside:
    ``begin()``, then for each pass ``start_pass()``, the step run (and waited for), and
    ``end_pass()``, until it says every pass is collected; then ``result()``; ``close()`` in any
    case. :func:`count_step` runs the step itself for each pass; a program profkit runs as it is
    runs its own steps after the window (``profkit.program``)."""

    def __init__(
        self, metrics: list[str], order: list[tuple[str, int]], device_index: int, ranges: str
    ) -> None:
        self.wanted = set(metrics)
        # A user range runs from the push before its launch to the pop after it, so its duration
        # holds the launch's host time too (2.4 us kernels read 96 us on an H100): the launch's
        # duration is the timed one, and a duration counter is taken only where every launch is a range.
        self.uncounted = [m for m in metrics if ranges == "first" and m.startswith(TIMES)]
        self.metrics = [m for m in metrics if m not in self.uncounted]
        self.metrics += [CTAS] if CTAS not in self.wanted else []
        self.order, self.device_index, self.ranges = order, device_index, ranges
        self.cu = _Cupti()
        self.host: Any = None
        self.obj: Any = None
        self.selector: _FirstLaunches | None = None
        self.passes_run = 0
        self.initialized = False

    def begin(self) -> None:
        cu, metrics, order = self.cu, self.metrics, self.order
        ctx = _P()
        try:
            cuda = C.CDLL("libcuda.so.1")
        except OSError as exc:
            raise CounterUnavailable(f"no CUDA driver to count on ({exc})") from None
        if cuda.cuCtxGetCurrent(C.byref(ctx)) != 0 or not ctx.value:
            raise CounterUnavailable("no current CUDA context to count on")
        cu("cuptiProfilerInitialize", _new(_Init))
        self.initialized = True
        chip = cu("cuptiDeviceGetChipName", _new(_Chip, deviceIndex=self.device_index)).pChipName
        size = cu(
            "cuptiProfilerGetCounterAvailability", _new(_Avail, ctx=ctx)
        ).counterAvailabilityImageSize
        avail = (C.c_uint8 * size)()
        cu(
            "cuptiProfilerGetCounterAvailability",
            _new(
                _Avail,
                ctx=ctx,
                counterAvailabilityImageSize=size,
                pCounterAvailabilityImage=C.cast(avail, _P),
            ),
        )
        self.host = _P(
            cu(
                "cuptiProfilerHostInitialize",
                _new(
                    _HostInit,
                    profilerType=RANGE_PROFILER,
                    pChipName=chip,
                    pCounterAvailabilityImage=C.cast(avail, _P),
                ),
            ).pHostObject
        )
        self.names = names = (C.c_char_p * len(metrics))(*[m.encode() for m in metrics])
        cu(
            "cuptiProfilerHostConfigAddMetrics",
            _new(_AddMetrics, pHostObject=self.host, ppMetricNames=names, numMetrics=len(metrics)),
        )
        size = cu(
            "cuptiProfilerHostGetConfigImageSize", _new(_ConfigSize, pHostObject=self.host)
        ).configImageSize
        self.config = config = (C.c_uint8 * size)()
        cu(
            "cuptiProfilerHostGetConfigImage",
            _new(
                _Config,
                pHostObject=self.host,
                configImageSize=size,
                pConfigImage=C.cast(config, _P),
            ),
        )
        self.passes = passes = cu(
            "cuptiProfilerHostGetNumOfPasses",
            _new(_Passes, configImageSize=size, pConfigImage=C.cast(config, _P)),
        ).numOfPasses
        if not 0 < passes <= MAX_PASSES:
            raise CounterUnavailable(f"the counter set takes {passes} passes")
        self.obj = obj = _P(
            cu("cuptiRangeProfilerEnable", _new(_Enable, ctx=ctx)).pRangeProfilerObject
        )
        if self.ranges != "all":
            self.selector = _FirstLaunches(cu, obj, order)
            try:
                self.selector.subscribe()
            except CounterUnavailable as exc:
                raise _LaunchesMissed(str(exc)) from None
        self.counted = counted = self.selector.counted if self.selector else list(range(len(order)))
        # The counter data's size grows with the ranges it holds, and so do the profiler's
        # start and stop (8,192 ranges cost 7 s a pass on an H100): room for the ranges
        # counted and one more, which shows a step that launches more.
        room = max(16, len(counted) + 1)
        self.data_size = data_size = cu(
            "cuptiRangeProfilerGetCounterDataSize",
            _new(
                _DataSize,
                pRangeProfilerObject=obj,
                pMetricNames=names,
                numMetrics=len(metrics),
                maxNumOfRanges=room,
                maxNumRangeTreeNodes=room,
            ),
        ).counterDataSize
        self.data = data = (C.c_uint8 * data_size)()
        cu(
            "cuptiRangeProfilerCounterDataImageInitialize",
            _new(
                _DataInit,
                pRangeProfilerObject=obj,
                counterDataSize=data_size,
                pCounterData=C.cast(data, _P),
            ),
        )
        try:
            cu(
                "cuptiRangeProfilerSetConfig",
                _new(
                    _SetConfig,
                    pRangeProfilerObject=obj,
                    configSize=size,
                    pConfig=C.cast(config, _P),
                    counterDataImageSize=data_size,
                    pCounterDataImage=C.cast(data, _P),
                    range=USER_RANGE if self.selector else AUTO_RANGE,
                    replayMode=USER_REPLAY,
                    maxRangesPerPass=room,
                    numNestingLevels=1,
                    minNestingLevel=1,
                    passIndex=0,
                    targetNestingLevel=1,
                ),
            )
        except CounterUnavailable as exc:
            raise (_LaunchesMissed(str(exc)) if self.selector else exc) from None

    def start_pass(self) -> None:
        if self.selector:
            self.selector.new_pass()
        self.cu("cuptiRangeProfilerStart", _new(_Object, pRangeProfilerObject=self.obj))

    def end_pass(self) -> bool:
        """The pass's step has run and its kernels are done: whether every pass is collected."""
        done = bool(
            self.cu(
                "cuptiRangeProfilerStop", _new(_Stop, pRangeProfilerObject=self.obj)
            ).isAllPassSubmitted
        )
        self.passes_run += 1
        if self.selector:
            _check_pass(self.selector, len(self.order))
        if not done and self.passes_run >= MAX_PASSES:
            raise CounterUnavailable(f"the counter set was not collected in {MAX_PASSES} steps")
        return done

    def result(self) -> dict[str, Any]:
        cu, metrics, order, counted = self.cu, self.metrics, self.order, self.counted
        data, data_size, names, selector = self.data, self.data_size, self.names, self.selector
        dropped = cu(
            "cuptiRangeProfilerDecodeData", _new(_Decode, pRangeProfilerObject=self.obj)
        ).numOfRangeDropped
        total = cu(
            "cuptiRangeProfilerGetCounterDataInfo",
            _new(_DataInfo, pCounterDataImage=C.cast(data, _P), counterDataImageSize=data_size),
        ).numTotalRanges
        if dropped or total != len(counted):
            raise CounterUnavailable(
                f"CUPTI counted {total} launches ({dropped} dropped) where {len(counted)} of a "
                f"step of {len(order)} launches were asked: the step does not repeat"
            )
        values = (C.c_double * len(metrics))()
        functions: dict[str, dict[str, float | int]] = {}
        for r, i in enumerate(counted):
            name, ctas = order[i]
            cu(
                "cuptiProfilerHostEvaluateToGpuValues",
                _new(
                    _Evaluate,
                    pHostObject=self.host,
                    pCounterDataImage=C.cast(data, _P),
                    counterDataImageSize=data_size,
                    rangeIndex=r,
                    ppMetricNames=names,
                    numMetrics=len(metrics),
                    pMetricValues=values,
                ),
            )
            got = dict(zip(metrics, values))
            if round(got[CTAS]) != ctas:
                raise CounterUnavailable(
                    f"launch {i} of the counted step ran {round(got[CTAS])} thread blocks where the "
                    f"timed step's ran {ctas}: the step does not repeat its kernels"
                )
            if name not in functions:
                functions[name] = {
                    m: (int(v) if float(v).is_integer() else float(v))
                    for m, v in got.items()
                    if m != CTAS or CTAS in self.wanted
                }
        return {
            "functions": functions,
            "passes": int(self.passes),
            "launches": len(order),
            "ranges": len(counted),
            "range_mode": self.ranges,
            "named_launches": selector.named if selector else 0,
            "uncounted": self.uncounted,
        }

    def close(self) -> None:
        cu = self.cu
        if self.selector is not None:
            self.selector.unsubscribe()
            self.selector = None
        if self.obj is not None:
            cu.lib.cuptiRangeProfilerDisable(C.byref(_new(_Object, pRangeProfilerObject=self.obj)))
            self.obj = None
        if self.host is not None:
            cu.lib.cuptiProfilerHostDeinitialize(C.byref(_new(_Host, pHostObject=self.host)))
            self.host = None
        if self.initialized:
            cu.lib.cuptiProfilerDeInitialize(C.byref(_new(_Init)))
            self.initialized = False
