"""Command lines built as lists, NVTX names and filters, progress lines from a real ncu log."""

from __future__ import annotations

import re
from pathlib import Path

from profkit import nvtx_ranges
from profkit.names import short_name
from profkit.tools import ncu

from .conftest import NCU_DATA


def test_profile_argv_is_a_list_with_the_filter():
    argv = ncu.profile_argv(
        "ncu",
        Path("/r/report.ncu-rep"),
        "regex:profkit@a\\.iter[0-9]+/",
        ["gpu__time_duration.sum", "x.sum"],
        ["python", "-m", "profkit.harness", "job.json"],
    )
    assert argv[:3] == ["ncu", "--target-processes", "all"]
    assert argv[argv.index("--nvtx-include") + 1] == "regex:profkit@a\\.iter[0-9]+/"
    assert argv[argv.index("--metrics") + 1] == "gpu__time_duration.sum,x.sum"
    assert argv[argv.index("--import-sass") + 1] == "0"
    assert argv[-4:] == ["python", "-m", "profkit.harness", "job.json"]
    assert ncu.export_csv_argv("ncu", Path("r.ncu-rep"))[-2:] == ["--print-units", "base"]


def test_filter_matches_the_ranges_the_harness_opens():
    tag = nvtx_ranges.tag("my model", "fp16", "eager")
    assert tag == "my_model.fp16.eager" and "/" not in tag
    filt = nvtx_ranges.ncu_include_filter(tag)
    # No trailing "/": that would select push/pop ranges; the iterations are start/end ranges,
    # the process's (ncu then profiles every thread's kernels in them: tests/test_steps.py).
    assert filt.startswith("regex:profkit@") and not filt.endswith("/")
    pattern = re.compile(filt[len("regex:profkit@") :])
    assert pattern.fullmatch(nvtx_ranges.iteration_range(tag, 12))
    assert not pattern.fullmatch(nvtx_ranges.iteration_range("other.fp16.eager", 0))
    assert nvtx_ranges.is_iteration_range(nvtx_ranges.iteration_range(tag, 3))
    assert not nvtx_ranges.is_iteration_range("Optimizer.step#SGD.step")


def test_progress_lines_from_a_real_log():
    lines = [
        l
        for l in (NCU_DATA / "capture.log").read_text().splitlines()
        if l.startswith("==PROF== Profiling")
    ]
    parsed = [ncu.parse_progress(l) for l in lines]
    assert parsed and all(parsed)
    assert parsed[0][0] == 161 and parsed[0][2] == 8


def test_short_names_agree_across_demanglings(ncu_rep_dir):
    """The CSV's simplified demangling and the report reader's full one reduce to one name."""
    from profkit.parse import load

    csv_names = [r["name"] for r in load(NCU_DATA / "resnet18_fp32_eager.raw.csv.gz").rows]
    rep_names = [r["name"] for r in load(ncu_rep_dir / "resnet18_fp32_eager.ncu-rep").rows]
    assert any(a != b for a, b in zip(csv_names, rep_names))  # the forms do differ
    assert [short_name(n) for n in csv_names] == [short_name(n) for n in rep_names]


def test_cuda_graphs_are_traced_per_node():
    """torch.compile's reduce-overhead replays CUDA graphs: both Nsight tools must show the
    graph's kernels one by one, not one opaque launch."""
    from profkit.tools import nsys

    argv = ncu.profile_argv(
        "ncu", Path("r.ncu-rep"), "regex:x/", ["gpu__time_duration.sum"], ["python"]
    )
    assert argv[argv.index("--graph-profiling") + 1] == "node"
    argv = nsys.profile_argv("nsys", Path("/r/report"), ["python"])
    assert argv[argv.index("--cuda-graph-trace") + 1] == "node"
