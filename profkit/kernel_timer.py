"""Every kernel's GPU start and end, recorded in the profiled process itself through CUPTI's
activity API (ctypes over the libcupti that torch already loaded).

Under ncu, profkit's default plan profiles only the first launch of each kernel function
(the counters decide a verdict per function); this records the duration of every launch in
the same process at once. torch.profiler cannot do it there: its CUPTI callback subscriber
collides with ncu's (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED), while the activity
buffers need no subscriber. Used by ``profkit.harness``; imports nothing heavy itself.

The kernel records are read at fixed offsets of ``CUpti_ActivityKernel`` (versions 4 to 10
share them up to the name): kind, start, end, device, context, stream, grid, block,
correlation id and the mangled name.
"""

from __future__ import annotations

import ctypes
import struct
from pathlib import Path
from typing import Any

KIND_CONCURRENT_KERNEL = 10
KIND_DRIVER = 4  # cuLaunchKernel and friends: how cuBLAS and cuDNN launch
KIND_RUNTIME = 5  # cudaLaunchKernel: how PyTorch's own kernels launch
SUCCESS = 0
MAX_LIMIT_REACHED = 3  # cuptiActivityGetNextRecord: no more records in the buffer
FLUSH_FORCED = 1
BUFFER_BYTES = 8 << 20

# kind, cbid, start, end, processId, threadId, correlationId, returnValue
_RUNTIME = struct.Struct("<IIQQIIII")

# The runtime and driver calls that block the host until the GPU is done (the names of
# ``parse.schema.HOST_SYNC_CALLS``), by CUPTI callback id (cupti_runtime_cbid.h and
# cupti_driver_cbid.h, CUDA 12 and 13; per-thread-stream variants under the same name).
SYNC_CALLS: dict[tuple[int, int], str] = {
    **{
        (KIND_RUNTIME, cbid): name
        for name, ids in (
            ("cudaMemcpy", (31, 215)),
            ("cudaMemcpy2D", (32, 216)),
            ("cudaMemcpyToSymbol", (39, 223)),
            ("cudaMemcpyFromSymbol", (40, 224)),
            ("cudaThreadSynchronize", (126,)),
            ("cudaStreamSynchronize", (131, 239)),
            ("cudaEventSynchronize", (137,)),
            ("cudaMemcpy3D", (144, 245)),
            ("cudaMemcpyPeer", (160,)),
            ("cudaDeviceSynchronize", (165,)),
        )
        for cbid in ids
    },
    **{
        (KIND_DRIVER, cbid): name
        for name, ids in (
            ("cuCtxSynchronize", (17, 800)),
            ("cuMemcpyHtoD", (43, 276, 397)),
            ("cuMemcpyDtoH", (45, 278, 398)),
            ("cuEventSynchronize", (121,)),
            ("cuStreamSynchronize", (126, 440)),
            ("cuMemcpy", (248, 305, 408)),
        )
        for cbid in ids
    },
}


class CuptiUnavailable(RuntimeError):
    """CUPTI's activity API cannot be used in this process; the message says why."""


def _libcupti() -> ctypes.CDLL:
    """The libcupti already mapped into this process (torch's), else the usual names."""
    paths: list[str] = []
    try:
        with open("/proc/self/maps") as f:
            paths = list(dict.fromkeys(l.split()[-1] for l in f if "libcupti.so" in l and "/" in l))
    except OSError:
        pass
    for name in [*paths, "libcupti.so", "libcupti.so.13", "libcupti.so.12"]:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise CuptiUnavailable("no libcupti in this process or on the library path")


_REQUEST = ctypes.CFUNCTYPE(
    None,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.POINTER(ctypes.c_size_t),
    ctypes.POINTER(ctypes.c_size_t),
)
_COMPLETE = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t
)


class KernelTimer:
    """``start()``, mark iterations with ``mark()``, ``stop()``; then ``kernels`` holds one dict
    per kernel execution, ``launches`` (correlation id -> launching thread and time) and
    ``syncs`` (the calls that blocked the host) where CUPTI gave runtime records."""

    def __init__(self) -> None:
        self.lib = _libcupti()
        self._buffers: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self.kernels: list[dict[str, Any]] = []
        self.launches: dict[int, tuple[int, int]] = {}
        # the host's waits for the GPU (``SYNC_CALLS``), in record order
        self.syncs: list[dict[str, Any]] = []
        self.marks: list[tuple[str, int]] = []
        self.runtime = False
        self._request = _REQUEST(self._on_request)
        self._complete = _COMPLETE(self._on_complete)
        self.lib.cuptiActivityGetNextRecord.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_void_p),
        ]
        self.lib.cuptiGetResultString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]

    def _check(self, result: int, what: str) -> None:
        if result != SUCCESS:
            text = ctypes.c_char_p()
            self.lib.cuptiGetResultString(result, ctypes.byref(text))
            raise CuptiUnavailable(
                f"{what} failed: {(text.value or b'?').decode(errors='replace')} ({result})"
            )

    def _on_request(
        self,
        buffer: ctypes._Pointer[ctypes.c_void_p],
        size: ctypes._Pointer[ctypes.c_size_t],
        max_records: ctypes._Pointer[ctypes.c_size_t],
    ) -> None:
        buf = ctypes.create_string_buffer(BUFFER_BYTES + 8)
        address = (ctypes.addressof(buf) + 7) & ~7  # records are 8-byte aligned
        self._buffers[address] = buf
        buffer[0] = address
        size[0] = BUFFER_BYTES
        max_records[0] = 0

    def _on_complete(
        self, context: int | None, stream: int, buffer: int | None, size: int, valid: int
    ) -> None:
        # ctypes passes c_void_p arguments as int (None for NULL) and the integer ones as int.
        record = ctypes.c_void_p()
        while (
            valid
            and self.lib.cuptiActivityGetNextRecord(buffer, valid, ctypes.byref(record)) == SUCCESS
        ):
            address = record.value or 0
            kind = ctypes.c_uint32.from_address(address).value
            if kind == KIND_CONCURRENT_KERNEL:
                self.kernels.append(_read_kernel(address))
            elif kind in (KIND_RUNTIME, KIND_DRIVER):
                _, cbid, start, end, _, thread, corr, _ = _RUNTIME.unpack(
                    ctypes.string_at(address, _RUNTIME.size)
                )
                self.launches[corr] = (thread, start)
                sync = SYNC_CALLS.get((kind, cbid))
                if sync is not None:
                    self.syncs.append(
                        {
                            "name": sync,
                            "start": start,
                            "end": end,
                            "thread": thread,
                            "driver": kind == KIND_DRIVER,
                        }
                    )
        if buffer is not None:
            self._buffers.pop(buffer, None)

    def now(self) -> int:
        ts = ctypes.c_uint64()
        self._check(self.lib.cuptiGetTimestamp(ctypes.byref(ts)), "cuptiGetTimestamp")
        return ts.value

    def start(self) -> None:
        self._check(
            self.lib.cuptiActivityRegisterCallbacks(self._request, self._complete),
            "cuptiActivityRegisterCallbacks",
        )
        self._check(
            self.lib.cuptiActivityEnable(KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(kernel)"
        )
        # Runtime and driver API records tie each kernel to its launching thread; where CUPTI
        # refuses them, the iteration windows alone place the kernels.
        self.runtime = (
            self.lib.cuptiActivityEnable(KIND_RUNTIME) == SUCCESS
            and self.lib.cuptiActivityEnable(KIND_DRIVER) == SUCCESS
        )

    def mark(self, label: str) -> None:
        self.marks.append((label, self.now()))

    def stop(self) -> None:
        self.lib.cuptiActivityFlushAll(FLUSH_FORCED)
        self.lib.cuptiActivityDisable(KIND_CONCURRENT_KERNEL)
        if self.runtime:
            self.lib.cuptiActivityDisable(KIND_RUNTIME)
            self.lib.cuptiActivityDisable(KIND_DRIVER)
        self.lib.cuptiActivityFlushAll(FLUSH_FORCED)

    def write(self, path: Path, ops: dict[str, Any] | None = None) -> None:
        """The kernels, marks and (``ops``) the operator ranges on this timer's clock
        (``profkit.annotate.IntervalLog``) as JSON."""
        import json

        for k in self.kernels:
            launch = self.launches.get(k["correlation"])
            k["thread"], k["launched_at"] = launch if launch else (None, None)
        out: dict[str, Any] = {
            "marks": self.marks,
            "runtime_records": self.runtime,
            "kernels": self.kernels,
            "syncs": self.syncs,
        }
        if ops is not None:
            out["ops"] = ops
        path.write_text(json.dumps(out))


def _read_kernel(address: int) -> dict[str, Any]:
    raw = ctypes.string_at(address, 112)
    start, end = struct.unpack_from("<QQ", raw, 16)
    device, context, stream = struct.unpack_from("<III", raw, 40)
    grid = struct.unpack_from("<iii", raw, 52)
    block = struct.unpack_from("<iii", raw, 64)
    (correlation,) = struct.unpack_from("<I", raw, 92)
    (name_ptr,) = struct.unpack_from("<Q", raw, 104)
    name = ctypes.string_at(name_ptr).decode(errors="replace") if name_ptr else ""
    return {
        "name": name,
        "start": start,
        "end": end,
        "device": device,
        "context": context,
        "stream": stream,
        "grid": list(grid),
        "block": list(block),
        "correlation": correlation,
    }
