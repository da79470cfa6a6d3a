"""Nsight Compute raw-page CSV exports (``ncu --import X.ncu-rep --csv --page raw``), plain
or gzipped, into the kernel table.

The export has a header row, then a row of units (blank for unitless columns), then one row
per profiled launch. Numbers may carry thousands separators ("110,240"); durations follow
``--print-units`` (``ns`` with ``base``, ``us`` with decimals by default), so the units row is
read and every time unit is scaled to nanoseconds. The push/pop NVTX column reads
``<tid>  "domain:range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg" ...``, one quoted
entry per open push/pop range, outermost first; the start/end column (``Id:Domain:Start/Stop_Range:...``)
``"<id>:domain:range:..." ...``, one entry per open start/end range. A launch's ranges are its
start/end ranges (the process's, outermost) then its thread's push/pop ranges.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from ..errors import BadExport
from ..names import short_name
from .gzipped import GZIP_ERRORS, open_text
from .ncu_common import DURATION, TIME_SCALE, kernel_metric_names, nvtx_columns, path_list
from .schema import DIM_LIMIT, Capture, KernelRow, kernel_row

REQUIRED = ("ID", "Kernel Name")
_TRIPLE = re.compile(r"^\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)$")
_NVTX_ENTRY = re.compile(r'"((?:[^"\\]|\\.)*)"')
# domain:range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg, where Msg repeats the range.
_NVTX_FIELDS = re.compile(
    r"^(?P<domain>[^:]*):(?P<range>.*):[^:]*:[^:]*:[^:]*:[^:]*:[^:]*:(?P=range)$", re.S
)


# csv's own bound on a field (128 KiB) raised to this: a long template name or NVTX stack fits,
# a damaged or hostile file is refused in one line.
MAX_FIELD = 16 << 20


@contextmanager
def _rows(path: Path) -> Iterator[Iterator[list[str]]]:
    """The file's CSV records, streamed (a gzipped file through ``gzipped.open_capped``, which
    refuses one that expands past its bound); damaged files are refused in one line."""
    previous = csv.field_size_limit(MAX_FIELD)
    try:
        with open_text(path, encoding="utf-8-sig") as f:

            def records() -> Iterator[list[str]]:
                reader = csv.reader(f)
                while True:
                    try:
                        row = next(reader)
                    except StopIteration:
                        return
                    except csv.Error as exc:
                        text = str(exc)
                        if "field larger than field limit" in text:
                            text = f"a field is longer than {MAX_FIELD >> 20} MiB"
                        raise BadExport(
                            f"{path.name} line {reader.line_num}: not readable as CSV ({text})"
                        ) from None
                    except UnicodeDecodeError:
                        raise BadExport(f"{path.name} is not a text CSV file") from None
                    except GZIP_ERRORS as exc:
                        raise BadExport(f"{path.name} is a damaged gzip file ({exc})") from None
                    yield row

            yield records()
    finally:
        csv.field_size_limit(previous)


_INTEGER = re.compile(r"^\+?[0-9]+$")


def parse_number(text: str) -> float | int | None:
    """'110,240' -> 110240 (an int, exact however large); '1.5' -> 1.5; '' or 'n/a' -> None;
    anything else that is no number -> None."""
    text = text.strip().replace(",", "")
    if not text or text.lower() in ("n/a", "nan", "-"):
        return None
    if _INTEGER.match(text):
        # Past 40 digits a float (infinite past ~308, and refused by the checks as no table's
        # number is this large): int() of thousands of digits is refused by Python itself.
        return int(text) if len(text) <= 40 else float(text)
    try:
        return float(text)
    except ValueError:
        return None


def _checked(text: str, field: str, where: str, integer: bool = False) -> float | int | None:
    """A number of a column that must hold numbers: blank (ncu's '', 'n/a') is None; text that
    is no finite number, a negative value or (``integer``) a fraction is refused in one line
    naming the row and the column. Whole numbers written as such are read exactly (an int)."""
    v = parse_number(text)
    if v is None:
        if text.strip().replace(",", "").lower() in ("", "n/a", "-"):
            return None
        raise BadExport(f"{where}: {field} is {text.strip()[:40]!r}, not a number")
    if not math.isfinite(v) or v < 0 or abs(v) >= 2**63:
        raise BadExport(
            f"{where}: {field} is {text.strip()[:40]!r}, not a finite non-negative number"
        )
    if integer and isinstance(v, float):
        if not v.is_integer():
            raise BadExport(f"{where}: {field} is {text.strip()[:40]!r}, not a whole number")
        if v >= 2**53:  # a float this large is no longer exact
            raise BadExport(
                f"{where}: {field} is {text.strip()[:40]!r}, not written as a whole number"
            )
        return int(v)
    return v


def parse_nvtx(cell: str) -> tuple[int | None, list[tuple[str, str]]]:
    """``'541  "profkit:a.iter0:none:...:a.iter0" '`` -> (541, [("profkit", "a.iter0")])."""
    cell = cell.strip()
    if not cell:
        return None, []
    head = cell.split(None, 1)[0]
    tid = int(head) if head.isdigit() else None
    ranges = []
    for entry in _NVTX_ENTRY.findall(cell):
        m = _NVTX_FIELDS.match(entry)
        if m:
            ranges.append((m.group("domain"), m.group("range")))
        elif ":" in entry:
            # The message not repeated (``none``, as for a push with no registered string): the
            # six fields after the name are split off its end, since a name may hold colons
            # itself (profkit's operator ranges: ``pk.op|aten::conv2d|...``).
            domain, rest = entry.split(":", 1)
            fields = rest.rsplit(":", 6)
            ranges.append((domain, fields[0] if len(fields) == 7 else rest.split(":", 1)[0]))
    return tid, ranges


def parse_start_end(cell: str) -> list[tuple[str, str]]:
    """``' "0:profkit:a.iter0:none:...:a.iter0" '`` -> [("profkit", "a.iter0")]: the start/end
    ranges open at a launch (each entry led by ncu's range id)."""
    return parse_nvtx(
        " ".join(f'"{e.split(":", 1)[1]}"' for e in _NVTX_ENTRY.findall(cell) if ":" in e)
    )[1]


def _triple(
    text: str, field: str = "", where: str = ""
) -> tuple[int | None, int | None, int | None]:
    """'(8, 2, 1)' -> (8, 2, 1); blank -> Nones; anything else (negative, huge, text) refused."""
    if not text.strip() or text.strip().lower() == "n/a":
        return (None, None, None)
    m = _TRIPLE.match(text.strip())
    if not m or any(len(g) > 10 or int(g) >= DIM_LIMIT for g in m.groups()):
        raise BadExport(
            f"{where}: {field} is {text.strip()[:40]!r}, not three whole numbers (x, y, z)"
        )
    return tuple(int(g) for g in m.groups())  # type: ignore[return-value]


def read_ncu_csv(path: Path) -> Capture[KernelRow]:
    """Read the export, streamed: records are read and checked one at a time, only the kernel
    table's values kept (ncu's raw page carries hundreds of columns per launch)."""
    with _rows(path) as records:
        return _read(path, records)


class _Columns(NamedTuple):
    """What the header and units row say of each record's fields."""

    position: dict[str, int]  # column name -> its position in a record
    metrics: list[str]  # the kernel metrics kept
    scale: dict[str, int]  # a time metric -> what its values are multiplied by for ns
    units: dict[str, str]  # the units row, by column (empty where there is none)
    nvtx: str | None  # the column of the push/pop ranges
    start_end: str | None  # the column of the start/end ranges


def _read(path: Path, records: Iterator[list[str]]) -> Capture[KernelRow]:
    header = _header(path, records)
    col = {name: i for i, name in enumerate(header)}
    units, first = _units(path, records, col)
    rows = _non_blank(first, records)
    metric_names = kernel_metric_names([n for n in header if "__" in n])
    if DURATION not in col:
        raise BadExport(
            f"{path.name} has no {DURATION} column",
            "Profile with ncu metrics that include it (ncu --metrics gpu__time_duration.sum,...).",
        )
    scale, metric_units = _scales(path, metric_names, units)
    columns = _Columns(
        col,
        metric_names,
        scale,
        units,
        next((n for n in header if n.startswith("thread Domain:Push/Pop_Range")), None),
        next((n for n in header if n.startswith("Id:Domain:Start/Stop_Range")), None),
    )

    out: list[KernelRow] = []
    seen_ids: set[int] = set()
    gpu_name = cc = None
    for lineno, r in enumerate(rows, start=3 if units else 2):
        if len(r) < len(header):
            raise BadExport(
                f"{path.name}: row {lineno} has {len(r)} fields, the header has {len(header)}"
            )
        where = f"{path.name} row {lineno}"
        row = _row(r, columns, where)
        if row["launch_id"] in seen_ids:
            raise BadExport(
                f"{path.name} lists the same kernel ID twice ({row['launch_id']}, {where}); "
                "is it two exports pasted together?"
            )
        seen_ids.add(row["launch_id"])
        out.append(row)
        if gpu_name is None and "device__attribute_display_name" in col:
            gpu_name = r[col["device__attribute_display_name"]].strip() or None
        if cc is None and "CC" in col:
            cc = r[col["CC"]].strip() or None
    if not out:
        raise BadExport(
            f"{path.name} holds no kernel rows",
            "Was the report made with a filter that matched nothing?",
        )
    return Capture(
        rows=iter(out),
        tool="ncu",
        source_format="ncu-csv",
        gpu_name=gpu_name,
        compute_capability=cc,
        metric_names=sorted(metric_names),
        metric_units=metric_units,
        range_paths=path_list(out),
    )


def _header(path: Path, records: Iterator[list[str]]) -> list[str]:
    """The header record, after any ==PROF== lines; refused without the columns profkit needs,
    or with a column twice."""
    header = next(records, None)
    if header is None:
        raise BadExport(f"{path} is empty")
    # ncu may print ==PROF== / ==WARNING== lines before the table when output was captured.
    while header and header[0].startswith("=="):
        header = next(records, [])
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise BadExport(
            f"{path.name} is not an ncu raw-page CSV export (no {', '.join(repr(c) for c in missing)} column)",
            "Export one with: ncu --import REPORT.ncu-rep --csv --page raw > FILE.csv",
        )
    twice = sorted({n for n in header if n and header.count(n) > 1})
    if twice:
        raise BadExport(
            f"{path.name} has the column {twice[0]!r} more than once", "Export the raw page again."
        )
    return header


def _units(
    path: Path, records: Iterator[list[str]], col: dict[str, int]
) -> tuple[dict[str, str], list[str] | None]:
    """The units row below the header, by column ({} where the file has no rows), and the first
    record if it is not one; a file with durations and no units row is refused."""
    first = next(records, None)
    if first is not None and len(first) > col["ID"] and first[col["ID"]].strip() == "":
        return {name: first[i].strip() for name, i in col.items() if i < len(first)}, None
    if DURATION in col and first is not None:
        # Without the units row the durations' unit is unknown (ns, us or ms by --print-units):
        # a guess would be off by 1000x.
        raise BadExport(
            f"{path.name} has no units row below its header, so its durations' unit is unknown",
            "Export the whole raw page: ncu --import REPORT.ncu-rep --csv --page raw > FILE.csv",
        )
    return {}, first


def _scales(
    path: Path, metric_names: list[str], units: dict[str, str]
) -> tuple[dict[str, int], dict[str, str]]:
    """Each time metric's factor to ns, and each metric's unit as stored (times in ns)."""
    metric_units: dict[str, str] = {}
    scale: dict[str, int] = {}
    for m in metric_names:
        unit = units.get(m, "")
        if unit in TIME_SCALE:
            scale[m] = TIME_SCALE[unit]
            metric_units[m] = "ns"
        elif unit:
            metric_units[m] = unit
    if DURATION not in scale and units.get(DURATION):
        raise BadExport(f"{path.name}: unknown time unit {units[DURATION]!r} for {DURATION}")
    return scale, metric_units


def _row(r: list[str], columns: _Columns, where: str) -> KernelRow:
    """One record as a kernel-table row, each value checked (``where`` names the record)."""
    col = columns.position
    launch_id = _checked(r[col["ID"]], "ID", where, integer=True)
    if launch_id is None:
        raise BadExport(f"{where} has no kernel ID")
    metrics = _metrics(r, columns, where)
    tid, ranges = parse_nvtx(r[col[columns.nvtx]]) if columns.nvtx else (None, [])
    if columns.start_end:
        ranges = parse_start_end(r[col[columns.start_end]]) + ranges
    gx, gy, gz = (
        _triple(r[col["Grid Size"]], "Grid Size", where)
        if "Grid Size" in col
        else (None, None, None)
    )
    bx, by, bz = (
        _triple(r[col["Block Size"]], "Block Size", where)
        if "Block Size" in col
        else (None, None, None)
    )
    name = r[col["Kernel Name"]]
    duration = metrics.get(DURATION)
    return kernel_row(
        int(launch_id),
        "kernel",
        name,
        short_name(name),
        duration_ns=int(round(duration)) if duration is not None else None,
        grid_x=gx,
        grid_y=gy,
        grid_z=gz,
        block_x=bx,
        block_y=by,
        block_z=bz,
        stream=_int(r, col, "Stream", where),
        device=_int(r, col, "Device", where),
        thread_id=tid,
        metrics=metrics,
        **nvtx_columns(ranges),
    )


def _metrics(r: list[str], columns: _Columns, where: str) -> dict[str, float | int]:
    """A record's kept metrics, times in ns. Every kept metric is a counter or a time: text, a
    negative or an infinite value is refused (it would be dropped or summed into the wrong figures)."""
    metrics: dict[str, float | int] = {}
    for m in columns.metrics:
        text = r[columns.position[m]]
        v = _checked(text, m, where)
        if v is not None:
            v = v * columns.scale.get(m, 1)
            if abs(v) >= 2**63:
                raise BadExport(
                    f"{where}: {m} is {text.strip()[:40]!r} {columns.units.get(m, '')}, too large"
                )
            metrics[m] = (
                v
                if isinstance(v, int)
                else (int(round(v)) if v.is_integer() or m in columns.scale else v)
            )
    return metrics


def _non_blank(first: list[str] | None, records: Iterator[list[str]]) -> Iterator[list[str]]:
    """The records after the header and units row, blank ones skipped."""
    if first is not None and any(c.strip() for c in first):
        yield first
    for r in records:
        if any(c.strip() for c in r):
            yield r


def _int(row: list[str], col: dict[str, int], name: str, where: str) -> int | None:
    if name not in col:
        return None
    v = _checked(row[col[name]], name, where, integer=True)
    return int(v) if v is not None else None
