"""Issue 38, "stored and shown": a run's latest tuning (``profkit tune``) in its report (the ranked
fixes after the findings, an estimate read as one), in ``summary`` (the best measured fix, and
the JSON's ``tuning``) and in ``profkit check --max-untried-gain-pct``.

The run is a real capture (MobileNetV2 fp16 under ncu, tests/data/report), whose findings call
for channels-last and torch.compile (depthwise convolutions, fusable kernels) and a padded
dimension (misaligned shapes). The tuning stored with it is profkit's own record, built here from
rules.toml's ``[[fix]]`` entries (their titles and code) and ranked by ``tuning.rank``, as
``profkit tune`` builds it; its times are the kind a GPU gives, not read from any tool.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import profkit
from profkit.records import TuneTrial, Tuning
from profkit.report import model
from profkit.tuning import fix_rules, rank

from . import chromium
from .conftest import DATA, cli_json
from .conftest import cli as cli_at

MNV2 = DATA / "report" / "mnv2_fp16_ncu.raw.csv.gz"
SHOTS = Path("/work/shots")
BASE_MS = 4.80
# A failed trial's note as a tool may write it: tags, quotes, an ampersand, an escape sequence.
WIDE = {"COLUMNS": "300"}  # a line each, unwrapped
HOSTILE = 'RuntimeError: <script>alert(1)</script> & "quoted" \x1b[31mred'


def cli(*args, db):
    return cli_at(*args, db=db, env=WIDE)


def _measured(
    fix_ids: list[str], verdict: str, median_ms: float, answers: list[str], rel: float
) -> TuneTrial:
    fixes = [fix_rules()[f] for f in fix_ids]
    saving = round(BASE_MS - median_ms, 6)
    return TuneTrial(
        fix_ids,
        " + ".join(f.title for f in fixes),
        verdict,
        answers,
        [line for f in fixes for line in f.code_for(False, "cuda")],
        median_ms=median_ms,
        spread_ms=0.03,
        saving_ms=saving,
        saving_pct=round(100 * saving / BASE_MS, 2),
        rel_diff=rel,
        max_abs_diff=rel * 10,
        tolerance=1e-2,
        agreement="agree" if rel <= 1e-2 else "disagree",
        iter_ns=[int(median_ms * 1e6)] * 5,
    )


def a_tuning(run: profkit.Run, gains: bool = True) -> Tuning:
    """A tuning of ``run`` as profkit tune stores one: the baseline, the fixes its findings call
    for (each measured, or failed, or an estimate), ranked."""
    pad = fix_rules()["pad_dimensions"]
    trials = [
        _measured(
            ["channels_last"],
            "gain" if gains else "no gain",
            3.90 if gains else 4.79,
            ["depthwise_convolutions"],
            2e-3,
        ),
        _measured(
            ["compile"],
            "gain" if gains else "no gain",
            3.10 if gains else 4.78,
            ["fusable_kernels", "depthwise_convolutions"],
            4e-3,
        ),
        _measured(["cudnn_benchmark"], "no gain", 4.78, [], 0.0),
        _measured(["amp"], "outputs disagree", 4.10, ["fp32_in_half_run"], 0.2),
        TuneTrial(
            ["compile_reduce_overhead"],
            fix_rules()["compile_reduce_overhead"].title,
            "failed",
            ["fusable_kernels"],
            list(fix_rules()["compile_reduce_overhead"].code),
            note=HOSTILE,
        ),
        TuneTrial(
            ["pad_dimensions"],
            pad.title,
            "estimate",
            ["misaligned_shapes"],
            list(pad.code),
            estimate_ms=0.35,
            estimate_pct=7.29,
            note="needs your code: an estimate from the finding's time, not a measurement",
        ),
    ]
    return Tuning(
        run=run.name,
        run_id=run.id,
        target="mobilenet_v2",
        device="cuda",
        iters=20,
        warmup=5,
        created_at="2026-11-28T03:00:12+00:00",  # as profkit tune stores it
        baseline=TuneTrial(
            [],
            "baseline (the run's setting)",
            "baseline",
            median_ms=BASE_MS,
            spread_ms=0.02,
            iter_ns=[int(BASE_MS * 1e6)] * 5,
        ),
        trials=rank(trials),
    )


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A database with the capture three times: ``tuned`` (two tunings: an older one with no
    gain, then the latest with gains), ``flat`` (one tuning, no fix gains) and ``untuned``."""
    tmp = tmp_path_factory.mktemp("tuned")
    db = profkit.open_db(tmp / "profkit.db")
    runs = {name: db.import_file(MNV2, name=name) for name in ("tuned", "flat", "untuned")}
    db.store.add_tuning(a_tuning(runs["tuned"], gains=False))
    db.store.add_tuning(a_tuning(runs["tuned"]))
    db.store.add_tuning(a_tuning(runs["flat"], gains=False))
    return db, tmp


# ------------------------------------------------------------------ the report
def test_the_report_ranks_the_latest_tunings_fixes(tuned):
    db, tmp = tuned
    run = db.run("tuned")
    latest = run.latest_tuning()
    assert latest is not None and latest == run.tunings()[-1] and len(run.tunings()) == 2
    view = model.tuning(db.store, run)
    assert view is not None
    assert [t["title"] for t in view["trials"]] == [t.title for t in latest.trials]
    assert [t["verdict"] for t in view["trials"]] == [
        "gain",
        "gain",
        "estimate",
        "no gain",
        "outputs disagree",
        "failed",
    ]
    html = run.report(tmp / "tuned.html").read_text()
    section = html[html.index('<section id="tuning">') : html.index('<section id="modules">')]
    assert html.index('<section id="findings">') < html.index('<section id="tuning">')
    assert 'Ranked fixes <span class="sub">profkit tune, 2026-11-28 03:00 UTC</span>' in section
    assert "best measured fix (profkit tune): torch.compile, 35% less time a step (4.80 -&gt; " in (
        section
    )
    # the table: the baseline first, then each trial in its rank, with its figures
    rows = section.split('<tr class="')[1:]
    assert rows[0].startswith('baseline"') and "4.80 ms ±0.02" in rows[0]
    assert "torch.compile" in rows[1] and "3.10 ms ±0.03" in rows[1] and "35.4%" in rows[1]
    assert "agree (rel. diff 4e-03, tolerance 1e-02)" in rows[1]
    assert "fusable_kernels, depthwise_convolutions" in rows[1]
    assert "channels-last layout" in rows[2] and "18.8%" in rows[2]
    # an estimate reads as one, never as a measurement: no step time, "≤ N% (estimate)"
    est = rows[3]
    assert 'data-verdict="estimate"' in est and "≤ 8% (estimate)" in est
    assert '<td class="num">-</td>' in est and "7.3%" not in est
    assert "outputs disagree" in rows[5] and "disagree (rel. diff 2e-01" in rows[5]
    # each gain's and the estimate's code, in a code block; the notes escaped
    assert "<pre><code>model = torch.compile(model)</code></pre>" in section
    assert (
        "<pre><code>model = model.to(memory_format=torch.channels_last)\n"
        "images = images.contiguous(memory_format=torch.channels_last)</code></pre>" in section
    )
    assert "config.vocab_size = (config.vocab_size + 63) // 64 * 64  # a vocabulary" in section
    assert "width = (width + 7) // 8 * 8  # a layer width, head size or channel count" in section
    assert (
        "torch.compile, CUDA graphs: RuntimeError: &lt;script&gt;alert(1)&lt;/script&gt; &amp; "
        in (section)
    )
    assert "\\x1b[31mred" in section and "\x1b" not in html and "<script>alert" not in html
    # the page stays self-contained
    assert "http://" not in section and "https://" not in section


def test_a_report_without_tuning_shows_no_ranked_fixes(tuned):
    db, tmp = tuned
    run = db.run("untuned")
    assert run.latest_tuning() is None and model.tuning(db.store, run) is None
    html = run.report(tmp / "untuned.html").read_text()
    assert 'id="tuning"' not in html and "Ranked fixes" not in html


def test_a_tuning_without_gain_says_so_in_the_report(tuned):
    db, tmp = tuned
    html = db.run("flat").report(tmp / "flat.html").read_text()
    assert "profkit tune found no fix that gains beyond the steps&#39; spread (4 measured" in html
    assert "best measured fix" not in html


# ------------------------------------------------------------------ summary
def test_summary_names_the_best_measured_fix(tuned):
    db, _ = tuned
    out = cli("summary", "tuned", db=db.path)
    assert out.exit_code == 0, out.output
    last = out.stdout.strip().splitlines()[-1]
    assert last == (
        "best measured fix (profkit tune): torch.compile, 35% less time a step (4.80 -> 3.10 ms), "
        "outputs agree to 4e-03"
    )
    flat = cli("summary", "flat", db=db.path).stdout.strip().splitlines()[-1]
    assert flat.startswith("profkit tune found no fix that gains")
    untuned = cli("summary", "untuned", db=db.path).stdout
    assert "profkit tune" not in untuned and "best measured fix" not in untuned


def test_summary_json_carries_the_latest_tuning(tuned):
    db, _ = tuned
    s = cli_json("summary", "tuned", db=db.path)
    latest = db.run("tuned").latest_tuning()
    assert latest is not None
    assert s["tuning"] == json.loads(json.dumps(latest.to_dict()))
    assert (
        s["tuning"]["best"]["title"] == "torch.compile"
        and s["tuning"]["best"]["saving_pct"] == 35.42
    )
    assert db.run("tuned").summary().to_dict() == s  # the library and the command agree
    assert cli_json("summary", "untuned", db=db.path)["tuning"] is None
    assert cli_json("summary", "flat", db=db.path)["tuning"]["best"] is None


# ------------------------------------------------------------------ check
def test_check_fails_where_a_known_fix_would_still_gain_more(tuned):
    db, tmp = tuned
    r = cli("check", "tuned", "--max-untried-gain-pct", "20", db=db.path)
    assert r.exit_code == 1, r.output
    line = next(x for x in r.stdout.splitlines() if x.startswith("FAIL"))
    assert line.startswith(
        "FAIL  time a known fix would still save: 35.4% (limit at most 20% of a step): "
        "a known fix would still gain 35%: torch.compile (4.80 -> 3.10 ms a step), tuning of "
        "2026-11-28 03:00 UTC; apply it: model = torch.compile(model)"
    )
    assert "also over the limit" not in line  # channels-last's 18.8% is within it
    both = cli("check", "tuned", "--max-untried-gain-pct", "10", db=db.path).stdout
    assert "also over the limit: channels-last layout 19%" in both
    # the estimate (7%) is not a measurement: it fails nothing
    ok = cli("check", "tuned", "--max-untried-gain-pct", "36", db=db.path)
    assert ok.exit_code == 0, ok.output
    assert ok.stdout.startswith("PASS  time a known fix would still save: 35.4% (limit at most 36%")
    # from a check file, as from Python
    (tmp / "checks.toml").write_text("[tune]\nmax_untried_gain_pct = 20\n")
    assert cli("check", "tuned", "--config", tmp / "checks.toml", db=db.path).exit_code == 1
    report = db.run("tuned").check(max_untried_gain_pct=20)
    assert not report.ok and report.results[0].name == "untried_gain"
    assert report.results[0].measured == 35.42
    data = json.loads(
        cli("check", "tuned", "--max-untried-gain-pct", "20", "-f", "json", db=db.path).stdout
    )
    assert data["failed"] == 1 and data["results"][0]["limit"] == 20


def test_check_passes_a_tuning_without_gain(tuned):
    db, _ = tuned
    r = cli("check", "flat", "--max-untried-gain-pct", "0", db=db.path)
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(
        "PASS  time a known fix would still save: no gain (limit at most 0% of a step): profkit "
        "tune found no fix that gains"
    )


def test_check_cannot_judge_a_run_without_tuning(tuned):
    db, _ = tuned
    r = cli("check", "untuned", "--max-untried-gain-pct", "5", db=db.path)
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(
        "SKIP  time a known fix would still save: not measured (limit at most 5% of a step): "
        "cannot be judged: the run has no tuning"
    )
    assert (
        cli("check", "untuned", "--max-untried-gain-pct", "5", "--strict", db=db.path).exit_code
        == 1
    )


@pytest.mark.parametrize("limit", ["150", "-1", "nan"])
def test_check_refuses_a_bad_limit(tuned, limit):
    db, _ = tuned
    r = cli("check", "tuned", "--max-untried-gain-pct", limit, db=db.path)
    assert r.exit_code == 2 and "--max-untried-gain-pct" in r.output
    assert len(r.output.strip().splitlines()) == 1
    with pytest.raises(profkit.UsageError, match="`max_untried_gain_pct` must be a number from 0"):
        db.run("tuned").check(max_untried_gain_pct=float(limit))


def test_a_check_file_refuses_a_bad_limit(tuned):
    db, tmp = tuned
    bad = tmp / "bad.toml"
    bad.write_text('[tune]\nmax_untried_gain_pct = "lots"\n')
    r = cli("check", "tuned", "--config", bad, db=db.path)
    assert r.exit_code == 2
    assert '[tune] max_untried_gain_pct must be a number from 0 to 100, not "lots"' in r.output


# ------------------------------------------------------------------ in Chromium
@pytest.mark.skipif(chromium.available() is not None, reason=str(chromium.available()))
def test_the_ranked_fixes_in_chromium(tuned, browser, tmp_path):
    db, tmp = tuned
    path = db.run("tuned").report(tmp / "tuned-chromium.html")
    page = chromium.ready_page(browser, path)
    section = page.locator("#tuning")
    assert section.is_visible()
    assert (
        page.locator("#best-fix")
        .inner_text()
        .startswith("best measured fix (profkit tune): torch.compile, 35% less time a step")
    )
    cells = page.eval_on_selector_all(
        "#tuning-table tbody tr",
        "rows => rows.map(r => Array.from(r.cells).map(c => c.innerText.trim()))",
    )
    assert cells[0][1] == "baseline (the run's setting)" and cells[0][2] == "4.80 ms ±0.02"
    assert [c[0] for c in cells[1:]] == ["1", "2", "3", "4", "5", "6"]
    assert [c[1] for c in cells[1:3]] == ["torch.compile", "channels-last layout"]
    assert cells[3][3] == "≤ 8% (estimate)" and cells[3][2] == "-"
    # an estimate's row is set apart (italic), a gain's saving in the "faster" colour
    assert (
        page.eval_on_selector(
            '#tuning-table tr[data-verdict="estimate"] td', "td => getComputedStyle(td).fontStyle"
        )
        == "italic"
    )
    assert page.locator("#tuning .fix-code pre").count() == 3
    assert page.locator("#tuning .tune-notes li").nth(1).inner_text().endswith("\\x1b[31mred")
    # the table fits the page at 1400 px (no sideways scrolling of its box)
    assert page.eval_on_selector("#tuning .table-wrap", "w => w.scrollWidth <= w.clientWidth")
    shot = tmp_path / "tune-report.png"
    section.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    if SHOTS.is_dir():  # for a person to look at (the lead's folder, where there is one)
        shutil.copy(shot, SHOTS / "tune-report.png")


def test_an_estimate_is_an_upper_bound_rounded_up():
    """An estimate's share is an upper bound: rounded up to whole percent, so a small one reads
    ``≤1%``, never ``≤0%``; a share of time too small to round to 1% reads ``<1%``."""
    from profkit.analyze.tuned import bound_pct, share_pct

    assert [bound_pct(p) for p in (0.0, 0.3, 7.0, 7.29, 99.99)] == ["0%", "1%", "7%", "8%", "100%"]
    assert [share_pct(p) for p in (0.0, 0.3, 0.6, 12.4)] == ["0%", "<1%", "1%", "12%"]
    # a share stored as 0.00 (two decimals) of a time that is not nothing
    assert (bound_pct(0.0, 0.0004), share_pct(0.0, 0.0004)) == ("1%", "<1%")
    assert (bound_pct(0.0, 0.0), share_pct(0.0, None)) == ("0%", "0%")
