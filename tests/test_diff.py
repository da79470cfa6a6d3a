"""profkit.analyze.diff on real captures from the H100 (tests/data/diff, made by
capture/capture_diff.sh with profkit itself; tests/data/ncu and nsys): eager against
TorchScript, cuDNN heuristics against its autotuner (other tile variants), fp32 against fp16,
a run against itself, ncu against nsys, eager against torch.compile (Triton fusions,
launching operators), CUDA graphs traced per node; the JSON contract and the command."""

from __future__ import annotations

import json

import pytest

import profkit

from .conftest import DATA, NCU_DATA, cli, cli_json, needs_torch, one_line_error

ROW_KEYS = {"name", "status", "calls_a", "calls_b", "time_a_ns", "time_b_ns", "variants_a", "variants_b"}
TOTAL_KEYS = {"kernels_a", "kernels_b", "gpu_time_a_ns", "gpu_time_b_ns", "tensor_core_time_pct_a",
              "tensor_core_time_pct_b"}


@pytest.fixture
def runs(tmp_path, diff_dir, nsys_dir):
    """Every capture imported once into a fresh database, by short names."""
    db = profkit.open_db(tmp_path / "d.db")
    files = {
        "eager": diff_dir / "r18_fp16_eager_ncu.raw.csv.gz", "ts": diff_dir / "r18_fp16_torchscript_ncu.raw.csv.gz",
        "heur": diff_dir / "r18_fp16_heuristic_nsys.sqlite", "tuned": diff_dir / "r18_fp16_autotuned_nsys.sqlite",
        "t_eager": diff_dir / "r18_fp16_eager_torch.json.gz", "t_compile": diff_dir / "r18_fp16_compile_torch.json.gz",
        "graphs": diff_dir / "r18_fp16_graphs_nsys.sqlite",
        "fp32": NCU_DATA / "resnet18_fp32_eager.raw.csv.gz", "fp16": NCU_DATA / "resnet18_fp16_eager.raw.csv.gz",
        "nsys3": nsys_dir / "nsys_resnet18_fp16.sqlite",
    }
    return db, {k: db.import_file(f, name=k) for k, f in files.items()}


def by_name(d):
    return {r.name: r for r in d.rows}


def test_eager_against_torchscript(runs):
    """TorchScript (torch.jit.trace) launched the very same kernels as eager."""
    _, r = runs
    d = r["eager"].diff(r["ts"])
    assert (d.totals.kernels_a, d.totals.kernels_b) == (162, 162)
    assert d.totals.status.added == d.totals.status.removed == 0
    assert all(x.calls_a == x.calls_b for x in d.rows) and d.totals.notes == []
    assert abs(d.totals.gpu_time_b_ns - d.totals.gpu_time_a_ns) < 0.05 * d.totals.gpu_time_a_ns


def test_autotuned_tile_variants(runs):
    """cuDNN's autotuner picked other variants of the same convolutions: exact names differ
    (added/removed), family matching lines them up and keeps each side's variants."""
    _, r = runs
    exact = r["heur"].diff(r["tuned"], match="exact")
    assert exact.totals.kernels_a == exact.totals.kernels_b == 162
    added = {x.name for x in exact.rows if x.status == "added"}
    removed = {x.name for x in exact.rows if x.status == "removed"}
    assert any("implicit_convolve_sgemm<__half, __half, (int)128" in n for n in added)
    assert any("implicit_convolve_sgemm<__half, __half, (int)1024" in n for n in removed)
    family = r["heur"].diff(r["tuned"], match="family")
    assert family.totals.status.added == family.totals.status.removed == 0
    sgemm = by_name(family)["cuDNN implicit_convolve_sgemm conv"]
    assert sgemm.calls_a == sgemm.calls_b == 1 and sgemm.variants_a != sgemm.variants_b
    fprop = by_name(family)["cuDNN xmma conv fprop"]
    assert len(fprop.variants_b) > len(fprop.variants_a) and fprop.status == "changed"
    conv_a = sum(x.calls_a for x in family.rows if "conv" in x.name)
    conv_b = sum(x.calls_b for x in family.rows if "conv" in x.name)
    assert conv_a == conv_b == 20  # the same 20 convolutions, other kernels


def test_fp32_against_fp16(runs):
    _, r = runs
    d = r["fp32"].diff(r["fp16"], match="family")
    t = d.totals
    assert t.tensor_core_time_pct_a == pytest.approx(39.31) and t.tensor_core_time_pct_b == pytest.approx(23.09)
    assert set(t.time_by_precision_a_ns) == {"fp32", "tf32"} and set(t.time_by_precision_b_ns) == {"fp16", "fp32"}
    fprop = by_name(d)["cuDNN xmma conv fprop"]
    assert "tf32" in fprop.precision_a and fprop.precision_b == "fp16"
    exact = r["fp32"].diff(r["fp16"], match="exact")
    assert exact.totals.status.same == 0  # every kernel is another template instance
    # fp32's classifier GEMM ran on CUDA cores (a gemv); fp16's on tensor cores (nvjet). The
    # convolutions were on the tensor cores in both (TF32, fp16): no move.
    (onto,) = t.onto_tensor_cores
    assert onto.name == "gemm" and onto.tensor_core_pct_a == 0 and onto.tensor_core_pct_b == 100
    assert onto.works_a == ["cuBLAS gemmSN"] and onto.works_b == ["cuBLAS nvjet GEMM"]
    assert onto.precision_a == "fp32" and onto.precision_b == "fp16"
    assert t.off_tensor_cores == []


@pytest.mark.parametrize("match", ["exact", "family"])
def test_a_run_against_itself(runs, match):
    _, r = runs
    for key in ("fp16", "heur", "t_compile"):
        d = r[key].diff(r[key], match=match)
        assert {x.status for x in d.rows} == {"same"} and all(x.delta_time_ns == 0 for x in d.rows)
        assert d.totals.onto_tensor_cores == d.totals.off_tensor_cores == [] and d.totals.notes == []


def test_ncu_against_nsys(runs):
    """ncu (1 iteration, ncu's CSV names, counters) against nsys (3 iterations, CUPTI names,
    no counters): per iteration, matched on short names, with what cannot be compared said."""
    _, r = runs
    d = r["fp16"].diff(r["nsys3"], match="exact")
    t = d.totals
    assert t.per_iteration and (t.iterations_a, t.iterations_b) == (1, 3)
    assert t.kernels_a == t.kernels_b == 162
    assert any("short names" in n for n in t.notes) and any("clocks locked" in n for n in t.notes)
    assert t.status.added == t.status.removed == 0
    assert all(x.calls_a == x.calls_b for x in d.rows)


def test_eager_against_compile_fusions(runs):
    """torch.compile: Triton kernels appear where elementwise, layout and norm kernels were."""
    _, r = runs
    d = r["t_eager"].diff(r["t_compile"], match="family")
    t = d.totals
    assert (t.kernels_a, t.kernels_b) == (162, 57)
    assert t.fused_kernels and all(x.name.startswith("Triton ") for x in t.fused_kernels)
    replaced = {x.name for x in t.replaced_by_fusion}
    assert {"cuDNN layout nchwToNhwc", "vectorized_elementwise_kernel", "batch_norm_transform_input_kernel"} <= replaced
    triton = [x for x in d.rows if x.name.startswith("Triton ")]
    assert triton and all(x.status == "added" and x.tensor_core_pct_b == 0 for x in triton)
    assert all(v.startswith("triton_") for x in triton for v in x.variants_b)


def test_match_by_launching_operator(runs):
    """torch.profiler runs know each kernel's operator: the convolutions' row shows what
    compile did to them (its layout kernels gone, all its time on tensor cores)."""
    _, r = runs
    d = r["t_eager"].diff(r["t_compile"], match="op")
    conv = by_name(d)["aten::cudnn_convolution"]
    assert conv.calls_a == 74 and conv.calls_b == 20 and conv.tensor_core_pct_b == 100.0
    assert by_name(d)["aten::native_batch_norm"].status == "removed"
    with pytest.raises(profkit.UsageError, match="recorded no launching operators"):
        r["fp16"].diff(r["t_eager"], match="op")


def test_cuda_graph_kernels_are_traced_one_by_one(runs):
    """reduce-overhead replays CUDA graphs; nsys traced each node, so the run's kernels are the
    compiled model's, not one opaque graph launch."""
    db, r = runs
    g = r["graphs"]
    assert g.kernel_count == 116 and g.count_by_kind()["kernel"] == 116  # 58 per iteration, 2 iterations
    d = r["heur"].diff(g, match="family")
    assert d.totals.per_iteration and d.totals.kernels_b == 58 and d.totals.fused_kernels


def test_json_contract_and_command(runs, tmp_path):
    db, _ = runs
    out = cli_json("diff", "heur", "tuned", "--match", "family", db=db.path)
    assert {"rows", "totals"} <= set(out) and out["match"] == "family"
    assert all(ROW_KEYS <= set(row) for row in out["rows"]) and TOTAL_KEYS <= set(out["totals"])
    exact = cli_json("diff", "eager", "ts", "--match", "exact", db=db.path)
    assert all(ROW_KEYS <= set(row) for row in exact["rows"])
    table = cli("diff", "fp32", "fp16", "--match", "family", db=db.path).stdout
    assert "tensor-core share of GPU time: 39.3% -> 23.1%" in table and "cuDNN xmma conv fprop" in table
    assert cli("diff", "eager", "ts", "-f", "csv", db=db.path).stdout.startswith("name,kind,status,")
    assert "14 unchanged rows hidden" in " ".join(cli("diff", "eager", "ts", "--match", "exact", db=db.path).stdout.split())
    for argv, message, code in [
        (["diff", "eager", "nosuch"], "no run 'nosuch'", 1),
        (["diff", "eager", "ts", "--match", "name"], "Invalid value for '--match'", 2),
        (["diff", "eager", "ts", "--threshold", "-1"], "Invalid value for '--threshold'", 2),
        (["diff", "fp16", "t_eager", "--match", "op"], "recorded no launching operators, so --match op", 2),
    ]:
        one_line_error(cli(*argv, db=db.path), message, code)


def test_noise_threshold(runs):
    _, r = runs
    loose = r["heur"].diff(r["tuned"], threshold_pct=50.0)
    strict = r["heur"].diff(r["tuned"], threshold_pct=0.0)
    assert loose.totals.status.same > strict.totals.status.same
    with pytest.raises(profkit.UsageError, match="`threshold_pct`"):
        r["heur"].diff(r["tuned"], threshold_pct=-5)
    frame = loose.frame()
    assert list(frame["name"]) == [x.name for x in loose.rows] and "variants_b" in frame.columns
    assert json.loads(json.dumps(loose.to_dict()))["threshold_pct"] == 50.0


@needs_torch
def test_compare_on_the_cpu(tmp_path, monkeypatch):
    """`profkit compare` end to end where there is no GPU: eager against TorchScript on the CPU,
    with the side-by-side report it writes."""
    monkeypatch.chdir(tmp_path)
    r = cli("compare", "resnet18", "--modes", "eager,torchscript", "--device", "cpu", "--batch-size", "1",
            "--warmup", "1", db=tmp_path / "c.db")
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "resnet18: 2 variants, each against eager" in text and "eager -> torchscript" in text
    written = [line.split(": ", 1)[1] for line in r.stdout.splitlines() if line.startswith("report: ")]
    runs = cli_json("runs", db=tmp_path / "c.db")
    assert [x["mode"] for x in runs] == ["eager", "torchscript"] and {x["device"] for x in runs} == {"cpu"}
    assert written == [f"reports/vs/{runs[0]['name']}+{runs[1]['name']}.html"] and (tmp_path / written[0]).exists()
    one_line_error(cli("compare", "resnet18", "--modes", "eager", db=tmp_path / "x.db"), "at least two variants", 2)
    one_line_error(cli("compare", "resnet18", "--modes", "eager,jit", db=tmp_path / "x.db"), "unknown --mode 'jit'", 2)
    assert not (tmp_path / "x.db").exists()


def test_refusals(runs, tmp_path):
    db, r = runs
    cpu = db.import_file(DATA / "torch" / "cpu_resnet18_fp32.json.gz", name="cpu")
    with pytest.raises(profkit.UsageError, match="holds CPU operators and t_eager GPU kernels"):
        cpu.diff(r["t_eager"])
    with pytest.raises(profkit.UsageError, match="not 'x'"):
        r["fp16"].diff("x")  # type: ignore[arg-type]
    other = profkit.open_db(tmp_path / "other.db").import_file(NCU_DATA / "resnet18_fp16_eager.raw.csv.gz")
    with pytest.raises(profkit.UsageError, match="two databases"):
        r["fp16"].diff(other)
    bf16 = db.import_file(DATA / "torch" / "cpu_resnet18_bf16.json.gz", name="cpu_bf16")
    d = cpu.diff(bf16, match="op")  # a CPU run's rows are the operators themselves
    conv = by_name(d)["aten::mkldnn_convolution"]
    assert conv.calls_a == conv.calls_b and conv.precision_a == "fp32" and conv.precision_b == "bf16"
    with pytest.raises(profkit.UsageError, match="only torch.profiler records"):
        profkit.compare("resnet18", modes="eager,torchscript", match="op", db=tmp_path / "c.db")
    with pytest.raises(profkit.UsageError, match="needs compile among the `modes`"):
        profkit.compare("resnet18", modes="eager,torchscript", compile_mode="max-autotune", db=tmp_path / "c.db")
    assert not (tmp_path / "c.db").exists()


def test_ncu_against_nsys_status_follows_calls(runs):
    _, r = runs
    d = r["eager"].diff(r["heur"])  # same 162 kernels: ncu's locked clocks make every time differ
    assert d.totals.status.changed == 0 and d.totals.status.same > 0
