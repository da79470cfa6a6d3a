"""torch.profiler (Kineto) traces: the Chrome-trace JSON that ``export_chrome_trace`` writes,
plain or gzipped, from ``profkit run --tool torch`` or from anyone's own profiling.

* A trace with GPU activity (``cat`` kernel, gpu_memcpy, gpu_memset) gives one row per
  activity, in launch order. Each is tied to its launch call (cuda_runtime / cuda_driver
  event with the same ``correlation``), whose thread and start place it in the
  ``record_function`` ranges (``user_annotation``) open on that thread at the time, and in
  profkit's iteration ranges (``<tag>.iterN``) open in its process: those hold a whole step,
  whichever thread launched its work (autograd's backward runs on a thread of its own).
* Its launch calls that blocked the host (synchronisations, synchronous copies: ``cuda_runtime``
  events named in ``schema.HOST_SYNC_CALLS``), each with the operator that made it.
* A trace without GPU activity (``--device cpu``) gives one row per CPU operator
  (``cpu_op``), ``kind`` ``cpu_op``, with its self time: its span less the spans of the
  operators and ranges it called, as torch.profiler's own "Self CPU" column counts it.

Timestamps in these files are microseconds with three decimals; they become integer ns.

The trace is read as a stream (:class:`_Text`): its text in chunks, one event decoded at a time
by the json module's own scanner, and of each event only what the steps below need is kept, as
a tuple, with names interned; the rows are made one at a time as the store reads them. Memory
grows with the events profkit reads, a hundred-odd bytes each, not with the file's text or one
dict per event, so that a trace of gigabytes imports in a fraction of what ``json.load`` of it takes.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, NoReturn, Optional

from ..errors import BadExport
from ..names import short_name
from ..nvtx_ranges import OP_PREFIX, is_iteration_range, op_label
from .gzipped import GZIP_ERRORS, open_text
from .ranges import (
    MAX_DEPTH,
    POINT,
    RANGE,
    LaunchIndex,
    OpenRange,
    attribute,
    kept,
    merged,
    nest_in_process_ranges,
    place,
    range_rows,
)
from .schema import (
    COLUMNS,
    DIM_LIMIT,
    ID_LIMIT,
    Capture,
    HostSyncRow,
    KernelRow,
    Kind,
    RangeRow,
    gpu_around,
    host_sync_call,
    launch_value_fault,
)

GPU_KINDS: dict[str, Kind] = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
OP_CATS = {"cpu_op", "operator"}
RANGE_CATS = {"user_annotation"}
# "Input type" entries that are not tensors.
NOT_TENSOR_TYPES = {"", "Scalar", "ScalarList", "TensorList", "GenericList", "None"}

# What the reader does with an event of each category (its ``cat``, lower case).
_GPU, _OP, _RANGE, _LAUNCH = 1, 2, 3, 4
_ROLE: dict[str, int] = {
    **dict.fromkeys(GPU_KINDS, _GPU),
    **dict.fromkeys(OP_CATS, _OP),
    **dict.fromkeys(RANGE_CATS, _RANGE),
    **dict.fromkeys(LAUNCH_CATS, _LAUNCH),
}

# The thread of an event: its (pid, tid), as the trace has them (numbers or names; None where
# it has none), one tuple shared by all the thread's events.
Thread = tuple[Any, Any]
# What the reader keeps of each event it reads (plain tuples: a million of them are made):
# a GPU activity: (kind, name, start ns, duration ns, correlation, External id, grid (x, y, z),
# block (x, y, z), stream, device as the trace has it (_ABSENT where it has none)).
Gpu = tuple[
    Kind,
    str,
    int,
    int,
    Optional[int],
    Optional[int],
    tuple[Optional[int], ...],
    tuple[Optional[int], ...],
    Optional[int],
    Any,
]
# a launch call: (thread, start ns), by its correlation id;
Launch = tuple[Thread, int]
# and one that blocked the host: (thread, start ns, duration ns, call (HOST_SYNC_CALLS), External id).
SyncCall = tuple[Thread, int, int, str, Optional[int]]
# a CPU operator: (thread, start ns, duration ns, name, input types, has an External id, External id);
# in a trace with GPU activity only its (name or None, input types), by its External id.
Op = tuple[Thread, int, int, str, Optional[str], bool, Optional[int]]
OpLabel = tuple[Optional[str], Optional[str]]
# a range (record_function): (thread, start ns, duration ns, name).
Annotation = tuple[Thread, int, int, str]
# A row to place in ranges: (launching thread, launch start, POINT, the row's index).
Point = tuple[Thread, int, int, int]
# What placing a row in its ranges set: (column, value) pairs, shared by the rows it is the same for.
Placed = tuple[tuple[str, Any], ...]

_ABSENT = object()
_LIMIT = 2**62


def _ns(us: Any) -> int:
    """Microseconds (a JSON number) -> integer ns; anything else (a bool, a string, a value
    no int64 holds, NaN or infinity) raises ValueError."""
    if type(us) is float:  # the common case first
        if us - us == 0.0 and abs(us) * 1000 < _LIMIT:
            return int(round(us * 1000))
    elif type(us) is int and abs(us) * 1000 < _LIMIT:
        return us * 1000
    if isinstance(us, bool) or not isinstance(us, (int, float)):
        raise ValueError(f"{us!r} is not a number")
    if not math.isfinite(us) or abs(us) * 1000 >= _LIMIT:
        raise ValueError(f"{us!r} is not a finite time")
    return int(round(us * 1000))


_WS = re.compile(r"[ \t\n\r]*")
# After an element of an array: its comma (and the space after it), or the array's end (group 1).
_NEXT = re.compile(r"[ \t\n\r]*(?:,[ \t\n\r]*|(\]))")


class _Text:
    """A trace's JSON text, read in chunks (``CHUNK`` characters) and decoded one value at a
    time by the json module's scanner (C), so that its ``traceEvents`` are read one event at a
    time (:meth:`events`) and the text is never held whole. Its other top-level entries are
    decoded whole, into ``top``, wherever they are. As strict as ``json.load``: any JSON
    error, anywhere, raises BadExport, with the character at which it was found."""

    CHUNK = 1 << 20

    def __init__(self, f: IO[str], filename: str):
        self.f, self.filename = f, filename
        self.buf, self.pos, self.base, self.eof = "", 0, 0, False  # base: the characters before buf
        # The scanner json.JSONDecoder.raw_decode calls (C), without its wrapping.
        self.scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
        self.top: dict[str, Any] | None = {}  # None: the file's JSON value is not an object
        self.found = False  # a traceEvents list was read

    def _more(self, at_least: int = 0) -> bool:
        """Read on (at least ``at_least`` characters more, where the file has them); False at its end."""
        if self.eof:
            return False
        chunk = self.f.read(max(self.CHUNK, at_least))
        self.base += self.pos
        self.buf, self.pos = self.buf[self.pos :] + chunk, 0
        self.eof = not chunk
        return not self.eof

    def fail(self, msg: str, pos: int | None = None) -> NoReturn:
        at = self.base + (self.pos if pos is None else pos)
        raise BadExport(f"{self.filename} is not a readable JSON trace: {msg} at character {at:,}")

    def _peek(self) -> str:
        """The next character that is not white space ('' at the end of the file), not read."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]  # always matches
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                return ""

    def _too_long(self, pos: int) -> NoReturn:
        """The scanner refused a whole number of more digits than Python converts (its
        ``int_max_str_digits``; no value of a trace has a fraction of that)."""
        self.fail(
            f"a number of more than {sys.get_int_max_str_digits():,} digits in the value", pos
        )

    def _fail_at_end(self, exc: StopIteration | json.JSONDecodeError) -> None:
        """A value that does not decode: the trace's error once the whole text is read (before,
        it may only go on past what is read)."""
        if not self.eof:
            return
        if isinstance(exc, StopIteration):
            self.fail("Expecting value", exc.value)
        else:
            self.fail(exc.msg, exc.pos)

    def _value(self) -> Any:
        """The next JSON value, whole."""
        self._peek()
        while True:
            try:
                value, end = self.scan(self.buf, self.pos)
                if end < len(self.buf) or self.eof:  # else a number may go on in the next chunk
                    self.pos = end
                    return value
            except (StopIteration, json.JSONDecodeError) as exc:
                self._fail_at_end(exc)
            except ValueError:
                self._too_long(self.pos)
            self._more(len(self.buf) - self.pos)  # a value longer than what is read: twice as much

    def _items(self) -> Iterator[Any]:
        """The elements of the array whose '[' was just read, one at a time."""
        if self._peek() == "]":
            self.pos += 1
            return
        scan, after = self.scan, _NEXT.match
        while True:
            buf, pos = self.buf, self.pos
            try:
                value, end = scan(buf, pos)
                m = after(buf, end)
                if m is not None and (m.group(1) or m.end() < len(buf) or self.eof):
                    self.pos = m.end()
                    yield value
                    if m.group(1):
                        return
                    continue
                if self.eof:
                    self.fail("Expecting ',' delimiter", _WS.match(buf, end).end())  # type: ignore[union-attr]
            except (StopIteration, json.JSONDecodeError) as exc:
                self._fail_at_end(exc)
            except ValueError:
                self._too_long(pos)
            # The element (or what follows it) goes on past what is read: read on, decode it again.
            self._more(len(buf) - pos)

    def events(self) -> Iterator[Any]:
        """The trace's events: the elements of its traceEvents list (or of the file's list)."""
        c = self._peek()
        if c == "[":
            self.pos += 1
            self.found = True
            yield from self._items()
        elif c == "{":
            self.pos += 1
            assert self.top is not None
            if self._peek() == "}":
                self.pos += 1
            else:
                while True:
                    if self._peek() != '"':
                        self.fail("Expecting property name enclosed in double quotes")
                    key = self._value()
                    if self._peek() != ":":
                        self.fail("Expecting ':' delimiter")
                    self.pos += 1
                    if key == "traceEvents" and (self.found or "traceEvents" in self.top):
                        # json.load would keep the last one, the events read from the first
                        raise BadExport(
                            f"{self.filename} has more than one traceEvents entry",
                            "A trace has one list of events.",
                        )
                    if key == "traceEvents" and self._peek() == "[":
                        self.pos += 1
                        self.found = True
                        yield from self._items()
                    else:
                        self.top[key] = self._value()
                    c = self._peek()
                    self.pos += 1
                    if c == "}":
                        break
                    if c != ",":
                        self.fail("Expecting ',' delimiter", self.pos - 1)
        else:
            self._value()  # a JSON value that is no object (or no JSON at all: refused here)
            self.top = None
        if self._peek():
            self.fail("Extra data")
        if self.top is None or not self.found:
            raise BadExport(
                f"{self.filename} is JSON but not a Chrome/Kineto trace (no traceEvents list)",
                "profkit imports traces written by torch.profiler's export_chrome_trace.",
            )


def _input_types(args: dict[str, Any]) -> str | None:
    types = args.get("Input type")
    if not isinstance(types, list):
        return None
    seen = list(dict.fromkeys(t for t in types if isinstance(t, str) and t not in NOT_TENSOR_TYPES))
    return _text(",".join(seen)) or None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


_NO_DIMS: tuple[int | None, ...] = (None, None, None)


def _dims(v: Any) -> tuple[int | None, ...] | None:
    """A grid or block as the trace gives it (``[x, y, z]``) -> (x, y, z); absent -> Nones; None
    where it is anything but three whole numbers from 0 to 2^31 - 1 (``schema.launch_value_fault``)."""
    if v is None:
        return _NO_DIMS
    if (
        type(v) is list
        and len(v) == 3
        and type(v[0]) is int
        and type(v[1]) is int
        and type(v[2]) is int
        and 0 <= v[0] < DIM_LIMIT
        and 0 <= v[1] < DIM_LIMIT
        and 0 <= v[2] < DIM_LIMIT
    ):
        return tuple(v)
    return None


def _id_ok(v: Any) -> bool:
    """A stream or device id as ``schema.launch_value_fault`` takes it (absent: None)."""
    return v is None or (type(v) is int and 0 <= v < ID_LIMIT)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(s: str) -> str:
    """A string of the trace as it can be stored and shown: a lone surrogate (JSON's ``"\\ud800"``,
    half of a pair, no character) becomes U+FFFD, as the nsys reader shows bytes that are not UTF-8."""
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", s)


class _Trace:
    """What profkit reads of a trace: its events' compact records (see the types above) and its
    other top-level entries."""

    def __init__(self) -> None:
        self.gpu: list[Gpu] = []
        # until the first GPU activity: a CPU trace's rows are its operators
        self.ops: list[Op] = []
        self.by_ext: dict[Any, OpLabel] | None = None  # from the first GPU activity on
        self.annotations: list[Annotation] = []
        self.launches: dict[int, Launch] = {}
        self.syncs: dict[int, SyncCall] = {}
        self.top: dict[str, Any] = {}

    def gpu_trace(self) -> dict[Any, OpLabel]:
        """The trace has GPU activity: its operators are wanted only for their External ids."""
        self.by_ext = {}
        for _, _, _, name, types, has_ext, ext in self.ops:
            if has_ext:
                self.by_ext[ext] = (name or None, types)
        self.ops.clear()
        return self.by_ext


def read_kineto(path: str | Path) -> Capture[KernelRow]:
    path = Path(path)
    trace = _read(path)
    syncs: list[HostSyncRow] = []
    if trace.gpu:
        kernels, ranges, notes = _gpu_rows(trace)
        syncs = _host_syncs(trace, ranges)
    elif trace.ops:
        kernels, ranges, notes = _cpu_rows(trace)
    else:
        raise BadExport(
            f"{path.name} holds no GPU kernels and no CPU operators",
            "Record it with torch.profiler (ProfilerActivity.CUDA for GPU kernels).",
        )
    gpu_name, cc = _device(trace, path.name)
    return Capture(
        rows=kernels,
        tool="torch",
        source_format="kineto-json",
        gpu_name=gpu_name,
        compute_capability=cc,
        notes=notes,
        ranges=ranges,
        range_paths=[r["path"] for r in ranges],
        host_syncs=syncs,
    )


def _read(path: Path) -> _Trace:
    """The trace, read as a stream (plain or gzipped: a gzipped one through gzipped.open_text,
    which refuses one that expands past its bound)."""
    try:
        with open_text(path) as f:
            text = _Text(f, path.name)
            trace = _events(text.events(), path.name)
            assert text.top is not None  # events() refused a file that is no object or list
            trace.top = text.top
            return trace
    except (*GZIP_ERRORS, UnicodeDecodeError) as exc:
        raise BadExport(f"{path.name} is not a readable JSON trace: {exc}") from exc
    except RecursionError:
        raise BadExport(f"{path.name} is nested too deeply to be a Chrome/Kineto trace") from None


# The event torch.profiler records for a Python dispatch mode's handling of each operator
# (profkit's attribution, :mod:`profkit.annotate`): its cost, not an operator of the model.
PYTHON_MODE = "PythonDispatchMode"


def _events(events: Iterator[Any], filename: str) -> _Trace:
    """The trace's complete events that profkit reads, checked (:func:`_check`), by what they
    are: GPU activities, CPU operators, annotations (ranges), and launch calls by correlation id,
    each as a compact record, its names and threads interned."""
    trace = _Trace()
    gpu, ops, annotations, launches, syncs = (
        trace.gpu,
        trace.ops,
        trace.annotations,
        trace.launches,
        trace.syncs,
    )
    by_ext = trace.by_ext
    # names, input types, threads, grids, labels: one object for each value
    strings: dict[Any, Any] = {}
    intern: Callable[[Any, Any], Any] = strings.setdefault
    sync_calls: dict[str, str | None] = {}  # launch calls' names: HOST_SYNC_CALLS' name, or None
    # operators' input types by their "Input type"
    known_types: dict[tuple[Any, ...] | None, str | None] = {}
    seen: set[Gpu] = set()  # the GPU activities read: one listed twice is refused
    for n, e in enumerate(events):
        if type(e) is not dict or e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        role = _ROLE.get(cat) if type(cat) is str else None
        if role is None:
            cat = str(cat).lower()
            role = _ROLE.get(cat)
            if role is None:
                continue
        start, dur = _check(e, n, cat, filename)
        args = e.get("args") or {}
        name = strings.get(e["name"])
        if name is None:
            name = strings[e["name"]] = _text(e["name"])
        pid, tid = e.get("pid"), e.get("tid")
        thread = intern((pid, tid), (pid, tid))
        if role == _GPU:
            if not name:  # a kernel without a name is none (ncu's report reader refuses one too)
                raise BadExport(f"{_where(e, n, cat, filename)} has an empty name")
            if by_ext is None:
                by_ext = trace.gpu_trace()
            grid, block = _dims(args.get("grid")), _dims(args.get("block"))
            stream, device = args.get("stream"), args.get("device")
            if grid is None or block is None or not _id_ok(stream) or not _id_ok(device):
                _bad_launch(e, n, cat, filename)
            g: Gpu = (
                GPU_KINDS[cat],
                name,
                start,
                dur,
                args.get("correlation"),
                args.get("External id"),
                intern(grid, grid),
                intern(block, block),
                stream,
                device if "device" in args else _ABSENT,
            )
            if g in seen:
                raise BadExport(
                    f"{_where(e, n, cat, filename)} repeats an earlier event: the same {g[0]} at the same "
                    "time on the same stream",
                    "Is it two traces merged? A trace lists each GPU activity once.",
                )
            seen.add(g)
            gpu.append(g)
        elif role == _OP:
            if name != PYTHON_MODE:
                given = args.get("Input type")
                key = tuple(given) if type(given) is list else None
                try:
                    types = known_types[key]
                except KeyError:
                    types = known_types[key] = _input_types(args)
                except TypeError:  # an entry that is no string (a list: unhashable)
                    types = _input_types(args)
                if by_ext is None:
                    ops.append(
                        (
                            thread,
                            start,
                            dur,
                            name,
                            types,
                            "External id" in args,
                            args.get("External id"),
                        )
                    )
                elif "External id" in args:
                    label = (name or None, types)
                    by_ext[args["External id"]] = intern(label, label)
        elif role == _RANGE:
            annotations.append((thread, start, dur, name))
        else:
            corr = args.get("correlation")
            if corr is not None:
                launches[corr] = (thread, start)
                call = (
                    sync_calls[name]
                    if name in sync_calls
                    else sync_calls.setdefault(name, host_sync_call(name))
                )
                if call is not None:
                    syncs[corr] = (thread, start, dur, call, args.get("External id"))
                elif syncs:
                    syncs.pop(corr, None)  # the last call of a correlation id is its launch
    return trace


def _where(e: dict[str, Any], n: int, cat: str, filename: str) -> str:
    return f"{filename}: traceEvents[{n}] ({cat} {str(e.get('name', ''))[:60]!r})"


def _bad_launch(e: dict[str, Any], n: int, cat: str, filename: str) -> NoReturn:
    """Refuse a GPU activity whose grid, block, stream or device is not what every importer
    holds them to (``schema.launch_value_fault``), naming the first such field."""
    args = e["args"]
    for key in ("grid", "block"):
        if _dims(args.get(key)) is None:
            raise BadExport(
                f"{_where(e, n, cat, filename)}: args.{key} is {_shown(args[key])}, not three "
                f"whole numbers from 0 to 2^31 - 1"
            )
    for key in ("stream", "device"):
        fault = launch_value_fault(key, args.get(key))
        if fault:
            raise BadExport(
                f"{_where(e, n, cat, filename)}: args.{key} is {_shown(args[key])}, {fault}"
            )
    raise AssertionError("a launch refused for no fault")


def _shown(value: Any) -> str:
    """A value of the trace in a message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check(e: dict[str, Any], n: int, cat: str, filename: str) -> tuple[int, int]:
    """Refuse an event profkit reads (the ``n``-th, of category ``cat``) whose fields are missing
    or of the wrong type; its start and duration in ns. The common case (float times, integer
    ids, numbers or names for threads) is decided here; anything else by :func:`_checked`."""
    ts, dur = e.get("ts"), e.get("dur")
    if (
        type(ts) is float
        and type(dur) is float
        and 0.0 <= ts
        and ts * 1000 < _LIMIT
        and 0.0 <= dur
        and dur * 1000 < _LIMIT
        and type(e.get("name")) is str
        and type(e.get("pid")) in _THREAD_TYPES
        and type(e.get("tid")) in _THREAD_TYPES
    ):
        args = e.get("args")
        if type(args) is dict:
            corr, ext = args.get("correlation"), args.get("External id")
            if (corr is None or (type(corr) is int and 0 <= corr < ID_LIMIT)) and (
                ext is None or (type(ext) is int and 0 <= ext < ID_LIMIT)
            ):
                return int(round(ts * 1000)), int(round(dur * 1000))
    return _checked(e, n, cat, filename)


# The types of a thread's pid and tid that _check takes as they are (None: not given; _checked
# decides that case).
_THREAD_TYPES = (int, str)


def _checked(e: dict[str, Any], n: int, cat: str, filename: str) -> tuple[int, int]:
    """:func:`_check`, every case."""
    if not isinstance(e.get("name"), str):
        raise BadExport(f"{_where(e, n, cat, filename)}: name is {e.get('name')!r}, not a string")
    try:
        start, dur = _ns(e["ts"]), _ns(e["dur"])
    except KeyError as missing:
        raise BadExport(
            f"{_where(e, n, cat, filename)} has no {missing.args[0]} "
            f"(a complete event needs ts and dur)"
        ) from None
    except ValueError as exc:
        raise BadExport(f"{_where(e, n, cat, filename)}: ts/dur {exc}") from None
    if dur < 0:
        raise BadExport(
            f"{_where(e, n, cat, filename)} has a negative duration ({e.get('dur')!r} us)"
        )
    if start < 0:  # a trace's times count from the epoch or the trace's start
        raise BadExport(
            f"{_where(e, n, cat, filename)} has a negative start (ts {e.get('ts')!r} us)"
        )
    for key in ("pid", "tid"):
        if key in e and not isinstance(e[key], (int, str)) or isinstance(e.get(key), bool):
            raise BadExport(
                f"{_where(e, n, cat, filename)}: {key} is {e[key]!r}, not a number or a name"
            )
    args = e.get("args")
    if args is None:
        if "args" in e:
            raise BadExport(f"{_where(e, n, cat, filename)}: args is NoneType, not an object")
        return start, dur
    if type(args) is not dict:
        raise BadExport(
            f"{_where(e, n, cat, filename)}: args is {type(args).__name__}, not an object"
        )
    # Ids, as a launch's stream and device are held (``schema.launch_value_fault``): whole numbers
    # from 0 to 2^63 - 1 (what SQLite stores; 10^30 would overflow where one is stored).
    for key, shown_key in (
        ("correlation", "args.correlation"),
        ("External id", "args['External id']"),
    ):
        value = args.get(key)
        if value is not None and not (_int(value) is not None and 0 <= value < ID_LIMIT):
            raise BadExport(
                f"{_where(e, n, cat, filename)}: {shown_key} is {_shown(value)}, "
                "not a whole number from 0 to 2^63 - 1"
            )
    return start, dur


def _device(trace: _Trace, filename: str) -> tuple[str | None, str | None]:
    """The GPU's name and compute capability, from the trace's deviceProperties entry for the
    device of its first GPU activity (else its first entry); None and None for a CPU trace."""
    props = trace.top.get("deviceProperties") or []
    if not isinstance(props, list) or not all(isinstance(p, dict) for p in props):
        raise BadExport(f"{filename}: deviceProperties is not a list of objects")
    if not (trace.gpu and props):
        return None, None
    dev = trace.gpu[0][9]
    dev = 0 if dev is _ABSENT else dev
    p = next((p for p in props if p.get("id") == dev), props[0])
    gpu_name = p.get("name")
    if gpu_name is not None and type(gpu_name) is not str:
        raise BadExport(
            f"{filename}: deviceProperties[{props.index(p)}].name is {_shown(gpu_name)}, not a string"
        )
    gpu_name = _text(gpu_name) if gpu_name is not None else None
    cc = (
        f"{p['computeMajor']}.{p.get('computeMinor', 0)}"
        if p.get("computeMajor") is not None
        else None
    )
    return gpu_name, cc


def _range(a: Annotation) -> OpenRange:
    (pid, tid), start, dur, name = a
    return OpenRange(
        name,
        None,
        _int(tid),
        start,
        start + dur,
        process=pid,
        process_wide=is_iteration_range(name),
    )


def _place(
    points: list[Point],
    annotations: list[Annotation],
    notes: list[str],
    row_of: Callable[[int], dict[str, Any]],
) -> tuple[list[OpenRange], dict[int, Placed]]:
    """Give each point's row the innermost range open for its thread (its own ranges and its
    process's iteration ranges), and count it in every open range: kernels (or CPU operators)
    with their time, and GPU operations of any kind. Ranges nested too deep are left out
    (``ranges.MAX_DEPTH``, a note in ``notes``). A point's row is ``row_of(index)``: its kind,
    duration_ns, op and input_types; what placing it sets, less kind and duration, is returned
    by index, for the rows to be made with it."""
    ranges = [_range(a) for a in annotations]
    own = [(a[0], r.start, RANGE, r) for a, r in zip(annotations, ranges) if not r.process_wide]
    own.sort(key=lambda x: (str(x[0]), x[1], -x[3].end))
    process = sorted(
        (r for r in ranges if r.process_wide), key=lambda r: (str(r.process), r.start, -r.end)
    )
    # Paths: the process's ranges among themselves, each thread's among its own, then each
    # thread range under the process ranges open when it began.
    for _ in attribute((r.global_tid, r.start, RANGE, r) for r in process):
        pass
    for _ in attribute(own):
        pass
    ranges = kept(ranges, notes)
    own = [x for x in own if x[3].depth < MAX_DEPTH]
    process = [r for r in process if r.depth < MAX_DEPTH]
    nest_in_process_ranges(ranges)
    by_process: dict[Any, list[OpenRange]] = {}
    for r in process:
        by_process.setdefault(r.process, []).append(r)
    # Each process's ranges (in start order), their starts, and the latest end among them so
    # far: the ranges open at t are among those begun by t, back to the last whose reach is t.
    spans = {
        pid: (rs, [r.start for r in rs], list(itertools.accumulate((r.end for r in rs), max)))
        for pid, rs in by_process.items()
    }

    def around(pid: Any, t: int) -> list[OpenRange]:
        if pid not in spans:
            return []
        rs, starts, reach = spans[pid]
        j = k = bisect.bisect_right(starts, t)
        while j > 0 and reach[j - 1] > t:
            j -= 1
        return [r for r in rs[j:k] if t < r.end]

    # A point's payload becomes (index, process, time), to find its process's open ranges.
    timeline: list[tuple[Thread, int, int, OpenRange | tuple[int, Any, int]]] = [
        (thread, t, POINT, (i, thread[0], t)) for thread, t, _, i in points
    ]
    timeline += own
    timeline.sort(
        key=lambda x: (str(x[0]), x[1], x[2], -x[3].end if isinstance(x[3], OpenRange) else 0)
    )
    placed: dict[int, Placed] = {}
    shared: dict[Placed, Placed] = {}
    for (i, pid, t), stack in attribute(timeline, paths=False):
        row = row_of(i)
        # row has the columns place() reads and sets, not all of a KernelRow
        place(row, merged(around(pid, t) if spans else [], stack))  # type: ignore[arg-type]
        del row["kind"], row["duration_ns"]
        p = tuple(row.items())
        placed[i] = shared.setdefault(p, p)
    del timeline
    return ranges, placed


def _others(index: LaunchIndex) -> Callable[[OpenRange], int]:
    """Other threads' launches in a range: none for a process-wide range, which counts them."""
    return lambda r: 0 if r.process_wide else index.others(r)


# A row's columns, all None: what a row is made from.
_EMPTY: dict[str, Any] = dict.fromkeys(COLUMNS)


def _gpu_rows(trace: _Trace) -> tuple[Iterator[KernelRow], list[RangeRow], list[str]]:
    gpu, launches = trace.gpu, trace.launches
    by_ext = trace.by_ext or {}

    def order(g: Gpu) -> tuple[int, int]:
        launch = launches.get(g[4])  # type: ignore[arg-type]  # None is no key
        return (launch[1] if launch else g[2], g[4] or 0)

    gpu.sort(key=order)
    timeline: list[Point] = []
    index = LaunchIndex()
    unlaunched = 0
    for i, g in enumerate(gpu):
        launch = launches.get(g[4])  # type: ignore[arg-type]
        if launch is None:
            unlaunched += 1
            continue
        thread, start = launch[0], launch[1]
        timeline.append((thread, start, POINT, i))
        if g[0] == "kernel":
            index.add(thread[0], _int(thread[1]), start)

    def row_of(i: int) -> dict[str, Any]:
        g = gpu[i]
        op, types = by_ext.get(g[5], _NO_OP)
        return {"kind": g[0], "duration_ns": g[3], "op": op, "input_types": types}

    notes: list[str] = []
    ranges, placed = _place(timeline, trace.annotations, notes, row_of)
    del timeline
    index.freeze()
    if unlaunched:
        notes.append(f"{unlaunched} GPU activities have no launch call in the trace, so no range")
    return _made_gpu_rows(trace, placed), range_rows(ranges, _others(index), gpu=True), notes


_NO_OP: OpLabel = (None, None)


def _made_gpu_rows(trace: _Trace, placed: dict[int, Placed]) -> Iterator[KernelRow]:
    """The GPU activities' rows, in launch order, made one at a time."""
    launches, by_ext = trace.launches, trace.by_ext or {}
    shorts: dict[str, str] = {}
    for i, (kind, name, start, dur, corr, ext, grid, block, stream, device) in enumerate(trace.gpu):
        launch = launches.get(corr)  # type: ignore[arg-type]
        short = shorts.get(name)
        if short is None:
            short = shorts[name] = short_name(name)
        op, types = by_ext.get(ext, _NO_OP)
        row = {
            **_EMPTY,
            "launch_id": i,
            "kind": kind,
            "name": name,
            "short_name": short,
            "duration_ns": dur,
            "start_ns": start,
            "grid_x": grid[0],
            "grid_y": grid[1],
            "grid_z": grid[2],
            "block_x": block[0],
            "block_y": block[1],
            "block_z": block[2],
            "stream": stream,
            "device": device if device is not _ABSENT else None,
            "thread_id": _int(launch[0][1]) if launch else None,
            "input_types": types,
            "op": op,
            "metrics": {},
        }
        p = placed.get(i)
        if p:
            row.update(p)
        yield row  # type: ignore[misc]  # every column of KernelRow is set


def _host_syncs(trace: _Trace, ranges: list[RangeRow]) -> list[HostSyncRow]:
    """The runtime calls that blocked the host (``schema.HOST_SYNC_CALLS``), in start order, each
    with the operator that made it (the one whose External id it carries: ``aten::_local_scalar_dense``
    for ``.item()``), the GPU work around it and the measured iteration it was made in (a trace
    is one process's)."""
    steps = [
        (r["start_ns"] or 0, (r["start_ns"] or 0) + (r["wall_ns"] or 0), r["name"])
        for r in ranges
        if is_iteration_range(r["name"])
    ]
    found = sorted(trace.syncs.items(), key=lambda x: (x[1][1], x[0]))
    if not found:
        return []
    by_ext = trace.by_ext or {}
    around = gpu_around((g[2], g[2] + g[3]) for g in trace.gpu)
    out: list[HostSyncRow] = []
    for i, (_, (thread, start, dur, name, ext)) in enumerate(found):
        end = start + dur
        last_end, next_start = around(end)
        step = next((x for x in steps if x[0] <= start < x[1]), None)
        out.append(
            {
                "sync_id": i,
                "name": name,
                "start_ns": start,
                "end_ns": end,
                "thread_id": _int(thread[1]),
                "rank": None,
                "op": by_ext.get(ext, _NO_OP)[0] if ext is not None else None,
                "gpu_last_end_ns": last_end,
                "gpu_next_start_ns": next_start,
                "iteration": step[2] if step else None,
                "iteration_end_ns": step[1] if step else None,
            }
        )
    return out


class _Node:
    """A CPU operator or range in its thread's tree, for self times."""

    __slots__ = (
        "thread",
        "start",
        "dur",
        "name",
        "types",
        "is_op",
        "parent",
        "kids",
        "merged",
        "children",
        "inner",
    )

    def __init__(
        self, thread: Thread, start: int, dur: int, name: str, types: str | None, is_op: bool
    ):
        self.thread, self.start, self.dur, self.name, self.types, self.is_op = (
            thread,
            start,
            dur,
            name,
            types,
            is_op,
        )
        self.parent: _Node | None = None
        self.kids: list[_Node] = []
        self.merged = False
        self.children = 0
        self.inner: str | None = None  # the first of profkit's operator ranges below it


def _drop_outer_call(e: _Node) -> None:
    """An operator call profkit's attribution re-dispatched (``profkit.annotate``): the profiler
    records it twice, the outer call holding only profkit's operator range, which holds the
    same call again. The outer one is the attribution's own cost: it is left out, the range
    and the call inside it standing in its place."""
    if not e.is_op or len(e.kids) != 1:
        return
    r = e.kids[0]
    if r.is_op or not r.name.startswith(OP_PREFIX) or len(r.kids) != 1:
        return
    inner = r.kids[0]
    if (
        not inner.is_op
        or inner.name != e.name
        or r.name[len(OP_PREFIX) :].split("|", 1)[0] != e.name
    ):
        return
    e.merged = True
    r.parent = e.parent
    if e.parent is not None:
        e.parent.kids = [r if k is e else k for k in e.parent.kids]


def _cpu_rows(trace: _Trace) -> tuple[Iterator[KernelRow], list[RangeRow], list[str]]:
    # Self time: each thread's operators and ranges form a tree by time containment; an
    # operator's self time is its span less its children's spans. As torch.profiler's own
    # table does, an operator whose only child is the same operator (aten::div_ re-dispatching
    # to aten::div_) counts as one call.
    all_ops = [_Node(o[0], o[1], o[2], o[3], o[4], True) for o in trace.ops]
    nodes = sorted(
        all_ops + [_Node(a[0], a[1], a[2], a[3], None, False) for a in trace.annotations],
        key=lambda e: (str(e.thread), e.start, -e.dur),
    )
    stack: list[_Node] = []
    thread = None
    for e in nodes:
        t = str(e.thread)
        if t != thread:
            stack, thread = [], t
        while stack and stack[-1].start + stack[-1].dur <= e.start:
            stack.pop()
        e.parent = stack[-1] if stack else None
        if stack:
            stack[-1].kids.append(e)
        stack.append(e)
    for e in nodes:
        _drop_outer_call(e)
    for e in nodes:
        p = e.parent
        if p is not None and p.name == e.name and len(p.kids) == 1:
            p.kids = e.kids
            for k in e.kids:
                k.parent = p
            e.merged = True
    # An operator profkit's attribution did not wrap (a composite one, aten::linear, or an
    # autograd node, AddmmBackward0) is the module's whose operators it called: the first
    # operator range below it says which.
    for e in reversed(nodes):
        if e.merged:
            continue
        if not e.is_op and e.name.startswith(OP_PREFIX):
            e.inner = e.name
        elif e.inner is None:
            e.inner = next((k.inner for k in e.kids if k.inner is not None), None)
    del nodes, stack
    ops = [e for e in all_ops if not e.merged]
    del all_ops
    for e in ops:
        e.children = sum(k.dur for k in e.kids)
    for e in ops:
        e.parent, e.kids = None, []  # the tree is done with: let it go

    ops.sort(key=lambda e: (e.start, -e.dur))
    timeline: list[Point] = []
    index = LaunchIndex()
    for i, e in enumerate(ops):
        timeline.append((e.thread, e.start, POINT, i))
        index.add(e.thread[0], _int(e.thread[1]), e.start)

    def row_of(i: int) -> dict[str, Any]:
        e = ops[i]
        return {
            "kind": "cpu_op",
            "duration_ns": max(0, e.dur - e.children),
            "op": None,
            "input_types": e.types,
        }

    notes: list[str] = []
    ranges, placed = _place(timeline, trace.annotations, notes, row_of)
    del timeline
    index.freeze()
    return _made_cpu_rows(ops, placed), range_rows(ranges, _others(index), gpu=False), notes


def _made_cpu_rows(ops: list[_Node], placed: dict[int, Placed]) -> Iterator[KernelRow]:
    """The CPU operators' rows, in start order, made one at a time."""
    shorts: dict[str, str] = {}
    for i, e in enumerate(ops):
        short = shorts.get(e.name)
        if short is None:
            short = shorts[e.name] = short_name(e.name)
        row = {
            **_EMPTY,
            "launch_id": i,
            "kind": "cpu_op",
            "name": e.name,
            "short_name": short,
            "duration_ns": max(0, e.dur - e.children),
            "start_ns": e.start,
            "thread_id": _int(e.thread[1]),
            "input_types": e.types,
            "metrics": {},
        }
        p = placed.get(i)
        if p:
            row.update(p)
        if row.get("module") is None and row.get("phase") is None and e.inner is not None:
            label = op_label(e.inner)
            if label is not None:
                row["module"], row["module_type"], row["phase"] = (
                    label.module,
                    label.module_type,
                    label.phase,
                )
        yield row  # type: ignore[misc]
