"""Issue 24, items 6 and 7: readable family names (a word's digits kept, variants wildcarded,
convolutions never labelled gemm), one default --match, "did you mean" for run and workload
names, progress lines on a stderr that is no terminal, and the notebook reprs (one line, and an
HTML card: escaped, self-contained, shown in Chromium and by the docs' notebook example)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path

import pytest

import profkit
from profkit.classify import by_name, variant_label, work_key

from .conftest import DATA, NCU_DATA, cli, cli_json, needs_torch, one_line_error

ROOT = Path(__file__).parents[1]
EAGER = DATA / "diff" / "r18_fp16_eager_torch.json.gz"
COMPILED = DATA / "diff" / "r18_fp16_compile_torch.json.gz"
CPU_FP32 = DATA / "torch" / "cpu_resnet18_fp32.json.gz"
CPU_BF16 = DATA / "torch" / "cpu_resnet18_bf16.json.gz"
NCU_FP16 = NCU_DATA / "resnet18_fp16_eager.raw.csv.gz"
SHOTS = Path(os.environ.get("PROFKIT_SHOTS_24", "/work/shots-24/misc"))


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    d = profkit.open_db(tmp_path_factory.mktemp("names") / "p.db", create=True)
    for path, name in (
        (EAGER, "r18_eager"),
        (COMPILED, "r18_compiled"),
        (CPU_FP32, "cpu_fp32"),
        (CPU_BF16, "cpu_bf16"),
        (NCU_FP16, "ncu_fp16"),
    ):
        d.import_file(path, name=name)
    return d


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------- (a) family names
def test_family_labels_keep_a_words_digits(db):
    """`max_pool2d` and `bn_fw_inf_1C11` stay as they are (were `max_pool#d`, `bn_fw_inf_#C#`);
    nothing is wildcarded as `#` any more."""
    rows = db.diff("cpu_fp32", "cpu_bf16", match="family").rows
    names = {r.name for r in rows}
    assert "max_pool2d_with_indices" in names and not any("#" in n for n in names)
    assert variant_label("bn_fw_inf_1C11_kernel_NCHW") == "bn_fw_inf_1C11_kernel_NCHW"
    assert (
        variant_label("nll_loss_forward_reduce_cuda_kernel_2d")
        == "nll_loss_forward_reduce_cuda_kernel_2d"
    )


def test_variants_still_line_up_and_are_wildcarded_as_stars():
    """What differs between variants of one kernel (tile shapes, knob and template numbers, an
    element type that is a part of its own) is `*`: the fp16 and bf16 attention kernels, and
    cuDNN's generated SDPA kernels of two knobs, are one work each."""
    f16 = "fmha_cutlassF_f16_aligned_64x64_rf_sm80"
    bf16 = "fmha_cutlassF_bf16_aligned_64x64_rf_sm80"
    assert work_key(f16) == work_key(bf16) == ("fmha_cutlassF_*_aligned_*_rf_sm80", "")
    a = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"
    b = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0"
    assert (
        work_key(a)[0] == work_key(b)[0] and "sm90" in work_key(a)[0] and "#" not in work_key(a)[0]
    )
    assert work_key("triton_poi_fused_add_13")[0] == work_key("triton_poi_fused_add_2")[0]
    assert variant_label("ampere_sgemm_128x64_nn") == "ampere_sgemm_*_nn"


def test_tensor_core_convolutions_are_conv_not_gemm(db):
    """Every convolution run as an implicit GEMM (cuDNN xmma fprop/dgrad/wgrad, CUTLASS conv)
    in the committed ResNet-18 captures is family conv, on the tensor cores still."""
    convs = [
        k
        for k in db.run("ncu_fp16").iter_kernels()
        if re.search(r"xmma_(fprop|dgrad|wgrad)|s16816fprop", k["name"])
    ]
    assert len(convs) > 10
    assert {k["family"] for k in convs} == {"conv"}
    assert any(k["tensor_core"] for k in convs)
    name = "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_f16_s16816fprop_optimized_f16_64x64_64x5_nhwc_align8>(T1::Params)"
    assert by_name(name)[:3] == ("fp16", True, "conv")
    # A GEMM stays a GEMM.
    assert by_name("nvjet_sm90_hsh_64x24_64x16_2x4_h_bz_NNT")[2] == "gemm"


# ------------------------------------------------------------------------- (b) one default --match
def test_diff_compare_and_report_default_to_family(db):
    import typer.main

    from profkit.cli import app

    assert cli_json("diff", "r18_eager", "r18_compiled", db=db.path)["match"] == "family"
    assert db.diff("r18_eager", "r18_compiled").match == "family"
    assert db.run("r18_eager").diff(db.run("r18_compiled")).match == "family"
    commands = typer.main.get_command(app).commands
    defaults = {
        name: next(p.default for p in commands[name].params if p.name == "match")
        for name in ("diff", "compare", "report")
    }
    assert {k: getattr(v, "value", v) for k, v in defaults.items()} == dict.fromkeys(
        defaults, "family"
    )
    # report: --match alone (the default) without --vs is no error; another one is
    assert cli("report", "r18_eager", "--match", "exact", db=db.path).exit_code == 2


# ------------------------------------------------------------------------- (c) did you mean
@pytest.mark.parametrize(
    "argv",
    [
        ["summary", "r18_eagr"],
        ["kernels", "r18_eagr"],
        ["ranges", "r18_eagr"],
        ["diff", "r18_eagr", "r18_compiled"],
        ["diff", "r18_eager", "r18_compild"],
        ["report", "r18_eagr"],
        ["report", "r18_eager", "--vs", "r18_compild"],
    ],
)
def test_a_mistyped_run_name_gets_did_you_mean(db, argv):
    before = _sha(db.path)
    r = cli(*argv, db=db.path)
    wanted = "r18_eager" if "r18_eagr" in argv else "r18_compiled"
    one_line_error(r, f"Did you mean '{wanted}'?")
    assert "Recent runs:" in r.stderr  # the hint there was stays
    assert _sha(db.path) == before


def test_a_name_like_none_gets_no_guess(db):
    r = cli("summary", "zzzzzz", db=db.path)
    one_line_error(r, "no run 'zzzzzz'")
    assert "Did you mean" not in r.stderr


def test_a_mistyped_workload_name_gets_did_you_mean(tmp_path):
    db = tmp_path / "p.db"
    one_line_error(cli("run", "resnt18", "--device", "cpu", db=db), "Did you mean 'resnet18'?")
    one_line_error(cli("bench", "vgg61", "--device", "cpu", db=db), "Did you mean 'vgg16'?")
    assert not db.exists()


# ------------------------------------------------------------------------- (d) progress on a pipe
@needs_torch
def test_stages_on_stderr_when_it_is_no_terminal(tmp_path, monkeypatch):
    """CliRunner's stderr is no terminal: a line per stage there once the command has run for
    cli.QUIET_S (0 here), each once; none of it on stdout."""
    from profkit import cli as cli_module

    monkeypatch.setattr(cli_module, "QUIET_S", 0.0)
    db = tmp_path / "p.db"
    r = cli(
        "run",
        ROOT / "tests" / "workloads" / "tiny_classifier.py",
        "--device",
        "cpu",
        "--tool",
        "torch",
        "--iters",
        "1",
        "--warmup",
        "1",
        "--no-report",
        db=db,
    )
    assert r.exit_code == 0, r.output
    lines = r.stderr.splitlines()
    stages = [
        line
        for line in lines
        if line.startswith(
            ("profkit: launching", "profkit: profiling", "profkit: reading", "profkit: classifying")
        )
    ]
    assert [s.split()[1] for s in stages] == ["launching", "profiling", "reading", "classifying"], (
        lines
    )
    assert len(set(lines)) == len(lines)
    assert "profkit:" not in r.stdout and "CPU operator calls" in r.stdout
    r = cli("import", EAGER, "--name", "again", db=db)
    assert (
        r.exit_code == 0
        and r.stderr.startswith("profkit: importing ")
        and "importing" not in r.stdout
    )


@needs_torch
def test_compare_json_stays_clean_with_stages(tmp_path, monkeypatch):
    from profkit import cli as cli_module

    monkeypatch.setattr(cli_module, "QUIET_S", 0.0)
    r = cli(
        "compare",
        ROOT / "tests" / "workloads" / "tiny_classifier.py",
        "--device",
        "cpu",
        "--tool",
        "torch",
        "--precisions",
        "fp32,fp16",
        "--modes",
        "eager",
        "--iters",
        "1",
        "--warmup",
        "1",
        "-f",
        "json",
        "--no-report",
        db=tmp_path / "p.db",
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["match"] == "family"
    assert sum(line.startswith("profkit: launching") for line in r.stderr.splitlines()) == 2, (
        r.stderr
    )


def test_quick_commands_print_no_stages(tmp_path):
    """Under cli.QUIET_S (as every quick command and bad input is) nothing but the output: an
    import prints its one line, a bad file its one error."""
    db = tmp_path / "p.db"
    r = cli("import", EAGER, db=db)
    assert r.exit_code == 0 and "importing" not in r.stderr
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(EAGER.read_bytes()[:200])
    r = cli("import", bad, db=db)
    assert r.exit_code != 0 and len(r.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------------- 7: notebook reprs
def test_reprs_are_one_line_with_headline_figures(db):
    eager, compiled = db.run("r18_eager"), db.run("r18_compiled")
    d = eager.diff(compiled)
    cmp = profkit.Comparison(
        "resnet18", d.match, ["fp16 eager", "fp16 compile"], [eager, compiled], [d]
    )
    texts = {
        "run": repr(eager),
        "summary": repr(eager.summary()),
        "diff": repr(d),
        "comparison": repr(cmp),
    }
    for what, text in texts.items():
        assert (
            "\n" not in text and len(text) < 300 and "RunInfo(" not in text and "=" not in text
        ), (what, text)
    assert texts["run"] == (
        "<Run 1 'r18_eager': resnet18 fp16 eager, torch on NVIDIA H100 80GB HBM3, "
        "162 kernel launches, 490.9 us GPU time>"
    )
    assert texts["summary"].startswith(
        "<Summary of run 'r18_eager': 162 kernel launches, 490.9 us GPU time, "
        "tensor cores 82.5% of matrix work"
    )
    assert texts["diff"].startswith(
        "<Diff 'r18_eager' -> 'r18_compiled' (match family): GPU time 490.9 us -> 225.3 us (-54.1%)"
    )
    assert (
        texts["comparison"]
        == "<Comparison of resnet18 (2 variants, match family): fp16 eager 490.9 us, "
        "fp16 compile 225.3 us>"
    )


def test_cpu_runs_speak_cpu_words(db):
    run = db.run("cpu_fp32")
    for obj in (run, run.summary(), run.diff(db.run("cpu_bf16"))):
        text, html = repr(obj), obj._repr_html_()
        assert "CPU self time" in text and "CPU self time" in html, text
        assert "GPU" not in text + html and "tensor core" not in (text + html).lower()


def test_html_cards_hold_the_figures_and_escape_every_name(db):
    from profkit.records import TopKernel

    eager = db.run("r18_eager")
    html = eager._repr_html_()
    for piece in (
        "r18_eager",
        "resnet18 fp16 eager",
        "NVIDIA H100 80GB HBM3",
        "490.9 us",
        "82.5%",
        "top kernels by GPU time",
    ):
        assert piece in html, piece
    assert "<script" not in html and "http" not in html and "<link" not in html
    hostile = "<script>alert('x')</script>&"
    s = dataclasses.replace(
        eager.summary(),
        run=hostile,
        top_kernels=[
            TopKernel(
                name=hostile,
                launches=1,
                total_ns=10,
                pct=1.0,
                precision="fp16",
                tensor_core=True,
                evidence="name",
            )
        ],
    )
    d = eager.diff(db.run("r18_compiled"))
    d = dataclasses.replace(
        d, run_a=hostile, rows=[dataclasses.replace(r, name=hostile) for r in d.rows]
    )
    for card in (s._repr_html_(), d._repr_html_()):
        assert (
            "<script>" not in card
            and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&amp;" in card
        )


def _readme_notebook_code() -> str:
    readme = (ROOT / "docs" / "api" / "index.md").read_text()
    section = readme.split("\n## In a notebook\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_the_readmes_notebook_example_runs_and_shows_cards(tmp_path, monkeypatch):
    """The docs' notebook cell (docs/api/index.md), run in IPython's shell from a folder where tests/ is the
    repository's: what it displays, and its last value, are HTML cards (as a notebook shows
    them)."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    (tmp_path / "tests").symlink_to(ROOT / "tests")
    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    try:
        with capture_output() as shown:
            result = shell.run_cell(_readme_notebook_code())
        assert result.success, result.error_in_exec or result.error_before_exec
        last = shell.display_formatter.format(result.result)[0]
    finally:
        InteractiveShell.clear_instance()
    outputs = [o.data for o in shown.outputs] + [last]
    assert len(outputs) == 3 and all("text/html" in o for o in outputs)
    assert [o["text/plain"].split()[0] for o in outputs] == ["<Run", "<Summary", "<Diff"]
    assert (
        "profkit-card" in last["text/html"] and "r18_eager -&gt; r18_compiled" in last["text/html"]
    )
    assert (tmp_path / "notebook.db").exists()


def test_a_card_in_chromium(db, browser, tmp_path):
    """The run, summary, diff and comparison cards on one page in headless Chromium: nothing
    fetched, no script error; a screenshot kept under SHOTS."""
    eager, compiled = db.run("r18_eager"), db.run("r18_compiled")
    d = eager.diff(compiled)
    cmp = profkit.Comparison(
        "resnet18", d.match, ["fp16 eager", "fp16 compile"], [eager, compiled], [d]
    )
    page_file = tmp_path / "cards.html"
    page_file.write_text(
        "<!doctype html><meta charset=utf-8><body style='margin:12px;background:#f6f8fa'>"
        + "<div style='height:10px'></div>".join(o._repr_html_() for o in (eager, d, cmp))
        + "</body>"
    )
    page = browser.new_page(viewport={"width": 1000, "height": 900})
    requests: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if not r.url.startswith("file:") else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_file.as_uri())
    cards = page.locator(".profkit-card")
    assert cards.count() == 3 and requests == [] and errors == []
    text = cards.nth(0).inner_text()
    assert "r18_eager" in text and "82.5%" in text and "top kernels by GPU time" in text
    box = cards.nth(1).bounding_box()
    assert box is not None and box["width"] <= 900
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "notebook_cards.png"), full_page=True)
    page.close()
