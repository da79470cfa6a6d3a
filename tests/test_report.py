"""HTML reports (profkit.report), made from real captures and opened the way a person sees them:
in a headless Chromium (Debian's chromium, driven by Playwright). Each page must run without
script errors, show the headline figures `summary --format json` gives, and have a table that
sorts and filters. A kernel name carrying a script must show as text and run nothing.

Browser tests skip where no Chromium or Playwright exists; .ci/run installs both.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from html import unescape
from pathlib import Path

import pytest

import profkit
from profkit.analyze.throughput import chip_of, throughput
from profkit.report import model

from . import chromium
from .conftest import DATA, NCU_DATA, cli, cli_json, help_words, one_line_error

needs_chromium = pytest.mark.skipif(
    chromium.available() is not None, reason=str(chromium.available())
)
XSS = "<script>alert(1)</script>"


# ------------------------------------------------------------------ the runs reported on
def _xss_capture(tmp_path: Path) -> Path:
    """The fp16 ResNet-18 ncu CSV with its first kernel's name edited to carry a script, and
    the quotes, ampersands and tags that break attributes and JSON."""
    import csv
    import io

    rows = list(
        csv.reader(
            io.StringIO(
                gzip.decompress((NCU_DATA / "resnet18_fp16_eager.raw.csv.gz").read_bytes()).decode()
            )
        )
    )
    col = rows[0].index("Kernel Name")
    rows[2][col] = rows[2][col].replace(
        "void ", f"void evil{XSS}\"'&amp;<img src=x onerror=alert(2)>_", 1
    )
    path = tmp_path / "xss.raw.csv"
    with path.open("w", newline="") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(rows)
    return path


@pytest.fixture(scope="module")
def reports(tmp_path_factory, diff_dir, report_dir):
    """A database with an ncu run, an nsys run, a CPU run, an eager/TorchScript pair and the
    script-carrying capture, and each one's report (and the pair's side-by-side one)."""
    tmp = tmp_path_factory.mktemp("reports")
    db = profkit.open_db(tmp / "r.db")
    files = {
        "ncu": report_dir / "mnv2_fp16_ncu.raw.csv.gz",
        "nsys": report_dir / "r50_fp16_b64_nsys.sqlite",
        "cpu": DATA / "torch" / "cpu_resnet18_fp32.json.gz",
        "eager": diff_dir / "r18_fp16_eager_ncu.raw.csv.gz",
        "ts": diff_dir / "r18_fp16_torchscript_ncu.raw.csv.gz",
        "xss": _xss_capture(tmp),
        "zoo": NCU_DATA / "precision_zoo.raw.csv.gz",
    }
    runs = {k: db.import_file(f, name=k) for k, f in files.items()}
    paths = {k: r.report(tmp / "out" / f"{k}.html") for k, r in runs.items()}
    paths["vs"] = runs["eager"].report(tmp / "out" / "vs.html", vs=runs["ts"])
    paths["index"] = db.write_index(tmp / "out" / "index.html")
    return db, runs, paths


def opened(browser, path):
    return chromium.ready_page(browser, path)


# ------------------------------------------------------------------ the page as a file
def test_self_contained_and_escaped(reports):
    _, _, paths = reports
    for kind, path in paths.items():
        html = path.read_text()
        # no network: nothing loaded from elsewhere, and the policy forbids it anyway
        assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html), kind
        csp = unescape(
            re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', html).group(1)
        )
        assert (
            csp.startswith("default-src 'none';")
            and "script-src 'sha256-" in csp
            and "unsafe-eval" not in csp
        )
        assert html.count("<script") == html.count("</script>") == (2 if kind == "index" else 3)
    xss = paths["xss"].read_text()
    assert XSS not in xss and "<img src=x" not in xss
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in xss or "\\u003cscript\\u003e" in xss


def test_compiled_template_kept_between_processes(reports, tmp_path, monkeypatch):
    """The template as Jinja2 compiled it is kept in profkit's folder of the user's cache and
    read back instead of compiling it again, for the same page; compiled again where the settings
    or a version differ, or the kept file is damaged; and where the folder is not this user's own
    (a link, a file), nothing is kept and each report compiles, as before."""
    import jinja2

    from profkit.report import page

    db, runs, _ = reports
    data = model.run_page(db.store, runs["ncu"])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "profkit" / "templates"
    compiled: list[str] = []
    compile_ = jinja2.Environment.compile

    def counting(self, source, name=None, filename=None, raw=False, defer_init=False):
        compiled.append(name)
        return compile_(self, source, name, filename, raw, defer_init)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)

    def fresh() -> tuple[str, int]:
        page._env.cache_clear()
        compiled.clear()
        return page.render(data), len(compiled)

    try:
        first, n = fresh()
        assert n == 1 and len(list(folder.iterdir())) == 1
        assert oct(folder.stat().st_mode & 0o777) == "0o700"
        assert fresh() == (first, 0)  # read back, not compiled
        # other settings (autoescaping off would make other code): compiled again
        monkeypatch.setitem(page.SETTINGS, "trim_blocks", False)
        assert fresh()[1] == 1
        monkeypatch.setitem(page.SETTINGS, "trim_blocks", True)  # one entry a template: again
        assert fresh() == (first, 1) and fresh() == (first, 0)
        for f in folder.iterdir():  # damaged: compiled again, and kept again
            f.write_bytes(b"j2" + os.urandom(64))
        assert fresh() == (first, 1) and fresh() == (first, 0)
        os.chmod(folder, 0o755)  # this user's, but opened to others: closed again, used
        assert fresh() == (first, 0) and oct(folder.stat().st_mode & 0o777) == "0o700"
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()
        (tmp_path / "elsewhere").mkdir()
        folder.symlink_to(tmp_path / "elsewhere")  # a link: no cache
        assert fresh() == (first, 1) and fresh() == (first, 1)
        assert not list((tmp_path / "elsewhere").iterdir())
        folder.unlink()
        folder.write_text("not a folder")  # a file: no cache
        assert fresh() == (first, 1)
    finally:
        page._env.cache_clear()


def test_headline_is_the_summary(reports):
    db, runs, _ = reports
    for name in ("ncu", "nsys", "cpu"):
        summary = cli_json("summary", name, "--top", "15", db=db.path)
        page = model.run_page(runs[name].database.store, runs[name])
        assert page["summary"] == summary
        keys = ("gpu_time_ns", "kernels", "tensor_core_time_pct", "time_by_precision_ns")
        # issue 23: the coverage of matrix work, on GPU runs
        keys += () if name == "cpu" else ("matrix_work",)
        assert {h["key"]: h["value"] for h in page["headline"]} == {k: summary[k] for k in keys}


def test_kernel_table_groups_launches(reports):
    _, runs, _ = reports
    table = model.kernel_table(runs["nsys"].database.store, runs["nsys"])
    assert sum(r["launches"] for r in table["rows"]) == runs["nsys"].kernel_count
    assert sum(r["time_ns"] for r in table["rows"]) == runs["nsys"].gpu_time_ns
    bn = table["rows"][0]
    assert (
        bn["launches"] == 106 and len(bn["inside"]) == model.LAUNCHES_PER_GROUP and bn["tc"] == "no"
    )
    assert bn["evidence"] == ["name"] and bn["details"]
    cutlass = next(r for r in table["rows"] if r["name"].startswith("void cutlass::Kernel2<"))
    assert (
        cutlass["short"].startswith("Kernel2<cutlass_80_tensorop_f16_") and cutlass["tc"] == "yes"
    )


def test_timeline_of_one_iteration(reports):
    _, runs, _ = reports
    tl = model.timeline(runs["nsys"].database.store, runs["nsys"])
    assert tl["note"] == "iteration resnet50.fp16.eager.iter0: 370 GPU operations"
    assert {b[0] for b in tl["bars"]} == {"stream 7"} and tl["bars"][0][1] == 0.0
    assert all(b[2] >= b[1] for b in tl["bars"]) and tl["span_us"] < 10_000
    assert (
        "ncu replays kernels" in model.timeline(runs["ncu"].database.store, runs["ncu"])["note"]
        and not model.timeline(runs["cpu"].database.store, runs["cpu"])["bars"]
    )


def test_throughput_from_counters(reports):
    _, runs, _ = reports
    t = throughput(runs["zoo"].database.store, runs["zoo"])
    assert t is not None and t.chip is not None and t.chip.name == "H100 SXM"
    tf32 = next(k for k in t.kernels if k.label.startswith("sm80_xmma_fprop_implicit_gemm_tf32"))
    # 2 x 924,844,032 multiply-adds of the 3x3 convolution over its measured duration
    assert (
        tf32.tensor_ops == 1_849_688_064
        and tf32.unit == "TFLOP/s"
        and tf32.achieved_tflops == pytest.approx(1_849_688_064 / tf32.time_ns / 1e3)
    )
    assert tf32.peak_tflops == 494.5 and tf32.peak_pct == pytest.approx(
        100 * tf32.achieved_tflops / 494.5
    )
    assert {k.precision for k in t.kernels} == {"fp64", "tf32", "fp16", "bf16", "fp8", "int8"}
    assert {k.unit for k in t.kernels if k.precision == "int8"} == {"TOPS"}
    assert t.run_rate["tf32"] == pytest.approx(t.tensor_ops["tf32"] / runs["zoo"].gpu_time_ns / 1e3)
    assert "--clock-control base" in t.notes[0]
    # no counters: no figures, no estimates
    assert throughput(runs["nsys"].database.store, runs["nsys"]) is None
    assert throughput(runs["cpu"].database.store, runs["cpu"]) is None


@pytest.mark.parametrize(
    "gpu, chip",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA GeForce RTX 4090", None),
        (None, None),
    ],
)
def test_chip_peaks(gpu, chip):
    found = chip_of(gpu)
    assert (found.name if found else None) == chip


def test_display_names_tell_launchers_apart():
    from profkit.names import display_name

    assert (
        display_name(
            "void at::native::vectorized_elementwise_kernel<(int)8, at::native::CUDAFunctor_add<c10::Half>, "
            "std::array<char *, (unsigned long)3>>(int, T2, T3)"
        )
        == "vectorized_elementwise_kernel<CUDAFunctor_add>"
    )
    assert (
        display_name(
            "void at::elementwise_kernel<128, 4, void at::gpu_kernel_impl_nocast<at::BinaryFunctor<c10::Half, "
            "c10::Half, c10::Half, binary_internal::MulFunctor<float>>>(at::TensorIteratorBase &, const T1 &)"
            "::[lambda(int) (instance 1)]>(int, T3)"
        )
        == "elementwise_kernel<MulFunctor>"
    )
    assert (
        display_name(
            "void cutlass::Kernel2<cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2_tn_align2>(T1::Params)"
        )
        == "Kernel2<cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2_tn_align2>"
    )
    assert (
        display_name("nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_bias_TNT")
        == "nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_bias_TNT"
    )


def test_index_links_every_run(reports):
    db, runs, paths = reports
    data = json.loads(
        re.search(r'id="profkit-data">(.*?)</script>', paths["index"].read_text(), re.S).group(1)
    )
    assert [r["name"] for r in data["runs"]] == list(runs)
    assert all((paths["index"].parent / r["report"]).exists() for r in data["runs"])


# ------------------------------------------------------------------ the command
def test_report_command(reports, tmp_path, monkeypatch):
    db, _, _ = reports
    monkeypatch.chdir(tmp_path)
    r = cli("report", "ncu", db=db.path)
    assert (
        r.exit_code == 0
        and r.stdout == "report: reports/ncu.html\n"
        and (tmp_path / "reports" / "ncu.html").exists()
    )
    r = cli("report", "eager", "--vs", "ts", "--match", "family", db=db.path)
    assert r.stdout == "report: reports/vs/eager+ts.html\n"
    assert '"match": "family"' in (tmp_path / "reports" / "vs" / "eager+ts.html").read_text()
    r = cli("report", "--index", "-o", "all/runs.html", db=db.path)
    assert r.stdout == "report: all/runs.html\n" and (tmp_path / "all" / "ncu.html").exists()
    assert not (tmp_path / "all" / "index.html").exists()


def test_writing_keeps_what_is_there(reports, tmp_path):
    """A symlink is written through, an existing file keeps its mode, and a pipe or a device is
    never replaced by a file."""
    _, runs, _ = reports
    (tmp_path / "link.html").symlink_to(tmp_path / "target.html")
    assert runs["ncu"].report(tmp_path / "link.html") == tmp_path / "link.html"
    assert (tmp_path / "link.html").is_symlink()
    assert (tmp_path / "target.html").stat().st_size > 100_000
    private = tmp_path / "private.html"
    private.write_text("x")
    private.chmod(0o600)
    runs["ncu"].report(private)
    assert private.stat().st_mode & 0o777 == 0o600 and private.stat().st_size > 100_000
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(profkit.UsageError, match="not a regular file"):
        runs["ncu"].report(tmp_path / "pipe")
    with pytest.raises(profkit.UsageError, match="not a regular file"):
        runs["ncu"].report("/dev/null")
    assert Path("/dev/null").is_char_device()


def test_index_pages_are_fresh_and_never_collide(tmp_path):
    """The index rewrites a run's page unless it is that run's (another database's page of the
    same name is not); a run named index has a page of its own; the index never overwrites one."""
    a, b = profkit.open_db(tmp_path / "a.db"), profkit.open_db(tmp_path / "b.db")
    a.import_file(NCU_DATA / "precision_zoo.raw.csv.gz", name="r")
    b.import_file(DATA / "report" / "mnv2_fp16_ncu.raw.csv.gz", name="r")
    b.import_file(NCU_DATA / "resnet18_fp16_eager.raw.csv.gz", name="index")
    a.write_index(tmp_path / "out" / "index.html")
    page = (tmp_path / "out" / "r.html").read_text()
    assert "precision_zoo" in page and str((tmp_path / "a.db").resolve()) in page
    before = (tmp_path / "out" / "r.html").stat().st_mtime_ns
    a.write_index(tmp_path / "out" / "index.html")
    assert (tmp_path / "out" / "r.html").stat().st_mtime_ns == before  # this run's page: kept
    b.write_index(tmp_path / "out" / "index.html")
    assert "mobilenet" in (tmp_path / "out" / "r.html").read_text()
    run_index = b.run("index")
    assert (tmp_path / "out" / f"index+{run_index.id}.html").exists()
    assert "profkit runs" in (tmp_path / "out" / "index.html").read_text()
    with pytest.raises(profkit.UsageError, match="would overwrite run r's report"):
        b.write_index(tmp_path / "out" / "r.html")
    with pytest.raises(profkit.UsageError, match="holds no runs"):
        profkit.open_db(tmp_path / "empty.db").write_index(tmp_path / "e.html")


def test_report_refusals(reports, tmp_path):
    db, _, _ = reports
    (tmp_path / "file").write_text("x")
    for args, code, message in [
        (["report"], 2, "give the RUN to report on (or --index for every run)"),
        (["report", "nosuch"], 1, "no run 'nosuch'"),
        (["report", "ncu", "--vs", "nosuch"], 1, "no run 'nosuch'"),
        (["report", "ncu", "--index"], 2, "--index writes the index of every run: give it no RUN"),
        (
            ["report", "ncu", "--match", "exact"],
            2,
            "--match and --threshold shape the diff of a side-by-side report",
        ),
        (["report", "ncu", "--threshold", "5"], 2, "give --vs RUN_B too"),
        (["report", "ncu", "-o", ""], 2, "no path to write the report to"),
        (["report", "ncu", "-o", str(tmp_path)], 2, "it is a folder. Give a file path to --output"),
        (
            ["report", "ncu", "-o", str(tmp_path / "file" / "x.html")],
            2,
            "file is a file, not a folder",
        ),
        (
            ["report", "--index", "-o", str(tmp_path / "file" / "x.html")],
            2,
            "file is a file, not a folder",
        ),
        (["report", "cpu", "--vs", "ncu"], 2, "holds CPU operators"),
    ]:
        one_line_error(cli(*args, db=db.path), message, code)
    one_line_error(cli("report", "x", db=tmp_path / "none.db"), "no database at", 1)
    assert not (tmp_path / "none.db").exists()


def test_run_and_compare_offer_no_report():
    for command in ("run", "compare"):
        text = " ".join(cli(command, "--help", env={"COLUMNS": "200"}).stdout.split())
        assert "--report / --no-report" in help_words(text) and "Write the HTML report" in text


# ------------------------------------------------------------------ in Chromium
def _column(page, key):
    return page.eval_on_selector_all(
        f'#kernel-table tbody tr.row td[data-key="{key}"]', "els => els.map(e => e.textContent)"
    )


def _shown_rows(page):
    return page.eval_on_selector_all(
        "#kernel-table tbody tr.row", "els => els.map(e => +e.dataset.index)"
    )


def _check_headline(page, summary, side=None):
    sel = '.figure[data-key="{}"]' + (f'[data-side="{side}"]' if side else "")
    for key in ("gpu_time_ns", "kernels", "tensor_core_time_pct", "time_by_precision_ns"):
        fig = page.locator(sel.format(key))
        assert json.loads(fig.get_attribute("data-value")) == summary[key], key
        assert fig.locator(".value").is_visible()
    from profkit.render import fmt_ns

    assert page.locator(sel.format("gpu_time_ns") + " .value").inner_text() == fmt_ns(
        summary["gpu_time_ns"]
    )
    assert page.locator(sel.format("kernels") + " .value").inner_text() == f"{summary['kernels']:,}"


def _check_sort_and_filter(page, rows, name_of, text_col="name"):
    n = len(rows)
    assert page.locator("#kernel-table .table-info").inner_text() == f"{n} rows"
    # sort by a numeric column: descending first, then ascending
    key = "launches" if page.locator('#kernel-table th[data-key="launches"]').count() else "calls_b"
    page.click(f'#kernel-table th[data-key="{key}"]')
    values = [rows[i][key] for i in _shown_rows(page)]
    assert values == sorted(values, reverse=True) and len(values) == min(50, n)
    assert page.get_attribute(f'#kernel-table th[data-key="{key}"]', "aria-sort") == "descending"
    page.click(f'#kernel-table th[data-key="{key}"]')
    values = [rows[i][key] for i in _shown_rows(page)]
    assert values == sorted(values)
    # filter by text: exactly the rows whose name holds it
    word = name_of(rows[0]).split("<")[0].split("(")[0][-6:].lower()
    page.fill("#kernel-table input.filter-text", word)
    expected = {i for i, r in enumerate(rows) if word in name_of(r).lower()}
    info = f"{len(expected)} of {n} rows match" if len(expected) < n else f"{n} rows"
    page.wait_for_function(
        "t => document.querySelector('#kernel-table .table-info').textContent === t", arg=info
    )
    shown = _shown_rows(page)
    assert 0 < len(shown) == min(50, len(expected)) and set(shown) <= expected
    page.fill("#kernel-table input.filter-text", "")
    page.wait_for_timeout(300)
    assert page.locator("#kernel-table .table-info").inner_text() == f"{n} rows"


@needs_chromium
@pytest.mark.parametrize("kind", ["ncu", "nsys", "cpu"])
def test_run_report_in_chromium(reports, browser, kind):
    db, runs, paths = reports
    page = opened(browser, paths[kind])
    summary = cli_json("summary", kind, db=db.path)
    _check_headline(page, summary)
    rows = model.kernel_table(runs[kind].database.store, runs[kind])["rows"]
    _check_sort_and_filter(page, rows, lambda r: r["name"])
    # a select filter: every row shown has that precision
    page.select_option('#kernel-table select[data-filter="precision"]', rows[0]["precision"])
    shown = _shown_rows(page)
    assert shown and all(rows[i]["precision"] == rows[0]["precision"] for i in shown)
    assert len(shown) == min(50, sum(r["precision"] == rows[0]["precision"] for r in rows))
    page.select_option('#kernel-table select[data-filter="precision"]', "")
    # a group opens on its launches and the evidence of its verdict
    page.click("#kernel-table tbody tr.row >> nth=0")
    details = page.locator("#kernel-table tr.details")
    assert details.count() == 1 and details.locator("tbody tr").count() == min(
        len(rows[_shown_rows(page)[0]]["inside"]), 25
    )
    assert "evidence" in details.inner_text()
    charts = page.evaluate(
        "() => ['chart-top', 'chart-precision', 'chart-tensor', 'chart-ranges', 'chart-timeline']"
        ".filter(id => document.getElementById(id) && Chart.getChart(document.getElementById(id)))"
    )
    expected = {
        "ncu": ["chart-top", "chart-precision", "chart-tensor", "chart-ranges"],
        "nsys": ["chart-top", "chart-precision", "chart-tensor", "chart-ranges", "chart-timeline"],
        "cpu": ["chart-top", "chart-precision", "chart-ranges"],
    }[kind]
    assert charts == expected
    if kind == "cpu":
        assert "CPU operator report" in page.locator("h1").inner_text()
        assert (
            page.locator('.figure[data-key="gpu_time_ns"] .label').inner_text() == "CPU self time"
        )
    if kind == "ncu":
        assert page.locator(".finding").count() == len(runs["ncu"].findings()) >= 3
        assert page.locator('.finding[data-id="depthwise_convolutions"]').count() == 1
        assert page.locator("#throughput-table tbody tr").count() > 5


@needs_chromium
def test_vs_report_in_chromium(reports, browser):
    db, runs, paths = reports
    page = opened(browser, paths["vs"])
    _check_headline(page, cli_json("summary", "eager", db=db.path), "a")
    _check_headline(page, cli_json("summary", "ts", db=db.path), "b")
    rows = runs["eager"].diff(runs["ts"]).to_dict()["rows"]
    _check_sort_and_filter(
        page, rows, lambda r: r["name"] + " " + " ".join(r["variants_a"] + r["variants_b"])
    )
    status = rows[0]["status"]
    page.select_option('#kernel-table select[data-filter="status"]', status)
    shown = _shown_rows(page)
    assert shown and all(rows[i]["status"] == status for i in shown)
    assert len(shown) == min(50, sum(r["status"] == status for r in rows))
    assert page.evaluate("() => !!Chart.getChart(document.getElementById('chart-vs-delta'))")


@needs_chromium
def test_index_in_chromium(reports, browser):
    _, runs, paths = reports
    page = opened(browser, paths["index"])
    links = page.eval_on_selector_all(
        "#kernel-table tbody a", "els => els.map(e => e.getAttribute('href'))"
    )
    assert sorted(links) == sorted(f"{n}.html" for n in runs)


@needs_chromium
def test_script_in_a_kernel_name_stays_text(reports, browser):
    _, _, paths = reports
    for kind in ("xss", "index"):
        page = opened(browser, paths[kind])  # asserts no dialog opened and no script error
        assert page.evaluate("() => document.scripts.length") == (2 if kind == "index" else 3)
        assert page.evaluate("() => document.querySelectorAll('img').length") == 0
    page = opened(browser, paths["xss"])
    page.fill("#kernel-table input.filter-text", "evil")
    page.wait_for_timeout(300)
    cell = page.locator("#kernel-table tbody tr.row td[data-key=name] span")
    assert cell.count() == 1 and XSS in cell.get_attribute("title")
    page.click("#kernel-table tbody tr.row")
    assert XSS in page.locator("#kernel-table tr.details .kname.full").inner_text()
    assert page.evaluate("() => document.querySelectorAll('script').length") == 3
