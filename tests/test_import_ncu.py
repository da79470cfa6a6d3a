"""The ncu importers (profkit.parse.ncu_csv, ncu_rep) on real captures from the GPU machine
(tests/data/ncu, see capture/), and the verdicts made from their counters."""

from __future__ import annotations

import re

import pytest

from profkit.classify import classify, rules
from profkit.parse import load
from profkit.parse.ncu_csv import parse_number

from .conftest import NCU_DATA, kernel_table

CAPTURES = [
    "precision_zoo",
    "resnet18_fp16_eager",
    "resnet18_fp32_eager",
    "resnet18_bf16_torchscript",
]
HMMA = "sm__inst_executed_pipe_tensor_op_hmma.sum"


def kernels_in_log(name: str) -> int:
    """ncu's own count for a capture, as capture.sh logged it from the ==PROF== lines."""
    m = re.search(rf"^## {name} rc=0 .*kernels=(\d+)", (NCU_DATA / "capture.log").read_text(), re.M)
    return int(m.group(1))


@pytest.mark.parametrize("name", CAPTURES)
def test_every_launch_counted_once(name, ncu_rep_dir):
    csv = kernel_table(NCU_DATA / f"{name}.raw.csv.gz")
    rep = kernel_table(ncu_rep_dir / f"{name}.ncu-rep")
    assert len(csv) == len(rep) == kernels_in_log(name)
    assert list(csv["launch_id"]) == list(range(len(csv)))
    # Two independent readers of the same capture agree launch by launch.
    assert list(csv["short_name"]) == list(rep["short_name"])
    assert list(csv["duration_ns"]) == list(rep["duration_ns"])
    assert list(csv["grid_x"]) == list(rep["grid_x"]) and list(csv["block_x"]) == list(
        rep["block_x"]
    )
    assert list(csv["nvtx_path"]) == list(rep["nvtx_path"])


def test_units_row_and_thousands_separators():
    base = load(NCU_DATA / "resnet18_fp16_eager.raw.csv.gz")
    auto = load(NCU_DATA / "resnet18_fp16_eager.raw-autounits.csv.gz")
    base_k, auto_k = kernel_table(None, base), kernel_table(None, auto)
    raw = (NCU_DATA / "precision_zoo.raw-autounits.csv").read_text().splitlines()
    assert raw[1].split('","')[0] == '"' and '"us"' in raw[1]  # a units row, durations in us
    assert re.search(r'"\d{1,3}(,\d{3})+"', raw[2])  # numbers with thousands separators
    # base units give ns; auto units give us with decimals: both must land on the same ns.
    assert list(base_k["duration_ns"]) == list(auto_k["duration_ns"])
    assert base.metric_units["gpu__time_duration.sum"] == "ns"
    assert base_k["duration_ns"].max() > 10_000
    zoo = kernel_table(NCU_DATA / "precision_zoo.raw.csv.gz")
    assert zoo.loc[0, "metrics"]["sm__ops_path_tensor_src_fp64.sum"] == 33_554_432  # "33,554,432"


def test_parse_number():
    assert parse_number("110,240") == 110240
    assert parse_number("36.768000") == pytest.approx(36.768)
    assert parse_number("") is None and parse_number("n/a") is None


def test_run_facts_from_the_file():
    cap = load(NCU_DATA / "resnet18_fp16_eager.raw.csv.gz")
    assert cap.gpu_name == "NVIDIA H100 80GB HBM3" and cap.compute_capability == "9.0"
    k = kernel_table(None, cap)
    assert cap.range_paths == ["profkit@resnet18.fp16.eager.iter0"]
    assert set(k["nvtx_range"]) == {"resnet18.fp16.eager.iter0"}
    assert set(k["nvtx_path"]) == {"profkit@resnet18.fp16.eager.iter0"}
    # Device attributes describe the GPU, not the kernel: not copied onto every launch.
    assert not any(m.startswith("device__attribute") for m in k.loc[0, "metrics"])


def type_counters(metrics: dict) -> set[str]:
    counters = rules().counters
    return {counters[m] for m, v in metrics.items() if m in counters and v}


@pytest.mark.parametrize("name", CAPTURES)
def test_verdicts_match_the_counters(name):
    """The counters decide tensor cores for every launch, and the precision of tensor work;
    where they saw none, a name rule gave the precision and the evidence says so (issue 23:
    these captures have no CUDA-core arithmetic counters)."""
    k = classify(kernel_table(NCU_DATA / f"{name}.raw.csv.gz"))
    for _, row in k.iterrows():
        used = type_counters(row["metrics"])
        assert bool(row["tensor_core"]) == bool(used), row["name"]
        assert row["evidence_detail"].startswith("tensor-path ops"), row["name"]
        if used:
            assert row["evidence"] == "metrics"
            assert row["precision"] == (used.pop() if len(used) == 1 else "mixed"), row["name"]
        else:
            assert row["evidence"] == (
                "name" if "precision from rule" in row["evidence_detail"] else "metrics"
            )


@pytest.mark.parametrize("name", CAPTURES)
def test_name_rules_agree_with_the_counters(name):
    """Stripped of its counters, every launch gets the same verdict from its name alone."""
    with_counters = classify(kernel_table(NCU_DATA / f"{name}.raw.csv.gz"))
    names_only = with_counters.drop(columns=["precision", "tensor_core", "evidence"]).assign(
        metrics=[{}] * len(with_counters)
    )
    names_only = classify(names_only)
    assert (names_only["evidence"] == "name").all()
    assert list(names_only["tensor_core"]) == list(with_counters["tensor_core"])
    assert list(names_only["precision"]) == list(with_counters["precision"])


def test_elementwise_and_layout_kernels_are_not_tensor_core():
    seen_trap = 0
    for name in CAPTURES:
        k = classify(kernel_table(NCU_DATA / f"{name}.raw.csv.gz"))
        memory_bound = k[k["family"].isin(["elementwise", "layout", "pooling", "norm", "reduce"])]
        assert len(memory_bound) and not memory_bound["tensor_core"].any()
        # The trap: Hopper's hmma instruction counter is non-zero for many of them.
        seen_trap += int(sum(m.get(HMMA, 0) > 0 for m in memory_bound["metrics"]))
    assert seen_trap > 0


def test_precision_zoo_covers_every_precision():
    k = classify(kernel_table(NCU_DATA / "precision_zoo.raw.csv.gz"))
    tc = k[k["tensor_core"].fillna(False)]
    assert set(tc["precision"]) == {"fp64", "tf32", "fp16", "bf16", "fp8", "int8"}
    ffma = k[k["name"].str.contains("_ffma_")]
    assert len(ffma) and not ffma["tensor_core"].any() and set(ffma["precision"]) == {"fp32"}


def test_tensor_op_counters_against_2mnk():
    """What the tensor-path op counters count, on products of known size (precision_zoo, batch 8:
    256 x 256 x 256 matrices; conv 8x64x56x56, 64 -> 64 channels, 3x3): 2*M*N*K, multiplies and
    adds, for the fp64, TF32 (HMMA) and int8 GEMMs and both convolutions; cuBLAS's nvjet
    kernels (fp16, bf16, fp8) count 9/8 of it: they compute padded tiles."""
    gemm = 2 * 256**3
    conv = 2 * 8 * 56 * 56 * 64 * 64 * 9
    seen = {}
    for r in load(NCU_DATA / "precision_zoo.raw.csv.gz").rows:
        ops = {k: v for k, v in r["metrics"].items() if k.startswith("sm__ops_path_tensor") and v}
        if ops:
            ((counter, value),) = ops.items()
            seen[(r["short_name"][:12], counter.split("src_")[-1].removesuffix(".sum"))] = value
    assert seen[("sm90_xmma_ge", "fp64")] == gemm
    assert seen[("Kernel2", "tf32_dst_fp32")] == gemm  # the TF32 GEMM (CUTLASS)
    assert seen[("Kernel2", "int8")] == gemm
    assert (
        seen[("nvjet_sm90_h", "fp16")] == seen[("nvjet_sm90_t", "bf16_dst_fp32")] == gemm * 9 // 8
    )
    assert seen[("nvjet_sm90_q", "fp8")] == gemm * 9 // 8
    assert seen[("sm80_xmma_fp", "tf32_dst_fp32")] == seen[("sm80_xmma_fp", "fp16")] == conv
