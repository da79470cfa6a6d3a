"""The ``profkit`` command: parse options, call one library function, render the result, and
turn expected errors into one line and a non-zero exit. No analysis lives here, and nothing
heavy (torch, pandas) is imported before a command needs it, so ``profkit --help`` is instant.
"""

from __future__ import annotations

import functools
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from .errors import ProfkitError

app = typer.Typer(
    name="profkit",
    help="Profile PyTorch workloads under Nsight Compute, Nsight Systems or torch.profiler and see, "
    "for every kernel, its precision and whether it ran on the tensor cores.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_state: dict[str, Any] = {"verbose": False, "db": None}


class Fmt(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


DbOpt = Annotated[
    Optional[Path],
    typer.Option("--db", help="Database file (default: $PROFKIT_DB, else ./profkit.db).", show_default=False),
]
# Before the command, `profkit --db X ...` also reads PROFKIT_DB; a command's own --db wins.
GlobalDbOpt = Annotated[
    Optional[Path],
    typer.Option("--db", envvar="PROFKIT_DB", help="Database file (default ./profkit.db).", show_default=False),
]
FmtOpt = Annotated[Fmt, typer.Option("--format", "-f", help="Output format.")]
RunArg = Annotated[str, typer.Argument(help="Run name or id (see `profkit runs`).", show_default=False)]


def _err(text: str) -> None:
    print(text, file=sys.stderr)


def handles_errors(fn: Callable) -> Callable:
    """ProfkitError -> 'profkit: error: ...' and its exit code; tracebacks only with --verbose."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ProfkitError as exc:
            if _state["verbose"]:
                raise
            _err(f"profkit: error: {exc.one_line()}")
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            _err("profkit: interrupted")
            raise typer.Exit(130) from None

    return wrapper


@app.callback()
def _main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks for errors.")] = False,
    db: GlobalDbOpt = None,
) -> None:
    _state["verbose"] = verbose
    _state["db"] = db


def _store(db: Optional[Path], create: bool = False):
    from .store import Store

    return Store(db or _state["db"], create=create)


def _console():
    from rich.console import Console

    return Console()


def _fmt_ns(ns: Any) -> str:
    if ns is None:
        return "-"
    ns = int(ns)
    if ns >= 1_000_000:
        return f"{ns / 1e6:,.3f} ms"
    if ns >= 1_000:
        return f"{ns / 1e3:,.1f} us"
    return f"{ns} ns"


def _tc(v: Any) -> str:
    return "-" if v is None else ("yes" if v else "no")


def _write_csv(rows, columns: list[str]) -> None:
    import csv

    w = csv.DictWriter(sys.stdout, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in r.items()})


# ---------------------------------------------------------------------------------- run
@app.command()
@handles_errors
def run(
    workload: Annotated[str, typer.Argument(help="A built-in workload (see `profkit workloads`) or a .py file defining build(spec).", show_default=False)],
    tool: Annotated[str, typer.Option(help="auto (ncu where it can read counters, else nsys, else torch), ncu, nsys or torch (torch.profiler).")] = "auto",
    precision: Annotated[str, typer.Option(help="fp32, fp16, bf16 or amp.")] = "fp32",
    mode: Annotated[str, typer.Option(help="eager or torchscript (torch.jit.trace).")] = "eager",
    batch_size: Annotated[int, typer.Option(help="Batch size passed to the workload.")] = 8,
    iters: Annotated[int, typer.Option(help="Measured iterations, each in its own NVTX range.")] = 1,
    warmup: Annotated[int, typer.Option(help="Unprofiled iterations before the measured ones.")] = 3,
    device: Annotated[str, typer.Option(help="cuda, or cpu to profile CPU operators with torch.profiler.")] = "cuda",
    metrics: Annotated[Optional[str], typer.Option(help="ncu metric preset for this GPU (default, time, tensor, full) or a comma-separated list of metric names.", show_default=False)] = None,
    name: Annotated[Optional[str], typer.Option(help="Run name (default: workload-precision-mode-tool).", show_default=False)] = None,
    timeout: Annotated[Optional[float], typer.Option(help="Stop the profiler after this many seconds.", show_default=False)] = None,
    cpu_sampling: Annotated[bool, typer.Option("--cpu-sampling", help="nsys: sample CPU call stacks too (large captures).")] = False,
    context_switches: Annotated[bool, typer.Option("--context-switches", help="nsys: trace the process's CPU context switches.")] = False,
    db: DbOpt = None,
) -> None:
    """Run a workload under a profiler, store its kernels and print a summary."""
    from .launch import Progress, RunRequest, plan, run as do_run
    from .workloads import Spec

    req = RunRequest(workload=workload, spec=Spec(batch_size=batch_size, precision=precision, mode=mode, device=device),
                     tool=tool, iters=iters, warmup=warmup, metrics=metrics, name=name, timeout_s=timeout,
                     cpu_sampling=cpu_sampling, context_switches=context_switches)
    checked = plan(req)  # bad options, and a tool that cannot run here, fail before a database is created
    from rich.console import Console

    store = _store(db, create=True)
    console = _console()
    err_console = Console(stderr=True)
    with err_console.status("starting") as status:
        def on_kernel(index: int, kname: str, passes: Optional[int]) -> None:
            status.update(f"ncu: profiled {index + 1} kernels ({passes or '?'} passes each): {kname[:60]}")

        def on_note(text: str) -> None:
            err_console.print(f"profkit: {text}", markup=False, highlight=False)

        row = do_run(store, checked, Progress(on_kernel=on_kernel, on_stage=status.update, on_note=on_note))
    _print_run_done(console, store, row)


def _print_run_done(console, store, row: dict) -> None:
    from .analyze.summary import summarize

    info = json.loads(row["info"] or "{}")
    summary = summarize(store, row)
    _render_summary(console, row, summary)
    size = info.get("report_bytes")
    raw = json.loads(row["raw_files"] or "{}")
    report = next((raw[k] for k in ("ncu-rep", "nsys-rep", "kineto-json") if k in raw), None)
    if report:
        console.print(f"report: {report} ({size / 1e6:.2f} MB)" if size else f"report: {report}")
    console.print(f"profiled in {row['profiled_wall_s']:.1f} s; run stored as [bold]{row['name']}[/bold] in {store.path}")


# ---------------------------------------------------------------------------------- import
@app.command("import")
@handles_errors
def import_(
    path: Annotated[Path, typer.Argument(help="A .ncu-rep report, an ncu raw-page CSV export (.csv, .csv.gz), or a torch.profiler trace (.json, .json.gz).", show_default=False)],
    name: Annotated[Optional[str], typer.Option(help="Run name (default: from the file name).", show_default=False)] = None,
    db: DbOpt = None,
) -> None:
    """Import a capture made elsewhere as a new run; prints the run's name last."""
    from .ingest import import_file

    store = _store(db, create=True)
    row, notes = import_file(store, path, name=name)
    for note in notes:
        _err(f"profkit: note: {note}")
    what = "CPU operator calls" if row["activity"] == "cpu_op" else "kernel launches"
    clock = "CPU self" if row["activity"] == "cpu_op" else "GPU"
    _err(f"imported {row['kernel_count']} {what} ({_fmt_ns(row['gpu_time_ns'])} {clock} time) from {path}")
    print(row["name"])


# ---------------------------------------------------------------------------------- runs
RUN_LIST_COLUMNS = ["id", "name", "source", "workload", "precision", "mode", "batch_size", "iters", "device",
                    "tool", "tool_version", "metric_set", "gpu_name", "compute_capability", "activity",
                    "kernel_count", "gpu_time_ns", "finished_at"]


@app.command()
@handles_errors
def runs(fmt: FmtOpt = Fmt.table, db: DbOpt = None) -> None:
    """List the runs in the database."""
    rows = _store(db).runs()
    if fmt is Fmt.json:
        print(json.dumps([{k: r[k] for k in RUN_LIST_COLUMNS} for r in rows], indent=2))
        return
    if fmt is Fmt.csv:
        _write_csv(rows, RUN_LIST_COLUMNS)
        return
    from rich.table import Table

    t = Table(box=None, header_style="bold")
    for c in ("id", "name", "source", "workload", "prec", "mode", "tool", "gpu", "kernels", "time", "finished"):
        t.add_column(c, justify="right" if c in ("id", "kernels", "time") else "left", no_wrap=c != "gpu")
    for r in rows:
        cpu = r["activity"] == "cpu_op"
        t.add_row(str(r["id"]), r["name"], r["source"] or "", r["workload"] or "-", r["precision"] or "-",
                  r["mode"] or "-", r["tool"] or "", "CPU only" if cpu else (r["gpu_name"] or "-"),
                  f"{r['kernel_count']} ops" if cpu else str(r["kernel_count"]),
                  _fmt_ns(r["gpu_time_ns"]) + (" cpu" if cpu else ""), (r["finished_at"] or "")[:19])
    console = _console()
    console.print(t if rows else "no runs yet: try `profkit run vgg16` or `profkit import REPORT.ncu-rep`")


# ---------------------------------------------------------------------------------- kernels
KERNEL_JSON_COLUMNS = ["launch_id", "kind", "name", "short_name", "duration_ns", "grid_x", "grid_y", "grid_z",
                       "block_x", "block_y", "block_z", "stream", "device", "thread_id", "nvtx_range", "nvtx_path",
                       "input_types", "precision", "tensor_core", "family", "evidence", "evidence_detail", "metrics"]


@app.command()
@handles_errors
def kernels(
    run_ref: RunArg,
    fmt: FmtOpt = Fmt.table,
    limit: Annotated[Optional[int], typer.Option(help="Show at most this many launches (table only).", show_default=False)] = None,
    db: DbOpt = None,
) -> None:
    """List a run's kernel launches with their precision, tensor-core verdict and evidence."""
    store = _store(db)
    row = store.get_run(run_ref)
    rows = store.iter_kernels(row["id"])
    if fmt is Fmt.json:
        # Streamed: one launch at a time, whatever the run's size.
        out = sys.stdout
        out.write("[")
        for i, r in enumerate(rows):
            out.write(("," if i else "") + "\n  " + json.dumps({k: r[k] for k in KERNEL_JSON_COLUMNS}))
        out.write("\n]\n" if row["kernel_count"] else "]\n")
        return
    if fmt is Fmt.csv:
        _write_csv(rows, KERNEL_JSON_COLUMNS)
        return
    from rich.table import Table

    cpu = row["activity"] == "cpu_op"
    what = "CPU operator calls (self time)" if cpu else "kernel launches"
    extra = store.db.execute("select count(*) from kernels where run_id = ? and kind in ('memcpy', 'memset')",
                             [row["id"]]).fetchone()[0]
    title = f"{row['name']}: {row['kernel_count']} {what}" + (f" and {extra} memcpy/memset" if extra else "")
    t = Table(box=None, header_style="bold", title=title)
    # Everything but the kernel and range names keeps its full width; those two share the rest.
    console = _console()
    if cpu:
        fixed = {"#": 4, "self time": 11, "input types": 24, "prec": 7, "evidence": 8}
        cols = ("#", "operator", "self time", "input types", "range", "prec", "evidence")
    else:
        fixed = {"#": 4, "duration": 11, "grid": 12, "block": 11, "prec": 7, "TC": 3, "evidence": 8}
        cols = ("#", "kernel", "duration", "grid", "block", "range", "prec", "TC", "evidence")
    spare = max(32, console.width - sum(fixed.values()) - 2 * len(cols))
    keep = {"#": len(str(max(0, (row["kernel_count"] or 1) - 1))), "prec": 4, "TC": 3}  # never squeezed
    widths = {**fixed, cols[1]: spare * 2 // 3, "range": spare - spare * 2 // 3}
    for c in cols:
        t.add_column(c, justify="right" if c in ("#", "duration", "self time") else "left", overflow="ellipsis",
                     no_wrap=True, max_width=widths[c], min_width=keep.get(c, min(widths[c], len(c))))
    for i, r in enumerate(rows):
        if limit is not None and i >= limit:
            break
        if cpu:
            t.add_row(str(r["launch_id"]), r["name"], _fmt_ns(r["duration_ns"]), r["input_types"] or "-",
                      r["nvtx_range"] or "-", r["precision"], r["evidence"])
        else:
            t.add_row(str(r["launch_id"]), r["name"].removeprefix("void "), _fmt_ns(r["duration_ns"]),
                      _dims(r, "grid"), _dims(r, "block"), r["nvtx_range"] or "-", r["precision"],
                      _tc(r["tensor_core"]), r["evidence"])
    console.print(t)


def _dims(r: dict, what: str) -> str:
    xyz = [r[f"{what}_{a}"] for a in "xyz"]
    return "-" if all(v is None for v in xyz) else ",".join("-" if v is None else str(v) for v in xyz)


# ---------------------------------------------------------------------------------- summary
@app.command()
@handles_errors
def summary(
    run_ref: RunArg,
    fmt: FmtOpt = Fmt.table,
    top: Annotated[int, typer.Option(help="How many kernels to list by time.")] = 10,
    db: DbOpt = None,
) -> None:
    """Summarise a run: launches, GPU time, tensor-core share, time by precision."""
    from .analyze.summary import summarize

    store = _store(db)
    row = store.get_run(run_ref)
    s = summarize(store, row, top=top)
    if fmt is Fmt.json:
        print(json.dumps({"run": row["name"], **s}, indent=2))
        return
    if fmt is Fmt.csv:
        _write_csv(
            [{"precision": p, "gpu_time_ns": ns, "kernels": s["kernels_by_precision"].get(p, 0)}
             for p, ns in s["time_by_precision_ns"].items()],
            ["precision", "gpu_time_ns", "kernels"],
        )
        return
    _render_summary(_console(), row, s)


def _render_summary(console, row: dict, s: dict) -> None:
    from rich.table import Table

    what = " ".join(str(x) for x in (row.get("workload"), row.get("precision"), row.get("mode")) if x)
    cpu = s.get("activity") == "cpu_op"
    where = "the CPU (no GPU work recorded)" if cpu else (row.get("gpu_name") or "unknown GPU")
    console.print(f"[bold]{row['name']}[/bold]  {what}  {row.get('tool') or ''} on {where}")
    if cpu:
        console.print(f"{s['kernels']} CPU operator calls, {_fmt_ns(s['gpu_time_ns'])} CPU self time; "
                      "these are CPU operators, not GPU kernels: no tensor cores")
    else:
        console.print(
            f"{s['kernels']} kernel launches, {_fmt_ns(s['gpu_time_ns'])} GPU time; "
            f"tensor cores: {s['tensor_core_kernels']} launches, [bold]{s['tensor_core_time_pct']:.1f}%[/bold] of GPU time"
        )
    ev = ", ".join(f"{k}: {v}" for k, v in s["evidence"].items())
    console.print(f"verdicts from {ev}")
    if s.get("memory_ops"):
        console.print("besides the kernels: " + ", ".join(
            f"{v['count']} {k} ({_fmt_ns(v['time_ns'])})" for k, v in s["memory_ops"].items()))
    t = Table(box=None, header_style="bold")
    t.add_column("precision")
    t.add_column("calls" if cpu else "launches", justify="right")
    t.add_column("CPU time" if cpu else "GPU time", justify="right")
    t.add_column("share", justify="right")
    for p, ns in s["time_by_precision_ns"].items():
        share = 100.0 * ns / s["gpu_time_ns"] if s["gpu_time_ns"] else 0.0
        t.add_row(p, str(s["kernels_by_precision"].get(p, 0)), _fmt_ns(ns), f"{share:.1f}%")
    console.print(t)
    if s["top_kernels"]:
        title = "top operators by CPU self time" if cpu else "top kernels by GPU time"
        k = Table(box=None, header_style="bold", title=title, title_justify="left")
        for c in ("operator" if cpu else "kernel", "calls" if cpu else "launches", "time", "share", "prec", "TC"):
            k.add_column(c, justify="right" if c in ("launches", "calls", "time", "share") else "left",
                         max_width=max(30, min(70, console.width - 40)) if c in ("kernel", "operator") else None,
                         overflow="ellipsis", no_wrap=True)
        for r in s["top_kernels"]:
            k.add_row(r["name"], str(r["launches"]), _fmt_ns(r["total_ns"]), f"{r['pct']:.1f}%",
                      r["precision"], _tc(r["tensor_core"]))
        console.print(k)


# ---------------------------------------------------------------------------------- ranges
@app.command()
@handles_errors
def ranges(run_ref: RunArg, fmt: FmtOpt = Fmt.table, db: DbOpt = None) -> None:
    """Per NVTX range: kernels launched in it, their GPU time, wall time, other threads' kernels."""
    from .analyze.ranges import RANGE_FIELDS, run_ranges

    store = _store(db)
    row = store.get_run(run_ref)
    rows = run_ranges(store, row)
    if fmt is Fmt.json:
        print(json.dumps(rows, indent=2))
        return
    if fmt is Fmt.csv:
        _write_csv(rows, RANGE_FIELDS)
        return
    from rich.table import Table

    cpu = row["activity"] == "cpu_op"
    console = _console()
    t = Table(box=None, header_style="bold", title=f"{row['name']}: {len(rows)} ranges", title_justify="left")
    heads = ["range", "thread", "wall", "ops" if cpu else "kernels", "CPU time" if cpu else "GPU time"]
    if not cpu:
        heads[4:4] = ["GPU ops"]
        heads.append("other threads")
    for c in heads:
        t.add_column(c, justify="left" if c == "range" else "right", overflow="ellipsis", no_wrap=True,
                     max_width=max(30, console.width - 60) if c == "range" else None)
    for r in rows:
        cells = ["  " * (r["depth"] or 0) + (r["name"] or ""), str(r["thread_id"] or "-"), _fmt_ns(r["wall_ns"]),
                 str(r["kernels"])]
        if not cpu:
            cells.append(str(r["gpu_ops"]))
        cells.append(_fmt_ns(r["gpu_time_ns"]))
        if not cpu:
            cells.append("-" if r["other_thread_kernels"] is None else str(r["other_thread_kernels"]))
        t.add_row(*cells)
    console.print(t if rows else f"{row['name']} has no ranges")
    others = sum(r["other_thread_kernels"] or 0 for r in rows if r["depth"] == 0)
    if others:
        console.print(
            f"{others} kernels were launched by other threads of the process while these ranges were open: "
            "a push/pop range belongs to the thread that opened it, and PyTorch's autograd engine runs the "
            "backward pass on a thread of its own. Those kernels are not in the ranges' kernels or GPU time "
            "(nor in what ncu's NVTX filter profiles); they are in the run's kernel table.")
    elif rows and rows[0]["wall_ns"] is None:
        console.print("ncu records kernels, not ranges: wall times and other threads' kernels need --tool nsys or torch.")


# ---------------------------------------------------------------------------------- workloads
@app.command("workloads")
@handles_errors
def workloads_() -> None:
    """List the built-in workloads."""
    from .workloads import BUILTIN_DIR, builtin_names, describe

    for n in builtin_names():
        print(f"{n:16} {describe(BUILTIN_DIR / f'{n}.py')}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
