"""Issue 24: terminal tables that fit 80, 120 and 200 columns on the committed captures (every
figure and verdict whole, run names whole, long names cut in the middle; --wide and JSON whole),
CPU runs in CPU words, and the report's caveats in `summary` and `diff`.

A terminal is given to the command as rich takes one: TTY_COMPATIBLE=1 and COLUMNS (the
mechanism render.room reads); the last test runs the commands in a real terminal (tmux)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import profkit
from profkit import render
from profkit.store import Store

from .conftest import DATA, cli, cli_json
from .where_data import import_where

WIDTHS = (80, 120, 200)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SHOTS = Path("/work/shots-24/tables")
LLAMA, TRAIN, NCU, NCU_B, CPU, CPU_B = ("hf_llama-bf16-eager-nsys", "resnet18_train-amp-eager-torch",
                                        "r18_fp16_eager_ncu", "r18_fp16_torchscript_ncu", "cpu_resnet18_fp32",
                                        "cpu_resnet18_bf16")
NSYS = "nsys_resnet18_train_amp"  # its backward pass on autograd's thread: the report's ranges caveat


@pytest.fixture(scope="module")
def db(tmp_path_factory, nsys_dir):
    """ncu, nsys, Kineto (GPU and CPU) captures imported, and two issue-23 captures with
    attribution."""
    path = tmp_path_factory.mktemp("tables") / "t.db"
    d = profkit.open_db(path)
    for name, f in {NCU: DATA / "diff/r18_fp16_eager_ncu.raw.csv.gz",
                    NCU_B: DATA / "diff/r18_fp16_torchscript_ncu.raw.csv.gz",
                    CPU: DATA / "torch/cpu_resnet18_fp32.json.gz", CPU_B: DATA / "torch/cpu_resnet18_bf16.json.gz",
                    "t_eager": DATA / "diff/r18_fp16_eager_torch.json.gz",
                    "t_compile": DATA / "diff/r18_fp16_compile_torch.json.gz",
                    NSYS: nsys_dir / "nsys_resnet18_train_amp.sqlite"}.items():
        d.import_file(f, name=name)
    store = Store(path)
    for name in (LLAMA, TRAIN):
        import_where(store, name)
    return path


def screen(*args, db, width):
    r = cli(*args, db=db, env={"COLUMNS": str(width), "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "0"})
    assert r.exit_code == 0, r.output
    text = ANSI.sub("", r.stdout)
    wider = [ln for ln in text.splitlines() if len(ln) > width]
    assert not wider, (width, wider)
    return text


COMMANDS = {
    "runs": (("runs",), ["id", "name", "prec", "kernels", "time"]),
    "kernels": (("kernels", NCU), ["#", "kernel", "duration", "grid", "block", "prec", "TC", "evidence"]),
    "kernels-where": (("kernels", LLAMA), ["#", "kernel", "duration", "module", "op", "types", "ph", "prec", "TC"]),
    "summary": (("summary", LLAMA), ["precision", "launches", "share", "kernel", "time", "prec", "TC", "module",
                                     "TC of matrix", "phase"]),
    "diff": (("diff", NCU, NCU_B, "--all"), ["status", "kernel", "calls A->B", "time A", "time B", "delta",
                                             "prec A->B", "TC A->B"]),
    "diff-family": (("diff", "t_eager", "t_compile", "--match", "family"),
                    ["status", "work", "calls A->B", "delta", "prec A->B", "TC A->B", "variants A/B"]),
    "ranges": (("ranges", TRAIN), ["range", "thread", "wall", "kernels", "GPU ops", "GPU time", "other threads"]),
}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command", COMMANDS)
def test_every_table_fits_and_keeps_its_figures(db, command, width):
    args, columns = COMMANDS[command]
    text = screen(*args, db=db, width=width)
    for col in columns:
        assert col in text, (command, width, col)
    # numbers whole: no cut cell is a figure (a time, a percentage, a count: `14.444…`, `10…`)
    for ln in text.splitlines():
        for cell in re.findall(r"\S*…\S*", ln):
            assert not re.fullmatch(r"[\d.,%+\->]*…[\d.,%+\->]*( ?[mun]?s)?", cell) or not re.search(r"\d", cell), (command, width, ln)


@pytest.mark.parametrize("width", WIDTHS)
def test_figures_and_run_names_are_whole(db, width):
    """Each run's name, launches and time in `runs`, and each precision's share in `summary`, as
    JSON has them."""
    runs = screen("runs", db=db, width=width)
    for r in cli_json("runs", db=db):
        line = next(ln for ln in runs.splitlines() if ln.split()[:2] == [str(r["id"]), r["name"]])
        assert str(r["kernel_count"]) in line
    s = cli_json("summary", LLAMA, db=db)
    text = screen("summary", LLAMA, db=db, width=width)
    for p, ns in s["time_by_precision_ns"].items():
        share = f"{100 * ns / s['gpu_time_ns']:.1f}%"
        assert re.search(rf"^\s*{p}\s+\d+\s+\S+ \S+\s+{re.escape(share)}\s*$", text, re.M), (p, share)
    top = [k["pct"] for k in s["top_kernels"]]
    for pct in top:
        assert f"{pct:.1f}%" in text


def test_names_are_cut_in_the_middle_and_given_the_room(db):
    names = [r["name"].removeprefix("void ") for r in cli_json("kernels", NCU, db=db)]
    for width in WIDTHS:
        text = screen("kernels", NCU, db=db, width=width)
        rows = [ln.split(None, 1)[1] for ln in text.splitlines() if re.match(r"\s*\d+\s", ln)]
        cut = [r.split("  ")[0] for r in rows if "…" in r.split("  ")[0]]
        assert cut, width
        for cell in cut:  # both ends of a real name
            head, tail = cell.split("…")
            assert any(n.startswith(head) and n.endswith(tail) for n in names), cell
            assert len(head) >= 5 and len(tail) >= 5
        if width == 200:  # the names get the room (not ~70 characters)
            assert max(len(c) for c in cut) > 100
    wide = cli("kernels", NCU, "--wide", db=db, env={"COLUMNS": "80", "TTY_COMPATIBLE": "1"}).stdout
    assert "…" not in wide and all(n in wide for n in names)


def test_a_table_too_wide_is_dropped_or_split_never_cut(db):
    """At 80 columns `runs` leaves out text columns (and says which), and `diff` splits in
    two tables that repeat the name: nothing with a figure is lost."""
    text = screen("runs", db=db, width=80)
    assert "not shown at 80 columns:" in text and "--wide" in text
    assert "finished" not in text.split("not shown")[0]
    diff = screen("diff", NCU, NCU_B, "--all", "--match", "exact", db=db, width=80)
    assert diff.count(" kernel ") == 2  # the name heads both parts


def test_csv_and_json_keep_whole_names(db):
    rows = cli_json("kernels", NCU, db=db)
    csv_out = cli("kernels", NCU, "-f", "csv", db=db, env={"COLUMNS": "80", "TTY_COMPATIBLE": "1"}).stdout
    assert "…" not in csv_out and max(len(r["name"]) for r in rows) > 200
    assert all(r["name"] in csv_out or '"' in r["name"] for r in rows)


def test_cut_text():
    assert render.cut_text("abcdefghij", 5, "middle") == "ab…ij"
    assert render.cut_text("abcdefghij", 6, "middle") == "abc…ij"
    assert render.cut_text("model.layers.0.mlp", 8, "start").endswith(".0.mlp")
    assert render.cut_text("short", 8, "middle") == "short"
    assert render.cut_text("123456", 3, None) == "123456"


# ---------------------------------------------------------------------------------- CPU words
GPU_WORDS = ("GPU time", "launches", "tensor-core", "tensor core", "TC")


@pytest.mark.parametrize("args", [("summary", CPU), ("kernels", CPU), ("diff", CPU, CPU_B, "--all"),
                                  ("ranges", CPU)])
def test_cpu_runs_in_cpu_words(db, args):
    for width in (80, 200):
        text = screen(*args, db=db, width=width)
        words = set(text.split())
        assert "TC" not in words and "GPU time" not in text and "launches" not in text, text
        assert "tensor-core share" not in text
        assert "operator" in text or "ops" in text or "CPU" in text


def test_cpu_compare_in_cpu_words(db, capsys, monkeypatch):
    """`compare`'s tables (built here from stored runs, as compare builds them)."""
    from profkit.api import Comparison

    d = profkit.open_db(db)
    a, b = d.run(CPU), d.run(CPU_B)
    cmp = Comparison("resnet18", "exact", ["fp32 eager", "bf16 eager"], [a, b], [a.diff(b)])
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    render.compare(cmp, "table")
    text = ANSI.sub("", capsys.readouterr().out)
    assert "CPU self time" in text and "GPU time" not in text and "launches" not in text
    assert "TC" not in text.split() and "tensor-core" not in text and "fused" not in text
    assert max(len(ln) for ln in text.splitlines()) <= 80
    assert cpu_bf16_in(text)
    gpu = d.run(NCU), d.run(NCU_B)
    render.compare(Comparison("resnet18", "exact", ["eager", "torchscript"], list(gpu), [gpu[0].diff(gpu[1])]),
                   "table")
    text = ANSI.sub("", capsys.readouterr().out)
    assert "TC of matrix work" in text and "tensor-core share" in text
    assert max(len(ln) for ln in text.splitlines()) <= 80


def cpu_bf16_in(text):
    return CPU in text and CPU_B in text


def test_json_keys_stay(db):
    """The words are for people: the JSON of a CPU run keeps its keys."""
    s = cli_json("summary", CPU, db=db)
    assert {"gpu_time_ns", "kernels", "tensor_core_time_pct"} <= set(s)


# ---------------------------------------------------------------------------------- caveats
def test_summary_prints_the_reports_caveats(db):
    """A capture that holds work outside its measured iterations: the report's caveat is in
    `summary`, word for word, from the one function both use."""
    from profkit.analyze.ranges import caveats
    from profkit.report.model import run_page

    store = Store(db)
    for name in (LLAMA, TRAIN, NCU, CPU):
        run = profkit.open_db(db).run(name)
        found = caveats(store, run)
        assert run_page(store, run)["caveats"] == found == run.caveats()
        text = " ".join(screen("summary", name, db=db, width=200).split())
        for sentence in found.values():
            assert f"caveat: {sentence}" in text
    assert caveats(store, profkit.open_db(db).run(NSYS)), "no capture with a caveat"
    assert "caveat" not in cli("summary", TRAIN, "-f", "json", db=db).stdout


def test_diff_prints_the_reports_caveats(db):
    """`diff` prints the notes the side-by-side report shows (the diff's own, one list)."""
    from profkit.report.model import vs_page

    store = Store(db)
    d = profkit.open_db(db)
    page = vs_page(store, d.run(CPU), d.run(CPU_B))
    notes = page["diff"]["totals"]["notes"]
    assert notes
    text = " ".join(screen("diff", CPU, CPU_B, db=db, width=120).split())
    for n in notes:
        assert f"note: {n}" in text


# ---------------------------------------------------------------------------------- a real terminal
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_in_a_real_terminal(db, tmp_path):
    """summary, kernels and diff in tmux at 80, 120 and 200 columns: no line wider than the
    window, the verdict columns there; the screens are kept for a person to read."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    env = f"PYTHONPATH={Path(__file__).resolve().parents[1]} PROFKIT_DB={db}"
    for width in WIDTHS:
        for name, args, must in (("summary", f"summary {LLAMA}", ["prec", "TC", "share", "TC of matrix"]),
                                 ("kernels", f"kernels {LLAMA} --limit 25", ["prec", "TC", "duration", "ph"]),
                                 ("diff", f"diff {NCU} {NCU_B} --all", ["prec A->B", "TC A->B", "delta"]),
                                 ("summary-cpu", f"summary {CPU}", ["CPU self time", "share"])):
            session = f"{name}{width}"
            # a server of its own for each screen: its first session sets the window's size
            tmux = ["tmux", "-L", f"profkit-tables-{tmp_path.name}-{session}"]
            done = tmp_path / f"{session}.done"
            cmd = f"env {env} {sys.executable} -m profkit {args}; touch {done}; sleep 30"
            subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", str(width), "-y", "100", cmd],
                           check=True)
            for _ in range(300):
                if done.exists():
                    break
                time.sleep(0.1)
            time.sleep(0.3)
            shot = subprocess.run([*tmux, "capture-pane", "-p", "-J", "-t", session], check=True,
                                  capture_output=True, text=True).stdout
            subprocess.run([*tmux, "kill-server"], check=False)
            (SHOTS / f"{name}-{width}.txt").write_text(shot)
            lines = shot.rstrip("\n").splitlines()
            assert max(len(ln.rstrip()) for ln in lines) <= width, (name, width)
            assert "Traceback" not in shot
            for col in must:
                assert col in shot, (name, width, col)


@pytest.mark.parametrize("width", WIDTHS)
def test_bench_show_keeps_every_figure(tmp_path, width):
    """`bench --show` and `--list` on the stored benchmark of tests/data/behaviour: top-1
    agreement (100.0%), times and spreads whole at every width."""
    import gzip

    path = tmp_path / "b.db"
    path.write_bytes(gzip.decompress((DATA / "behaviour" / "bench.db.gz").read_bytes()))
    b = cli_json("bench", "--list", db=path)[0]
    text = screen("bench", "--show", b["id"], db=path, width=width)
    for col in ("median", "±", "min", "max", "items/s", "s/item", "peak MiB", "max abs diff", "top-1"):
        assert col in text
    assert "100.0%" in text and "10…" not in text
    for r in cli_json("bench", "--show", b["id"], db=path)["rows"]:
        if r["status"] == "ok":
            assert f"{r['items_per_s']:,.1f}" in text
    listing = screen("bench", "--list", db=path, width=width)
    assert b["workload"] in listing
