"""Issue 24: how the report looks, checked in a real headless Chromium on reports made from
committed captures (tests/data/report, tests/data/diff, tests/data/where).

- One colour meaning per concept: every badge, chart and line takes its colours from
  ``report.palette``; the computed colours are the palette's, and no colour value serves two
  concepts (green is fp16 only: not tensor cores, not "faster").
- CUDA cores are normal for work that does no matrix math: an element-wise kernel's badge is
  neutral; only matrix work (GEMM, conv, attention) off the tensor cores is a warning.
- Readable at 700 px: nothing overflows the page, the columns that carry the answer stay in
  view, the others are one click away, long names are cut in the middle with the full name in
  the title.
- The index shows each run's tensor-core coverage of matrix work and links the side-by-side
  pages there are.

Set PROFKIT_SHOTS to a folder to keep full-page screenshots of each page at 1400 and 700 px.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote

import pytest

import profkit
from profkit.analyze.matrix import MATRIX_FAMILIES, of_run, pct_text
from profkit.parse.schema import PRECISIONS
from profkit.report import model, side_by_side_pages
from profkit.report.palette import NEUTRAL, PALETTE, css_variables

from . import chromium
from .conftest import DATA
from .where_data import import_where

needs_chromium = pytest.mark.skipif(
    chromium.available() is not None, reason=str(chromium.available())
)
TREE = "resnet18_train-amp-eager-nsys"  # attribution, a timeline and a module tree
PAIR = ("heuristic", "autotuned")  # tests/data/diff: the same model, cuDNN's kernels changed


@pytest.fixture(scope="module")
def site(tmp_path_factory, diff_dir):
    """A database of an ncu run (MobileNetV2: depthwise convolutions on CUDA cores beside
    element-wise kernels), an issue-23 capture with a module tree and a timeline, and a pair of
    nsys runs; their pages, one side-by-side page (where `profkit report A --vs B` puts it) and
    the index."""
    tmp = tmp_path_factory.mktemp("look")
    db = profkit.open_db(tmp / "look.db")
    import_where(db.store, TREE)
    db.import_file(DATA / "report" / "mnv2_fp16_ncu.raw.csv.gz", name="mnv2")
    db.import_file(diff_dir / "r18_fp16_heuristic_nsys.sqlite", name=PAIR[0])
    db.import_file(diff_dir / "r18_fp16_autotuned_nsys.sqlite", name=PAIR[1])
    out = tmp / "reports"
    vs = db.run(PAIR[0]).report(out / "vs" / f"{PAIR[0]}+{PAIR[1]}.html", vs=db.run(PAIR[1]))
    # not linked: a page of runs this database does not hold, and another database's page
    (out / "vs" / "nosuch+mnv2.html").write_text("<html></html>")
    other = profkit.open_db(tmp / "other.db")
    other.import_file(DATA / "report" / "mnv2_fp16_ncu.raw.csv.gz", name="mnv2")
    other.import_file(DATA / "report" / "effb0_fp16_ncu.raw.csv.gz", name=TREE)
    other.run("mnv2").report(out / "vs" / f"mnv2+{TREE}.html", vs=other.run(TREE))
    index = db.write_index(out / "index.html")
    return db, {"run": out / "mnv2.html", "tree": out / f"{TREE}.html", "vs": vs, "index": index}


def rgb(hex_colour: str) -> str:
    """A palette colour as getComputedStyle writes it."""
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def concept_of(colour: str) -> set[str]:
    c = colour.strip().upper()
    found = {
        concept for concept, colours in PALETTE.items() for v in colours.values() if v.upper() == c
    }
    return found | ({"neutral"} if c in (v.upper() for v in NEUTRAL.values()) else set())


def shot(page, name: str) -> None:
    folder = os.environ.get("PROFKIT_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name), full_page=True)


def opened(browser, path, width=1400):
    return chromium.ready_page(browser, path, width=width)


def chart_colours(page, chart_id) -> list[tuple[str, str]]:
    """(label, colour) of every bar or slice a chart draws."""
    return page.evaluate(
        """id => { const c = Chart.getChart(document.getElementById(id)); const out = [];
        c.data.datasets.forEach(d => d.data.forEach((v, i) => {
          const col = Array.isArray(d.backgroundColor) ? d.backgroundColor[i] : d.backgroundColor;
          out.push([c.data.datasets.length > 1 ? d.label : String(c.data.labels[i]), col]); }));
        return out; }""",
        chart_id,
    )


def legend(page, chart_id) -> dict[str, str]:
    return dict(
        page.eval_on_selector_all(
            f'ul.legend[data-for="{chart_id}"] li',
            "lis => lis.map(li => [li.textContent, getComputedStyle(li.firstChild).backgroundColor])",
        )
    )


# ------------------------------------------------------------------ the palette itself
def test_the_palette_gives_each_colour_one_meaning():
    values = [v.upper() for colours in PALETTE.values() for v in colours.values()] + [
        v.upper() for v in NEUTRAL.values()
    ]
    assert len(values) == len(set(values))  # no colour in two concepts (nor twice in one)
    assert set(PALETTE["precision"]) == set(PRECISIONS)
    assert {"tensor", "matrix_cuda", "cuda"} <= set(PALETTE["tc"]) and set(PALETTE["change"]) == {
        "faster",
        "slower",
    }
    css = css_variables()
    for concept, colours in PALETTE.items():
        for key, value in colours.items():
            assert f"--c-{concept}-{key}: {value};" in css


def test_kernel_rows_say_whether_they_are_matrix_work(site):
    db, _ = site
    rows = model.kernel_table(db.store, db.run("mnv2"))["rows"]
    assert all(r["matrix"] == (r["family"] in MATRIX_FAMILIES) for r in rows)
    assert any(r["matrix"] and r["tc"] == "no" for r in rows) and any(
        not r["matrix"] and r["tc"] == "no" for r in rows
    )


# ------------------------------------------------------------------ colours as drawn
@needs_chromium
def test_run_page_colours_are_the_palettes(site, browser):
    db, pages = site
    page = opened(browser, pages["run"])
    seen: dict[str, set[str]] = {}

    def saw(concept, colour):
        seen.setdefault(concept, set()).add(colour)

    # badges in the kernel table: each precision's and tensor-core use's own colour
    for cls, bg in page.eval_on_selector_all(
        "#kernel-table .badge",
        "bs => bs.map(b => [b.className, getComputedStyle(b).backgroundColor])",
    ):
        kind = cls.split()[1]
        prefix, key = kind.split("-", 1)
        concept = {"p": "precision", "tc": "tc", "ev": "evidence", "st": None}[prefix]
        if concept:
            assert bg == rgb(PALETTE[concept][key]), kind
            saw(concept, bg)
    # charts: top kernels and time by precision in precision colours, tensor-core use in its own
    rows = model.kernel_table(db.store, db.run("mnv2"))["rows"]
    top = sorted(rows, key=lambda r: -r["time_ns"])[:15]
    assert [c.upper() for _, c in chart_colours(page, "chart-top")] == [
        PALETTE["precision"][r["precision"]] for r in top
    ]
    for label, colour in chart_colours(page, "chart-precision"):
        assert colour.upper() == PALETTE["precision"][label]
        saw("precision", rgb(colour.upper()))
    tc_keys = {
        "matrix work on tensor cores": "tensor",
        "matrix work on CUDA cores": "matrix_cuda",
        "other kernels (no matrix math)": "cuda",
        "matrix work, undecided": "unknown",
        "other kernels, undecided": "unknown",
        "other kernels on tensor cores": "tensor_other",
    }
    drawn = chart_colours(page, "chart-tensor")
    assert {label for label, _ in drawn} >= {
        "matrix work on tensor cores",
        "matrix work on CUDA cores",
        "other kernels (no matrix math)",
    }
    for label, colour in drawn:
        assert colour.upper() == PALETTE["tc"][tc_keys[label]], label
        saw("tc", rgb(colour.upper()))
    # a legend names the precisions the top-kernels bars use
    assert legend(page, "chart-top") == {
        p: rgb(PALETTE["precision"][p]) for p in dict.fromkeys(r["precision"] for r in top)
    }
    # findings in the finding colour; the headline's tensor-core figure in the tensor-core colour
    borders = page.eval_on_selector_all(
        ".finding", "fs => fs.map(f => getComputedStyle(f).borderLeftColor)"
    )
    assert borders and set(borders) == {rgb(PALETTE["severity"]["finding"])}
    saw("severity", borders[0])
    lead = page.eval_on_selector(".figure.lead", "f => getComputedStyle(f).borderTopColor")
    assert lead == rgb(PALETTE["tc"]["tensor"])
    # no colour drawn for two concepts
    every = [c for colours in seen.values() for c in colours]
    assert len(every) == len(set(every)), seen
    assert {"precision", "tc", "evidence", "severity"} <= set(seen)
    # green is fp16's only
    assert rgb(PALETTE["precision"]["fp16"]) not in seen["tc"]


@needs_chromium
def test_timeline_colours_are_the_palettes(site, browser):
    _, pages = site
    page = opened(browser, pages["tree"])
    expected = {
        "tensor cores": PALETTE["tc"]["tensor"],
        "matrix work on CUDA cores": PALETTE["tc"]["matrix_cuda"],
        "unknown": PALETTE["tc"]["unknown"],
        "other kernels (no matrix math)": PALETTE["tc"]["cuda"],
        "memcpy / memset": NEUTRAL["memory"],
    }
    drawn = dict(
        page.evaluate("""() => Chart.getChart(document.getElementById('chart-timeline')).data.datasets
                                   .map(d => [d.label, d.backgroundColor])""")
    )
    assert drawn and {k: v.upper() for k, v in drawn.items()} == {k: expected[k] for k in drawn}
    # the module tree's precision bars: the precisions' colours
    for p, bg in page.eval_on_selector_all(
        "#module-tree .pbar span",
        "ss => ss.map(s => [s.dataset.precision, getComputedStyle(s).backgroundColor])",
    ):
        assert bg == rgb(PALETTE["precision"][p])


@needs_chromium
def test_vs_page_colours_are_the_palettes(site, browser):
    db, pages = site
    page = opened(browser, pages["vs"])
    d = db.run(PAIR[0]).diff(db.run(PAIR[1])).to_dict()
    for label, colour in chart_colours(page, "chart-vs-precision"):
        assert colour.upper() == PALETTE["precision"][label]
    # the largest changes: faster and slower in the change colours, the diff's "same" rows in neither
    big = sorted(d["rows"], key=lambda r: -abs(r["delta_time_ns"]))[:15]

    def key(r):
        return (
            "same"
            if r["status"] == "same" or not r["delta_time_ns"]
            else "faster"
            if r["delta_time_ns"] < 0
            else "slower"
        )

    colours = {
        "faster": PALETTE["change"]["faster"],
        "slower": PALETTE["change"]["slower"],
        "same": NEUTRAL["quiet"],
    }
    assert [c.upper() for _, c in chart_colours(page, "chart-vs-delta")] == [
        colours[key(r)] for r in big
    ]
    assert {"faster", "slower"} <= {key(r) for r in big}
    assert legend(page, "chart-vs-delta") == {
        "faster in B": rgb(colours["faster"]),
        "slower in B": rgb(colours["slower"]),
        f"within {d['threshold_pct']:g}% (the same)": rgb(colours["same"]),
    }
    # the table's change: Δ in the change colours; the status badge carries no colour
    for cls, colour in page.eval_on_selector_all(
        "#kernel-table td[data-key=delta_time_ns] span",
        "ss => ss.map(s => [s.className, getComputedStyle(s).color])",
    ):
        assert colour == rgb(PALETTE["change"][cls.removeprefix("d-")])
    for bg in page.eval_on_selector_all(
        "#kernel-table .badge", "bs => bs.map(b => getComputedStyle(b).backgroundColor)"
    ):
        assert bg == "rgba(0, 0, 0, 0)"
    # none of these colours means anything else
    drawn = [c for _, c in chart_colours(page, "chart-vs-delta")] + [
        c for _, c in chart_colours(page, "chart-vs-precision")
    ]
    assert all(len(concept_of(c)) == 1 for c in drawn)
    assert PALETTE["precision"]["fp16"] not in {
        c.upper() for _, c in chart_colours(page, "chart-vs-delta")
    }


# ------------------------------------------------------------------ CUDA cores: normal for memory-bound work
@needs_chromium
def test_cuda_cores_are_a_warning_for_matrix_work_only(site, browser):
    db, pages = site
    page = opened(browser, pages["run"])
    rows = model.kernel_table(db.store, db.run("mnv2"))["rows"]
    badges = page.eval_on_selector_all(
        "#kernel-table tbody tr.row",
        """trs => trs.map(tr => {
        const b = tr.querySelector('td[data-key=tc] .badge');
        return [+tr.dataset.index, b.className, b.textContent, b.title, getComputedStyle(b).backgroundColor]; })""",
    )
    assert len(badges) == len(rows)
    kinds = set()
    for i, cls, text, title, bg in badges:
        r = rows[i]
        if r["tc"] != "no":
            continue
        if r["matrix"]:  # a depthwise convolution, a first convolution: could run on tensor cores
            assert (
                cls == "badge tc-matrix_cuda" and text == "⚠ CUDA cores" and "matrix work" in title
            )
            assert bg == rgb(PALETTE["tc"]["matrix_cuda"])
        else:  # batch norm, element-wise, layout: where they belong
            assert cls == "badge tc-cuda" and text == "CUDA cores" and "should be" in title
            assert bg == rgb(PALETTE["tc"]["cuda"])
        kinds.add((r["matrix"], r["family"]))
    assert (False, "elementwise") in kinds and (True, "conv") in kinds
    elementwise = next(
        b for b in badges if rows[b[0]]["family"] == "elementwise" and rows[b[0]]["tc"] == "no"
    )
    assert elementwise[1] == "badge tc-cuda"


# ------------------------------------------------------------------ 700 px
def _fits(page) -> None:
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 700
    # anything wider than the window is inside a box that scrolls it
    wide = page.evaluate("""() => [...document.querySelectorAll('body *')].filter(e =>
        e.getBoundingClientRect().right > document.documentElement.clientWidth + 1 && !e.closest('.table-wrap'))
        .map(e => e.tagName + '.' + e.className)""")
    assert wide == []


def _in_view(page, host: str, keys: list[str]) -> None:
    """The header cells of ``keys`` are shown and inside the window, without scrolling."""
    for k in keys:
        box = page.locator(f'{host} th[data-key="{k}"]').bounding_box()
        assert (
            box is not None
            and box["width"] > 0
            and box["x"] >= 0
            and box["x"] + box["width"] <= 700
        ), k


@needs_chromium
def test_readable_at_700_px(site, browser):
    db, pages = site
    for kind, keys, low in [
        (
            "run",
            ["name", "precision", "tc", "launches", "time_ns", "pct"],
            ["evidence", "family", "mean_ns", "max_ns"],
        ),
        (
            "tree",
            ["name", "precision", "tc", "launches", "time_ns", "pct"],
            ["evidence", "family", "mean_ns", "max_ns"],
        ),
        (
            "vs",
            ["name", "status", "time_b_ns", "delta_time_ns", "delta_pct", "tensor_core_pct_a"],
            ["kind", "calls_a", "calls_b", "time_a_ns", "precision_a"],
        ),
        (
            "index",
            ["name", "workload", "precision", "time_ns", "matrix_tensor_core_pct"],
            ["mode", "tool", "gpu_name", "kernels", "tensor_core_time_pct", "date"],
        ),
    ]:
        page = opened(browser, pages[kind], width=700)
        _fits(page)
        _in_view(page, "#kernel-table", keys)
        for k in low:  # hidden, and one click away
            assert not page.locator(f'#kernel-table th[data-key="{k}"]').is_visible(), (kind, k)
        page.check("#kernel-table input.show-all-columns")
        for k in low:
            assert page.locator(f'#kernel-table th[data-key="{k}"]').is_visible(), (kind, k)
        _fits(page)  # the table scrolls in its own box
        page.uncheck("#kernel-table input.show-all-columns")
        if kind in ("run", "tree"):
            # long names cut in the middle, the whole name in the title
            rows = model.kernel_table(db.store, db.run("mnv2" if kind == "run" else TREE))["rows"]
            cells = page.eval_on_selector_all(
                "#kernel-table tbody tr.row",
                """trs => trs.map(tr => {
                const s = tr.querySelector('td[data-key=name] span'); return [+tr.dataset.index, s.textContent, s.title]; })""",
            )
            cut = [(rows[i], text, title) for i, text, title in cells if "…" in text]
            assert cut, kind
            # the shown name's start and end, the kernel's whole name on hover
            for (
                row,
                text,
                title,
            ) in cut:
                # (a label may hold "…" of its own: template arguments its siblings share)
                assert len(text) <= 44 and any(
                    row["short"].startswith(text[:i])
                    and row["short"].endswith(text[i + 1 :])
                    and text[i + 1 :]
                    for i, ch in enumerate(text)
                    if ch == "…"
                ), text
                assert title == row["name"]
        if kind == "tree":
            wrap = page.eval_on_selector(
                "#module-tree .table-wrap", "w => [w.scrollWidth, w.clientWidth]"
            )
            assert wrap[0] <= wrap[1]
            assert page.locator("#module-tree th", has_text="tensor cores").is_visible()
        shot(page, f"{kind}-700.png")
        wide = opened(browser, pages[kind], width=1400)
        for k in keys + low:  # a wide window shows every column
            assert wide.locator(f'#kernel-table th[data-key="{k}"]').is_visible(), (kind, k)
        assert wide.locator("#kernel-table input.show-all-columns").is_hidden()
        shot(wide, f"{kind}-1400.png")


# ------------------------------------------------------------------ the index
def test_the_index_lists_the_side_by_side_pages_of_its_runs(site):
    db, pages = site
    folder = pages["index"].parent
    names = {r.name for r in db.store.runs()}
    assert side_by_side_pages(db.store, folder, names) == [
        (PAIR[0], PAIR[1], f"vs/{PAIR[0]}+{PAIR[1]}.html")
    ]
    data = model.index_page(db.store, {}, side_by_side_pages(db.store, folder, names))
    assert data["pairs"] == [{"a": PAIR[0], "b": PAIR[1], "href": f"vs/{PAIR[0]}+{PAIR[1]}.html"}]
    assert side_by_side_pages(db.store, folder / "nowhere", names) == []


@needs_chromium
def test_index_shows_coverage_and_links_the_side_by_side_pages(site, browser):
    db, pages = site
    page = opened(browser, pages["index"])
    cells = dict(
        page.eval_on_selector_all(
            "#kernel-table tbody tr",
            """trs => trs.map(tr => [
        tr.querySelector('td[data-key=name]').innerText, tr.querySelector('td[data-key=matrix_tensor_core_pct]').innerText])""",
        )
    )
    assert cells == {r.name: pct_text(of_run(db.store, r)) for r in db.store.runs()}
    assert (
        page.locator('#kernel-table th[data-key="matrix_tensor_core_pct"]').inner_text()
        == "tensor cores: of matrix work"
    )
    links = page.eval_on_selector_all(
        "#pairs a", "as => as.map(a => [a.getAttribute('href'), a.innerText])"
    )
    assert links == [[f"vs/{PAIR[0]}+{PAIR[1]}.html", f"{PAIR[0]} vs {PAIR[1]}"]]
    page.click("#pairs a")  # the link works: the side-by-side page opens and draws
    page.wait_for_selector("body[data-ready]", state="attached")
    assert unquote(page.url) == unquote(pages["vs"].resolve().as_uri())
    assert page.locator("h1").inner_text().startswith(f"{PAIR[0]} vs {PAIR[1]}")


@needs_chromium
def test_an_index_without_side_by_side_pages_says_how_to_make_one(site, browser, tmp_path):
    db, pages = site
    index = db.write_index(tmp_path / "index.html")
    page = opened(browser, index)
    assert page.locator("#pairs a").count() == 0
    assert "profkit report RUN --vs RUN_B" in page.inner_text("#pairs")
