"""profkit.analyze.findings on real captures: each finding (rules.toml [[finding]]) is raised
by a capture that shows it and not by one that does not."""

from __future__ import annotations

from dataclasses import replace

import pytest

import profkit
from profkit.analyze.findings import CHECKS, finding_rules
from profkit.names import short_name

from .conftest import DATA, NCU_DATA, cli


@pytest.fixture(scope="module")
def found(tmp_path_factory, diff_dir, nsys_dir, report_dir):
    db = profkit.open_db(tmp_path_factory.mktemp("f") / "f.db")
    files = {
        "fp16": NCU_DATA / "resnet18_fp16_eager.raw.csv.gz",
        "fp32": NCU_DATA / "resnet18_fp32_eager.raw.csv.gz",
        "vgg_fp16": NCU_DATA / "vgg16_fp16_eager.raw.csv.gz",
        "eager": diff_dir / "r18_fp16_eager_torch.json.gz",
        "compile": diff_dir / "r18_fp16_compile_torch.json.gz",
        "graphs": diff_dir / "r18_fp16_graphs_nsys.sqlite",
        "train": nsys_dir / "nsys_resnet18_train_amp.sqlite",
        "infer": nsys_dir / "nsys_resnet18_fp16.sqlite",
        "cpu": DATA / "torch" / "cpu_resnet18_fp32.json.gz",
        "mnv2": report_dir / "mnv2_fp16_ncu.raw.csv.gz",
        "effb0": report_dir / "effb0_fp16_ncu.raw.csv.gz",
        "r50_b64": report_dir / "r50_fp16_b64_nsys.sqlite",
    }
    runs = {k: db.import_file(f, name=k) for k, f in files.items()}
    return {k: {f.id: f for f in r.findings()} for k, r in runs.items()}, db


def test_every_rule_has_a_check():
    assert set(finding_rules()) == set(CHECKS)


@pytest.mark.parametrize(
    "finding, triggers, quiet",
    [
        # the first convolution over 3 channels in fp16 ran implicit_convolve_sgemm, no tensor cores;
        # an fp32 run is no half-precision run, and the compiled run's convolutions all used them
        ("half_missed_tensor_cores", ["fp16", "eager"], ["fp32", "compile"]),
        # fp32 copy kernels (the input cast) in fp16 ResNet-18; VGG16 fp16 has none worth 5 %; in the AMP
        # training step autocast's and the optimizer's fp32 kernels are meant to be (issue 23)
        ("fp32_in_half_run", ["fp16", "eager"], ["vgg_fp16", "fp32", "train"]),
        # (issue 23, more in test_findings_23.py) the AMP step has no fp32 GEMM or convolution; ResNet-18
        # fp32's convolutions ran TF32; the AMP step syncs once a step (GradScaler), inference never in one
        ("fp32_matrix_outside_autocast", [], ["train", "fp16", "fp32"]),
        ("tf32_left_off", [], ["fp32", "fp16", "train"]),
        ("host_syncs", ["train"], ["infer", "eager", "compile", "graphs", "fp16"]),
        # MobileNetV2 and EfficientNet-B0 fp16: cuDNN's conv2d_c1_k1 and PyTorch's depthwise kernels;
        # ResNets and VGG16 have no depthwise convolutions
        ("depthwise_convolutions", ["mnv2", "effb0"], ["fp16", "vgg_fp16", "r50_b64", "eager"]),
        ("layout_conversions", ["fp16", "fp32", "vgg_fp16", "eager"], ["compile", "graphs"]),
        ("fusable_kernels", ["fp16", "eager", "train"], ["compile", "graphs"]),
        # batch 2: the GPU idles most of each range, even replaying CUDA graphs; ncu records no timeline;
        # ResNet-50 at batch 64 keeps the GPU busy
        ("launch_bound", ["eager", "infer", "compile", "graphs"], ["fp16", "vgg_fp16", "r50_b64"]),
        ("autograd_thread", ["train"], ["infer", "eager"]),
    ],
)
def test_finding_triggers_on_real_captures(found, finding, triggers, quiet):
    by_run, _ = found
    for run in triggers:
        assert finding in by_run[run], (finding, run)
    for run in quiet:
        assert finding not in by_run[run], (finding, run)


def test_evidence_and_kernels(found):
    by_run, _ = found
    f = by_run["fp16"]["half_missed_tensor_cores"]
    assert [k.name.split("<")[0] for k in f.kernels] == ["void implicit_convolve_sgemm"]
    assert f.kernels[0].launches == 1 and f.share_pct == pytest.approx(4.25)
    lay = by_run["fp16"]["layout_conversions"]
    assert lay.share_pct > 30 and all("Nhwc" in k.name or "Nchw" in k.name for k in lay.kernels)
    assert "channels_last" in lay.advice
    assert "476 kernels were launched by other threads" in by_run["train"]["autograd_thread"].detail
    assert by_run["cpu"] == {}  # CPU operators: none of these GPU findings
    dw = by_run["mnv2"]["depthwise_convolutions"]
    # MobileNetV2 has 17 depthwise convolutions: 14 ran cuDNN's kernel, 3 PyTorch's
    assert sorted((short_name(k.name), k.launches) for k in dw.kernels) == [
        ("conv2d_c1_k1_nchw_shmem_tiling", 14),
        ("conv_depthwise2d_forward_kernel", 3),
    ]
    assert (
        dw.share_pct == pytest.approx(11.1, abs=0.05)
        and "20.4% of its GPU time on tensor cores" in dw.detail
    )
    # the depthwise kernels are that finding's, not half_missed_tensor_cores'
    assert not any(
        "depthwise" in k.name or "c1_k1" in k.name
        for k in by_run["mnv2"]["half_missed_tensor_cores"].kernels
    )


def test_summary_table_shows_findings(found):
    _, db = found
    text = " ".join(cli("summary", "fp16", db=db.path).stdout.split())
    assert (
        "findings" in text
        and "time in NCHW <-> NHWC layout conversions" in text
        and "channels_last" in text
    )


def test_a_run_with_neither_modules_nor_shapes_but_fused_attention_is_not_judged(tmp_path):
    """attention_zoo (each SDPA backend forced in turn, math's included; no modules or shapes
    recorded): its math path's products and softmax cannot be told from a router's and its
    experts' beside fused attention, so the run is not judged; a BERT encoder on SDPA's fused
    kernels is quiet too."""
    db = profkit.open_db(tmp_path / "a.db")
    for name, capture in (
        ("zoo", "attention_zoo_fp16.torch.json.gz"),
        ("bert", "bert_encoder_fp16.torch.json.gz"),
    ):
        run = db.import_file(DATA / "attention" / capture, name=name)
        assert "unfused_attention" not in {x.id for x in run.findings()}, name


def test_a_softmax_over_two_dimensions_is_no_attention():
    """A mixture of experts' router (a softmax over (tokens, experts)) beside batched expert
    products in one module is not attention; the same products around a softmax over
    (batch, heads, queries, keys) are; with no shapes recorded, the products decide."""
    from profkit.analyze.findings import _Context, _unfused_attention
    from profkit.rows import KernelGroup, ShapeGroup

    def group(module, op, shapes, time_ns=1000, launches=1):
        name = "softmax_warp_forward" if "softmax" in op else "nvjet_hsh_gemm"
        return ShapeGroup(
            name, name, op, shapes, None, module, "fp16", "gemm", True, launches, time_ns
        )

    def found(groups, kernels=()):
        store = type("S", (), {"shape_groups": lambda self, run_id, ops, by="family": groups})()
        run = type("R", (), {"id": 1})()
        ctx = _Context(run, list(kernels), 10_000, store)  # type: ignore[arg-type]
        return _unfused_attention(ctx, finding_rules()["unfused_attention"])

    router = [
        group("moe", "aten::_softmax", "[512,8]"),
        group("moe", "aten::bmm", "[8,64,256];[8,256,512]", launches=2),
    ]
    assert found(router) is None
    attention = [
        group("attn", "aten::_softmax", "[8,4,128,128]"),
        group("attn", "aten::bmm", "[32,128,64];[32,64,128]", launches=2),
    ]
    assert found(attention) is not None
    # Scores of no product's output in the module (a softmax over something else): not attention.
    assert found([replace(attention[0], shapes="[8,4,128,77]"), attention[1]]) is None
    # No shapes: the products decide, unless fused attention ran too and no module is known.
    assert found([replace(g, shapes=None) for g in router]) is not None
    bare = [replace(g, shapes=None, module=None) for g in router]
    assert found(bare) is not None
    fused = [KernelGroup("kernel", "flash_fwd", None, None, "attention", 1, 10, 10, "fp16")]
    assert found(bare, fused) is None
    # SDPA's math path under attribution: _safe_softmax launches five kernels, one a softmax.
    math = [
        replace(attention[0], op="aten::_safe_softmax", name=n)
        for n in ("softmax_warp_forward", "isneginf", "reduce_kernel", "fill", "where")
    ]
    f = found([*math, attention[1]])
    assert f is not None and "1 softmax and 2 batched matrix product kernels" in f.detail
