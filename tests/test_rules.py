"""Each classification rule, over real kernel names from the captures in tests/data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profkit.classify import by_name, classify_one, metric_set, rules
from profkit.errors import UsageError
from profkit.parse import load

from .conftest import DATA, NCU_DATA

RULES = rules().name_rules
WORK_RULES = rules().work_rules
DIFF_DATA = DATA / "diff"


@pytest.fixture(scope="module")
def real_names() -> set[str]:
    names: set[str] = set()
    # The kernel names ncu reported in `profkit compare` runs on the H100 (benchmarks/compare).
    for f in (Path(__file__).parents[1] / "benchmarks" / "compare").glob("*.json"):
        data = json.loads(f.read_text())
        if isinstance(data, dict):
            names |= {v for r in data.get("rows", []) for v in r["variants_a"] + r["variants_b"]}
    for f in [
        *NCU_DATA.glob("*.raw.csv.gz"),
        *DIFF_DATA.glob("*.csv.gz"),
        *(DATA / "report").glob("*.raw.csv.gz"),
        *DIFF_DATA.glob("*.json.gz"),
        DATA / "torch" / "kineto_resnet18_fp16.json.gz",
        DATA / "torch" / "torch_run_resnet18_train_amp.json.gz",
        *(DATA / "steps").glob("*.raw.csv.gz"),
        *(DATA / "steps").glob("*.json.gz"),
        *(DATA / "attention").glob("*.raw.csv.gz"),
        *(DATA / "attention").glob("*.json.gz"),
        *(DATA / "ddp").glob("torch_*.json.gz"),
        *(DATA / "ddp").glob("nsys_*.sqlite.gz"),
        *(DATA / "where").glob("*/report.sqlite.gz"),
        *(DATA / "where").glob("*/trace.json.gz"),
        *(DATA / "where").glob("*/raw.csv.gz"),
        *(DATA / "findings").glob("*/report.sqlite.gz"),
        *(DATA / "findings").glob("*/trace.json.gz"),
    ]:
        if "kernel_times" in f.name:
            continue
        names |= {r["name"] for r in load(f).rows}
    return names


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_examples_are_real_and_classified_by_it(rule, real_names):
    assert rule.examples, f"rule {rule.id} has no example"
    for name in rule.examples:
        assert name in real_names, f"{rule.id}: example not found in any capture: {name[:80]}"
        m = rule.regex.search(name)
        assert m, f"{rule.id} does not match its example {name[:80]}"
        precision, tensor, family, p_rule, t_rule = by_name(name)
        if rule.tensor_core is not None:
            assert (tensor, t_rule) == (rule.tensor_core, rule.id)
        if rule.precision is not None:
            expected = rule.precision_for(m)
            if expected is not None:
                assert (precision, p_rule) == (expected, rule.id)
            else:  # a name whose group is absent (an NCCL broadcast has no element type): not decided here
                assert p_rule != rule.id


def test_rule_ids_unique():
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))


def test_unknown_name_says_so():
    v = classify_one("my_custom_kernel", {})
    assert (v.precision, v.tensor_core, v.evidence) == ("unknown", None, "none")


def test_counter_verdict_beats_the_name():
    """The counters decide tensor cores (none here); the precision, which the tensor-path
    counters cannot see, is the name rule's, and the evidence says so (issue 23: the evidence
    is what decided the precision)."""
    name = "void cudnn::nchwToNhwcKernel<__half, __half, float, 0, 1, 0>(cudnn::nchw2nhwc_params_t<T3>, const T1 *, T2 *)"
    v = classify_one(
        name,
        {"sm__ops_path_tensor_src_fp16.sum": 0, "sm__inst_executed_pipe_tensor_op_hmma.sum": 128},
    )
    assert (v.tensor_core, v.evidence, v.precision) == (False, "name", "fp16")
    assert (
        v.evidence_detail.startswith("tensor-path ops = 0")
        and "precision from rule" in v.evidence_detail
    )


def test_uncounted_type_falls_back_to_the_name():
    # The 'tensor' preset has no fp8 counter: an fp8 GEMM must not be called non-tensor.
    v = classify_one(
        "nvjet_sm90_qqtst_24x64_128x16_4x2_h_bz_algo2_TNN", {"sm__ops_path_tensor_src_fp16.sum": 0}
    )
    assert (v.tensor_core, v.precision, v.evidence) == (True, "fp8", "name")


def test_metric_presets():
    assert metric_set(None, "9.0")[0] == "full"
    label, ms = metric_set("tensor", "9.0")
    assert label == "tensor" and ms[0] == "gpu__time_duration.sum" and len(ms) == 5
    assert metric_set(None, "8.0") == ("time", ["gpu__time_duration.sum"])
    assert metric_set("sm__pipe_tensor_cycles_active.sum", "9.0")[1] == [
        "gpu__time_duration.sum",
        "sm__pipe_tensor_cycles_active.sum",
    ]
    with pytest.raises(UsageError):
        metric_set("nosuch", "9.0")


@pytest.fixture(scope="module")
def real_short_names(real_names) -> set[str]:
    from profkit.names import short_name

    return {short_name(n) for n in real_names} | real_names


@pytest.mark.parametrize("rule", WORK_RULES, ids=[r.id for r in WORK_RULES])
def test_work_rule_examples_are_real_and_keyed_by_it(rule, real_short_names):
    """Every work rule (what diff --match family lines up) has real names as examples, and
    the examples of one rule fall into as few works as its label's groups allow."""
    from profkit.classify import work_key

    assert rule.examples, f"work rule {rule.id} has no example"
    for name in rule.examples:
        assert name in real_short_names, f"{rule.id}: example not found in any capture: {name[:80]}"
        assert work_key(name, name)[1] == rule.id, name[:80]


def test_tile_variants_share_a_work_key():
    from profkit.classify import work_key

    a = "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn"
    b = "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn"
    assert work_key(a)[0] == work_key(b)[0] == "cuDNN xmma conv fprop"
    assert (
        work_key("triton_poi_fused_convolution_0")[0]
        == work_key("triton_poi_fused_convolution_17")[0]
    )
    # issue 24: a word's digits stay
    assert work_key("bn_fw_tr_1C11_singleread") == (
        "bn_fw_tr_1C11_singleread",
        "",
    )
    mangled = "_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_Conv2dWgradOutput"
    demangled = (
        "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_f16_s16816wgrad_optimized_f16>(T1::Params)"
    )
    assert work_key(mangled)[0] == work_key("Kernel", demangled)[0] == "CUTLASS conv wgrad"


def _counted_rows() -> list[dict]:
    """Every launch ncu counted the tensor-path ops of, across the captures in tests/data."""
    counters = rules().counters
    files = sorted({*DATA.rglob("*.raw.csv.gz"), *DATA.rglob("*.raw.csv")})
    out = []
    for f in files:
        if "mangled" in f.name:  # the same launches as its demangled twin
            continue
        out += [r for r in load(f).rows if any(m in counters for m in (r["metrics"] or {}))]
    return out


def test_every_name_rule_gives_the_counter_verdict_on_the_kernels_it_matches():
    """Across every ncu launch with tensor-path counters in tests/data (attention in fp16, bf16
    and fp32 among them): where the name rules say tensor cores or not, the counters agree,
    and where a tensor-core kernel's name gives a precision, it is the counters'."""
    rows = _counted_rows()
    assert len(rows) > 1500
    wrong = {}
    for r in rows:
        v = classify_one(r["name"], r["metrics"])
        precision, tensor, _, p_rule, t_rule = by_name(r["name"])
        if (tensor is not None and tensor != v.tensor_core) or (
            v.tensor_core and precision not in (None, v.precision)
        ):
            wrong[r["name"][:100]] = (precision, tensor, p_rule, t_rule, v.precision, v.tensor_core)
    assert not wrong


# Timeline captures beside ncu captures of the same workload and precision (tests/data/attention).
PAIRS = [
    ("attention_zoo_fp16", "fp16"),
    ("attention_zoo_bf16", "bf16"),
    ("bert_encoder_fp16", "fp16"),
    ("bert_encoder_bf16", "bf16"),
    ("gpt_decoder_fp16_compile", "fp16"),
    ("resnet18_bf16_compile", "bf16"),
]


@pytest.mark.parametrize("name, precision", PAIRS)
def test_kernels_whose_names_carry_no_type_take_the_launching_operators_and_agree_with_the_counters(
    name, precision
):
    """cuDNN's SDPA kernel (named f16 for bf16 too) and torch.compile's Triton kernels: in a
    torch.profiler run their precision comes from the launching operator's input types, and
    the verdict agrees with the counters ncu read for the same kernel in the same workload:
    tensor cores or not, and the precision where the counters saw tensor work (the run's
    precision where they did none)."""
    from profkit.classify import classify_row, inputs_rule

    folder = DATA / "attention"
    counted = {}
    for r in load(folder / f"{name}.ncu.raw.csv.gz").rows:
        counted.setdefault(r["name"], classify_one(r["name"], r["metrics"]))
    seen = 0
    for r in load(folder / f"{name}.torch.json.gz").rows:
        if r["kind"] != "kernel" or not inputs_rule(r["name"]) or r["name"] not in counted:
            continue
        v, c = classify_row("kernel", r["name"], None, r["input_types"]), counted[r["name"]]
        # issue 23: the evidence that decided
        assert v.evidence == "dtypes" and "input types" in v.evidence_detail
        assert v.tensor_core == c.tensor_core
        assert v.precision == (c.precision if c.tensor_core else precision), r["name"]
        seen += 1
    assert seen
