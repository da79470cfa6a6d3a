"""Issue 23: the report's module tree ("Where in the model"), built from the store's module
groups (profkit.analyze.modules) on the committed captures with attribution
(tests/data/where/), and opened level by level in a real headless Chromium.

Every node's time includes its descendants' and its children add up to it; the top level adds
up to the run's kernel time; a run without attribution shows one line saying so and how to get
it. Set PROFKIT_SHOTS to a folder to keep screenshots of the pages the browser tests open.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import profkit
from profkit.analyze.matrix import of_run
from profkit.analyze.module_tree import MODEL, OWN, ModuleNode, module_tree
from profkit.analyze.modules import NOT_ATTRIBUTED
from profkit.report import model

from . import chromium
from .conftest import NCU_DATA
from .where_data import EAGER, RUNS, import_where

RESNET = "resnet18_train-amp-eager-nsys"
LLAMA = "hf_llama-bf16-eager-nsys"
COMPILED = "hf_llama-bf16-compile-nsys"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """Every capture of tests/data/where/, and an ncu capture of before attribution."""
    d = profkit.open_db(tmp_path_factory.mktemp("tree") / "tree.db")
    for name in RUNS:
        import_where(d.store, name)
    d.import_file(NCU_DATA / "resnet18_fp16_eager.raw.csv.gz", name="no_attribution")
    return d


def walk(nodes: list[ModuleNode], depth: int = 0):
    for n in nodes:
        yield n, depth
        yield from walk(n.children, depth + 1)


def within(rows: list[dict], path: str) -> list[dict]:
    """The kernel rows of a module and its submodules."""
    return [k for k in rows if k["module"] == path or (k["module"] or "").startswith(path + ".")]


# ------------------------------------------------------------------ the tree, from the store
@pytest.mark.parametrize("name", RUNS)
def test_every_node_adds_up_to_its_children_and_the_top_to_the_run(db, name):
    store, run = db.store, db.run(name)
    groups = store.module_groups(run.id)
    nodes = module_tree(groups)
    # compiled models: kernels traced to operators only
    if not any(g.module is not None for g in groups):
        assert nodes == [] or [n.name for n in nodes] == [NOT_ATTRIBUTED]
        return
    assert sum(n.time_ns for n in nodes) == sum(g.time_ns for g in groups) == run.gpu_time_ns
    assert sum(n.launches for n in nodes) == sum(g.launches for g in groups)
    for node, _ in walk(nodes):
        assert sum(node.precision_ns.values()) == sum(node.phase_ns.values()) == node.time_ns
        assert node.matrix_tc_ns <= node.matrix_ns <= node.time_ns
        if node.children:
            kids = node.children
            assert sum(c.time_ns for c in kids) == node.time_ns, node.path
            assert sum(c.launches for c in kids) == node.launches, node.path
            assert sum(c.matrix_ns for c in kids) == node.matrix_ns, node.path
            assert [c.time_ns for c in kids] == sorted((c.time_ns for c in kids), reverse=True)
            assert [c.name for c in kids].count(OWN) <= 1
            for c in kids:
                assert (
                    c.path == node.path
                    if c.name == OWN
                    else c.path == (f"{node.path}.{c.name}" if node.path else c.name)
                )
    # the whole run's coverage of matrix work is the headline's
    mw = of_run(store, run)
    assert mw is not None
    assert sum(n.matrix_ns for n in nodes) == mw.time_ns
    assert sum(n.matrix_tc_ns for n in nodes) == mw.tensor_core_time_ns


@pytest.mark.parametrize("name", EAGER)
def test_a_modules_figures_are_its_kernels(db, name):
    """Against the kernel rows themselves: each first-level module's time, launches, per
    precision and per phase are those of the kernels of it and its submodules."""
    store, run = db.store, db.run(name)
    rows = [k for k in store.iter_kernels(run.id) if k["kind"] == "kernel"]
    (root,) = [n for n in module_tree(store.module_groups(run.id)) if n.name == MODEL]
    assert root.path == ""
    for child in root.children:
        if child.name == OWN:
            continue
        mine = within(rows, child.path)
        assert child.time_ns == sum(k["duration_ns"] or 0 for k in mine)
        assert child.launches == len(mine)
        for p, t in child.precision_ns.items():
            assert t == sum(
                k["duration_ns"] or 0 for k in mine if (k["precision"] or "unknown") == p
            )
        assert child.phase_ns.get("backward", 0) == sum(
            k["duration_ns"] or 0 for k in mine if k["phase"] == "backward"
        )


def test_the_first_levels(db):
    resnet = module_tree(db.store.module_groups(db.run(RESNET).id))
    assert [n.name for n in resnet] == [
        MODEL,
        "(optimizer)",
        "(outside modules)",
        "(CrossEntropyLoss)",
    ]
    root = resnet[0]
    assert {c.name for c in root.children} == {
        "conv1",
        "bn1",
        "relu",
        "maxpool",
        "layer1",
        "layer2",
        "layer3",
        "layer4",
        "avgpool",
        "fc",
    }
    assert (
        root.phase_ns["backward"] and root.phase_ns["forward"] and "optimizer" not in root.phase_ns
    )
    assert resnet[1].phase_ns == {"optimizer": resnet[1].time_ns}
    layer1 = next(c for c in root.children if c.name == "layer1")
    block = next(c for c in layer1.children if c.name == "0")
    assert block.module_type == "BasicBlock" and block.path == "layer1.0"
    conv = next(c for c in block.children if c.name == "conv1")
    assert conv.module_type == "Conv2d" and conv.children == [] and conv.tensor_core_pct is not None
    llama = module_tree(db.store.module_groups(db.run(LLAMA).id))
    assert [n.name for n in llama] == [MODEL]
    assert {c.name for c in llama[0].children} == {"model", "lm_head"}
    # the RMS norms and the rotary embedding are the bf16 model's fp32 work (issue 23's "where")
    layer = next(c for c in llama[0].children[0].children if c.name == "layers").children[0]
    norm = next(c for c in layer.children if c.name == "input_layernorm")
    assert norm.module_type == "LlamaRMSNorm" and next(iter(norm.precision_ns)) == "fp32"


def test_a_run_without_attribution_says_so_in_one_line(db):
    for name, why in (("no_attribution", None), (COMPILED, "Inductor")):
        page = model.modules(db.store, db.run(name))
        assert page["nodes"] == [] and "\n" not in page["note"]
        assert page["note"].startswith(
            "This capture has no module attribution: profkit run records"
        )
        assert "--attribution under nsys and torch" in page["note"]
        assert (why in page["note"]) if why else "Here:" not in page["note"]
    assert model.modules(db.store, db.run(RESNET))["note"] is None


# ------------------------------------------------------------------ the tree in a browser
@pytest.fixture(scope="module")
def pages(db, tmp_path_factory):
    out = tmp_path_factory.mktemp("tree-pages")
    return {
        n: db.run(n).report(out / f"{n}.html") for n in (RESNET, LLAMA, COMPILED, "no_attribution")
    }


def shot(page, name: str) -> None:
    folder = os.environ.get("PROFKIT_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.locator("#modules").screenshot(path=str(Path(folder) / name))


def opened(browser, path):
    return chromium.ready_page(browser, path, height=1000)


def rows(page) -> list[dict]:
    return page.eval_on_selector_all(
        "#module-tree tr.mnode",
        """trs => trs.map(tr => ({
        name: tr.dataset.name, path: tr.dataset.path, depth: Number(tr.dataset.depth), time: Number(tr.dataset.timeNs),
        expanded: tr.querySelector("button.toggle") ? tr.querySelector("button.toggle").getAttribute("aria-expanded") : null,
        text: tr.innerText}))""",
    )


def children_of(all_rows: list[dict], path: str) -> list[dict]:
    i = next(i for i, r in enumerate(all_rows) if r["path"] == path and r["name"] != OWN)
    depth, kids = all_rows[i]["depth"], []
    for r in all_rows[i + 1 :]:
        if r["depth"] <= depth:
            break
        if r["depth"] == depth + 1:
            kids.append(r)
    return kids


def toggle(page, path: str) -> None:
    page.locator(
        f'#module-tree tr.mnode[data-path="{path}"]:not([data-name="{OWN}"]) button.toggle'
    ).click()


@pytest.mark.skipif(chromium.available() is not None, reason=str(chromium.available()))
def test_the_resnet_tree_opens_level_by_level(db, pages, browser):
    page = opened(browser, pages[RESNET])
    shown = rows(page)
    tree = module_tree(db.store.module_groups(db.run(RESNET).id))
    # the top level, and the model's first level opened; nothing deeper
    assert [r["name"] for r in shown if r["depth"] == 0] == [n.name for n in tree]
    assert [r["name"] for r in shown if r["depth"] == 1] == [c.name for c in tree[0].children]
    assert max(r["depth"] for r in shown) == 1
    assert [r["time"] for r in shown if r["depth"] == 0] == [n.time_ns for n in tree]
    assert sum(r["time"] for r in shown if r["depth"] == 1) == shown[0]["time"]
    assert shown[0]["expanded"] == "true" and shown[1]["expanded"] == "false"
    header = page.inner_text("#module-tree thead")
    assert "backward" in header and "tensor cores" in header
    shot(page, "resnet18-train-collapsed.png")
    # click layer1: its blocks appear under it, adding up to it
    toggle(page, "layer1")
    shown = rows(page)
    kids = children_of(shown, "layer1")
    assert [k["name"] for k in kids] == [
        c.name for c in next(c for c in tree[0].children if c.name == "layer1").children
    ]
    assert sum(k["time"] for k in kids) == next(r["time"] for r in shown if r["path"] == "layer1")
    # keyboard: Enter on a focused block opens it, and the figures of a row read as the tree's
    page.focus('#module-tree tr.mnode[data-path="layer1.0"] button.toggle')
    page.keyboard.press("Enter")
    shown = rows(page)
    kids = children_of(shown, "layer1.0")
    assert {"conv1", "conv2", "bn1", "bn2", "relu"} <= {k["name"] for k in kids}
    assert sum(k["time"] for k in kids) == next(r["time"] for r in shown if r["path"] == "layer1.0")
    conv = next(r for r in kids if r["name"] == "conv1")
    assert "Conv2d" in conv["text"] and "fp16" in conv["text"] and "%" in conv["text"]
    # closing layer1 takes every row below it away
    toggle(page, "layer1")
    assert [r["path"] for r in rows(page) if r["path"].startswith("layer1.")] == []
    assert (
        page.get_attribute(
            '#module-tree tr.mnode[data-path="layer1"] button.toggle', "aria-expanded"
        )
        == "false"
    )


@pytest.mark.skipif(chromium.available() is not None, reason=str(chromium.available()))
def test_a_transformer_layer_opens_to_its_attention_mlp_and_norms(db, pages, browser):
    page = opened(browser, pages[LLAMA])
    shown = rows(page)
    assert [r["name"] for r in shown if r["depth"] == 0] == [MODEL]
    assert [r["name"] for r in shown if r["depth"] == 1] == ["model", "lm_head"]
    # an inference run: no backward column
    assert "backward" not in page.inner_text("#module-tree thead")
    for path in ("model", "model.layers", "model.layers.0"):
        toggle(page, path)
        shown = rows(page)
        kids = children_of(shown, path)
        assert kids and sum(k["time"] for k in kids) == next(
            r["time"] for r in shown if r["path"] == path
        ), path
    names = [k["name"] for k in children_of(shown, "model.layers.0")]
    assert {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"} <= set(names)
    assert [k["name"] for k in children_of(shown, "model.layers")] == ["0", "1"]
    norm = next(r for r in shown if r["path"] == "model.layers.0.input_layernorm")
    assert "LlamaRMSNorm" in norm["text"] and "fp32" in norm["text"]
    # the precision bar: one segment per precision, widths as the time shares
    bar = page.eval_on_selector_all(
        '#module-tree tr.mnode[data-path="model.layers.0.input_layernorm"] .pbar span',
        "ss => ss.map(s => [s.dataset.precision, parseFloat(s.style.width)])",
    )
    assert bar[0][0] == "fp32" and abs(sum(w for _, w in bar) - 100) < 0.01
    shot(page, "llama-layer-open.png")


@pytest.mark.skipif(chromium.available() is not None, reason=str(chromium.available()))
def test_a_run_without_attribution_shows_one_line(pages, browser):
    for name in ("no_attribution", COMPILED):
        page = opened(browser, pages[name])
        assert page.query_selector("#module-tree") is None
        note = page.inner_text("#modules-note")
        assert "no module attribution" in note and "--attribution" in note
        shot(page, f"{name}-note.png")


def test_findings_where_tables_show_module_and_shapes_where_the_places_carry_them(db):
    """The findings' "where" tables have operator, count and time; a place that carries its
    module and shapes (``FindingWhere`` with ``module``/``shapes``) adds those columns."""
    from profkit.report import page as html_page

    data = model.run_page(db.store, db.run(RESNET))
    finding = next(f for f in data["findings"] if f["where"] and f["id"] != "host_syncs")

    def where_table(html: str) -> str:
        rest = html[html.index(f'data-id="{finding["id"]}"') :]
        rest = rest[rest.index('class="where"') :]
        return rest[: rest.index("</details>")]

    table = where_table(html_page.render(data))
    # the place: module, operator and shapes in one cell on a run with attribution
    assert re.search(r'<td class="kname">[^<]*aten::', table)
    assert "<th>module</th>" not in table and "<th>shapes</th>" not in table
    finding["where"][0].update(module="layer1.0.conv1", shapes="[8,64,56,56];[64,64,3,3]")
    table = where_table(html_page.render(data))
    assert "<th>module</th>" in table and "<th>shapes</th>" in table
    assert (
        '<td class="kname">layer1.0.conv1</td><td class="kname">[8,64,56,56];[64,64,3,3]</td>'
        in table
    )
    assert table.count('<td class="kname">-</td>') == 2 * (len(finding["where"]) - 1)
