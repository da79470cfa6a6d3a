"""Issue 23's views of attribution on real captures (tests/data/where/, H100): the summary's
by-module table (``profkit summary``, ``Run.modules``), the kernel table's module, operator,
shapes and types (``profkit kernels``), and the diff by module (``profkit diff --match
module``, ``Run.diff(match="module")``); captures without attribution say so."""

from __future__ import annotations

import hashlib
import re

import pytest

import profkit
from profkit.analyze.modules import NOT_ATTRIBUTED, level_path
from profkit.store import Store

from .conftest import NCU_DATA, cli, cli_json, one_line_error
from .where_data import RUNS, import_where

# a window wide enough for every column: these tests read what the tables hold
WIDE = {"COLUMNS": "250"}

USED = [
    "resnet18_train-amp-eager-nsys",
    "resnet18_train-amp-eager-torch",
    "hf_llama-bf16-eager-nsys",
    "hf_llama-bf16-eager-torch",
    "hf_llama-bf16-compile-nsys",
    "hf_gpt2_train-amp-eager-nsys",
    "hf_gpt2_train_padded-amp-eager-nsys",
]
OLD = NCU_DATA / "vgg16_fp16_eager.raw.csv.gz"  # a capture from before attribution


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("views") / "views.db"
    s = Store(path)
    for name in USED:
        assert name in RUNS
        import_where(s, name)
    s.close()
    assert cli("import", OLD, "--name", "old", db=path).exit_code == 0
    return path


@pytest.fixture(scope="module")
def db(db_path):
    return profkit.open_db(db_path)


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------- the tree's levels
def test_a_modules_path_is_cut_at_a_depth_with_a_lists_index_counting_with_its_name():
    assert level_path("model.layers.0.self_attn.q_proj", 1) == "model"
    assert level_path("model.layers.0.self_attn.q_proj", 2) == "model.layers.0"
    assert level_path("model.layers.0.self_attn.q_proj", 3) == "model.layers.0.self_attn"
    assert level_path("model.layers.0.self_attn.q_proj", 9) == "model.layers.0.self_attn.q_proj"
    assert level_path("layer4.0.downsample.0", 2) == "layer4.0.downsample.0"
    assert level_path("(optimizer)", 1) == "(optimizer)" and level_path("", 1) == ""


# ---------------------------------------------------------------------------------- summary, Run.modules
@pytest.mark.parametrize("name", USED[:-1])
@pytest.mark.parametrize("depth", [1, 2, 5])
def test_the_module_table_adds_up_to_the_runs_kernel_time(db, name, depth):
    run = db.run(name)
    view = run.module_view(depth)
    if name.endswith("compile-nsys"):
        assert view is None  # a compiled model's kernels have the fused operators, no modules
        return
    assert view is not None and view.depth == depth
    assert sum(r.time_ns for r in view.rows) == run.gpu_time_ns
    assert sum(r.launches for r in view.rows) == run.kernel_count
    for r in view.rows:
        assert sum(r.time_by_precision_ns.values()) == r.time_ns == sum(r.time_by_phase_ns.values())
        assert r.matrix_time_ns <= r.time_ns
        assert (r.matrix_tensor_core_pct is None) == (r.matrix_time_ns == 0)
    assert len({r.module for r in view.rows}) == len(view.rows)


def test_the_summary_of_a_training_step_has_the_by_module_table(db_path):
    s = cli_json("summary", "resnet18_train-amp-eager-nsys", db=db_path)
    assert s["modules"]["depth"] == 2
    rows = {r["module"]: r for r in s["modules"]["rows"]}
    assert sum(r["time_ns"] for r in rows.values()) == s["gpu_time_ns"]
    assert rows["(optimizer)"]["time_by_phase_ns"] == {"optimizer": rows["(optimizer)"]["time_ns"]}
    assert "(outside modules)" in rows
    conv = rows["layer1.0.conv1"]
    assert conv["module_type"] == "Conv2d" and set(conv["time_by_phase_ns"]) == {
        "forward",
        "backward",
    }
    assert conv["matrix_tensor_core_pct"] > 50
    # depth 1: a residual block's convolutions roll up into it
    s1 = cli_json("summary", "resnet18_train-amp-eager-nsys", "--module-depth", "1", db=db_path)
    rows1 = {r["module"]: r for r in s1["modules"]["rows"]}
    assert "layer1.0.conv1" not in rows1 and rows1["layer1.0"]["module_type"] == "BasicBlock"
    assert rows1["layer1.0"]["time_ns"] == sum(
        r["time_ns"] for m, r in rows.items() if m == "layer1.0" or m.startswith("layer1.0.")
    )


def test_the_llamas_rms_norm_shows_fp32_in_a_bf16_run(db):
    """The issue's "where": in the bf16 Llama the RMS norms (and the rotary embedding) run in fp32."""
    df = db.run("hf_llama-bf16-eager-nsys").modules(depth=4)
    norm = df.set_index("module").loc["model.layers.0.input_layernorm"]
    assert norm["module_type"] == "LlamaRMSNorm"
    assert max(norm["time_by_precision_ns"], key=norm["time_by_precision_ns"].get) == "fp32"
    rope = df.set_index("module").loc["model.rotary_emb"]
    assert set(rope["time_by_precision_ns"]) == {"fp32"}
    assert df["time_ns"].sum() == db.run("hf_llama-bf16-eager-nsys").gpu_time_ns
    assert list(df.columns) == [
        "module",
        "module_type",
        "launches",
        "time_ns",
        "time_pct",
        "time_by_precision_ns",
        "time_by_phase_ns",
        "matrix_time_ns",
        "matrix_tensor_core_pct",
    ]
    assert str(df["time_ns"].dtype) == "Int64" and str(df["module"].dtype) == "string"


def test_the_summary_table_shows_modules_and_says_when_a_capture_has_none(db_path):
    out = cli("summary", "hf_llama-bf16-eager-nsys", db=db_path, env=WIDE).stdout
    assert "GPU time by module (depth 2" in out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("model.layers.0 "))
    assert "LlamaDecoderLayer" in line and "bf16" in line and "fp32" in line and "fwd 100%" in line
    for name in ("old", "hf_llama-bf16-compile-nsys"):
        r = cli("summary", name, db=db_path, env=WIDE)
        assert r.exit_code == 0
        notes = [ln for ln in r.stdout.splitlines() if "module" in ln]
        assert len(notes) == 1 and "has no module attribution" in notes[0], notes
        assert cli_json("summary", name, db=db_path)["modules"] is None
    assert "profkit run records it" in cli("summary", "old", db=db_path).stdout


@pytest.mark.parametrize("depth", ["0", "-1", "x"])
def test_a_bad_module_depth_is_one_line(db_path, depth):
    before = digest(db_path)
    one_line_error(
        cli("summary", "hf_llama-bf16-eager-nsys", "--module-depth", depth, db=db_path),
        "'--module-depth'",
        code=2,
    )
    assert digest(db_path) == before


def test_the_api_refuses_a_bad_depth_and_a_run_without_attribution(db):
    from profkit.errors import UsageError

    run = db.run("hf_llama-bf16-eager-nsys")
    for bad in (0, -2, 1.5, True):
        with pytest.raises(UsageError, match="depth"):
            run.modules(depth=bad)
    with pytest.raises(UsageError, match="has no module attribution"):
        db.run("old").modules()
    assert db.run("old").module_view() is None


# ---------------------------------------------------------------------------------- kernels
def test_the_kernel_table_shows_module_operator_shapes_and_types(db_path):
    out = cli("kernels", "hf_llama-bf16-eager-nsys", db=db_path, env=WIDE).stdout
    header = next(ln for ln in out.splitlines() if ln.strip().startswith("#"))
    assert header.split() == [
        "#",
        "kernel",
        "duration",
        "module",
        "op",
        "shapes",
        "types",
        "ph",
        "prec",
        "TC",
    ]
    assert re.search(
        r"model\.layers\.0\.self_attn\.q_proj\s+linear\s+\[4,128,256\];\[256,256\]\s+bf16,bf16\s+fwd",
        out,
    )
    back = cli("kernels", "resnet18_train-amp-eager-nsys", db=db_path, env=WIDE).stdout
    assert re.search(r"layer1\.0\.conv1\s+convolution_backward\s+\S+\s+\S+\s+bwd", back)
    # JSON has the columns whole
    rows = cli_json("kernels", "hf_llama-bf16-eager-nsys", db=db_path)
    assert {"module", "module_type", "op", "shapes", "input_types", "phase"} <= set(rows[0])


def test_the_kernel_table_fits_a_terminal_and_keeps_a_paths_end(db_path):
    for width in (100, 120):
        out = cli(
            "kernels",
            "hf_llama-bf16-eager-nsys",
            db=db_path,
            env={"COLUMNS": str(width), "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"},
        ).stdout
        plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
        assert max(len(ln) for ln in plain.splitlines()) <= width
        header = next(ln for ln in plain.splitlines() if ln.strip().startswith("#"))
        assert header.split()[-3:] == ["ph", "prec", "TC"]
        assert "…" in plain


def test_a_kernel_table_without_attribution_is_as_before(db_path):
    """(The summary says the capture has no attribution: test_the_summary_table_shows_modules_...)"""
    r = cli("kernels", "old", "--limit", "3", db=db_path, env=WIDE)
    assert r.exit_code == 0 and not r.stderr
    header = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("#"))
    assert header.split() == [
        "#",
        "kernel",
        "duration",
        "grid",
        "block",
        "range",
        "prec",
        "TC",
        "evidence",
    ]


# ---------------------------------------------------------------------------------- diff --match module
def test_the_same_model_under_two_tools_has_the_same_modules(db_path, db):
    d = cli_json(
        "diff",
        "hf_llama-bf16-eager-nsys",
        "hf_llama-bf16-eager-torch",
        "--match",
        "module",
        db=db_path,
    )
    assert d["match"] == "module"
    assert {r["status"] for r in d["rows"]} == {"same"}
    mods = {r["name"] for r in d["rows"]}
    assert {
        "model.layers.0.input_layernorm",
        "model.layers.1.mlp.down_proj",
        "lm_head",
        "model.norm",
    } <= mods
    for r in d["rows"]:
        assert r["calls_a"] == r["calls_b"]
        assert sum(r["time_by_precision_a_ns"].values()) == r["time_a_ns"]
    norm = next(r for r in d["rows"] if r["name"] == "model.layers.0.input_layernorm")
    assert (
        next(iter(norm["time_by_precision_a_ns"]))
        == next(iter(norm["time_by_precision_b_ns"]))
        == "fp32"
    )
    assert norm["variants_a"] == ["LlamaRMSNorm"]
    q = next(r for r in d["rows"] if r["name"] == "model.layers.0.self_attn.q_proj")
    assert q["matrix_tensor_core_pct_a"] == q["matrix_tensor_core_pct_b"] == 100.0
    assert sum(r["time_a_ns"] for r in d["rows"]) == d["totals"]["gpu_time_a_ns"]
    # the API's Diff is the same
    api = db.diff("hf_llama-bf16-eager-nsys", "hf_llama-bf16-eager-torch", match="module")
    assert api.to_dict() == d
    assert set(api.frame()["name"]) == mods


def test_a_padded_vocabulary_shows_in_the_lm_head_alone(db_path):
    """The GPT-2 step with its vocabulary padded to a multiple of 64: by module, the output
    projection is what changed."""
    d = cli_json(
        "diff",
        "hf_gpt2_train-amp-eager-nsys",
        "hf_gpt2_train_padded-amp-eager-nsys",
        "--match",
        "module",
        db=db_path,
    )
    changed = [r for r in d["rows"] if r["status"] != "same"]
    assert changed[0]["name"] == "lm_head" and changed[0]["delta_time_ns"] < 0
    out = cli(
        "diff",
        "hf_gpt2_train-amp-eager-nsys",
        "hf_gpt2_train_padded-amp-eager-nsys",
        "--match",
        "module",
        db=db_path,
    ).stdout
    assert "matched by module" in out and re.search(r"changed\s+lm_head\s", out)
    assert "TC matrix A->B" in out


def test_modules_on_one_side_appear_or_vanish(db_path):
    """A ResNet against a Llama: no module in common; every row appeared or vanished."""
    d = cli_json(
        "diff",
        "resnet18_train-amp-eager-nsys",
        "hf_llama-bf16-eager-nsys",
        "--match",
        "module",
        db=db_path,
    )
    assert {r["status"] for r in d["rows"]} == {"added", "removed"}
    out = cli(
        "diff",
        "resnet18_train-amp-eager-nsys",
        "hf_llama-bf16-eager-nsys",
        "--match",
        "module",
        db=db_path,
    ).stdout
    assert re.search(r"appeared\s+lm_head", out) and re.search(r"vanished\s+\(optimizer\)", out)


@pytest.mark.parametrize("other", ["old", "hf_llama-bf16-compile-nsys"])
def test_a_diff_by_module_of_a_run_without_attribution_is_one_line(db_path, other):
    before = digest(db_path)
    one_line_error(
        cli("diff", "hf_llama-bf16-eager-nsys", other, "--match", "module", db=db_path),
        f"--match module lines kernels up by module, and {other} has no module attribution",
        code=2,
    )
    assert digest(db_path) == before


def test_compare_by_module_is_refused_before_anything_runs(db_path):
    for args, why in (
        (["--modes", "eager,compile"], "compiled model"),
        (["--precisions", "fp32,fp16", "--no-attribution"], "attribution is turned off"),
    ):
        one_line_error(
            cli("compare", "resnet18", *args, "--match", "module", db=db_path), why, code=2
        )


def test_not_attributed_kernels_are_a_row_of_their_own():
    from profkit.analyze.modules import module_rows
    from profkit.rows import ModuleGroup

    groups = [
        ModuleGroup("a.b", "Linear", "forward", "bf16", "gemm", True, 2, 100, 1),
        ModuleGroup(None, None, None, "fp32", "elementwise", False, 1, 50, 1),
    ]
    rows = module_rows(groups, 1)
    assert [(r.module, r.time_ns, r.time_by_phase_ns) for r in rows] == [
        ("a", 100, {"forward": 100}),
        (NOT_ATTRIBUTED, 50, {"unknown": 50}),
    ]
    assert rows[0].module_type is None  # "a" ran no kernel of its own: its class is not known
