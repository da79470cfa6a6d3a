"""Everything the ``profkit`` command prints, in one place: tables and text through Rich, JSON
and CSV of what the library returns. No analysis and no database access here: each function
takes records (runs, kernel rows, summaries, range rows) and writes them.

Tables are Rich's (``rich.table.Table``), as wide as the output: ``$COLUMNS`` wherever it is
set, in a terminal or not; else the terminal's width; else (a file, a pipe to ``head`` or
``grep``) 80 columns. profkit decides only what goes into a table: which columns fit (``Col``:
figures and verdicts whole, words left out first) and how kernel names read (``names.table_labels``:
the report's short names, never two kernels printed alike, cut to the room left); ``--wide``
shows the full names, wrapped by Rich. JSON and CSV keep the full names.

Every string is printed as text, never as Rich markup or emoji codes, and through
``formatting.shown``: a control character in a kernel's, GPU's or run's name (a screen clear, an
OSC 52 clipboard write) shows as ``\\x1b`` and does nothing. ``console``, ``Text`` and
``print_table`` apply it themselves, so no command prints around it.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from .errors import name_params
from .formatting import UNSAFE, cut_middle, fmt_ns, shown
from .names import table_labels
from .parse.schema import KERNEL_FIELDS, RANGE_FIELDS, ClassifiedRow, Kind, RangeRow
from .records import (
    RUN_LIST_FIELDS,
    BenchRecord,
    BenchRow,
    IterationSkew,
    ModuleView,
    RankReport,
    RemovedRun,
    RunRecord,
    Summary,
    TuneTrial,
    Tuning,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text as RichText

    from .analyze.check import CheckReport
    from .analyze.diff import Diff
    from .analyze.findings import Finding
    from .api import Comparison
    from .workloads import WorkloadEntry

# Rows in a `kernels` table unless --limit says otherwise (JSON and CSV stream every row).
TABLE_MAX = 5000
# The width of what is printed where nothing says ($COLUMNS unset and no terminal).
DEFAULT_WIDTH = 80


def width_of(stream: Any) -> int | None:
    """How wide ``stream``'s lines may be: ``$COLUMNS`` where set (a terminal or not), else
    None for a terminal (Rich asks the window), else DEFAULT_WIDTH. The one place that decides
    how wide profkit's output is."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if _is_terminal(stream) else DEFAULT_WIDTH


def console(stderr: bool = False, wide: bool = False) -> Console:
    """A Rich console for stdout (or stderr) as wide as ``width_of`` says, that prints a str as
    text (no markup, emoji codes or highlighting; its control characters shown escaped) and lets
    a closed pipe end the command as the CLI ends it (Rich's own way exits 1). ``wide``: the
    tables' --wide (full kernel names, wrapped)."""
    from rich.console import Console as RichConsole

    class _Console(RichConsole):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError

        def print(self, *objects: Any, **options: Any) -> None:
            super().print(*(shown(o) if isinstance(o, str) else o for o in objects), **options)

    stream = sys.stderr if stderr else sys.stdout
    c = _Console(stderr=stderr, width=width_of(stream), markup=False, emoji=False, highlight=False)
    c.profkit_wide = wide  # type: ignore[attr-defined]  # read by print_table
    return c


def Text(*parts: str | tuple[str, str], style: str = "") -> RichText:
    """A line of text printed as it is (no markup, no emoji codes) in a style, as Rich's
    ``Text.assemble``; its parts may be (text, style) pairs of their own:
    ``Text((name, "bold"), " on ", gpu)``. Every part's control characters are shown escaped
    (``formatting.shown``), a newline too: a Text is one line."""
    from rich.text import Text as RichText

    return RichText.assemble(
        *(shown(p) if isinstance(p, str) else (shown(p[0]), p[1]) for p in parts), style=style
    )


def hanging(c: Console, head: str, text: str) -> None:
    """``head`` and ``text`` on a line, ``text`` wrapped under itself (Rich's grid)."""
    from rich.table import Table

    grid = Table.grid()
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(Text(head), Text(text))
    c.print(grid)


# ---------------------------------------------------------------------------------- what goes into a table
@dataclass(frozen=True)
class Col:
    """A column of a table printed by ``print_table``. ``cut``: how a cell too long for the
    room is shortened: None (never: numbers, verdicts, run names), "kernel" (kernel names: the
    report's short labels, no two kernels alike, ``names.table_labels``), "name" (operator or
    range names: cut in the middle, no two alike), "start" (a module path: its end says most),
    "end" (a date, an error), "wrap" (prose: Rich wraps it onto more lines). A cut column keeps at least ``least`` characters and takes its
    ``share`` of the room left. ``drop``: where the whole columns and the least of the cut ones
    do not fit, the column with the highest ``drop`` goes first, and a line under the table
    names it (``--wide`` shows every column)."""

    header: str
    justify: str = "left"
    cut: str | None = None
    least: int = 12
    share: int = 1
    drop: int = 0
    key: bool = False


def cut_text(text: str, width: int, how: str | None) -> str:
    """``text`` cut to ``width`` characters with an ellipsis where ``how`` says (see Col.cut)."""
    if how is None or len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    if how == "start":
        return "…" + text[len(text) - width + 1 :]
    if how == "end":
        return text[: width - 1] + "…"
    return cut_middle(text, width)


CHUNK_ROWS = 200  # rows laid out by Rich at once (print_table)
PADDING = 2  # between two columns (Rich's padding (0, 1), no padding at the table's edges)


def _fit(cols: Sequence[Col], natural: Sequence[int], width: int) -> tuple[list[int], list[int]]:
    """Which columns a table shows in ``width`` (their indices) and each column's room: every
    column without ``cut`` at its natural width, the cut ones sharing what is left (by
    ``share``, up to their natural width, at least their ``least``); columns with ``drop``
    left out, highest first, only where that does not fit."""
    least = [
        n if col.cut is None else min(n, max(col.least, len(col.header)))
        for col, n in zip(cols, natural)
    ]
    shown_cols = list(range(len(cols)))

    def need(idx: Sequence[int]) -> int:
        return sum(least[i] for i in idx) + PADDING * (len(idx) - 1)

    for i in sorted((i for i, col in enumerate(cols) if col.drop), key=lambda i: -cols[i].drop):
        if need(shown_cols) <= width:
            break
        shown_cols.remove(i)
    room = list(least)
    spare = width - need(shown_cols)
    while spare < 0:  # even so too wide: the cut columns give up their least, down to 8 characters
        squeezable = [i for i in shown_cols if cols[i].cut and room[i] > 8]
        if not squeezable:
            break  # Rich shrinks what is left
        for i in squeezable:
            if spare < 0 and room[i] > 8:
                room[i] -= 1
                spare += 1
    while spare > 0:
        hungry = [i for i in shown_cols if cols[i].cut and room[i] < natural[i]]
        if not hungry:
            break
        if not any(cols[i].share for i in hungry):
            break
        hungry = [i for i in hungry if cols[i].share]
        shares = sum(cols[i].share for i in hungry)
        given = 0
        for i in hungry:
            more = min(natural[i] - room[i], max(1, spare * cols[i].share // shares), spare - given)
            room[i] += more
            given += more
        spare -= given
    return shown_cols, room


def _parts(
    cols: Sequence[Col], shown_cols: list[int], room: list[int], width: int
) -> list[list[int]]:
    """The columns of each table a table is printed as: one where it fits; else (more columns
    of figures than the width holds: a rank's each) several, each with the ``key`` columns."""

    def need(idx: Sequence[int]) -> int:
        return sum(room[i] for i in idx) + PADDING * (len(idx) - 1)

    keys = [i for i in shown_cols if cols[i].key]
    if need(shown_cols) <= width or need(keys) >= width:
        return [shown_cols]
    parts = [list(keys)]
    for i in shown_cols:
        if i in keys:
            continue
        if len(parts[-1]) > len(keys) and need(parts[-1] + [i]) > width:
            parts.append(list(keys))
        parts[-1].append(i)
    return [sorted(p) for p in parts]


def print_table(
    c: Console,
    cols: Sequence[Col],
    rows: Sequence[Sequence[str]],
    title: str | None = None,
    title_left: bool = False,
) -> None:
    """A table of plain-text cells on ``c``, laid out by Rich. profkit picks the columns that
    fit ``c``'s width (``_fit``) and the names' labels: kernel names as ``names.table_labels``
    makes them for the room their column has (other names cut, no two alike); with --wide
    (``console(wide=True)``) every column and the full names, which Rich wraps. Nothing is
    printed for a table without rows."""
    if not rows:
        return
    from rich.cells import cell_len
    from rich.table import Table
    from rich.text import Text as RichText

    wide = bool(getattr(c, "profkit_wide", False))
    width = c.width
    rows = [[shown(cell) for cell in r] for r in rows]
    labels: dict[int, Callable[[int | None], dict[str, str]]] = {}
    for i, col in enumerate(cols):
        if col.cut in ("kernel", "name"):
            labels[i] = partial(table_labels, [r[i] for r in rows], short=col.cut == "kernel")
    natural = [
        max([cell_len(col.header)] + [cell_len(r[i]) for r in rows]) for i, col in enumerate(cols)
    ]
    # a kernel's short label is what the column needs, not its full name
    for (
        i,
        make,
    ) in labels.items():
        if not wide:
            natural[i] = max(
                [cell_len(cols[i].header)] + [cell_len(v) for v in make(None).values()]
            )
    if wide:  # every column, every word whole (wrapped where the room is short), the names given most room
        fit = [
            replace(col, drop=0, share=col.share * (4 if i in labels else 1))
            for i, col in enumerate(cols)
        ]
        shown_cols, room = _fit(fit, natural, width)
    else:
        shown_cols, room = _fit(cols, natural, width)
    # wrapped by Rich
    whole = {i for i in shown_cols if cols[i].cut == "wrap" or wide and cols[i].cut}
    cut = {i: make(room[i]) for i, make in labels.items() if i in shown_cols and i not in whole}
    # Every column's width is fixed here (Rich need not measure each cell again), so a long table
    # is printed in chunks that line up: its first lines come at once (`profkit kernels RUN | head`).
    step = len(rows) if wide else CHUNK_ROWS
    for n, part in enumerate(_parts(cols, shown_cols, room, width)):
        for start in range(0, len(rows), step):
            first = not n and not start
            t = Table(
                box=None,
                header_style="bold",
                title=RichText(shown(title)) if title and first else None,
                title_justify="left" if title_left else "center",
                pad_edge=False,
                show_edge=False,
                show_header=not start,
            )
            for i in part:
                t.add_column(
                    RichText(cols[i].header),
                    justify=cols[i].justify,  # type: ignore[arg-type]
                    no_wrap=i not in whole,
                    overflow="fold" if i in whole else "ellipsis",
                    width=room[i] if i in whole or not wide else None,
                )
            for r in rows[start : start + step]:
                t.add_row(
                    *(
                        RichText(
                            r[i]
                            if i in whole
                            else cut[i][r[i]]
                            if i in cut
                            else cut_text(r[i], room[i], cols[i].cut)
                        )
                        for i in part
                    )
                )
            c.print(t)
    dropped = [cols[i].header for i in range(len(cols)) if i not in shown_cols]
    if dropped:
        c.print(
            Text(f"(not shown at {width} columns: {', '.join(dropped)}; --wide shows every column)")
        )


EVIDENCE_WORDS = {
    "metrics": "counters",
    "name": "kernel names",
    "dtypes": "operator input types",
    "none": "nothing",
}


def evidence_line(s: Any) -> str:
    """What decided the precision, as shares of the run's time (and launches; a CPU run's
    operator calls): ``precision decided by counters 30.7% of the time (12 launches), ...``."""
    total = sum(s.time_by_evidence_ns.values()) or 1
    unit = "calls" if getattr(s, "activity", None) == "cpu_op" else "launches"
    parts = [
        f"{EVIDENCE_WORDS.get(k, k)} {100 * ns / total:.1f}%"
        + (" of the time" if i == 0 else "")
        + f" ({s.evidence.get(k, 0):,} {unit})"
        for i, (k, ns) in enumerate(s.time_by_evidence_ns.items())
    ]
    return "precision decided by " + ", ".join(parts)


def _tc(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "no")


def _dims(r: Mapping[str, Any], what: str) -> str:
    xyz = [r[f"{what}_{a}"] for a in "xyz"]
    return (
        "-" if all(v is None for v in xyz) else ",".join("-" if v is None else str(v) for v in xyz)
    )


def write_json(obj: Any) -> None:
    """``obj`` as indented JSON: every character but ASCII escaped (``\\u001b``), DEL too."""
    print(json.dumps(obj, indent=2).replace("\x7f", "\\u007f"))  # (DEL can only be in a string)


def _json_inert(text: str) -> str:
    """A JSON text with every character ``formatting.shown`` escapes written as a JSON escape
    (``\\u009b``): the same JSON, that does nothing on a terminal. (Outside its strings a JSON
    text holds only printable ASCII, so each one is in a string.)"""
    if text.isprintable():  # what it escapes is never printable
        return text
    return UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def json_array(objects: Iterable[str], batch: int = 5000) -> None:
    """A JSON array of objects given as JSON texts, one per line, streamed. Where standard
    output cannot take every character (not UTF-8), each object is written with non-ASCII
    characters escaped instead, as json.dumps writes them. Control characters (SQLite's JSON
    leaves DEL, C1 and bidirectional ones as they are) are escaped: ``_json_inert``."""
    write = sys.stdout.write
    if (getattr(sys.stdout, "encoding", None) or "utf-8").lower().replace("-", "").replace(
        "_", ""
    ) != "utf8":
        objects = (json.dumps(json.loads(text)) if not text.isascii() else text for text in objects)
    objects = map(_json_inert, objects)
    write("[")
    pending: list[str] = []
    first = True
    for text in objects:
        pending.append(text)
        if len(pending) >= batch:
            write(("\n  " if first else ",\n  ") + ",\n  ".join(pending))
            first, pending = False, []
    if pending:
        write(("\n  " if first else ",\n  ") + ",\n  ".join(pending))
        first = False
    write("]\n" if first else "\n]\n")


# A text cell a spreadsheet would take for a formula (OWASP's "CSV injection"): its first
# character one of these, and the cell no plain number ("-1.5" stays a number).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_FORMULA_FIRST = frozenset(_FORMULA_START)
_AS_JSON = frozenset({dict, list})
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def csv_cell(value: Any, terminal: bool = False) -> Any:
    """A value as ``write_csv`` writes it: a dict or list as JSON; a text that starts with
    ``= + - @``, a tab or a carriage return (``=HYPERLINK(...)`` in a kernel's name) behind a
    single quote, so that a spreadsheet shows it rather than runs it; on a ``terminal``, a
    text's control characters shown escaped. Numbers as they are."""
    if isinstance(value, (dict, list)):
        value = json.dumps(value)
    if not isinstance(value, str):
        return value
    if value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        value = "'" + value
    return shown(value) if terminal else value


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def write_csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> None:
    """RFC 4180 CSV, records ended by "\n": a field holding "\r" or "\n" (a kernel or range
    name may) is quoted, so that every CSV reader sees one record per row. (csv quotes only the
    characters of its line terminator; each record is written with "\r\n" and ended "\n".)
    Text cells are guarded against formulas (``csv_cell``); written to a terminal, their
    control characters are shown escaped, elsewhere (a file, a pipe) they are kept."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\r\n")
    out = sys.stdout
    terminal = _is_terminal(out)

    def emit() -> None:
        out.write(buf.getvalue()[:-2] + "\n")
        buf.seek(0)
        buf.truncate()

    w.writeheader()
    emit()
    for r in rows:
        if terminal:
            w.writerow({k: csv_cell(v, True) for k, v in r.items()})
        else:  # csv_cell where it changes anything (the same, a third faster on millions of rows)
            w.writerow(
                {
                    k: csv_cell(v)
                    if v.__class__ in _AS_JSON or v.__class__ is str and v[:1] in _FORMULA_FIRST
                    else v
                    for k, v in r.items()
                }
            )
        emit()


# ---------------------------------------------------------------------------------- runs
def runs(records: Sequence[RunRecord], fmt: str, wide: bool = False) -> None:
    rows = [{k: getattr(r, k) for k in RUN_LIST_FIELDS} for r in records]
    if fmt == "json":
        write_json(rows)
        return
    if fmt == "csv":
        write_csv(rows, RUN_LIST_FIELDS)
        return
    c = console(wide=wide)
    if not records:
        c.print("no runs yet: try `profkit run vgg16` or `profkit import REPORT.ncu-rep`")
        return
    # A run's name whole where it fits (it is typed next; else cut in its middle, its id beside
    # it), its precision and mode (eager, torchscript and compile runs differ by them), its
    # figures whole; the words about it cut or left out.
    cols = [
        Col("id", "right", key=True),
        Col("name", cut="name", least=40, share=100, key=True),
        Col("source", cut="end", least=6, drop=6),
        Col("workload", cut="middle", least=8, drop=2),
        Col("prec"),
        Col("mode"),
        Col("tool", drop=3),
        Col("gpu", cut="middle", least=8, drop=4),
        Col("kernels", "right"),
        Col("time", "right"),
        Col("finished", drop=5),
    ]
    body = []
    for r in records:
        cpu = r.activity == "cpu_op"
        name = r.name if r.status in (None, "ok") else f"{r.name} ({r.status})"
        body.append(
            [
                str(r.id),
                name,
                r.source or "",
                r.workload or "-",
                r.precision or "-",
                r.mode or "-",
                r.tool or "",
                "CPU only" if cpu else (r.gpu_name or "-"),
                f"{r.kernel_count} ops" if cpu else str(r.kernel_count),
                fmt_ns(r.gpu_time_ns) + (" cpu" if cpu else ""),
                (r.finished_at or "")[:16].replace("T", " "),
            ]
        )
    print_table(c, cols, body)


# ---------------------------------------------------------------------------------- kernels
def kernels(
    run: RunRecord,
    rows: Iterable[ClassifiedRow],
    fmt: str,
    limit: int | None = None,
    memory_ops: int = 0,
    wide: bool = False,
) -> None:
    """A run's kernel table (rows with KERNEL_FIELDS, as the store yields them). JSON and CSV
    are streamed, one launch at a time."""
    if fmt == "json":
        json_array(json.dumps(r) for r in rows)
        return
    if fmt == "csv":
        write_csv(rows, KERNEL_FIELDS)
        return
    c = console(wide=wide)
    cpu = run.activity == "cpu_op"
    what = "CPU operator calls (self time)" if cpu else "kernel launches"
    title = f"{run.name}: {run.kernel_count} {what}" + (
        f" and {memory_ops} memcpy/memset" if memory_ops else ""
    )
    # A table is built whole before it is printed (a huge run's would take minutes and GBs): at
    # most ``cap`` rows, read first, so that their attribution picks the columns.
    cap = limit if limit is not None else TABLE_MAX
    shown_rows = list(itertools.islice(rows, cap))
    where = not cpu and any(r["module"] is not None or r["op"] or r["shapes"] for r in shown_rows)
    # Every figure and verdict whole; the kernel by its short label (names.table_labels), the
    # other names sharing the rest, cut in the middle (a module path at its start: its end
    # says most); where even that does not fit, the launch's details are left out first.
    n = Col("#", "right", key=True)
    if cpu:
        cols = [
            n,
            Col("operator", cut="name", least=24, share=3, key=True),
            Col("self time", "right"),
            Col("input types", cut="middle", least=8, share=2, drop=2),
            Col("range", cut="middle", least=10, drop=3),
            Col("prec"),
            Col("evidence", drop=1),
        ]
    elif where:
        # Where each kernel came from: module, operator, its input shapes and types, phase
        # (a run with attribution: profkit run records it).
        cols = [
            n,
            Col("kernel", cut="kernel", least=40, share=5, key=True),
            Col("duration", "right"),
            Col("module", cut="start", least=10, share=4, drop=1),
            Col("op", cut="middle", least=6, share=2, drop=3),
            Col("shapes", cut="middle", least=10, share=3, drop=5),
            Col("types", cut="middle", least=8, drop=4),
            Col("ph", drop=2),
            Col("prec"),
            Col("TC"),
        ]
    else:
        cols = [
            n,
            Col("kernel", cut="kernel", least=40, share=3, key=True),
            Col("duration", "right"),
            Col("grid", drop=2),
            Col("block", drop=3),
            Col("range", cut="middle", least=10, drop=5),
            Col("prec"),
            Col("TC"),
            Col("evidence", drop=4),
        ]
    body = []
    for r in shown_rows:
        if cpu:
            body.append(
                [
                    str(r["launch_id"]),
                    r["name"],
                    fmt_ns(r["duration_ns"]),
                    r["input_types"] or "-",
                    r["nvtx_range"] or "-",
                    r["precision"],
                    r["evidence"],
                ]
            )
        elif where:
            module = r["module"]
            # the kernel's short label (print_table's): the whole name is in --wide, --format json or csv
            body.append(
                [
                    str(r["launch_id"]),
                    r["name"],
                    fmt_ns(r["duration_ns"]),
                    "-" if module is None else "(model)" if module == "" else module,
                    (r["op"] or "-").replace("aten::", ""),
                    r["shapes"] or "-",
                    _short_types(r["input_types"]),
                    PHASE_SHORT.get(r["phase"] or "", "-"),
                    r["precision"],
                    _tc(r["tensor_core"]),
                ]
            )
        else:
            body.append(
                [
                    str(r["launch_id"]),
                    r["name"],
                    fmt_ns(r["duration_ns"]),
                    _dims(r, "grid"),
                    _dims(r, "block"),
                    r["nvtx_range"] or "-",
                    r["precision"],
                    _tc(r["tensor_core"]),
                    r["evidence"],
                ]
            )
    print_table(c, cols, body, title)
    n_shown = len(shown_rows)
    total = (run.kernel_count or 0) + memory_ops
    if limit is None and n_shown < total:
        line(
            f"profkit: the first {n_shown:,} of {total:,} rows; --limit N shows more, --format json or csv "
            "streams them all",
            stderr=True,
        )


PHASE_SHORT = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}
_TYPES_SHORT = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float64": "fp64",
    "int64": "i64",
    "int32": "i32",
    "int8": "i8",
    "uint8": "u8",
    "float8_e4m3fn": "fp8e4m3",
    "float8_e5m2": "fp8e5m2",
}


def _short_types(types: str | None) -> str:
    """An operator's input types, short: "bfloat16,int64" -> "bf16,i64"."""
    return ",".join(_TYPES_SHORT.get(t, t) for t in types.split(",")) if types else "-"


# ---------------------------------------------------------------------------------- summary
def summary(
    run: RunRecord,
    s: Summary,
    fmt: str,
    c: Console | None = None,
    caveats: Mapping[str, str] | None = None,
    wide: bool = False,
) -> None:
    """A run's summary; ``caveats`` (``Run.caveats()``, what the report prints beside its
    figures) each on a line of its own under the headline. (The line naming the best fix of the
    run's latest tuning, ``s.tuning``, is :func:`best_fix`.)"""
    if fmt == "json":
        write_json(s.to_dict())
        return
    if fmt == "csv":
        write_csv(
            [
                {"precision": p, "gpu_time_ns": ns, "kernels": s.kernels_by_precision.get(p, 0)}
                for p, ns in s.time_by_precision_ns.items()
            ],
            ["precision", "gpu_time_ns", "kernels"],
        )
        return
    c = c or console(wide=wide)
    from .workloads import option_labels

    options = option_labels(run.info.options)
    what = " ".join(str(x) for x in (run.workload, run.precision, *options, run.mode) if x)
    cpu = s.activity == "cpu_op"
    where = "the CPU (no GPU work recorded)" if cpu else (run.gpu_name or "unknown GPU")
    c.print(Text((run.name, "bold"), f"  {what}  {run.tool or ''} on {where}"))
    if cpu:
        c.print(
            f"{s.kernels} CPU operator calls, {fmt_ns(s.gpu_time_ns)} CPU self time; "
            "these are CPU operators, not GPU kernels: no tensor cores"
        )
    elif s.matrix_work is None:
        c.print(
            Text(
                f"{s.kernels} kernel launches, {fmt_ns(s.gpu_time_ns)} GPU time; tensor cores: "
                f"{s.tensor_core_kernels} launches, ",
                (f"{s.tensor_core_time_pct:.1f}%", "bold"),
                " of GPU time",
            )
        )
    else:
        from .analyze.matrix import describe

        c.print(f"{s.kernels} kernel launches, {fmt_ns(s.gpu_time_ns)} GPU time")
        c.print(
            Text(
                f"{describe(s.matrix_work, s.tensor_core_time_pct)} ({s.tensor_core_kernels} launches on tensor cores)"
            )
        )
    c.print(Text(evidence_line(s)))
    if s.memory_ops:
        c.print(
            "besides the kernels: "
            + ", ".join(f"{v.count} {k} ({fmt_ns(v.time_ns)})" for k, v in s.memory_ops.items())
        )
    for text in (caveats or {}).values():
        hanging(c, "caveat: ", text)
    print_table(
        c,
        [
            Col("precision"),
            Col("calls" if cpu else "launches", "right"),
            Col("CPU self time" if cpu else "GPU time", "right"),
            Col("share", "right"),
        ],
        [
            [
                p,
                str(s.kernels_by_precision.get(p, 0)),
                fmt_ns(ns),
                f"{100.0 * ns / s.gpu_time_ns if s.gpu_time_ns else 0.0:.1f}%",
            ]
            for p, ns in s.time_by_precision_ns.items()
        ],
    )
    if s.top_kernels:
        # A CPU run's operators have no tensor cores: no TC column.
        cols = [
            Col(
                "operator" if cpu else "kernel", cut="name" if cpu else "kernel", least=24, key=True
            ),
            Col("calls" if cpu else "launches", "right"),
            Col("time", "right"),
            Col("share", "right"),
            Col("prec"),
            *([] if cpu else [Col("TC")]),
        ]
        print_table(
            c,
            cols,
            [
                [
                    r.name,
                    str(r.launches),
                    fmt_ns(r.total_ns),
                    f"{r.pct:.1f}%",
                    r.precision or "-",
                    *([] if cpu else [_tc(r.tensor_core)]),
                ]
                for r in s.top_kernels
            ],
            "top operators by CPU self time" if cpu else "top kernels by GPU time",
            title_left=True,
        )
    if s.ranks is not None:
        ranks(s.ranks, c)
    if not cpu or s.modules is not None:  # a CPU run's by module where it has attribution
        modules(run, s.modules, c, cpu)


def best_fix(tuning: Tuning | None, c: Console | None = None) -> None:
    """The line naming a tuning's best measured fix (or that none gains); nothing without one."""
    if tuning is None:
        return
    from .analyze.tuned import best_fix_line

    (c or console()).print(Text(best_fix_line(tuning)))


# a diff by module's rows, in the table
MODULE_STATUS = {
    "added": "appeared",
    "removed": "vanished",
}
MODULE_ROWS = 20  # the by-module table's rows, most time first; the rest summed in one


def _mix(times: dict[str, float], total: float, most: int = 3) -> str:
    """Time per key as shares, largest first: "bf16 72%, fp32 28%" (at most ``most``)."""
    parts = [f"{k} {100 * t / total:.0f}%" for k, t in list(times.items())[:most] if total and t]
    return (
        ", ".join(parts) + (" ..." if len([t for t in times.values() if t]) > most else "") or "-"
    )


def _main_precision(times: dict[str, float], total: float) -> str:
    """The precision with the most time and its share ("fp32 82%"), "+" where others have some."""
    if not total or not times:
        return "-"
    p, t = next(iter(times.items()))
    return f"{p} {100 * t / total:.0f}%" + ("+" if sum(1 for v in times.values() if v) > 1 else "")


def _module_name(m: str) -> str:
    return "(model)" if m == "" else m


def _phases(times: dict[str, float], total: float) -> str:
    return (
        " ".join(
            f"{PHASE_SHORT.get(k, k)} {100 * t / total:.0f}%"
            for k, t in times.items()
            if total and t
        )
        or "-"
    )


def modules(run: RunRecord, view: ModuleView | None, c: Console, cpu: bool = False) -> None:
    """The summary's by-module table (``cpu``: a CPU run's operator calls and CPU self time, no
    tensor cores), or one line saying the capture has no attribution."""
    if view is None:
        from .analyze.modules import no_attribution

        c.print(Text(f"by module: {no_attribution(run)}"))
        return
    cols = [
        Col("module", cut="start", least=14, share=2, key=True),
        Col("type", cut="middle", least=8, drop=2),
        Col("calls" if cpu else "launches", "right"),
        Col("time", "right"),
        Col("share", "right"),
        Col("precision"),
        *([] if cpu else [Col("TC of matrix", "right")]),
        Col("phase", drop=1),
    ]
    rows = view.rows
    listed = rows if len(rows) <= MODULE_ROWS + 1 else rows[:MODULE_ROWS]
    body = [
        [
            _module_name(r.module),
            r.module_type or "-",
            _n(r.launches),
            fmt_ns(r.time_ns),
            f"{r.time_pct:.1f}%",
            _mix(r.time_by_precision_ns, r.time_ns),
            *(
                []
                if cpu
                else [
                    "-" if r.matrix_tensor_core_pct is None else f"{r.matrix_tensor_core_pct:.0f}%"
                ]
            ),
            _phases(r.time_by_phase_ns, r.time_ns),
        ]
        for r in listed
    ]
    rest = rows[len(listed) :]
    if rest:
        body.append(
            [
                f"({len(rest)} more modules)",
                "",
                _n(sum(r.launches for r in rest)),
                fmt_ns(sum(r.time_ns for r in rest)),
                f"{sum(r.time_pct for r in rest):.1f}%",
                "",
                *([] if cpu else [""]),
                "",
            ]
        )
    print_table(
        c,
        cols,
        body,
        f"{'CPU self time' if cpu else 'GPU time'} by module (depth {view.depth}; "
        "--module-depth N for more or fewer levels)",
        title_left=True,
    )


# ---------------------------------------------------------------------------------- ranks
def ranks(rep: RankReport, c: Console) -> None:
    """A distributed run's ranks: figures per rank, each iteration's skew, rank differences."""
    cpu = rep.activity == "cpu_op"
    comm = "collectives" if cpu else "NCCL"
    heads = ["rank", "GPU", "kernels", "GPU time", "compute", comm, f"{comm} share", "overlapped"]
    if cpu:
        heads = ["rank", "ops", "CPU time", "compute", "collectives", f"{comm} wall"]
    cols = [
        Col(
            h,
            "left" if h in ("rank", "GPU") else "right",
            key=h == "rank",
            drop=1 if h == "GPU" else 0,
        )
        for h in heads
    ]
    body = []
    for f in rep.ranks:
        share = f"{100.0 * f.comm_time_ns / f.gpu_time_ns:.1f}%" if f.gpu_time_ns else "-"
        if cpu:
            body.append(
                [
                    str(f.rank),
                    str(f.kernels),
                    fmt_ns(f.gpu_time_ns),
                    fmt_ns(f.compute_time_ns),
                    str(f.comm_kernels),
                    fmt_ns(f.comm_time_ns),
                ]
            )
        else:
            over = "-" if f.comm_overlap_pct is None else f"{f.comm_overlap_pct:.1f}%"
            body.append(
                [
                    str(f.rank),
                    ",".join(map(str, f.devices)) or "-",
                    str(f.kernels),
                    fmt_ns(f.gpu_time_ns),
                    fmt_ns(f.compute_time_ns),
                    fmt_ns(f.comm_time_ns),
                    share,
                    over,
                ]
            )
    print_table(c, cols, body, f"{rep.world_size} ranks", title_left=True)
    if cpu:
        c.print(
            "collectives: gloo's all-reduce and broadcast ranges, run on gloo's own threads beside the operators"
        )
    else:
        c.print(
            f"overlapped: the share of a rank's {comm} time during which a compute kernel of its own ran on its GPU"
        )
    if rep.iterations:
        iterations(rep.iterations, c)
    for note in rep.notes:
        c.print(Text(f"note: {note}"))
    if rep.same_kernels:
        c.print(
            f"every rank launched the same {'operators' if cpu else 'kernels'}, as often, in the same precisions"
        )
    for d in rep.differences:
        more = sum(x.launches for x in d.kernels) - sum(x.vs_launches for x in d.kernels)
        c.print(
            f"rank {d.rank} differs from rank {d.vs}: {len(d.kernels)} kernels launched a different number of "
            f"times ({more:+d} launches in all), {len(d.precisions)} in other precisions"
        )
        for p in d.precisions[:5]:
            c.print(
                Text(f"  {p.name[:90]}: {'/'.join(p.precisions)} vs {'/'.join(p.vs_precisions)}")
            )
        for k in d.kernels[:5]:
            c.print(Text(f"  {k.name[:90]} ({k.precision}): {k.launches} vs {k.vs_launches}"))


def iterations(rows: Sequence[IterationSkew], c: Console, comm: bool = True) -> None:
    """Each measured iteration across the ranks: start and end skew, each rank's wall time, and
    (from the kernels) whom the others waited for."""
    waits = comm and any(r.waited_for is not None for r in rows)
    rank_ids = sorted({p.rank for r in rows for p in r.ranks})
    cols = [
        Col(
            h,
            "left" if h == "iteration" else "right",
            key=h == "iteration",
            cut="middle" if h == "iteration" else None,
            least=14,
        )
        for h in [
            "iteration",
            "start skew",
            "end skew",
            *(f"rank {i} wall" for i in rank_ids),
            *(["waited for", "wait"] if waits else []),
        ]
    ]
    body = []
    for r in rows:
        walls = {p.rank: p.wall_ns for p in r.ranks}
        cells = [
            r.iteration,
            fmt_ns(r.start_skew_ns),
            fmt_ns(r.end_skew_ns),
            *(fmt_ns(walls.get(i)) for i in rank_ids),
        ]
        if waits:
            cells += ["-" if r.waited_for is None else f"rank {r.waited_for}", fmt_ns(r.wait_ns)]
        body.append(cells)
    print_table(c, cols, body, "iterations across ranks", title_left=True)
    if waits:
        c.print(
            "waited for: the rank with the least communication time in the iteration; the others reached the "
            "all-reduce first and waited inside it (wait: the most-waiting rank's communication time less its)"
        )


# ---------------------------------------------------------------------------------- ranges
def ranges(run: RunRecord, rows: Sequence[RangeRow], fmt: str, wide: bool = False) -> None:
    out = [{k: r[k] for k in RANGE_FIELDS} for r in rows]  # type: ignore[literal-required]
    if fmt == "json":
        write_json(out)
        return
    if fmt == "csv":
        write_csv(out, RANGE_FIELDS)
        return
    c = console(wide=wide)
    if not rows:
        c.print(f"{run.name} has no ranges")
        return
    ranked = any(r.get("rank") is not None for r in rows)
    _ranges_table(c, run, rows, ranked)
    if ranked:
        from .analyze.ranks import iteration_skew

        skew = iteration_skew(rows)
        if skew:
            iterations(skew, c, comm=False)
    others = sum(r["other_thread_kernels"] or 0 for r in rows if r["depth"] == 0)
    if others:
        c.print(
            f"{others} kernels were launched by other threads of the process while these ranges were open: "
            "a push/pop range belongs to the thread that opened it, and PyTorch's autograd engine runs the "
            "backward pass on a thread of its own. Those kernels are not in the ranges' kernels or GPU time "
            "(nor in what ncu's NVTX filter profiles); they are in the run's kernel table."
        )
    elif rows[0]["wall_ns"] is None:
        c.print(
            "ncu records kernels, not ranges: wall times and other threads' kernels need --tool nsys or torch."
        )


def _ranges_table(c: Console, run: RunRecord, rows: Sequence[RangeRow], ranked: bool) -> None:
    """One row per range, nested by depth; a CPU run's ranges count operators, a GPU run's
    kernels, GPU operations and other threads' kernels."""
    cpu = run.activity == "cpu_op"
    cols = [
        *([Col("rank", "right", key=True)] if ranked else []),
        Col("range", cut="middle", least=24, key=True),
        Col("thread", "right", drop=1),
        Col("wall", "right"),
        Col("ops" if cpu else "kernels", "right"),
        *([] if cpu else [Col("GPU ops", "right")]),
        Col("CPU self time" if cpu else "GPU time", "right"),
        *([] if cpu else [Col("other threads", "right")]),
    ]
    body = []
    for r in rows:
        cells = [
            *([str(r["rank"]) if r.get("rank") is not None else "-"] if ranked else []),
            "  " * (r["depth"] or 0) + (r["name"] or ""),
            str(r["thread_id"] or "-"),
            fmt_ns(r["wall_ns"]),
            str(r["kernels"]),
        ]
        if not cpu:
            cells.append(str(r["gpu_ops"]))
        cells.append(fmt_ns(r["gpu_time_ns"]))
        if not cpu:
            cells.append(
                "-" if r["other_thread_kernels"] is None else str(r["other_thread_kernels"])
            )
        body.append(cells)
    print_table(c, cols, body, f"{run.name}: {len(rows)} ranges", title_left=True)


# ---------------------------------------------------------------------------------- run, import, workloads
RAW_FILE_WORDS = {
    "ncu-rep": "ncu capture",
    "nsys-rep": "nsys capture",
    "kineto-json": "torch.profiler trace",
}


def run_done(
    run: RunRecord,
    s: Summary,
    report: str | None,
    db_path: str,
    caveats: Mapping[str, str] | None = None,
) -> None:
    c = console()
    summary(run, s, "table", c, caveats=caveats)
    size = run.info.report_bytes
    traces = sum(k.startswith("kineto-json-rank") for k in run.raw_files or {})
    # the tool's own file, named for what it is (the HTML report, where asked for, is "report:")
    what = next(
        (
            RAW_FILE_WORDS[k]
            for k, path in (run.raw_files or {}).items()
            if path == report and k in RAW_FILE_WORDS
        ),
        "capture",
    )
    if report and traces > 1:  # rank 0's trace, with the others beside it
        c.print(
            f"{what}: {report} and {traces - 1} more ranks' traces beside it"
            + (f" ({size / 1e6:.2f} MB in all)" if size else "")
        )
    elif report:
        c.print(f"{what}: {report} ({size / 1e6:.2f} MB)" if size else f"{what}: {report}")
    c.print(
        Text(
            f"profiled in {run.profiled_wall_s or 0:.1f} s; run stored as ",
            (run.name, "bold"),
            f" in {db_path}",
        )
    )


def imported(run: RunRecord, source: str) -> None:
    """What an import made: a line on stderr, and the new run's name last on stdout."""
    cpu = run.activity == "cpu_op"
    what, clock = ("CPU operator calls", "CPU self") if cpu else ("kernel launches", "GPU")
    error(
        f"imported {run.kernel_count} {what} ({fmt_ns(run.gpu_time_ns)} {clock} time) from {source}"
    )
    line(run.name)


def removed(done: RemovedRun, fmt: str) -> None:
    """What ``profkit rm`` deleted: the run and its folder (JSON and CSV: the same as a record)."""
    if fmt == "json":
        write_json(done.to_dict())
        return
    if fmt == "csv":
        write_csv([done.to_dict()], list(done.to_dict()))
        return
    run = done.run
    where = f"and its folder {done.folder}" if done.folder else "(no folder of its own)"
    line(f"removed run {run.name} (id {run.id}) {where}")


def workloads(rows: Sequence[WorkloadEntry]) -> None:
    """The catalog: each workload's name whole, what it supports and what it is (wrapped to
    the width)."""
    cols = [
        Col("workload"),
        Col("precisions", cut="wrap", least=11, share=2),
        Col("modes", cut="wrap", least=12, share=2),
        Col("description", cut="wrap", least=24, share=6),
    ]
    print_table(
        console(),
        cols,
        [[r.name, ", ".join(r.precisions), ", ".join(r.modes), r.description] for r in rows],
    )


def line(text: str = "", stderr: bool = False) -> None:
    """A line of text, on stdout or stderr, as it is (no markup), its control characters shown
    escaped (``formatting.shown``): how a line is printed without a console."""
    print(shown(text), file=sys.stderr if stderr else sys.stdout)


def error(text: str) -> None:
    line(text, stderr=True)


# ---------------------------------------------------------------------------------- diff, compare
DIFF_CSV_FIELDS = (
    "name",
    "kind",
    "status",
    "calls_a",
    "calls_b",
    "time_a_ns",
    "time_b_ns",
    "mean_a_ns",
    "mean_b_ns",
    "delta_calls",
    "delta_time_ns",
    "delta_pct",
    "precision_a",
    "precision_b",
    "tensor_core_pct_a",
    "tensor_core_pct_b",
    "family",
    "variants_a",
    "variants_b",
)


def _n(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) and not float(x).is_integer() else str(int(x))


def _share(p: float | None) -> str:
    return "-" if p is None else f"{p:.0f}%"


def _by_precision(times: dict[str, float], total: float) -> str:
    return ", ".join(f"{p} {100 * t / total:.0f}%" for p, t in times.items() if total and t) or "-"


def cpu_diff(d: Diff) -> bool:
    """Whether a diff lines up CPU operators (CPU runs): its words are then CPU words."""
    return any(r.kind == "cpu_op" for r in d.rows)


def headline(d: Diff) -> list[str]:
    """The lines that say what changed between A and B, in words."""
    from .analyze.matrix import describe_change

    t = d.totals
    per = " per iteration" if t.per_iteration else ""
    cpu = cpu_diff(d)  # CPU operators: their calls and self time, and no tensor cores
    calls, clock = ("operator calls", "CPU self time") if cpu else ("launches", "GPU time")
    lines = [
        f"A = {d.run_a} ({t.tool_a}), B = {d.run_b} ({t.tool_b}), matched by {d.match}"
        + (f", per iteration (A {t.iterations_a}, B {t.iterations_b})" if t.per_iteration else ""),
        f"{calls}{per}: {_n(t.kernels_a)} -> {_n(t.kernels_b)}; {clock}{per}: {fmt_ns(t.gpu_time_a_ns)} -> "
        f"{fmt_ns(t.gpu_time_b_ns)}"
        + (
            f" ({100 * (t.gpu_time_b_ns - t.gpu_time_a_ns) / t.gpu_time_a_ns:+.1f}%)"
            if t.gpu_time_a_ns
            else ""
        ),
        *filter(None, [None if cpu else describe_change(t.matrix_work_a, t.matrix_work_b)]),
        *(
            []
            if cpu
            else [
                f"tensor-core share of GPU time: {t.tensor_core_time_pct_a:.1f}% -> {t.tensor_core_time_pct_b:.1f}%"
            ]
        ),
        f"time by precision: {_by_precision(t.time_by_precision_a_ns, t.gpu_time_a_ns)} -> "
        f"{_by_precision(t.time_by_precision_b_ns, t.gpu_time_b_ns)}",
        "rows: "
        + ", ".join(f"{n} {s}" for s, n in asdict(t.status).items())
        + f" (noise threshold {d.threshold_pct:g}%)",
    ]
    for moved, where in ((t.onto_tensor_cores, "onto"), (t.off_tensor_cores, "off")):
        if moved:
            lines.append(
                f"{where} the tensor cores in B: "
                + "; ".join(
                    f"{x.name} ({x.tensor_core_pct_a:.0f}% -> {x.tensor_core_pct_b:.0f}% of its time; "
                    f"{', '.join(x.works_a[:2])} in {x.precision_a} -> {', '.join(x.works_b[:2])} in {x.precision_b})"
                    for x in moved[:4]
                )
                + (f" and {len(moved) - 4} more" if len(moved) > 4 else "")
            )
    lines += fusion_lines(d)
    lines += [f"note: {n}" for n in t.notes]
    return lines


FUSION_SHOWN = (
    6  # A's kinds of kernels without counterpart listed one a line; the rest summed in one
)
FUSION_WIDTH = 76  # their lines' width: under 80 columns with compare's indent


def _some(names: list[str], width: int) -> str:
    """``names`` comma-joined, as many as fit in ``width``, the rest counted (``+2``); the
    first cut in the middle where even it alone does not fit."""
    for n in range(len(names), 0, -1):
        more = f" +{len(names) - n}" if n < len(names) else ""
        text = ", ".join(names[:n]) + more
        if len(text) <= width:
            return text
    more = f" +{len(names) - 1}" if len(names) > 1 else ""
    return cut_middle(names[0], max(width - len(more), 1)) + more if names else ""


def fusion_lines(d: Diff) -> list[str]:
    """What compile did: B's generated (Triton) kernels, and every kind of A's kernels without
    a counterpart in B, with the part of it launched by operators those kernels fused; the
    largest kinds one a line (each in under 80 columns), the rest summed in one."""
    t = d.totals
    if not t.fused_kernels:
        return []
    per = " per iteration" if t.per_iteration else ""
    made = t.fused_kernels
    lines = [
        f"fused (Triton) kernels in B: {len(made)} kinds, {_n(sum(x.calls_b for x in made))} launches, "
        f"{fmt_ns(sum(x.time_b_ns for x in made))}{per}"
    ]
    gone = t.replaced_by_fusion
    if not gone:
        return lines
    total = sum(x.time_a_ns for x in gone)
    fused = sum(x.fused_time_a_ns for x in gone)
    lines += [
        f"A's kernels without counterpart in B: {len(gone)} kinds, {_n(sum(x.calls_a for x in gone))} launches, "
        f"{fmt_ns(total)}{per}",
        (
            f"  of which launched by operators that B's Triton kernels fused: {fmt_ns(fused)}"
            + (f" ({100 * fused / total:.0f}%)" if total else "")
        )
        if t.fusion_traced
        else "  A recorded no launching operators (--attribution): not traced to B's kernels",
    ]
    for x in gone[:FUSION_SHOWN]:
        head = (
            f"  {fmt_ns(x.time_a_ns):>8}  {cut_middle(x.name.removeprefix('void '), 30):30} "
            f"{_n(x.calls_a) + 'x':>5}  "
        )
        if not x.fused_ops:
            lines.append(head + "not traced to B's kernels")
            continue
        head += (
            "fused: "
            if x.fused_time_a_ns >= x.time_a_ns
            else f"{fmt_ns(x.fused_time_a_ns)} fused: "
        )
        lines.append(
            head + _some([o.rpartition("::")[2] for o in x.fused_ops], FUSION_WIDTH - len(head))
        )
    rest = gone[FUSION_SHOWN:]
    if rest:
        calls = sum(x.calls_a for x in rest)
        lines.append(
            f"  and {len(rest)} more kind{'s' if len(rest) > 1 else ''}: {_n(calls)} launch"
            f"{'' if calls == 1 else 'es'}, {fmt_ns(sum(x.time_a_ns for x in rest))}, "
            f"{fmt_ns(sum(x.fused_time_a_ns for x in rest))} of it fused"
        )
    return lines


def _signed_ns(x: float) -> str:
    return ("+" if x > 0 else "-" if x < 0 else "") + fmt_ns(abs(x))


def diff(
    d: Diff, fmt: str, limit: int | None = None, show_same: bool = False, wide: bool = False
) -> None:
    if fmt == "json":
        write_json(d.to_dict())
        return
    if fmt == "csv":
        write_csv(({**asdict(r)} for r in d.rows), DIFF_CSV_FIELDS)
        return
    c = console(wide=wide)
    for line in headline(d):
        c.print(Text(line))
    rows = [r for r in d.rows if show_same or r.status != "same"]
    hidden = len(d.rows) - len(rows)
    by_module = d.match == "module"
    cpu = cpu_diff(d)
    name_col = {
        "exact": "operator" if cpu else "kernel",
        "family": "work",
        "op": "operator",
        "module": "module",
    }[d.match]
    # Every figure and verdict whole; the name takes what is left: a kernel by its short label
    # (names.table_labels), a module's path cut at its start (its end says most), other names
    # in the middle. Where that does not fit, the calls and A's time, then B's, are left out
    # first (the delta and the verdicts stay).
    name = Col(
        name_col,
        cut="start" if by_module else "kernel" if d.match == "exact" and not cpu else "name",
        least=30,
        key=True,
    )
    if by_module:  # a module's main precision and the tensor-core coverage of its matrix work
        cols = [
            Col("status"),
            name,
            Col("time A", "right", drop=1),
            Col("time B", "right"),
            Col("delta", "right"),
            Col("prec A->B"),
            Col("TC matrix A->B", "right"),
        ]
    else:
        cols = [
            Col("status"),
            name,
            Col("calls A->B", "right", drop=4),
            Col("time A", "right", drop=3),
            Col("time B", "right", drop=2),
            Col("delta", "right"),
            Col("prec A->B"),
            *([] if cpu else [Col("TC A->B", "right")]),
        ]
    if d.match not in ("exact", "module"):
        cols.append(Col("variants A/B", "right", drop=1))
    body = []
    for i, r in enumerate(rows):
        if limit is not None and i >= limit:
            break
        if by_module:
            cells = [
                MODULE_STATUS.get(r.status, r.status),
                _module_name(r.name),
                fmt_ns(r.time_a_ns),
                fmt_ns(r.time_b_ns),
                _signed_ns(r.delta_time_ns),
                f"{_main_precision(r.time_by_precision_a_ns, r.time_a_ns)}->"
                f"{_main_precision(r.time_by_precision_b_ns, r.time_b_ns)}",
                f"{_share(r.matrix_tensor_core_pct_a)}->{_share(r.matrix_tensor_core_pct_b)}",
            ]
        else:
            cells = [
                r.status,
                r.name,
                f"{_n(r.calls_a)}->{_n(r.calls_b)}",
                fmt_ns(r.time_a_ns),
                fmt_ns(r.time_b_ns),
                _signed_ns(r.delta_time_ns),
                f"{r.precision_a or '-'}->{r.precision_b or '-'}",
                *([] if cpu else [f"{_share(r.tensor_core_pct_a)}->{_share(r.tensor_core_pct_b)}"]),
            ]
        if d.match not in ("exact", "module"):
            cells.append(f"{len(r.variants_a)}/{len(r.variants_b)}")
        body.append(cells)
    print_table(c, cols, body)
    n_shown = min(len(rows), limit) if limit is not None else len(rows)
    if hidden or n_shown < len(rows):
        c.print(
            Text(
                f"{n_shown} of {len(d.rows)} rows shown"
                + (f"; {hidden} unchanged rows hidden (--all shows them)" if hidden else "")
            )
        )


def compare(cmp: Comparison, fmt: str, limit: int = 15, wide: bool = False) -> None:
    if fmt == "json":
        write_json(cmp.to_dict())
        return
    if fmt == "csv":
        write_csv(
            (asdict(v) for v in cmp.variant_rows()),
            (
                "variant",
                "run",
                "kernels",
                "gpu_time_ns",
                "tensor_core_time_pct",
                "added",
                "removed",
                "changed",
                "fused_kernels",
                "matrix_tensor_core_pct",
                "matrix_time_ns",
                "matrix_undecided_time_ns",
            ),
        )
        return
    c = console(wide=wide)
    cpu = any(cpu_diff(d) for d in cmp.diffs)  # CPU operators: no tensor cores, CPU self time
    cols = [
        Col("variant", key=True),
        Col("run", key=True),
        Col("calls" if cpu else "launches", "right", drop=6),
        Col("CPU self time" if cpu else "GPU time", "right"),
        *([] if cpu else [Col("TC of matrix work", "right"), Col("TC share", "right", drop=5)]),
        Col("by precision", cut="end", least=14),
        Col("added", "right", drop=3),
        Col("removed", "right", drop=2),
        Col("changed", "right", drop=4),
        *([] if cpu else [Col("fused", "right", drop=1)]),
    ]
    body = []
    for v in cmp.variant_rows():
        matrix = (
            "-"
            if v.matrix_time_ns is None
            else "none"
            if v.matrix_tensor_core_pct is None
            else (f"{v.matrix_tensor_core_pct:.1f}% of {fmt_ns(v.matrix_time_ns)}")
        )
        body.append(
            [
                v.variant,
                v.run,
                _n(v.kernels),
                fmt_ns(v.gpu_time_ns),
                *([] if cpu else [matrix, f"{v.tensor_core_time_pct:.1f}%"]),
                v.by_precision,
                *(
                    "-" if x is None else str(x)
                    for x in (v.added, v.removed, v.changed, *([] if cpu else [v.fused_kernels]))
                ),
            ]
        )
    print_table(
        c,
        cols,
        body,
        f"{cmp.workload}: {len(cmp.runs)} variants, each against {cmp.labels[0]} "
        f"(matched by {cmp.match})",
        title_left=True,
    )
    for label, d in zip(cmp.labels[1:], cmp.diffs):
        c.print(Text(""))
        c.print(Text(f"{cmp.labels[0]} -> {label}", style="bold"))
        for line in headline(d)[1:]:
            c.print(Text("  " + line))
    # One table of what changed: each row's time in every variant.
    keys: dict[tuple[str, Kind], float] = {}
    for d in cmp.diffs:
        for r in d.rows:
            if r.status != "same":
                keys[(r.name, r.kind)] = max(keys.get((r.name, r.kind), 0.0), abs(r.delta_time_ns))
    top = sorted(keys, key=lambda k: -keys[k])[:limit]
    if not top:
        return
    per = any(d.totals.per_iteration for d in cmp.diffs)
    name = {
        "exact": "operator" if cpu else "kernel",
        "family": "work",
        "op": "operator",
        "module": "module",
    }[cmp.match]
    cols = [
        Col(
            name,
            cut="start"
            if cmp.match == "module"
            else "kernel"
            if cmp.match == "exact" and not cpu
            else "name",
            least=24,
            key=True,
        ),
        *(Col(label, "right") for label in cmp.labels),
    ]
    by_key = [{(r.name, r.kind): r for r in d.rows} for d in cmp.diffs]
    body = []
    for key in top:
        first = next((m[key] for m in by_key if key in m), None)
        cells = [key[0], fmt_ns(first.time_a_ns) if first and first.calls_a else "-"]
        for m in by_key:
            row = m.get(key)
            cells.append(fmt_ns(row.time_b_ns) if row and row.calls_b else "-")
        body.append(cells)
    print_table(
        c,
        cols,
        body,
        f"what changed most ({'time per iteration' if per else 'time'}; top {len(top)} of "
        f"{len(keys)})",
        title_left=True,
    )


def findings(found: Sequence[Finding]) -> None:
    """The findings under a summary: what to look at, its evidence, the main kernels, advice."""
    if not found:
        return
    c = console()
    c.print(Text("findings", style="bold"))
    for f in found:
        hanging(c, "- ", f"{f.title}: {f.detail}")
        heads = [
            f"    {fmt_ns(k.time_ns)} in {k.launches} launches ({k.precision}): "
            for k in f.kernels[:3]
        ]
        # the kernels by the tables' labels, each on its line (the full names: --format json)
        labels = table_labels(
            [k.name for k in f.kernels[:3]], max(20, c.width - max(map(len, heads), default=0))
        )
        for head, k in zip(heads, f.kernels[:3]):
            c.print(Text(head + labels[k.name]))
        hanging(c, "    try: ", f.advice)


def report_written(path: Any, stderr: bool = False) -> None:
    """Where an HTML report was written (stderr when stdout carries JSON or CSV)."""
    line(f"report: {path}", stderr=stderr)


def check(report: CheckReport, fmt: str) -> None:
    """``profkit check``'s outcome: a line per assertion and the headline, or JSON, or JUnit
    XML (its texts' control characters escaped by ``CheckReport.to_junit``)."""
    if fmt == "json":
        write_json(report.to_dict())
    elif fmt == "junit":
        sys.stdout.write(report.to_junit())
    else:
        c = console()  # each line wrapped to the width, under its text ("PASS  ...")
        for text in report.lines():
            status = re.match(r"[A-Z]+  (?=\S)", text)
            hanging(c, status.group(), text[status.end() :]) if status else c.print(Text(text))


def doctor(checks: Sequence[Any], fmt: str) -> None:
    """One line a check: status, what was checked, what was found, and what to do."""
    if fmt == "json":
        write_json([c.to_dict() for c in checks])
        return
    if fmt == "csv":
        write_csv([c.to_dict() for c in checks], ("name", "status", "detail", "advice"))
        return
    for c in checks:
        line(f"{c.status:<4}  {c.name}: {c.detail}" + (f". {c.advice}" if c.advice else ""))


# ---------------------------------------------------------------------------------- bench
BENCH_CSV_FIELDS = (
    "precision",
    "mode",
    "status",
    "reference_only",
    "median_ms",
    "spread_ms",
    "p25_ms",
    "p75_ms",
    "min_ms",
    "max_ms",
    "items_per_s",
    "s_per_item",
    "peak_memory_bytes",
    "max_abs_diff",
    "top1_agreement",
    "note",
    "error",
)
BENCH_LIST_FIELDS = (
    "id",
    "workload",
    "batch_size",
    "device",
    "gpu_name",
    "torch_version",
    "iters",
    "warmup",
    "precisions",
    "modes",
    "combinations",
    "failed",
    "created_at",
)


def _bench_ms(median: float | None, spread: float | None = None) -> str:
    """A median time in milliseconds with as many decimals as its size calls for, and its
    spread with the same: ``12.3 ms (±0.4)``."""
    if median is None:
        return "-"
    from .analyze.tuned import decimals as places

    decimals = places(median)
    text = f"{median:,.{decimals}f} ms"
    return text if spread is None else f"{text} (±{spread:,.{decimals}f})"


def _bench_label(r: BenchRow) -> str:
    return f"{r.precision} {r.mode}" + (" (reference)" if r.reference_only else "")


def bench(b: BenchRecord, fmt: str, wide: bool = False) -> None:
    """A benchmark: the grid of median times (one row per mode, one column per precision),
    then one row per combination with its figures, then what failed and why agreement is n/a."""
    if fmt == "json":
        write_json(b.to_dict())
        return
    if fmt == "csv":
        write_csv((r.to_dict() for r in b.rows), BENCH_CSV_FIELDS)
        return
    c = console(wide=wide)
    c.print(Text(_bench_heading(b)))
    c.print(Text("median time per iteration (± half the interquartile range), one row per mode:"))
    _bench_grid(c, b)
    c.print(Text("each combination's times:"))
    _bench_detail(c, b)
    notes = dict.fromkeys(
        r.note for r in b.rows if r.status == "ok" and r.note and r.note.startswith("n/a")
    )
    for note in notes:
        c.print(Text(f"agreement with fp32 eager: {note}"))
    rounds = (b.info or {}).get("round_medians_ms") or {}
    if rounds:  # --rounds: how far the processes' medians were apart is the between-process drift
        c.print(Text("each process's median, round by round (ms):"))
        for combination, medians in rounds.items():
            if medians:
                c.print(Text(f"  {combination}: " + ", ".join(f"{m:.4g}" for m in medians)))
    for r in b.rows:
        if r.status != "ok":
            c.print(Text(f"{_bench_label(r)} failed: {r.error}"))


def _bench_heading(b: BenchRecord) -> str:
    from .workloads import option_labels

    where = "CPU" if b.device == "cpu" else (b.gpu_name or "GPU")
    options = "".join(f", {label}" for label in option_labels((b.info or {}).get("options")))
    return (
        f"{b.workload}{options}, batch {b.batch_size}, on {where}"
        + (f", torch {b.torch_version}" if b.torch_version else "")
        + f": {b.iters} timed iteration{'s' if b.iters != 1 else ''} after {b.warmup} warm-up"
        + (f", in each of {rounds} processes" if (rounds := (b.info or {}).get("rounds")) else "")
        + (f" (benchmark {b.id})" if b.id is not None else "")
    )


def _bench_grid(c: Console, b: BenchRecord) -> None:
    """Modes x precisions: each combination's median (and spread), or its status."""
    body = []
    for m in b.modes:
        cells = [m]
        for p in b.precisions:
            r = b.row(p, m)
            cells.append(
                "-"
                if r is None
                else _bench_ms(r.median_ms, r.spread_ms)
                if r.status == "ok"
                else r.status
            )
        body.append(cells)
    print_table(c, [Col("mode", key=True), *(Col(p, "right") for p in b.precisions)], body)


def _bench_detail(c: Console, b: BenchRecord) -> None:
    """One row per combination with its figures, in two tables that each fit 80 columns: its
    times, then its throughput, memory and agreement with fp32 eager."""
    times = [
        Col("combination", key=True),
        *(Col(h, "right") for h in ("median", "±", "min", "max")),
    ]
    other = [
        Col("combination", key=True),
        *(Col(h, "right") for h in ("items/s", "s/item", "peak MiB", "max abs diff", "top-1")),
    ]
    rows_t, rows_o = [], []
    for r in b.rows:
        if r.status != "ok":
            rows_t.append([_bench_label(r), r.status, *("-" * (len(times) - 2))])
            rows_o.append([_bench_label(r), *("-" * (len(other) - 1))])
            continue
        rows_t.append(
            [
                _bench_label(r),
                _bench_ms(r.median_ms),
                _bench_ms(r.spread_ms).removesuffix(" ms"),
                _bench_ms(r.min_ms),
                _bench_ms(r.max_ms),
            ]
        )
        rows_o.append(
            [
                _bench_label(r),
                "-" if r.items_per_s is None else f"{r.items_per_s:,.1f}",
                "-" if r.s_per_item is None else f"{r.s_per_item:.3g} s",
                "-" if r.peak_memory_bytes is None else f"{r.peak_memory_bytes / 2**20:,.1f}",
                "n/a" if r.max_abs_diff is None else f"{r.max_abs_diff:.3g}",
                "n/a" if r.top1_agreement is None else f"{100 * r.top1_agreement:.1f}%",
            ]
        )
    print_table(c, times, rows_t)
    c.print(Text("each combination's throughput, peak memory and agreement with fp32 eager:"))
    print_table(c, other, rows_o)


def benches(records: Sequence[BenchRecord], fmt: str, wide: bool = False) -> None:
    """The stored benchmarks, one line each (``--format json``: each whole, rows included)."""
    if fmt == "json":
        write_json([b.to_dict() for b in records])
        return
    rows = [
        {
            **{k: getattr(b, k) for k in BENCH_LIST_FIELDS if hasattr(b, k)},
            "combinations": sum(not r.reference_only for r in b.rows),
            "failed": sum(r.status != "ok" and not r.reference_only for r in b.rows),
        }
        for b in records
    ]
    if fmt == "csv":
        write_csv(rows, BENCH_LIST_FIELDS)
        return
    c = console(wide=wide)
    if not records:
        c.print(
            "no benchmarks yet: try `profkit bench resnet18 --device cpu --batch-size 1 --iters 5 --warmup 1`"
        )
        return
    cols = [
        Col("id", "right", key=True),
        Col("workload", key=True),
        Col("batch", "right"),
        Col("on", cut="middle", least=8, drop=1),
        Col("precisions"),
        Col("modes"),
        Col("ok", "right"),
        Col("created", drop=2),
    ]
    print_table(
        c,
        cols,
        [
            [
                str(b.id),
                b.workload,
                str(b.batch_size),
                "CPU" if b.device == "cpu" else (b.gpu_name or "GPU"),
                ",".join(b.precisions),
                ",".join(b.modes),
                f"{row['combinations'] - row['failed']}/{row['combinations']}",
                b.created_at[:19],
            ]
            for b, row in zip(records, rows)
        ],
    )


# ---------------------------------------------------------------------------------- sweep
def sweep_progress(
    res: Any, done: int, total: int, option: Callable[[str], str | None] | None = None
) -> str:
    """One line as a sweep's job ends (on stderr); ``option`` names the parameters in its error
    as the caller calls them (the command: flags)."""
    where = f" on {res.worker}" if res.worker else ""
    took = f" in {res.wall_s:.0f} s" if res.wall_s is not None else ""
    what = (
        f"run {res.run}"
        if res.status == "ok"
        else f"FAILED: {name_params(res.error or '', option)}"
    )
    return f"[{done}/{total}] {res.job.label()}{where}{took}: {what}"


def sweep(result: Any, fmt: str, option: Callable[[str], str | None] | None = None) -> None:
    """A sweep's jobs: one row each (skipped cells too), then the engine and wall time; the
    jobs' errors with their parameters named by ``option`` (the command: flags)."""
    out = result.to_dict()
    rows = [
        {**r, "error": name_params(r["error"], option) if r["error"] else r["error"]}
        for r in out["jobs"]
    ]
    if fmt == "json":
        write_json({**out, "jobs": rows})
        return
    fields = ["workload", "precision", "mode", "tool", "status", "run", "worker", "wall_s", "error"]
    if fmt == "csv":
        write_csv(rows, fields)
        return
    c = console()
    cols = [
        Col("workload", cut="middle", key=True),
        Col("precision"),
        Col("mode"),
        Col("tool"),
        Col("status"),
        Col("run"),
        Col("worker", cut="middle", drop=1),
        Col("wall", "right"),
        Col("error", cut="end", share=2),
    ]
    print_table(
        c,
        cols,
        [
            [
                str(r["workload"]),
                r["precision"],
                r["mode"],
                r["tool"],
                r["status"],
                r["run"] or "-",
                r["worker"] or "-",
                f"{r['wall_s']:.0f} s" if r["wall_s"] is not None else "-",
                r["error"] or "",
            ]
            for r in rows
        ],
    )
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("ok", "failed", "skipped")}
    c.print(
        f"{counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped; "
        f"{result.engine}, {result.wall_s:.0f} s wall"
    )


# ---------------------------------------------------------------------------------- tune
TUNE_CSV_FIELDS = (
    "fixes",
    "title",
    "verdict",
    "median_ms",
    "spread_ms",
    "saving_ms",
    "saving_pct",
    "estimate_ms",
    "estimate_pct",
    "rel_diff",
    "tolerance",
    "agreement",
    "findings",
    "code",
    "note",
)


def _tune_saving(t: TuneTrial) -> str:
    from .analyze.tuned import bound_pct, share_pct

    if t.verdict == "estimate":
        return (
            "-" if t.estimate_pct is None else f"≤{bound_pct(t.estimate_pct, t.estimate_ms)} (est.)"
        )
    if t.verdict == "not tried" and t.estimate_pct is not None:
        return f"({share_pct(t.estimate_pct, t.estimate_ms)} of time)"  # what its findings cover: not a saving
    if t.saving_pct is None:
        return "-"
    return f"{t.saving_pct:.1f}%"  # negative: the step took longer


def _tune_outputs(t: TuneTrial) -> str:
    if t.rel_diff is not None:
        return f"{t.agreement} {t.rel_diff:.0e}"
    if t.agreement and t.agreement.startswith("n/a"):
        return "n/a"
    return t.agreement or "-"


def tuning(t: Tuning, fmt: str, wide: bool = False) -> None:
    """A tuning: the baseline, then each fix ranked (time a step after it, saving, outputs,
    verdict, the finding it answers), then each fix's code and the notes."""
    rows = [t.baseline, *t.trials]
    if fmt == "json":
        write_json(t.to_dict())
        return
    if fmt == "csv":
        write_csv(
            (
                {
                    **r.to_dict(),
                    "fixes": "+".join(r.fixes),
                    "findings": ",".join(r.findings),
                    "code": "\n".join(r.code),
                }
                for r in rows
            ),
            TUNE_CSV_FIELDS,
        )
        return
    from .analyze.tuned import step_text

    c = console(wide=wide)
    where = "CPU" if t.device == "cpu" else "GPU"
    c.print(
        Text(
            f"{t.target} (run {t.run}) on the {where}: {t.iters} timed steps after {t.warmup} warm-up "
            f"per trial; baseline {step_text(t.baseline)} a step"
        )
    )
    cols = [
        Col("#", "right"),
        Col("fix", key=True, cut="end", least=22, share=2),
        Col("step", "right"),
        Col("saves", "right"),
        Col("outputs", drop=2),
        Col("verdict"),
        Col("answers", cut="end", least=8, drop=1),
    ]
    body = []
    for i, r in enumerate(t.trials, start=1):
        body.append(
            [
                str(i),
                r.title,
                step_text(r),
                _tune_saving(r),
                _tune_outputs(r),
                r.verdict,
                ", ".join(r.findings) or "settings",
            ]
        )
    print_table(c, cols, body)
    best = t.best
    others = [
        (i, r)
        for i, r in enumerate(t.trials, start=1)
        if r.verdict in ("gain", "estimate") and r.code and r is not best
    ]
    if best is not None:
        c.print(
            Text(
                f"do this first: {best.title}, {best.saving_pct:.0f}% less time a step"
                + (f", outputs agree to {best.rel_diff:.0e}" if best.rel_diff is not None else "")
                + ":"
            )
        )
        for code_line in best.code:
            c.print(Text(f"    {code_line}"))
    else:
        c.print(Text("no fix profkit tried gains beyond the steps' spread"))
    if others:
        c.print(Text("the other gains and estimates:" if best else "the estimates:"))
    for i, r in others:
        c.print(Text(f"  {i}. {r.title}:"))
        for code_line in r.code:
            c.print(Text(f"       {code_line}"))
    for i, r in enumerate(t.trials, start=1):
        if r.note and r.verdict != "estimate":
            hanging(c, f"{i}. {r.title}: ", r.note)
    if t.baseline.note:  # its timings (each process's median: the drift) and what failed
        hanging(c, "baseline: ", t.baseline.note)
