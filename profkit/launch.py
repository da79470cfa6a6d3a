"""``profkit run``: put a workload under a profiler and turn what it writes into a run.

The workload runs in a child process (``profkit.harness``) so that the profiler sees a
whole process, and so that torch is never imported by the CLI itself. The raw report, its
CSV export, the job file and the profiler's log are kept in the run's folder beside the
database; the database is written only once everything has been read.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import gpu, nvtx_ranges, workloads
from .classify import metric_set
from .errors import ToolFailed, UsageError, WorkloadError
from .ingest import now, store_capture
from .parse.ncu_csv import read_ncu_csv
from .store import Store, raw_dir
from .tools import ncu, runner

TOOLS = ("ncu",)


@dataclass
class Progress:
    """What a front end may show while a profiler works."""

    on_kernel: Callable[[int, str, int | None], None] | None = None
    on_stage: Callable[[str], None] | None = None
    on_line: Callable[[str], None] | None = None

    def stage(self, text: str) -> None:
        if self.on_stage:
            self.on_stage(text)


@dataclass
class RunRequest:
    workload: str
    spec: workloads.Spec = field(default_factory=workloads.Spec)
    tool: str = "ncu"
    iters: int = 1
    warmup: int = 3
    metrics: str | None = None
    name: str | None = None
    timeout_s: float | None = None


def check(req: RunRequest) -> tuple[str, Path]:
    """Validate a request before anything is written; return the workload's (name, path)."""
    workloads.validate_spec(req.spec)
    if req.tool not in TOOLS:
        raise UsageError(f"unknown tool {req.tool!r}", f"Choose one of {', '.join(TOOLS)}.")
    if req.iters < 1 or req.warmup < 0:
        raise UsageError("--iters must be at least 1 and --warmup at least 0")
    if req.spec.device != "cuda":
        raise UsageError("ncu profiles GPU kernels; --device cpu needs another tool")
    return workloads.resolve(req.workload)


def run(store: Store, req: RunRequest, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress()
    wname, wpath = check(req)
    if req.name is not None:
        store.check_name_free(req.name)

    exe = ncu.find()
    tool_version = ncu.version(exe)
    gpu_info = gpu.query()
    cc = gpu_info[1] if gpu_info else None
    set_label, metrics = metric_set(req.metrics, cc)

    tag = nvtx_ranges.tag(wname, req.spec.precision, req.spec.mode)
    name = req.name or store.unique_name(f"{wname}-{req.spec.precision}-{req.spec.mode}-{req.tool}")
    folder = raw_dir(store.path, name)
    folder.mkdir(parents=True, exist_ok=True)
    report = folder / "report.ncu-rep"
    job = {
        "spec": req.spec.as_dict(), "workload_path": str(wpath), "warmup": req.warmup,
        "iters": req.iters, "tag": tag, "info_path": str(folder / "harness.json"),
    }
    (folder / "job.json").write_text(json.dumps(job, indent=2))
    nvtx_filter = nvtx_ranges.ncu_include_filter(tag)
    argv = ncu.profile_argv(exe, report, nvtx_filter, metrics,
                            [sys.executable, "-m", "profkit.harness", str(folder / "job.json")])
    started = now()
    seen = {"n": 0}
    harness_errors: list[str] = []

    def on_line(line: str) -> None:
        p = ncu.parse_progress(line)
        if p:
            seen["n"] = p[0] + 1
            if progress.on_kernel:
                progress.on_kernel(*p)
        elif line.startswith("profkit-harness: error:"):
            harness_errors.append(line.split("error:", 1)[1].strip())
        if progress.on_line:
            progress.on_line(line)

    progress.stage(f"profiling {wname} ({req.spec.precision}, {req.spec.mode}) under ncu, metrics: {set_label}")
    t0 = time.monotonic()
    result = runner.stream(argv, log_path=folder / "ncu.log", on_line=on_line, timeout=req.timeout_s)
    wall = time.monotonic() - t0
    if harness_errors:
        raise WorkloadError(harness_errors[0])
    ncu.check_result(result, report, seen["n"], nvtx_filter)

    progress.stage("exporting the raw page to CSV")
    csv_path = folder / "raw.csv"
    csv_path.write_text(runner.capture(ncu.export_csv_argv(exe, report), timeout=900))
    capture = read_ncu_csv(csv_path)
    capture.tool_version = tool_version
    if capture.gpu_name is None and gpu_info:
        capture.gpu_name, capture.compute_capability = gpu_info
    info_path = folder / "harness.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    if not len(capture.kernels):
        raise ToolFailed(f"the CSV export of {report} holds no kernels")

    progress.stage("classifying and storing")
    row = {
        "name": name, "source": "run", "workload": wname, "precision": req.spec.precision,
        "mode": req.spec.mode, "batch_size": req.spec.batch_size, "iters": req.iters,
        "device": req.spec.device, "metric_set": set_label, "metrics": metrics,
        "command": argv, "started_at": started, "profiled_wall_s": round(wall, 3),
        "raw_files": {"ncu-rep": str(report), "ncu-csv": str(csv_path), "log": str(folder / "ncu.log")},
        "info": {"harness": info, "report_bytes": report.stat().st_size},
    }
    return store_capture(store, capture, row)
