"""The headline that answers "did my matrix math run on the tensor cores?" (issue 23, item 4):
the tensor-core coverage of matrix work (time on tensor cores over the time of the GEMM,
convolution and attention kernels: the kernel table's ``family`` gemm, conv or attention),
beside the share of all GPU time, in ``summary``, ``diff``, ``compare``, the reports and the
index page, and in the API's records.

Every expected figure is computed here from the kernel table itself (``profkit kernels -f
json``) of real captures, not from profkit's aggregates. The report pages are opened in a real
headless Chromium; their screenshots go to ``$PROFKIT_SHOTS`` (default /work/shots-head when
that folder's parent exists, else the test's temporary folder).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import sqlite3
from dataclasses import asdict
from pathlib import Path

import pytest

import profkit
from profkit.analyze.matrix import MATRIX_FAMILIES
from profkit.errors import ProfkitWarning
from profkit.formatting import fmt_ns
from profkit.records import MatrixWork
from profkit.report import model

from . import chromium
from .conftest import DATA, NCU_DATA, cli, cli_json


@pytest.fixture(autouse=True)
def wide_window(monkeypatch):
    """A window wide enough that no line is wrapped: these tests read the lines' words (the
    widths are test_tables')."""
    monkeypatch.setenv("COLUMNS", "400")


needs_chromium = pytest.mark.skipif(
    chromium.available() is not None, reason=str(chromium.available())
)

GPU_RUNS = ("r50", "mnv2", "r18fp32", "bert", "nomatrix", "undecided")


# ------------------------------------------------------------------ captures
def _without_tensor_core_verdict(con: sqlite3.Connection, run_id: int, launches: list[int]) -> None:
    """Those launches of the run lose their tensor-core verdict, the others of their launch
    group keep it: each moves to a copy of its group (``kernel_groups``) with none."""
    from profkit.store.layout import GROUP_COLUMNS

    cols = ", ".join(GROUP_COLUMNS)
    copied: dict[int, int] = {}
    for launch in launches:
        (group,) = con.execute(
            "select group_id from launches where run_id = ? and launch_id = ?", [run_id, launch]
        ).fetchone()
        if group not in copied:
            (new,) = con.execute(
                "select max(id) + 1 from kernel_groups where run_id = ?", [run_id]
            ).fetchone()
            con.execute(
                f"insert into kernel_groups (run_id, id, {cols}) select run_id, ?, "
                f"{cols.replace('tensor_core', 'null')} from kernel_groups where run_id = ? and id = ?",
                [new, run_id, group],
            )
            copied[group] = new
        con.execute(
            "update launches set group_id = ? where run_id = ? and launch_id = ?",
            [copied[group], run_id, launch],
        )


def _without_matrix_kernels(src: Path, out: Path, matrix_names: set[str]) -> Path:
    """The ncu raw-page CSV ``src`` with every launch of a matrix kernel taken out: a real
    capture of a run that did no matrix work."""
    rows = list(csv.reader(io.StringIO(gzip.decompress(src.read_bytes()).decode())))
    col = rows[0].index("Kernel Name")
    kept = rows[:2] + [r for r in rows[2:] if r[col] not in matrix_names]
    assert len(kept) < len(rows) and len(kept) > 2
    with out.open("w", newline="") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(kept)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory, report_dir):
    """A database of real captures: ResNet-50 fp16 under nsys (all its matrix work on tensor
    cores, a quarter of its GPU time), MobileNetV2 fp16 under ncu (depthwise convolutions off
    them), ResNet-18 fp32 under ncu, a BERT encoder fp16 under torch.profiler (attention
    kernels), a CPU run, the ResNet-18 capture without its matrix kernels, and the ResNet-50
    capture with the tensor-core verdicts of some of its GEMM launches taken away (undecided)."""
    tmp = tmp_path_factory.mktemp("headline")
    db = profkit.open_db(tmp / "h.db")
    files = {
        "r50": report_dir / "r50_fp16_b64_nsys.sqlite",
        "mnv2": report_dir / "mnv2_fp16_ncu.raw.csv.gz",
        "r18fp32": NCU_DATA / "resnet18_fp32_eager.raw.csv.gz",
        "bert": DATA / "attention" / "bert_encoder_fp16.torch.json.gz",
        "cpu": DATA / "torch" / "cpu_resnet18_fp32.json.gz",
    }
    out = {k: db.import_file(f, name=k) for k, f in files.items()}
    with pytest.warns(ProfkitWarning, match="imported before as r50"):
        out["undecided"] = db.import_file(files["r50"], name="undecided")
    matrix_names = {
        k["name"] for k in kernels(db.path, "r18fp32") if k["family"] in MATRIX_FAMILIES
    }
    out["nomatrix"] = db.import_file(
        _without_matrix_kernels(files["r18fp32"], tmp / "nomatrix.raw.csv", matrix_names),
        name="nomatrix",
    )
    # Undecided: the first 40 GEMM launches of the ResNet-50 copy lose their verdict (as a kernel
    # no rule knows would have none), straight in the stored rows of that run.
    gemms = [k["launch_id"] for k in kernels(db.path, "undecided") if k["family"] == "gemm"][:40]
    undecided_id = out["undecided"].id
    db.close()
    con = sqlite3.connect(tmp / "h.db")
    with con:
        _without_tensor_core_verdict(con, undecided_id, gemms)
    con.close()
    # The run's aggregates (issue 25: what the analyses read) written again from its rows as edited,
    # as an importer writes them once its rows are final.
    from profkit.store import Store

    store = Store(tmp / "h.db")
    with store.write():
        store.write_aggregates(undecided_id)
    store.close()
    db = profkit.open_db(tmp / "h.db")
    return db, {k: db.run(k) for k in out}, tmp


def kernels(path, name):
    return cli_json("kernels", name, db=path)


def expected(rows, scale=1.0):
    """The coverage of matrix work, computed from the kernel table's rows as the issue defines it."""
    gpu = [k for k in rows if k["kind"] == "kernel"]
    matrix = [k for k in gpu if k["family"] in ("gemm", "conv", "attention")]
    time = sum(k["duration_ns"] for k in matrix)
    tc = sum(k["duration_ns"] for k in matrix if k["tensor_core"] is True)
    undecided = sum(k["duration_ns"] for k in matrix if k["tensor_core"] is None)
    total = sum(k["duration_ns"] for k in gpu)

    def n(x):
        x = x / scale
        return int(x) if float(x).is_integer() else round(x, 3)

    return {
        "time_ns": n(time),
        "tensor_core_time_ns": n(tc),
        "undecided_time_ns": n(undecided),
        "tensor_core_pct": round(100 * tc / time, 2) if time else None,
        "gpu_time_pct": round(100 * time / total, 2) if total else 0.0,
    }


def all_share(rows):
    gpu = [k for k in rows if k["kind"] == "kernel"]
    total = sum(k["duration_ns"] for k in gpu)
    return round(100 * sum(k["duration_ns"] for k in gpu if k["tensor_core"] is True) / total, 2)


# ------------------------------------------------------------------ summary: JSON, API, table
@pytest.mark.parametrize("name", GPU_RUNS)
def test_summary_figure_is_the_kernel_tables(runs, name):
    db, rs, _ = runs
    rows = kernels(db.path, name)
    want = expected(rows)
    summary = cli_json("summary", name, db=db.path)
    assert summary["matrix_work"] == want
    assert summary["tensor_core_time_pct"] == all_share(rows)
    # the API: the same numbers as a typed record
    mw = rs[name].summary().matrix_work
    assert isinstance(mw, MatrixWork) and asdict(mw) == want


def test_the_figures_on_the_committed_captures(runs):
    """What the issue says of ResNet-50 fp16: 24.7% of all GPU time then, 26.4% once cuDNN's first-layer convolution counts as the tensor-core convolution it is (issue 36), all its matrix work."""
    db, _, _ = runs
    r50 = cli_json("summary", "r50", db=db.path)
    assert r50["tensor_core_time_pct"] == 26.37 and r50["matrix_work"]["tensor_core_pct"] == 100.0
    mnv2 = cli_json("summary", "mnv2", db=db.path)["matrix_work"]
    assert 0 < mnv2["tensor_core_pct"] < 100  # its depthwise convolutions ran on CUDA cores
    bert = kernels(db.path, "bert")
    assert any(k["family"] == "attention" for k in bert)  # attention counts as matrix work
    assert (
        expected(bert)["time_ns"]
        > expected([k for k in bert if k["family"] != "attention"])["time_ns"]
    )


@pytest.mark.parametrize("name", ["r50", "mnv2", "r18fp32"])
def test_summary_table_says_what_the_figure_is(runs, name):
    db, _, _ = runs
    rows = kernels(db.path, name)
    want = expected(rows)
    r = cli("summary", name, db=db.path)
    assert r.exit_code == 0, r.output
    line = (
        f"tensor cores: {want['tensor_core_pct']:.1f}% of matrix work (GEMM, conv, attention: "
        f"{fmt_ns(want['time_ns'])}), {all_share(rows):.1f}% of all GPU time"
    )
    assert line in r.stdout, r.stdout


def test_no_matrix_work(runs):
    db, rs, _ = runs
    summary = cli_json("summary", "nomatrix", db=db.path)
    assert summary["matrix_work"] == {
        "time_ns": 0,
        "tensor_core_time_ns": 0,
        "undecided_time_ns": 0,
        "tensor_core_pct": None,
        "gpu_time_pct": 0.0,
    }
    assert summary["kernels"] > 0
    r = cli("summary", "nomatrix", db=db.path)
    assert (
        r.exit_code == 0
        and (
            "tensor cores: no matrix work (no GEMM, conv or attention kernels); "
            f"{summary['tensor_core_time_pct']:.1f}% of all GPU time"
        )
        in r.stdout
    )
    fig = {f["key"]: f for f in model.headline(rs["nomatrix"].summary(), "x")}["matrix_work"]
    assert fig["text"] == "no matrix work" and fig["value"] == summary["matrix_work"]
    d = cli_json("diff", "r18fp32", "nomatrix", db=db.path)["totals"]
    assert d["matrix_work_b"]["tensor_core_pct"] is None
    r = cli("diff", "r18fp32", "nomatrix", db=db.path)
    assert r.exit_code == 0 and "-> no matrix work" in r.stdout


def test_undecided_time_is_counted_out_and_said(runs):
    db, _, _ = runs
    rows = kernels(db.path, "undecided")
    want = expected(rows)
    assert want["undecided_time_ns"] > 0 and want["tensor_core_pct"] < 100.0
    assert want["tensor_core_time_ns"] + want["undecided_time_ns"] == want["time_ns"]
    assert cli_json("summary", "undecided", db=db.path)["matrix_work"] == want
    r = cli("summary", "undecided", db=db.path)
    assert (
        f"tensor cores: {want['tensor_core_pct']:.1f}% of matrix work (GEMM, conv, attention: "
        f"{fmt_ns(want['time_ns'])}, of which {fmt_ns(want['undecided_time_ns'])} undecided"
    ) in r.stdout
    r = cli("diff", "r50", "undecided", db=db.path)
    assert (
        f"100.0% of {fmt_ns(want['time_ns'])} -> {want['tensor_core_pct']:.1f}% of {fmt_ns(want['time_ns'])}, "
        f"{fmt_ns(want['undecided_time_ns'])} undecided" in r.stdout
    )
    # the capture as it came has no undecided matrix work
    assert cli("summary", "r50", db=db.path).stdout.count("undecided") == 0


def test_cpu_runs_keep_their_wording(runs):
    db, rs, _ = runs
    assert cli_json("summary", "cpu", db=db.path)["matrix_work"] is None
    assert rs["cpu"].summary().matrix_work is None
    r = cli("summary", "cpu", db=db.path)
    assert (
        "these are CPU operators, not GPU kernels: no tensor cores" in r.stdout
        and "matrix" not in r.stdout
    )
    figs = {f["key"]: f for f in model.headline(rs["cpu"].summary(), "x")}
    assert (
        "matrix_work" not in figs and figs["tensor_core_time_pct"]["text"] == "n/a (CPU operators)"
    )


# ------------------------------------------------------------------ diff and compare
def test_diff_totals_side_by_side(runs):
    db, rs, _ = runs
    # Same iteration counts: each side's figure is its summary's
    d = cli_json("diff", "mnv2", "r18fp32", db=db.path)["totals"]
    assert d["matrix_work_a"] == expected(kernels(db.path, "mnv2"))
    assert d["matrix_work_b"] == expected(kernels(db.path, "r18fp32"))
    # ResNet-50 holds 2 iterations, MobileNetV2 1: per iteration, as the rest of the totals
    d = cli_json("diff", "r50", "mnv2", db=db.path)["totals"]
    assert d["per_iteration"] and d["iterations_a"] == 2
    a = expected(kernels(db.path, "r50"), scale=2)
    assert d["matrix_work_a"] == a and d["gpu_time_a_ns"] * a[
        "gpu_time_pct"
    ] / 100 == pytest.approx(a["time_ns"], rel=1e-3)
    api = rs["r50"].diff(rs["mnv2"]).totals
    assert (
        isinstance(api.matrix_work_a, MatrixWork)
        and asdict(api.side("b").matrix_work) == d["matrix_work_b"]
    )
    r = cli("diff", "r50", "mnv2", db=db.path)
    b = d["matrix_work_b"]
    assert (
        f"tensor cores on matrix work (GEMM, conv, attention): 100.0% of {fmt_ns(a['time_ns'])} -> "
        f"{b['tensor_core_pct']:.1f}% of {fmt_ns(b['time_ns'])}"
    ) in r.stdout
    # the share of all, beside it
    assert "tensor-core share of GPU time: 26.4% -> 20.4%" in r.stdout
    # CPU against CPU: no tensor cores, no figure
    cpu = cli_json("diff", "cpu", "cpu", db=db.path)["totals"]
    assert cpu["matrix_work_a"] is None and cpu["matrix_work_b"] is None
    assert "matrix work" not in cli("diff", "cpu", "cpu", db=db.path).stdout


def test_compare_rows(runs, capsys):
    """compare's variant rows carry each variant's coverage (from the diffs' totals)."""
    from profkit import render
    from profkit.api import Comparison

    db, rs, _ = runs
    variants = [rs["r18fp32"], rs["mnv2"], rs["nomatrix"]]
    cmp = Comparison(
        "resnet18",
        "family",
        ["fp32", "mnv2", "none"],
        variants,
        [variants[0].diff(v, match="family") for v in variants[1:]],
    )
    rows = cmp.variant_rows()
    for row, name in zip(rows, ("r18fp32", "mnv2", "nomatrix")):
        want = expected(kernels(db.path, name))
        assert (row.matrix_tensor_core_pct, row.matrix_time_ns, row.matrix_undecided_time_ns) == (
            want["tensor_core_pct"],
            want["time_ns"],
            want["undecided_time_ns"],
        )
    assert cmp.to_dict()["variants"][1]["matrix_tensor_core_pct"] == rows[1].matrix_tensor_core_pct
    render.compare(cmp, "csv")
    out = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["matrix_tensor_core_pct"] for r in out] == [
        str(rows[0].matrix_tensor_core_pct),
        str(rows[1].matrix_tensor_core_pct),
        "",
    ]
    render.compare(cmp, "table")
    table = capsys.readouterr().out
    assert "TC of matrix work" in table and f"{rows[1].matrix_tensor_core_pct:.1f}% of " in table
    assert "tensor cores on matrix work (GEMM, conv, attention)" in table


def test_index_page_rows(runs):
    db, rs, _ = runs
    page = model.index_page(db.store, {})
    by_name = {r["name"]: r for r in page["runs"]}
    for name in GPU_RUNS:
        rows = kernels(db.path, name)
        assert by_name[name]["matrix_tensor_core_pct"] == expected(rows)["tensor_core_pct"]
        assert by_name[name]["tensor_core_time_pct"] == all_share(rows)
    assert by_name["cpu"]["matrix_tensor_core_pct"] is None and by_name["cpu"]["matrix_text"] == "-"
    assert by_name["nomatrix"]["matrix_text"] == "no matrix work"


# ------------------------------------------------------------------ in Chromium
def shots_dir(tmp: Path) -> Path:
    default = Path("/work/shots-head")
    out = Path(
        os.environ.get("PROFKIT_SHOTS") or (default if default.parent.is_dir() else tmp / "shots")
    )
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="module")
def pages(runs):
    db, rs, tmp = runs
    out = tmp / "out"
    paths = {
        k: rs[k].report(out / f"{k}.html") for k in ("r50", "mnv2", "nomatrix", "undecided", "cpu")
    }
    paths["vs"] = rs["r50"].report(out / "vs.html", vs=rs["mnv2"])
    paths["index"] = db.write_index(out / "index.html")
    return paths


def opened(browser, path):
    return chromium.ready_page(browser, path)


def chart_parts(page, chart_id):
    """The labels and values (ms) of a doughnut chart as drawn."""
    return page.evaluate(f"""() => {{ const c = Chart.getChart(document.getElementById('{chart_id}'));
        return c.data.labels.map((l, i) => [l, c.data.datasets[0].data[i]]); }}""")


@needs_chromium
@pytest.mark.parametrize("name", ["r50", "mnv2", "nomatrix", "undecided", "cpu"])
def test_run_report_headline_in_chromium(runs, pages, browser, name):
    db, _, tmp = runs
    page = opened(browser, pages[name])
    summary = cli_json("summary", name, db=db.path)
    fig = page.locator('.figure[data-key="matrix_work"]')
    if name == "cpu":  # no tensor cores: the headline as it was
        assert fig.count() == 0 and page.locator("#chart-tensor").count() == 0
        assert (
            page.locator('.figure[data-key="tensor_core_time_pct"] .label').inner_text()
            == "time on tensor cores"
        )
        page.locator("#headline").screenshot(path=str(shots_dir(tmp) / f"{name}_headline.png"))
        return
    assert json.loads(fig.get_attribute("data-value")) == summary["matrix_work"]
    assert "lead" in fig.get_attribute("class")
    value, basis = fig.locator(".value").inner_text(), fig.locator(".basis").inner_text()
    all_fig = page.locator('.figure[data-key="tensor_core_time_pct"]')
    assert json.loads(all_fig.get_attribute("data-value")) == summary["tensor_core_time_pct"]
    shots = shots_dir(tmp)
    page.locator("#headline").screenshot(path=str(shots / f"{name}_headline.png"))
    mw = summary["matrix_work"]
    page.locator("#charts figure.chart:has(#chart-tensor)").screenshot(
        path=str(shots / f"{name}_tensor_chart.png")
    )
    parts = dict(chart_parts(page, "chart-tensor"))
    assert sum(parts.values()) == pytest.approx(summary["gpu_time_ns"] / 1e6, rel=1e-6)
    assert parts.get("matrix work on tensor cores", 0) == pytest.approx(
        mw["tensor_core_time_ns"] / 1e6
    )
    off = mw["time_ns"] - mw["tensor_core_time_ns"] - mw["undecided_time_ns"]
    assert parts.get("matrix work on CUDA cores", 0) == pytest.approx(off / 1e6)
    assert parts.get("matrix work, undecided", 0) == pytest.approx(mw["undecided_time_ns"] / 1e6)
    if mw["tensor_core_pct"] is None:
        assert value == "no matrix work" and "no GEMM, conv or attention kernels" in basis
        return
    assert value == f"{mw['tensor_core_pct']:.1f}%"
    assert (
        f"GEMM, conv, attention: {fmt_ns(mw['time_ns'])} ({mw['gpu_time_pct']:.1f}% of GPU time)"
        in basis
    )
    caption = page.locator("#charts figure.chart:has(#chart-tensor) figcaption").inner_text()
    assert (
        f"matrix work (GEMM, conv, attention) {mw['tensor_core_pct']:.1f}% on tensor cores"
        in caption
    )
    if name == "undecided":
        assert f"of which {fmt_ns(mw['undecided_time_ns'])} undecided" in basis
    if name == "r50":
        # All its matrix work ran on tensor cores: nothing in the chart or the timeline is red.
        assert "matrix work on CUDA cores" not in parts
        assert parts["other kernels (no matrix math)"] > 2 * parts["matrix work on tensor cores"]
        labels = page.evaluate(
            "() => Chart.getChart(document.getElementById('chart-timeline')).data.datasets"
            ".map(d => d.label)"
        )
        assert (
            "matrix work on CUDA cores" not in labels and "other kernels (no matrix math)" in labels
        )
        page.locator("#timeline").screenshot(path=str(shots / "r50_timeline.png"))
    if name == "mnv2":
        assert parts["matrix work on CUDA cores"] > 0  # its depthwise convolutions


@needs_chromium
def test_vs_report_headline_in_chromium(runs, pages, browser):
    db, _, tmp = runs
    page = opened(browser, pages["vs"])
    for side, name in (("a", "r50"), ("b", "mnv2")):
        fig = page.locator(f'.figure[data-key="matrix_work"][data-side="{side}"]')
        assert (
            json.loads(fig.get_attribute("data-value"))
            == cli_json("summary", name, db=db.path)["matrix_work"]
        )
    t = cli_json("diff", "r50", "mnv2", db=db.path)["totals"]
    a, b = t["matrix_work_a"], t["matrix_work_b"]
    line = page.locator("#matrix-change").inner_text()
    assert line == (
        f"Tensor cores on matrix work (GEMM, conv, attention): {a['tensor_core_pct']:.1f}% of "
        f"{fmt_ns(a['time_ns'])} -> {b['tensor_core_pct']:.1f}% of {fmt_ns(b['time_ns'])}."
    )
    page.locator("#headline").screenshot(path=str(shots_dir(tmp) / "vs_headline.png"))


@needs_chromium
def test_index_in_chromium(runs, pages, browser):
    db, _, tmp = runs
    page = opened(browser, pages["index"])
    cells = page.eval_on_selector_all(
        "#kernel-table tbody tr",
        """rows => rows.map(r => [r.querySelector('td[data-key=name]').innerText,
            r.querySelector('td[data-key=matrix_tensor_core_pct]').innerText,
            r.querySelector('td[data-key=tensor_core_time_pct]').innerText])""",
    )
    shown = {n: (m, a) for n, m, a in cells}
    for name in GPU_RUNS:
        rows = kernels(db.path, name)
        pct = expected(rows)["tensor_core_pct"]
        assert shown[name] == (
            "no matrix work" if pct is None else f"{pct:.1f}%",
            f"{all_share(rows):.1f}%",
        )
    assert shown["cpu"] == ("-", "-")
    page.screenshot(path=str(shots_dir(tmp) / "index.png"), full_page=True)
