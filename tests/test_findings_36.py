"""Issue 36: findings and verdicts that hold on every model and every tool, on real H100 captures
of models nobody on the team wrote (tests/data/findings: a Hugging Face BERT MLM training step,
torchvision's Faster R-CNN, an LSTM language model, timm's ResNet-50 in NCHW and channels-last,
each under the default plan, nsys and torch.profiler, imported as `profkit run` imports them)."""

from __future__ import annotations

import gzip
import json

import pytest

from profkit.analyze.findings import finding_rules, findings, stretch
from profkit.analyze.ranges import caveats
from profkit.store import Store

from .where_data import FINDINGS, FINDINGS_RUNS, import_where

TOOLS = ("ncu", "nsys", "torch")
# One model, one precision and layout, under each tool.
MODELS = (
    "bert-amp",
    "frcnn-amp",
    "frcnn-fp32",
    "lstm-amp",
    "lstm-fp16",
    "r50-fp16",
    "r50cl-fp16",
    "r50b64-fp16",
)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    s = Store(tmp_path_factory.mktemp("findings") / "f.db", create=True)
    for name in FINDINGS_RUNS:
        import_where(s, name, FINDINGS)
    return s


def found(store: Store, name: str) -> dict[str, object]:
    return {f.id: f for f in findings(store, store.get_run(name))}


def kernel_groups(store: Store, name: str):
    return [g for g in store.kernel_groups(store.get_run(name).id) if g.kind == "kernel"]


# ---------------------------------------------------------------- 4. every kernel's precision known
@pytest.mark.parametrize("name", FINDINGS_RUNS)
def test_unknown_precision_is_at_most_half_a_percent_under_every_tool(store, name):
    """Integer and boolean kernels, library kernels with a type in their name, opaque copies,
    cuDNN's first-layer convolution: at most 0.5% of a capture's kernel time is left unknown."""
    groups = kernel_groups(store, name)
    total = sum(g.time_ns for g in groups)
    unknown = sum(g.time_ns for g in groups if g.precision == "unknown")
    assert unknown <= 0.005 * total, (
        name,
        [g.name[:80] for g in groups if g.precision == "unknown"][:5],
    )


def test_integer_and_opaque_kernels_get_a_type_and_the_first_layer_is_a_convolution(store):
    by = {g.short_name: g for g in kernel_groups(store, "frcnn-amp-nsys")}
    assert by["gather_keep_from_mask"].precision == "int"  # torchvision's NMS: a boolean mask
    assert by["DeviceSelectSweepKernel"].precision == "int"  # nonzero's CUB select
    index = [g for g in kernel_groups(store, "frcnn-amp-nsys") if "OpaqueType<(int)2>" in g.name]
    # 2 bytes in an AMP run
    assert index and all(g.precision == "fp16" and g.family == "memory" for g in index)
    first = [g for g in kernel_groups(store, "r50-fp16-nsys") if "image_first_layer" in g.name]
    assert first and all(
        (g.precision, g.family, g.tc_time_ns > 0) == ("fp16", "conv", True) for g in first
    )


def test_the_run_decides_a_two_byte_copy_in_a_bf16_run():
    """A 2-byte opaque copy takes the run's 2-byte float type: bf16 in a bf16 run."""
    from profkit.classify import RUN_HALF, name_else

    assert (
        name_else(
            "void at::native::index_elementwise_kernel<(int)128, (int)4, at::native::OpaqueType<(int)2>>"
        )[0]
        == RUN_HALF
    )


# ---------------------------------------------------------------- 1. timeline findings on the bare iteration
@pytest.mark.parametrize("name", [r for r in FINDINGS_RUNS if "ncufull" not in r])
def test_launch_bound_only_where_the_bare_iterations_gpu_is_mostly_idle(store, name):
    """Launch-bound fires where the GPU's busy share of the bare iteration (no profiler, no
    ranges: the warm-up steps the harness timed) is below the rule's threshold, whatever share
    the profiled, stretched iterations had."""
    run = store.get_run(name)
    harness = run.info.harness or {}
    ranges = [r for r in store.ranges(run.id) if r["depth"] == 0 and r["wall_ns"]]
    busy = sum(r["gpu_time_ns"] for r in ranges) / len(ranges)
    bare = min(harness["bare_iteration_ns"])
    rule = finding_rules()["launch_bound"]
    expected = 100 * busy / min(
        bare, sum(r["wall_ns"] for r in ranges) / len(ranges)
    ) < rule.number("max_busy_pct")
    assert ("launch_bound" in found(store, name)) == expected
    if expected:
        assert "of the bare iteration's wall time" in found(store, name)["launch_bound"].detail


@pytest.mark.parametrize("tool", TOOLS)
def test_launch_bound_is_quiet_where_the_bare_gpu_is_busy_though_the_profiled_one_idled(
    store, tool
):
    """ResNet-50 fp16 at batch 64: the GPU is busy 92-93% of the bare iteration; under the
    default plan's timing harness the profiled iterations ran 3.8x longer (24% busy), which the
    finding read before: quiet now, under every tool. Batch 8 (19% busy bare): launch-bound."""
    run = store.get_run(f"r50b64-fp16-{tool}")
    ranges = [r for r in store.ranges(run.id) if r["depth"] == 0 and r["wall_ns"]]
    profiled_busy = sum(r["gpu_time_ns"] for r in ranges) / sum(r["wall_ns"] for r in ranges)
    if tool == "ncu":
        assert profiled_busy < 0.5  # what the finding judged before issue 36
    assert "launch_bound" not in found(store, f"r50b64-fp16-{tool}")
    assert "launch_bound" in found(store, f"r50-fp16-{tool}")


def test_the_stretch_is_said_under_every_tool(store):
    """The profiled iterations ran 1.5x (nsys) to 7x (the default plan's timing harness with
    operator ranges) the bare one: every timeline finding says so, the default tool's too."""
    for name in (
        "r50-fp16-ncu",
        "r50-fp16-nsys",
        "r50-fp16-torch",
        "frcnn-amp-ncu",
        "frcnn-amp-nsys",
    ):
        s = stretch(store.get_run(name))
        assert s is not None and s.ratio > 1.25
        for f in found(store, name).values():
            if f.id in ("launch_bound", "host_syncs"):
                assert f"ran {s.ratio:.1f}x the bare one" in f.detail, (name, f.id)


def test_the_default_tool_shows_a_detection_models_host_syncs(store):
    """torchvision's detection post-processing syncs tens of times a step; the default plan's
    CUPTI timer records the waits with the operator behind each, as nsys and torch.profiler do."""
    for tool in TOOLS:
        f = found(store, f"frcnn-amp-{tool}")["host_syncs"]
        assert "36 per iteration" in f.detail, (tool, f.detail)
    where = {w.where for w in found(store, "frcnn-amp-ncu")["host_syncs"].where}
    assert any(w and w.startswith("roi_heads") for w in where)


def test_host_syncs_fire_on_the_problem_and_stay_quiet_on_the_fix_under_the_default_tool(store):
    sync = found(store, "sync-ncu")["host_syncs"]
    assert "aten::index" in sync.detail and "aten::_local_scalar_dense" in sync.detail
    assert "host_syncs" not in found(store, "syncfixed-ncu")


def test_a_run_without_a_timeline_says_its_timeline_findings_are_not_judged(store):
    for name in ("r50-fp16-ncufull", "lstm-fp16-ncufull"):
        run = store.get_run(name)
        assert "timeline" in caveats(store, run)
        assert not {"launch_bound", "host_syncs"} & set(found(store, name))
    assert "timeline" not in caveats(store, store.get_run("r50-fp16-ncu"))


# ---------------------------------------------------------------- 2. misaligned shapes by shape and layout
@pytest.mark.parametrize(
    "name",
    [
        "r50-fp16-ncu",
        "r50-fp16-nsys",
        "r50-fp16-torch",
        "r50-fp16-ncufull",
        "r50b1-fp16-ncu",
        "r50b1-fp16-nsys",
    ],
)
def test_nchw_one_by_one_convolutions_get_the_layout_advice_not_padding(store, name):
    """ResNet-50's NCHW 1x1 convolutions run cuDNN's align2 GEMMs although every channel count is
    a multiple of 8: the advice is channels-last (those kernels are gone with it), under every tool."""
    f = found(store, name)["misaligned_shapes"]
    rule = finding_rules()["misaligned_shapes"]
    assert f.advice.startswith(rule.text("layout_advice"))
    assert "not a multiple" not in f.detail
    assert "NCHW" in f.detail


@pytest.mark.parametrize("tool", TOOLS)
def test_channels_last_is_quiet(store, tool):
    assert "misaligned_shapes" not in found(store, f"r50cl-fp16-{tool}")


def test_an_rnn_with_a_hidden_size_not_a_multiple_of_8_is_flagged_under_the_default_tool(store):
    """The LSTM's own GEMMs (hidden size 1020): judged by cuDNN RNN's sizes in the operator's shapes."""
    f = found(store, "lstm-fp16-ncu")["misaligned_shapes"]
    assert "1020" in f.detail and f.share_pct > 50
    assert any(w.where and "aten::_cudnn_rnn" in w.where for w in f.where)
    assert f.advice == finding_rules()["misaligned_shapes"].advice  # padding, not the layout


@pytest.mark.parametrize("name", ["lstm1024-fp16-ncu", "lstm1024-fp16-nsys"])
def test_the_aligned_rnn_is_quiet(store, name):
    """Hidden size 1024: quiet, though the decoder's 700 rows (35 tokens x 20) are no multiple of 8:
    a row count alone counts only where the kernel's name says it loaded unaligned."""
    assert "misaligned_shapes" not in found(store, name)


@pytest.mark.parametrize("tool", ["ncu", "torch"])
def test_attention_computed_by_hand_is_flagged_and_sdpa_is_quiet(store, tool):
    """HF BERT with its "eager" attention (matmul, softmax, dropout, matmul in each layer's
    self-attention module, forward and backward): flagged under the default tool, with those
    modules as where it ran, and under torch.profiler by its operators alone (no modules
    recorded); the same model on SDPA's fused kernels: quiet."""
    f = found(store, f"bertattn-amp-{tool}")["unfused_attention"]
    assert 2 < f.share_pct < 3.5 and {k.family for k in f.kernels} >= {"gemm"}
    places = {w.where for w in f.where}
    if tool == "ncu":
        assert places == {f"bert.encoder.layer.{i}.attention.self" for i in (0, 1)}, places
    else:
        assert places == {"aten::bmm", "aten::_softmax", "aten::_softmax_backward_data"}, places
    assert "24 batched matrix product kernels" in f.detail
    assert "unfused_attention" not in found(store, f"bert-amp-{tool}")


def test_attention_by_hand_needs_the_operators_that_launched_it(store):
    """nsys without --attribution records no operators: nothing says which products surround a
    softmax, so the finding is not raised (a lead by kernel names alone could not tell attention's
    batched products from a linear layer's)."""
    assert "unfused_attention" not in found(store, "bertattn-amp-nsys")


def test_no_other_capture_is_said_to_compute_attention_by_hand(store):
    flagged = [n for n in FINDINGS_RUNS if "unfused_attention" in found(store, n)]
    assert flagged == ["bertattn-amp-ncu", "bertattn-amp-torch"], flagged


# ---------------------------------------------------------------- 3. one answer whatever the tool
@pytest.mark.parametrize("model", MODELS)
def test_the_same_findings_under_every_tool(store, model):
    sets = {tool: set(found(store, f"{model}-{tool}")) for tool in TOOLS}
    assert sets["ncu"] == sets["nsys"] == sets["torch"], sets


@pytest.mark.parametrize("name", ["r50-fp16-ncufull", "lstm-fp16-ncufull"])
def test_metrics_full_runs_keep_their_attribution(store, name):
    """ncu's CSV of a --metrics full run holds profkit's operator ranges (names with colons, the
    message not repeated): every kernel has its operator and module, as the default plan's do."""
    groups = kernel_groups(store, name)
    total = sum(g.time_ns for g in groups)
    assert sum(g.time_ns for g in groups if g.op) >= 0.99 * total


def test_metrics_full_gives_the_default_plans_findings_less_the_timeline(store):
    for model in ("r50-fp16", "lstm-fp16"):
        full = set(found(store, f"{model}-ncufull"))
        default = set(found(store, f"{model}-ncu")) - {
            "launch_bound",
            "host_syncs",
            "exposed_communication",
        }
        assert full == default, (model, full, default)


def test_the_bare_iterations_are_kept_with_the_run(store):
    for name in FINDINGS_RUNS:
        # ncu's two processes (counting fell back to ncu): the run keeps the timing process's figures.
        timed = FINDINGS / name / "harness-times.json"
        harness = json.loads(
            (timed if timed.exists() else FINDINGS / name / "harness.json").read_text()
        )
        job = json.loads((FINDINGS / name / "job.json").read_text())
        assert (
            len(harness["bare_iteration_ns"]) == job["warmup"] - 1
            and min(harness["bare_iteration_ns"]) > 0
        )
        assert (store.get_run(name).info.harness or {}).get("bare_iteration_ns") == harness[
            "bare_iteration_ns"
        ]


def test_the_default_plans_timer_recorded_the_host_waits():
    times = json.loads(
        gzip.decompress((FINDINGS / "frcnn-amp-ncu" / "kernel_times.json.gz").read_bytes())
    )
    assert {s["name"] for s in times["syncs"]} <= {"cudaStreamSynchronize", "cudaDeviceSynchronize"}
    assert len(times["syncs"]) >= 72


# ---------------------------------------------------------------- 6. compare's fusion accounting
def test_fusion_says_it_cannot_trace_a_run_without_operators(tmp_path):
    """BERT eager under nsys (no attribution: no launching operators) against compile: the total
    of A's kernels without counterpart stands, and the line says they are not traced, rather than
    "0 ns fused"; the same pair under torch.profiler traces most of it."""
    import profkit
    from profkit import render

    db = profkit.open_db(tmp_path / "b.db")
    for name in (
        "bert-amp-nsys",
        "bert-amp-compile-nsys",
        "bert-amp-torch",
        "bert-amp-compile-torch",
    ):
        import_where(db.store, name, FINDINGS)
    nsys = db.diff("bert-amp-nsys", "bert-amp-compile-nsys")
    assert nsys.totals.replaced_by_fusion and not nsys.totals.fusion_traced
    assert "not traced to B's kernels" in render.fusion_lines(nsys)[2]
    torch = db.diff("bert-amp-torch", "bert-amp-compile-torch")
    gone = torch.totals.replaced_by_fusion
    assert torch.totals.fusion_traced and sum(x.fused_time_a_ns for x in gone) > 0.5 * sum(
        x.time_a_ns for x in gone
    )


def test_a_programs_warm_up_steps_are_its_bare_steps(tmp_path):
    """profkit.program's window on a GPU: each warm-up step after the first is timed from the
    last one's end to its own, both to a device sync (here a stand-in for torch's CUDA calls,
    counting the syncs); the window's info keeps them as ``bare_iteration_ns``."""
    import types

    from profkit.options import Spec
    from profkit.process.job import HarnessJob
    from profkit.program import Window

    syncs: list[int] = []
    cuda = types.SimpleNamespace(
        is_available=lambda: True, is_initialized=lambda: True, synchronize=lambda: syncs.append(1)
    )
    job = HarnessJob(
        spec=Spec(device="cuda"),
        workload_path="w.py",
        warmup=3,
        iters=2,
        tag="t",
        info_path=str(tmp_path / "i.json"),
    )
    window = Window(job, types.SimpleNamespace(cuda=cuda), {})
    for n in (1, 2):  # the window itself opens at step 3 (the last warm-up step)
        window.on_step(n)
    assert len(syncs) == 2 and len(window.bare_ns) == 1 and window.bare_ns[0] > 0


def test_a_linear_layers_misaligned_width_is_flagged_by_shape_alone(store, monkeypatch):
    """With shapes known, the vocabulary (30522) is a cause by itself, whatever the kernel's name
    says: with no name ever counting as unaligned, BERT's decoder is still flagged under the
    default tool. The backward product's first matrix [30522,1024] does not make 30522 a row count."""
    from profkit.analyze import findings as f

    rules = dict(f.finding_rules())
    rule = rules["misaligned_shapes"]
    rules["misaligned_shapes"] = f.FindingRule(
        rule.id, rule.title, rule.advice, {**rule.settings, "pattern": "(?!)"}
    )
    monkeypatch.setattr(f, "finding_rules", lambda: rules)
    found_ = {x.id: x for x in f.findings(store, store.get_run("bert-amp-ncu"))}
    assert "30522" in found_["misaligned_shapes"].detail


def test_a_linear_layers_lead_in_an_nchw_run_gets_the_padding_advice(store):
    """Detection's box predictor (91 classes, 364 box outputs: align1/align2 GEMMs) under
    torch.profiler, whose operator is known (aten::addmm) but not its shapes: a lead with the
    padding advice, not the channels-last one the NCHW backbone's leads get."""
    from profkit.analyze import findings as f

    ctx = f._Context(
        store.get_run("frcnn-amp-torch"),
        kernel_groups(store, "frcnn-amp-torch"),
        sum(g.time_ns for g in kernel_groups(store, "frcnn-amp-torch")),
        store,
    )
    rule = f.finding_rules()["misaligned_shapes"]
    low = f.FindingRule(rule.id, rule.title, rule.advice, {**rule.settings, "min_share_pct": 0.0})
    found_ = f._misaligned(ctx, low)
    assert found_ is not None and not found_.advice.startswith(rule.text("layout_advice"))
