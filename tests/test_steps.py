"""Whole training steps under every tool, on real captures (tests/data/steps, H100,
`profkit run WORKLOAD --precision amp --iters 2` with --tool ncu, ncu --metrics time, nsys and
torch): every tool counts the same kernels per step, and that count is every kernel the step
launched, from any thread (the nsys export's launch calls inside each iteration's start/end
range, counted here by SQL, are the oracle)."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from profkit import nvtx_ranges
from profkit.parse.kineto import read_kineto
from profkit.parse.ncu_csv import read_ncu_csv
from profkit.parse.ncu_plan import read_per_function
from profkit.parse.nsys_sqlite import read_nsys_sqlite

from .conftest import DATA

STEPS = DATA / "steps"
WORKLOADS = sorted({p.name.split("_amp.")[0] for p in STEPS.glob("*_amp.nsys.sqlite.gz")})


def _plain(path: Path, tmp_path: Path) -> Path:
    out = tmp_path / path.name.removesuffix(".gz")
    out.write_bytes(gzip.decompress(path.read_bytes()))
    return out


def _oracle(export: Path) -> list[tuple[int, int]]:
    """Per NVTX start/end range (eventType 60) of the export: (kernels whose launch call, on
    any thread, started inside it; threads that launched them)."""
    con = sqlite3.connect(export)
    out = []
    for start, end in con.execute("select start, end from NVTX_EVENTS where eventType = 60 order by start"):
        out.append(con.execute(
            "select count(*), count(distinct r.globalTid) from CUPTI_ACTIVITY_KIND_KERNEL k "
            "join CUPTI_ACTIVITY_KIND_RUNTIME r using (correlationId) where r.start >= ? and r.start < ?",
            (start, end)).fetchone())
    con.close()
    return out


def _per_step(ranges: list[dict], workload: str) -> list[int]:
    tag = nvtx_ranges.tag(workload, "amp", "eager")
    steps = [r for r in ranges if r["depth"] == 0 and r["name"].startswith(tag + ".iter")]
    return [r["kernels"] for r in sorted(steps, key=lambda r: r["name"])]


@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_tool_counts_every_kernel_of_the_step(workload, tmp_path):
    base = STEPS / f"{workload}_amp"
    export = _plain(Path(f"{base}.nsys.sqlite.gz"), tmp_path)
    oracle = _oracle(export)
    assert len(oracle) == 2 and all(threads == 2 for _, threads in oracle)  # main thread and autograd's
    launched = [n for n, _ in oracle]

    nsys = read_nsys_sqlite(export)
    nsys_rows = list(nsys.rows)
    torch = read_kineto(Path(f"{base}.torch.json.gz"))
    torch_rows = list(torch.rows)
    times = json.loads(Path(f"{base}.ncu.harness-times.json").read_text())
    assert times["iteration_ranges"] == "process"
    ncu = read_per_function(Path(f"{base}.ncu.raw.csv.gz"), Path(f"{base}.ncu.raw-mangled.csv.gz"),
                            Path(f"{base}.ncu.kernel_times.json.gz"), nvtx_ranges.tag(workload, "amp", "eager"),
                            nvtx_ranges.DOMAIN, {int(k): v for k, v in times["thread_ids"].items()}, process_wide=True)
    ncu_rows = list(ncu.rows)
    every = Counter(r["nvtx_range"] for r in read_ncu_csv(Path(f"{base}.ncu-every.raw.csv.gz")).rows)

    assert _per_step(nsys.ranges, workload) == launched
    assert _per_step(torch.ranges, workload) == launched
    assert _per_step(ncu.ranges, workload) == launched
    assert [every[k] for k in sorted(every)] == launched
    # Nothing of a step is "another thread's" any more, and each tool saw both threads launch.
    for capture, rows in ((nsys, nsys_rows), (torch, torch_rows), (ncu, ncu_rows)):
        assert all(r["other_thread_kernels"] in (0, None) for r in capture.ranges if r["depth"] == 0)
        kernels = [r for r in rows if r["kind"] == "kernel"]
        assert len(kernels) == sum(launched) and all(r["nvtx_range"] for r in kernels)
        # (CUPTI names threads by pthread id: ncu's rows carry the OS id of the main thread only.)
        assert len({r["thread_id"] for r in kernels}) == 2 and (capture is ncu or None not in {r["thread_id"] for r in kernels})
    # ncu counted every kernel function of the step, the backward pass's included: every
    # launch's verdict comes from counters.
    assert {r["evidence"] for r in ncu_rows} == {"metrics"}
