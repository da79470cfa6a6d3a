"""Issue 23's captures (tests/data/where/: what `profkit run` kept on the H100 for models with
attribution, see tests/data/README.md) imported as `profkit run` imports them: the nsys export
or Kineto trace with the compiled kernels the harness found, and ncu's per-function plan from
its two CSV exports and the timing harness's CUPTI records."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from profkit import nvtx_ranges
from profkit.ingest import now, store_capture
from profkit.launch import TIMELINE_KEYS
from profkit.options import SWITCHES as OPTIONS
from profkit.parse import load
from profkit.parse.compiled import with_compiled_kernels
from profkit.parse.ncu_plan import counted_functions, read_per_function, read_timed
from profkit.records import RunInfo, RunRecord
from profkit.store import Store

from .conftest import DATA

WHERE = DATA / "where"
RUNS = sorted(p.name for p in WHERE.iterdir() if p.is_dir())
# Built-in catalog workloads in half precision (tests/data/catalog/): compiled under nsys and
# torch.profiler, eager under ncu.
CATALOG = DATA / "catalog"
CATALOG_RUNS = sorted(p.name for p in CATALOG.iterdir() if p.is_dir())
# Issue 36 (tests/data/findings/): models nobody on the team wrote, under the default tool (counted in
# the run's process), ncu with --metrics full, nsys and torch.profiler, named <model>-<precision>-<tool>.
FINDINGS = DATA / "findings"
FINDINGS_RUNS = sorted(p.name for p in FINDINGS.iterdir() if p.is_dir())
# Eager models, forward and backward (training steps) and forward only, under each tool.
EAGER = [r for r in RUNS if "-eager-" in r]
TRAINING = [r for r in EAGER if "_train" in r]


def import_where(store: Store, name: str, base: Path = WHERE) -> RunRecord:
    folder = base / name
    job = json.loads((folder / "job.json").read_text())
    harness = json.loads((folder / "harness.json").read_text())
    # the timing process's timeline, as the run keeps it
    if (folder / "harness-times.json").exists():
        timer = json.loads((folder / "harness-times.json").read_text())
        harness.update({k: timer[k] for k in TIMELINE_KEYS if k in timer})
    # counted in the run's process (findings/: issue 36)
    if (folder / "kernel_counts.json.gz").exists():
        counted = json.loads(gzip.decompress((folder / "kernel_counts.json.gz").read_bytes()))
        capture = read_timed(
            folder / "kernel_times.json.gz",
            counted_functions(counted),
            job["tag"],
            nvtx_ranges.DOMAIN,
            {int(k): int(v) for k, v in (harness.get("thread_ids") or {}).items()},
            harness.get("iteration_ranges") == "process",
            (harness.get("gpu_name"), harness.get("compute_capability")),
        )
    elif (folder / "kernel_times.json.gz").exists():
        times = json.loads((folder / "harness-times.json").read_text())
        capture = read_per_function(
            folder / "raw.csv.gz",
            folder / "raw-mangled.csv.gz",
            folder / "kernel_times.json.gz",
            job["tag"],
            nvtx_ranges.DOMAIN,
            {int(k): int(v) for k, v in (times.get("thread_ids") or {}).items()},
            process_wide=True,
        )
    else:
        workdir = Path(store.path).parent / name  # a gzipped export is decompressed here
        workdir.mkdir()
        export = next(
            folder / f
            for f in ("report.sqlite.gz", "trace.json.gz", "raw.csv.gz")
            if (folder / f).exists()
        )
        capture = load(export, workdir=workdir)
    with_compiled_kernels(capture, harness.get("compiled_kernels"))
    spec = job["spec"]
    fields = {
        "name": name,
        "source": "run",
        "started_at": now(),
        "workload": Path(job["workload_path"]).stem,
        "precision": spec["precision"],
        "mode": spec["mode"],
        "batch_size": spec["batch_size"],
        "iters": job["iters"],
        "device": spec["device"],
        "info": RunInfo(harness=harness, options={k: True for k in OPTIONS if spec.get(k)} or None),
    }
    reserved = store.reserve(name, name, fields, status="running")
    return store_capture(store, capture, fields, reserved)
