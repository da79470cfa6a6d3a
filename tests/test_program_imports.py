"""Captures of unmodified scripts, imported (issue 35): torch.profiler's ``ProfilerStep#N`` ranges
are steps; ``--step-range NAME`` makes a user's or a framework's ranges steps; nsys's own PyTorch
annotation (``--pytorch=autograd-shapes-nvtx``) is read as operators and shapes."""

from __future__ import annotations

import json
from collections import Counter

from .conftest import DATA, cli, one_line_error

STEPS = DATA / "torch" / "profiler_steps.json.gz"  # tests/data/capture/profiler_steps.py made it
# benchmarks/program_gpu.sh's nsys_pytorch stage made it
SHAPES = DATA / "nsys" / "autograd_shapes.sqlite.gz"


def test_profiler_steps_are_steps(tmp_path):
    import profkit

    db = profkit.open_db(tmp_path / "p.db")
    run = db.import_file(STEPS)
    ranges = run.ranges()
    steps = ranges[ranges.name.str.startswith("ProfilerStep#")]
    assert steps.name.tolist() == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    # A step is the process's: every operator of the recorded steps is in one, autograd's thread's too.
    k = run.kernels()
    assert k.nvtx_path.str.startswith("ProfilerStep#").all()
    assert int(steps.kernels.sum()) == len(k) and (steps.other_thread_kernels == 0).all()


def test_step_range_names_a_users_ranges(tmp_path):
    r = cli("import", STEPS, "--step-range", "Optimizer.step#SGD.step", db=tmp_path / "p.db")
    assert r.exit_code == 0, r.output
    import profkit

    run = profkit.open_db(tmp_path / "p.db").list_runs()[-1]
    ranges = run.ranges()
    opt = ranges[ranges.name == "Optimizer.step#SGD.step"]
    assert len(opt) == 3 and (opt.other_thread_kernels == 0).all()


def test_step_range_must_name_something(tmp_path):
    one_line_error(
        cli("import", STEPS, "--step-range", " ", db=tmp_path / "p.db"), "names a range", 2
    )
    assert not (tmp_path / "p.db").exists()


def test_nsys_pytorch_annotation_reads_as_operators_and_shapes(tmp_path):
    """20 steps of tests/data/programs/own/amp_train.py under ``nsys profile
    --pytorch=autograd-shapes-nvtx`` on the H100 (benchmarks/program_gpu.sh, stage nsys_pytorch)."""
    import profkit

    run = profkit.open_db(tmp_path / "p.db").import_file(SHAPES)
    k = run.kernels()
    k = k[k.kind == "kernel"]
    assert k.op.notna().mean() > 0.9
    assert k.op.str.contains(", op_id = |sizes = ", regex=True).sum() == 0
    assert k.shapes.notna().any()
    wheres = [w.where for f in run.findings() for w in f.where if w.where]
    assert wheres and not [w for w in wheres if "op_id =" in w or "sizes = [" in w]
    syncs = next(f for f in run.findings() if f.title == "host synchronisations inside the step")
    # operator and shapes
    assert any(w.where and w.where.startswith("aten::copy_ [") for w in syncs.where)


def test_nsys_pytorch_annotation_is_never_shown_raw(tmp_path):
    """Issue 36, item 5: what profkit shows of that capture names each range of PyTorch's
    annotation by its name and input shapes, never by its raw text (``aten::addmm, seq = 10,
    op_id = 294, sizes = [[64], [16, 256], [256, 64], [], []], input_op_ids = [...]``). Its
    operator calls are attribution only, not ranges of the run (as under torch.profiler); the
    run's ranges are the autograd nodes and record_function ranges, by name and shapes."""
    db = tmp_path / "p.db"
    assert cli("import", SHAPES, "--name", "a", db=db).exit_code == 0
    shown = [
        cli(*args, db=db)
        for args in (
            ("kernels", "a", "--format", "json"),
            ("kernels", "a", "--wide"),
            ("ranges", "a", "--format", "json"),
            ("ranges", "a", "--wide"),
            ("summary", "a"),
        )
    ]
    for r in shown:
        assert r.exit_code == 0, r.output
        assert not [
            f for f in ("seq = ", "op_id = ", "sizes = [", "input_op_ids") if f in r.stdout
        ], r.stdout[:2000]
    kernels = json.loads(shown[0].stdout)
    wgrad = [k for k in kernels if k["name"].startswith("sm80_xmma_wgrad_implicit_gemm")]
    assert len(wgrad) == 40 and all(
        (k["op"], k["shapes"], k["nvtx_range"], k["nvtx_path"])
        == (
            "aten::convolution_backward",
            "[16,16,32,32];[16,3,32,32];[16,3,3,3]",
            "ConvolutionBackward0 [16,16,32,32]",
            "autograd::engine::evaluate_function: ConvolutionBackward0/ConvolutionBackward0 [16,16,32,32]",
        )
        for k in wgrad
    )
    names = Counter(r["name"] for r in json.loads(shown[2].stdout))
    assert (
        names["Optimizer.step#AdamW.step"] == 20
        and names["ConvolutionBackward0 [16,16,32,32]"] == 20
    )
    assert not [n for n in names if n.startswith("aten::")]


def test_step_range_names_a_range_of_pytorchs_annotation_as_shown(tmp_path):
    """``--step-range`` takes the name profkit shows (every call's op_id left out): the optimizer
    step ranges of that capture are steps, each holding its kernels."""
    import profkit

    run = profkit.open_db(tmp_path / "p.db").import_file(
        SHAPES, step_ranges=["Optimizer.step#AdamW.step"]
    )
    ranges = run.ranges()
    steps = ranges[ranges.name == "Optimizer.step#AdamW.step"]
    assert len(steps) == 20 and int(steps.kernels.sum()) == 176
    assert (
        int(run.kernels().nvtx_path.fillna("").str.startswith("Optimizer.step#AdamW.step").sum())
        == 176
    )
