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

ROW_KEYS = {
    "name",
    "status",
    "calls_a",
    "calls_b",
    "time_a_ns",
    "time_b_ns",
    "variants_a",
    "variants_b",
}
TOTAL_KEYS = {
    "kernels_a",
    "kernels_b",
    "gpu_time_a_ns",
    "gpu_time_b_ns",
    "tensor_core_time_pct_a",
    "tensor_core_time_pct_b",
}


@pytest.fixture
def runs(tmp_path, diff_dir, nsys_dir):
    """Every capture imported once into a fresh database, by short names."""
    db = profkit.open_db(tmp_path / "d.db")
    files = {
        "eager": diff_dir / "r18_fp16_eager_ncu.raw.csv.gz",
        "ts": diff_dir / "r18_fp16_torchscript_ncu.raw.csv.gz",
        "heur": diff_dir / "r18_fp16_heuristic_nsys.sqlite",
        "tuned": diff_dir / "r18_fp16_autotuned_nsys.sqlite",
        "t_eager": diff_dir / "r18_fp16_eager_torch.json.gz",
        "t_compile": diff_dir / "r18_fp16_compile_torch.json.gz",
        "graphs": diff_dir / "r18_fp16_graphs_nsys.sqlite",
        "fp32": NCU_DATA / "resnet18_fp32_eager.raw.csv.gz",
        "fp16": NCU_DATA / "resnet18_fp16_eager.raw.csv.gz",
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
    assert t.tensor_core_time_pct_a == pytest.approx(
        39.31
    ) and t.tensor_core_time_pct_b == pytest.approx(23.09)
    assert set(t.time_by_precision_a_ns) == {"fp32", "tf32"} and set(t.time_by_precision_b_ns) == {
        "fp16",
        "fp32",
    }
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
        assert (
            d.totals.onto_tensor_cores == d.totals.off_tensor_cores == [] and d.totals.notes == []
        )


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
    assert {
        "cuDNN layout nchwToNhwc",
        "vectorized_elementwise_kernel",
        "batch_norm_transform_input_kernel",
    } <= replaced
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
    # 58 per iteration, 2 iterations
    assert g.kernel_count == 116 and g.count_by_kind()["kernel"] == 116
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
    assert (
        "tensor-core share of GPU time: 39.3% -> 23.1%" in table
        and "cuDNN xmma conv fprop" in table
    )
    assert cli("diff", "eager", "ts", "-f", "csv", db=db.path).stdout.startswith(
        "name,kind,status,"
    )
    assert "14 unchanged rows hidden" in " ".join(
        cli("diff", "eager", "ts", "--match", "exact", db=db.path).stdout.split()
    )
    for argv, message, code in [
        (["diff", "eager", "nosuch"], "no run 'nosuch'", 1),
        (["diff", "eager", "ts", "--match", "name"], "Invalid value for '--match'", 2),
        (["diff", "eager", "ts", "--threshold", "-1"], "Invalid value for '--threshold'", 2),
        (
            ["diff", "fp16", "t_eager", "--match", "op"],
            "recorded no launching operators, so --match op",
            2,
        ),
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
    r = cli(
        "compare",
        "resnet18",
        "--modes",
        "eager,torchscript",
        "--device",
        "cpu",
        "--batch-size",
        "1",
        "--warmup",
        "1",
        db=tmp_path / "c.db",
    )
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "resnet18: 2 variants, each against eager" in text and "eager -> torchscript" in text
    written = [
        line.split(": ", 1)[1] for line in r.stdout.splitlines() if line.startswith("report: ")
    ]
    runs = cli_json("runs", db=tmp_path / "c.db")
    assert [x["mode"] for x in runs] == ["eager", "torchscript"] and {
        x["device"] for x in runs
    } == {"cpu"}
    assert (
        written == [f"reports/vs/{runs[0]['name']}+{runs[1]['name']}.html"]
        and (tmp_path / written[0]).exists()
    )
    one_line_error(
        cli("compare", "resnet18", "--modes", "eager", db=tmp_path / "x.db"),
        "at least two variants",
        2,
    )
    one_line_error(
        cli("compare", "resnet18", "--modes", "eager,jit", db=tmp_path / "x.db"),
        "unknown --mode 'jit'",
        2,
    )
    assert not (tmp_path / "x.db").exists()


def test_refusals(runs, tmp_path):
    db, r = runs
    cpu = db.import_file(DATA / "torch" / "cpu_resnet18_fp32.json.gz", name="cpu")
    with pytest.raises(profkit.UsageError, match="holds CPU operators and t_eager GPU kernels"):
        cpu.diff(r["t_eager"])
    with pytest.raises(profkit.UsageError, match="not 'x'"):
        r["fp16"].diff("x")  # type: ignore[arg-type]
    other = profkit.open_db(tmp_path / "other.db").import_file(
        NCU_DATA / "resnet18_fp16_eager.raw.csv.gz"
    )
    with pytest.raises(profkit.UsageError, match="two databases"):
        r["fp16"].diff(other)
    bf16 = db.import_file(DATA / "torch" / "cpu_resnet18_bf16.json.gz", name="cpu_bf16")
    d = cpu.diff(bf16, match="op")  # a CPU run's rows are the operators themselves
    conv = by_name(d)["aten::mkldnn_convolution"]
    assert (
        conv.calls_a == conv.calls_b and conv.precision_a == "fp32" and conv.precision_b == "bf16"
    )
    with pytest.raises(profkit.UsageError, match="only torch.profiler records"):
        profkit.compare("resnet18", modes="eager,torchscript", match="op", db=tmp_path / "c.db")
    with pytest.raises(profkit.UsageError, match="needs compile among the `modes`"):
        profkit.compare(
            "resnet18", modes="eager,torchscript", compile_mode="max-autotune", db=tmp_path / "c.db"
        )
    assert not (tmp_path / "c.db").exists()


def test_ncu_against_nsys_status_follows_calls(runs):
    _, r = runs
    d = r["eager"].diff(r["heur"])  # same 162 kernels: ncu's locked clocks make every time differ
    assert d.totals.status.changed == 0 and d.totals.status.same > 0


# ---------------------------------------------------------------- what compile removed (issue 36)
LLAMA = [
    (f"hf_llama-bf16-eager-{tool}", f"hf_llama-bf16-compile-{tool}")
    for tool in ("nsys", "torch", "ncu")
]
# The issue's own case (tests/data/findings): Hugging Face's BERT MLM training step, AMP, eager -> compile.
BERT = [(f"bert-amp-{tool}", f"bert-amp-compile-{tool}") for tool in ("nsys", "torch")]


@pytest.fixture
def compiled(tmp_path, diff_dir):
    """Eager against torch.compile on real H100 captures: the Llama-style model of
    tests/data/where under nsys, torch.profiler and ncu's per-function plan (imported as `profkit
    run` imports them, Inductor's operator lists included), and resnet18's Kineto traces of
    tests/data/diff (the generated kernels known by their names only)."""
    from .where_data import FINDINGS, import_where

    db = profkit.open_db(tmp_path / "c.db")
    for pair in LLAMA:
        for name in pair:
            import_where(db.store, name)
    for pair in BERT:
        for name in pair:
            import_where(db.store, name, FINDINGS)
    db.import_file(diff_dir / "r18_fp16_eager_torch.json.gz", name="r18_eager")
    db.import_file(diff_dir / "r18_fp16_compile_torch.json.gz", name="r18_compile")
    return db


PAIRS = [*LLAMA, *BERT, ("r18_eager", "r18_compile")]


def without_counterpart(db, a, b):
    """A's kernels whose work (diff --match family's key) B never ran: (kinds, launches, time),
    read from the store's kernel groups, not from the diff."""
    from profkit.classify import work_key

    def groups(name):
        return [g for g in db.store.kernel_groups(db.run(name).id) if g.kind == "kernel"]

    seen_b = {work_key(g.short_name or g.name, g.name)[0] for g in groups(b)}
    gone = [g for g in groups(a) if work_key(g.short_name or g.name, g.name)[0] not in seen_b]
    return (
        {work_key(g.short_name or g.name, g.name)[0] for g in gone},
        sum(g.calls for g in gone),
        sum(g.time_ns for g in gone),
    )


@pytest.mark.parametrize("a,b", PAIRS)
def test_fusion_total_is_every_kernel_without_counterpart(compiled, a, b):
    """What compile removed is every kind of A's kernels B has none of, whatever its family
    (copies, gathers, scans and concatenations too, not only element-wise and norm kernels):
    its total is exactly their summed time, in the diff and in the lines printed."""
    from profkit import render

    d = compiled.diff(a, b)
    t = d.totals
    assert t.fused_kernels and not t.per_iteration and t.notes == []
    kinds, launches, time_ns = without_counterpart(compiled, a, b)
    gone = t.replaced_by_fusion
    assert {x.name for x in gone} == kinds and len(gone) == len(kinds)
    assert sum(x.calls_a for x in gone) == launches and sum(x.time_a_ns for x in gone) == time_ns
    assert [x.time_a_ns for x in gone] == sorted((x.time_a_ns for x in gone), reverse=True)
    lines = render.fusion_lines(d)
    assert lines[1] == (
        f"A's kernels without counterpart in B: {len(kinds)} kinds, {launches} launches, "
        f"{profkit.formatting.fmt_ns(time_ns)}"
    )
    # The largest kinds one a line, the rest summed in one: every kind counted once.
    listed = lines[3 : 3 + min(len(gone), render.FUSION_SHOWN)]
    assert [line[12:42].rstrip() for line in listed] == [
        profkit.formatting.cut_middle(x.name, 30) for x in gone[: render.FUSION_SHOWN]
    ]
    if len(gone) > render.FUSION_SHOWN:
        rest = gone[render.FUSION_SHOWN :]
        assert lines[-1].startswith(f"  and {len(rest)} more kind")
        assert f"{sum(x.calls_a for x in rest)} launch" in lines[-1]
    assert all(len(line) <= render.FUSION_WIDTH for line in lines[3:])


@pytest.mark.parametrize("a,b", LLAMA)
def test_fusion_traced_by_inductors_operator_lists(compiled, a, b):
    """A removed kind's time is traced to B's generated kernels where the operators that
    launched it are among those Inductor says each kernel fused; what no kernel fused is not
    (aten::all's reduction, aten::diff's copies: Inductor decomposed them into other operators)."""
    d = compiled.diff(a, b)
    gone = {x.name: x for x in d.totals.replaced_by_fusion}
    made = {x.name for x in d.totals.fused_kernels}
    for x in gone.values():
        assert 0 < x.fused_time_a_ns <= x.time_a_ns and set(x.fused_into) <= made
        assert x.fused_ops and all(o.startswith("aten::") for o in x.fused_ops)
    reduce, cat = gone["reduce_kernel"], gone["CatArrayBatchedCopy"]
    assert reduce.fused_ops == ["aten::mean"] and reduce.fused_time_a_ns < reduce.time_a_ns
    assert all("mean" in k for k in reduce.fused_into)
    assert cat.fused_ops == ["aten::cat"] and cat.fused_time_a_ns < cat.time_a_ns
    assert "aten::to" in gone["unrolled_elementwise_kernel"].fused_ops  # fused as aten::_to_copy
    # Exactly the time of the removed kernels whose operator a generated kernel of B lists (here
    # by its own name, or aten::to as the aten::_to_copy Inductor lists for it).
    from profkit.classify import work_key

    b_ops = {
        o
        for g in compiled.store.kernel_groups(compiled.run(b).id)
        if g.short_name.startswith("triton_")
        for o in (g.op or "").split("+")
    }
    a_gone = [
        g
        for g in compiled.store.kernel_groups(compiled.run(a).id)
        if g.kind == "kernel" and work_key(g.short_name or g.name, g.name)[0] in gone
    ]
    traced = sum(
        g.time_ns
        for g in a_gone
        if g.op in b_ops or (g.op == "aten::to" and "aten::_to_copy" in b_ops)
    )
    assert traced == sum(x.fused_time_a_ns for x in gone.values())


def test_fusion_traced_by_kernel_names(compiled):
    """resnet18's compiled trace holds no operator lists: Triton's names say what each kernel
    fused (batch norm, add, max pool, mean); the layout conversions and copies, whose operators
    (cudnn_convolution, copy_) no name holds, stay untraced."""
    d = compiled.diff("r18_eager", "r18_compile")
    gone = {x.name: x for x in d.totals.replaced_by_fusion}
    bn = gone["batch_norm_transform_input_kernel"]
    assert bn.fused_time_a_ns == bn.time_a_ns and bn.fused_ops == ["aten::native_batch_norm"]
    assert bn.fused_into and all("native_batch_norm" in k for k in bn.fused_into)
    assert gone["max_pool_forward_nchw"].fused_ops == ["aten::max_pool2d_with_indices"]
    for name in (
        "cuDNN layout nchwToNhwc",
        "cuDNN layout nhwcToNchw",
        "unrolled_elementwise_kernel",
        "cuDNN implicit_convolve_sgemm conv",
    ):
        assert (
            gone[name].fused_time_a_ns == 0 and gone[name].fused_ops == gone[name].fused_into == []
        )


def test_no_matrix_work_fused_into_a_pointwise_kernel(compiled):
    """A generated kernel of no matrix math takes over no GEMM or attention kernel, though its
    operator list names the attention and bmm whose inputs it prepares."""
    from profkit.analyze.fusion import GeneratedKernel

    groups = compiled.store.kernel_groups(compiled.run("hf_llama-bf16-compile-nsys").id)
    (rope, *_) = [
        g
        for g in groups
        if "_scaled_dot_product_cudnn_attention" in (g.op or "") and g.family == "fused"
    ]
    k = GeneratedKernel.of(rope)
    assert "bmm" in k.ops and "scaled_dot_product_cudnn_attention" in k.ops
    assert k.fuses("aten::mul", "elementwise") and k.fuses("aten::_to_copy", "elementwise")
    assert not k.fuses("aten::bmm", "gemm") and not k.fuses(
        "aten::_scaled_dot_product_cudnn_attention", "attention"
    )
    assert not k.fuses("aten::all", "reduce")


def test_fusion_in_the_terminal_and_the_side_by_side_page(compiled, tmp_path):
    """`profkit diff` and `profkit compare` print the total and the largest kinds, each line
    under 80 columns; the side-by-side page gives the total and one row per kind."""
    from profkit import render
    from profkit.api import Comparison

    a, b = LLAMA[0]
    d = compiled.diff(a, b)
    gone = d.totals.replaced_by_fusion
    total = profkit.formatting.fmt_ns(sum(x.time_a_ns for x in gone))
    fused = profkit.formatting.fmt_ns(sum(x.fused_time_a_ns for x in gone))
    out = cli("diff", a, b, db=compiled.path, env={"COLUMNS": "80"}).stdout
    assert f"A's kernels without counterpart in B: {len(gone)} kinds" in out and total in out
    assert f"of which launched by operators that B's Triton kernels fused: {fused}" in out
    cmp = Comparison(
        "hf_llama", "family", ["eager", "compile"], [compiled.run(a), compiled.run(b)], [d]
    )
    with pytest.MonkeyPatch.context() as m:
        import io
        import sys

        buf = io.StringIO()
        m.setattr(sys, "stdout", buf)
        m.setenv("COLUMNS", "80")
        render.compare(cmp, "table")
    text = buf.getvalue()
    shown = [line for line in text.splitlines() if line.startswith("     ") and " fused: " in line]
    assert len(shown) == render.FUSION_SHOWN and all(len(line) <= 80 for line in shown)
    assert f"  A's kernels without counterpart in B: {len(gone)} kinds" in text
    page = compiled.run(a).report(tmp_path / "vs.html", vs=compiled.run(b)).read_text()
    assert (
        f"of A's kernels have no counterpart in B: {sum(x.calls_a for x in gone)} launches, {total}, "
        f"of which {fused}" in " ".join(page.split())
    )
    table = page[
        page.index('id="fusion-kernels"') : page.index(
            "</details>", page.index('id="fusion-kernels"')
        )
    ]
    assert table.count("<tr>") == len(gone) + 1 and "aten::mean" in table
