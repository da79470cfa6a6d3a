"""Issue 24: terminal tables that fit 80, 120 and 200 columns on the committed captures (every
figure and verdict whole, run names whole, long names cut in the middle; --wide and JSON whole),
CPU runs in CPU words, and the report's caveats in `summary` and `diff`. Issue 37: Rich lays the
tables out; COLUMNS is honoured piped or not, 80 where nothing says; kernels by the report's
short labels, never two kernels printed alike (cut or not); `runs` keeps the mode, `workloads`
fits, an empty section prints nothing, `run` names each file for what it is.

A terminal is given to the command as Rich takes one: TTY_COMPATIBLE=1 and COLUMNS (what
render.width_of reads); the tmux test runs the commands in a real terminal."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

import profkit
from profkit import render
from profkit.store import Store

from .conftest import DATA, cli, cli_json
from .where_data import import_where

WIDTHS = (80, 120, 200)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
LLAMA, TRAIN, NCU, NCU_B, CPU, CPU_B = (
    "hf_llama-bf16-eager-nsys",
    "resnet18_train-amp-eager-torch",
    "r18_fp16_eager_ncu",
    "r18_fp16_torchscript_ncu",
    "cpu_resnet18_fp32",
    "cpu_resnet18_bf16",
)
NSYS = (
    "nsys_resnet18_train_amp"  # its backward pass on autograd's thread: the report's ranges caveat
)


@pytest.fixture(scope="module")
def db(tmp_path_factory, nsys_dir):
    """ncu, nsys, Kineto (GPU and CPU) captures imported, and two issue-23 captures with
    attribution."""
    path = tmp_path_factory.mktemp("tables") / "t.db"
    d = profkit.open_db(path)
    for name, f in {
        NCU: DATA / "diff/r18_fp16_eager_ncu.raw.csv.gz",
        NCU_B: DATA / "diff/r18_fp16_torchscript_ncu.raw.csv.gz",
        CPU: DATA / "torch/cpu_resnet18_fp32.json.gz",
        CPU_B: DATA / "torch/cpu_resnet18_bf16.json.gz",
        "t_eager": DATA / "diff/r18_fp16_eager_torch.json.gz",
        "t_compile": DATA / "diff/r18_fp16_compile_torch.json.gz",
        NSYS: nsys_dir / "nsys_resnet18_train_amp.sqlite",
    }.items():
        d.import_file(f, name=name)
    store = Store(path)
    for name in (LLAMA, TRAIN):
        import_where(store, name)
    return path


def screen(*args, db, width):
    r = cli(
        *args, db=db, env={"COLUMNS": str(width), "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "0"}
    )
    assert r.exit_code == 0, r.output
    text = ANSI.sub("", r.stdout)
    wider = [ln for ln in text.splitlines() if len(ln) > width]
    assert not wider, (width, wider)
    return text


COMMANDS = {
    "runs": (("runs",), ["id", "name", "prec", "kernels", "time"]),
    "kernels": (
        ("kernels", NCU),
        ["#", "kernel", "duration", "grid", "block", "prec", "TC", "evidence"],
    ),
    "kernels-where": (
        ("kernels", LLAMA),
        ["#", "kernel", "duration", "module", "op", "types", "ph", "prec", "TC"],
    ),
    "summary": (
        ("summary", LLAMA),
        [
            "precision",
            "launches",
            "share",
            "kernel",
            "time",
            "prec",
            "TC",
            "module",
            "TC of matrix",
            "phase",
        ],
    ),
    "diff": (
        ("diff", NCU, NCU_B, "--all"),
        ["status", "kernel", "calls A->B", "time A", "time B", "delta", "prec A->B", "TC A->B"],
    ),
    "diff-family": (
        ("diff", "t_eager", "t_compile", "--match", "family"),
        ["status", "work", "calls A->B", "delta", "prec A->B", "TC A->B", "variants A/B"],
    ),
    "ranges": (
        ("ranges", TRAIN),
        ["range", "thread", "wall", "kernels", "GPU ops", "GPU time", "other threads"],
    ),
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
            assert not re.fullmatch(
                r"[\d.,%+\->]*…[\d.,%+\->]*( ?[mun]?s)?", cell
            ) or not re.search(r"\d", cell), (command, width, ln)


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
        assert re.search(rf"^\s*{p}\s+\d+\s+\S+ \S+\s+{re.escape(share)}\s*$", text, re.M), (
            p,
            share,
        )
    top = [k["pct"] for k in s["top_kernels"]]
    for pct in top:
        assert f"{pct:.1f}%" in text


def test_wide_shows_the_full_names_wrapped(db):
    """--wide: every full kernel name (one line each in a window wide enough, wrapped by Rich in
    80 columns: no line wider, nothing cut)."""
    names = [r["name"] for r in cli_json("kernels", NCU, db=db)]
    wide = cli(
        "kernels", NCU, "--wide", db=db, env={"COLUMNS": "5000", "TTY_COMPATIBLE": "1"}
    ).stdout
    assert "…" not in wide and all(n in wide for n in names)
    text = screen("kernels", NCU, "--wide", db=db, width=80)
    assert "…" not in text and max(len(n) for n in names) > 200


def test_a_table_too_wide_leaves_out_words_never_figures(db):
    """At 80 columns `runs` leaves out text columns (and says which) but keeps the mode; `diff`
    leaves out the calls and the times where the kernel's name needs the room, says so, and
    keeps the delta, precisions and tensor cores whole."""
    text = screen("runs", db=db, width=80)
    assert "not shown at 80 columns:" in text and "--wide" in text
    head = text.splitlines()[0].split()
    assert head[:3] == ["id", "name", "prec"] and "mode" in head and "finished" not in head
    assert "torchscript" in text and "eager" in text
    diff = screen("diff", NCU, NCU_B, "--all", "--match", "exact", db=db, width=80)
    assert re.search(
        r"\(not shown at 80 columns: calls A->B, time A(, time B)?; --wide shows every column\)",
        diff,
    )
    for col in ("delta", "prec A->B", "TC A->B"):
        assert col in diff.split("(not shown")[0]


def test_csv_and_json_keep_whole_names(db):
    rows = cli_json("kernels", NCU, db=db)
    csv_out = cli(
        "kernels", NCU, "-f", "csv", db=db, env={"COLUMNS": "80", "TTY_COMPATIBLE": "1"}
    ).stdout
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


@pytest.mark.parametrize(
    "args", [("summary", CPU), ("kernels", CPU), ("diff", CPU, CPU_B, "--all"), ("ranges", CPU)]
)
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
    render.compare(
        Comparison("resnet18", "exact", ["eager", "torchscript"], list(gpu), [gpu[0].diff(gpu[1])]),
        "table",
    )
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


# ---------------------------------------------------------------------------------- issue 37: every command, every width
# Captures with many kernels that share the report's short name (PyTorch's elementwise, reduce
# and multi-tensor launchers in several types and vector widths; cuDNN's sm90 kernels that
# differ in their middle): Faster R-CNN and BERT under nsys, ncu and torch.profiler, VGG16 under ncu.
MANY = ("frcnn-amp-nsys", "frcnn-fp32-nsys", "bert-amp-ncu", "bert-amp-torch")
VGG = "vgg16_fp16_eager"
# How the output is seen: a terminal of 80 or 120 columns (COLUMNS, as a terminal sets it), a pipe
# with COLUMNS=80, and a pipe where nothing says (COLUMNS unset: 80).
SIGHTS = {
    "80": ({"COLUMNS": "80", "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "0"}, 80),
    "120": ({"COLUMNS": "120", "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "0"}, 120),
    "piped 80": ({"COLUMNS": "80", "TTY_COMPATIBLE": None, "FORCE_COLOR": None}, 80),
    "piped": ({"COLUMNS": None, "TTY_COMPATIBLE": None, "FORCE_COLOR": None}, 80),
}


@pytest.fixture(scope="module")
def many(db, tmp_path_factory):
    """The tables' database and the captures above (tests/data/findings/, tests/data/ncu)."""
    from .where_data import FINDINGS

    store = Store(db)
    for name in MANY:
        import_where(store, name, FINDINGS)
    profkit.open_db(db).import_file(DATA / "ncu" / "vgg16_fp16_eager.raw.csv.gz", name=VGG)
    return db


def seen(*args, db, sight):
    env, width = SIGHTS[sight]
    r = cli(*args, db=db, env=env) if db else cli(*args, env=env)
    assert r.exit_code in (0, 1), r.output  # check: 1 where an assertion fails
    text = ANSI.sub("", r.stdout)
    assert not [ln for ln in text.splitlines() if len(ln) > width], (args, sight, text)
    return text


def cells(text, header, count, column):
    """Column ``column`` (an index) of the ``count`` rows under the table header that starts
    with ``header`` (cells are two or more spaces apart)."""
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if re.match(rf"\s*{re.escape(header)}\s", ln))
    return [re.split(r"\s{2,}", ln.strip())[column] for ln in lines[at + 1 : at + 1 + count]]


def assert_apart(full, printed):
    """Each full name printed one way, and no two full names printed alike."""
    by_name = {}
    for name, cell in zip(full, printed, strict=True):
        assert by_name.setdefault(name, cell) == cell, (name, cell, by_name[name])
    alike = {}
    for name, cell in by_name.items():
        alike.setdefault(cell, []).append(name)
    assert not [v for v in alike.values() if len(v) > 1], [v for v in alike.values() if len(v) > 1]


@pytest.mark.parametrize("sight", SIGHTS)
@pytest.mark.parametrize("run", (*MANY, VGG))
def test_kernels_and_summary_fit_and_tell_kernels_apart(many, run, sight):
    """`kernels` and `summary` on captures whose kernels share short names: no line wider than
    the width (80 in a pipe where nothing says), each kernel printed one way, no two alike;
    launches, times, precisions and tensor cores whole."""
    rows = cli_json("kernels", run, db=many)[:300]  # (JSON streams every row)
    text = seen("kernels", run, "--limit", "300", db=many, sight=sight)
    assert_apart([r["name"] for r in rows], cells(text, "#", len(rows), 1))
    for r, ln in zip(rows, text.splitlines()[2:]):
        assert ln.split()[0] == str(r["launch_id"]) and f" {r['precision']} " in f"{ln} "
    s = cli_json("summary", run, "--top", "200", db=many)
    text = seen("summary", run, "--top", "200", db=many, sight=sight)
    top = s["top_kernels"]
    assert len({k["name"] for k in top}) > 15
    printed = cells(text, "kernel", len(top), 0)
    assert_apart([k["name"] for k in top], printed)
    for k, label in zip(top, printed):  # the report's short name where it alone tells the kernel
        assert label.split("<")[0].rstrip("…") in k["name"] or "…" in label, (label, k["name"])
    rows = text[text.index("top kernels by GPU time") :].splitlines()[2 : 2 + len(top)]
    for k, ln in zip(top, rows):
        assert ln.split()[-3:] == [
            f"{k['pct']:.1f}%",
            k["precision"],
            {True: "yes", False: "no", None: "-"}[k["tensor_core"]],
        ], ln


def test_labels_are_the_reports_short_names_grown_apart(many):
    """names.table_labels on real captures' names: the report's label (display_name) where it
    is the kernel's alone; the template arguments that differ where two share it; cut to a
    width, still apart, each within it."""
    from profkit.names import display_name, table_labels

    names = [
        r["name"] for run in ("frcnn-amp-nsys", VGG) for r in cli_json("kernels", run, db=many)
    ]
    names = sorted(set(names))
    labels = table_labels(names)
    shared = {}
    for n in names:
        shared.setdefault(display_name(n), []).append(n)
    for label, group in shared.items():
        if len(group) == 1:
            assert labels[group[0]] == label
        else:
            assert all(
                labels[n].startswith(label.split("<")[0]) and labels[n] != label for n in group
            ), group
    adds = [labels[n] for n in shared["vectorized_elementwise_kernel<CUDAFunctor_add>"]]
    assert sorted(adds) == [
        "vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, …>",
        "vectorized_elementwise_kernel<8, CUDAFunctor_add<Half>, …>",
    ], adds
    for width in (8, 12, 20, 30, 44):
        cut = table_labels(names, width)
        assert len(set(cut.values())) == len(names) and max(map(len, cut.values())) <= width


def test_the_report_names_kernels_as_the_tables_do(many):
    """One labelling for the HTML report's kernel table and the command's: no two kernels of
    Faster R-CNN alike in the report either."""
    from profkit.names import table_labels
    from profkit.report.model import kernel_table

    run = profkit.open_db(many).run(MANY[0])
    rows = kernel_table(Store(many), run)["rows"]
    labels = table_labels(r["name"] for r in rows)
    assert [r["short"] for r in rows] == [labels[r["name"]] for r in rows]
    assert len({r["short"] for r in rows}) == len({r["name"] for r in rows}) > 100


@pytest.mark.parametrize("sight", SIGHTS)
def test_diff_and_compare_fit_and_tell_kernels_apart(many, sight, monkeypatch, capsys):
    """`diff` (exact: every kernel) and `compare`'s tables on two captures of Faster R-CNN."""
    a, b = MANY[:2]
    d = cli_json("diff", a, b, "--match", "exact", "--all", db=many)
    text = seen("diff", a, b, "--match", "exact", "--all", db=many, sight=sight)
    assert_apart([r["name"] for r in d["rows"]], cells(text, "status", len(d["rows"]), 1))
    from profkit.api import Comparison

    runs = profkit.open_db(many)
    ra, rb = runs.run(a), runs.run(b)
    env, width = SIGHTS[sight]
    for k, v in env.items():
        monkeypatch.delenv(k, raising=False) if v is None else monkeypatch.setenv(k, v)
    render.compare(Comparison("frcnn", "exact", ["amp", "fp32"], [ra, rb], [ra.diff(rb)]), "table")
    out = ANSI.sub("", capsys.readouterr().out)
    assert not [ln for ln in out.splitlines() if len(ln) > width], out
    top = out[out.index("what changed most") :].splitlines()[2:]
    printed = [re.split(r"\s{2,}", ln.strip())[0] for ln in top if ln.strip()]
    assert len(printed) == 15 and len(set(printed)) == 15


@pytest.mark.parametrize("sight", SIGHTS)
def test_every_other_table_command_fits(many, sight, tmp_path):
    """`runs` (mode kept), `workloads`, `ranges`, `bench --show`, `bench --list` and `check`
    in the width, piped or not."""
    runs = seen("runs", db=many, sight=sight)
    head = runs.splitlines()[0].split()
    assert "mode" in head and "prec" in head
    for r in cli_json("runs", db=many):
        assert re.search(rf"^\s*{r['id']}\s.*\s{r['mode']}\s", runs, re.MULTILINE), r["name"]
    catalog = seen("workloads", db=None, sight=sight)
    assert catalog.splitlines()[0].split() == ["workload", "precisions", "modes", "description"]
    for name in ("resnet18", "vgg16", "bert_encoder", "attention_zoo"):
        assert re.search(rf"^{name}\s", catalog, re.MULTILINE)
    seen("ranges", TRAIN, db=many, sight=sight)
    seen("ranges", MANY[0], db=many, sight=sight)
    seen(
        "check",
        MANY[0],
        "--min-tensor-core-coverage",
        "99",
        "--no-fp32-matrix",
        db=many,
        sight=sight,
    )
    import gzip

    bench_db = tmp_path / "b.db"
    bench_db.write_bytes(gzip.decompress((DATA / "behaviour" / "bench.db.gz").read_bytes()))
    text = seen("bench", "--show", "1", db=bench_db, sight=sight)
    assert "100.0%" in text and "items/s" in text and "max abs diff" in text
    seen("bench", "--list", db=bench_db, sight=sight)


def test_a_pipe_takes_columns_else_80(db):
    """Piped, COLUMNS is honoured (the README's `profkit kernels RUN | head`), and where it is
    unset the width is 80, never unlimited."""
    for env, width in (
        ({"COLUMNS": "100", "TTY_COMPATIBLE": None}, 100),
        ({"COLUMNS": None, "TTY_COMPATIBLE": None}, 80),
        ({"COLUMNS": "60", "TTY_COMPATIBLE": None}, 60),
    ):
        text = cli("kernels", NCU, db=db, env=env).stdout
        longest = max(len(ln) for ln in text.splitlines())
        assert width - 10 <= longest <= width, (env, longest)


def test_an_empty_section_prints_nothing(db):
    """A diff of a run with itself: no table headers without rows, one line that says so."""
    text = cli("diff", NCU, NCU, db=db, env={"COLUMNS": "80"}).stdout
    assert "status" not in text and "kernel" not in text.split("rows:")[1], text
    assert "0 of " in text and "unchanged rows hidden" in text
    assert cli("diff", NCU, NCU, "--all", db=db).stdout.count("status") == 1


def test_run_names_each_file_for_what_it_is(db, capsys):
    """`run`'s closing lines: the tool's capture as "ncu capture:" (nsys, torch.profiler: their
    own words), the HTML page as "report:"."""
    from profkit.records import RunInfo

    d = profkit.open_db(db)
    for name, kind, word in (
        (NCU, "ncu-rep", "ncu capture"),
        (NSYS, "nsys-rep", "nsys capture"),
        ("t_eager", "kineto-json", "torch.profiler trace"),
    ):
        run = d.run(name)
        raw = f"/runs/{name}.{kind}"
        record = replace(run, raw_files={kind: raw}, info=RunInfo(report_bytes=1_500_000))
        render.run_done(record, run.summary(), raw, "profkit.db")
        render.report_written(f"reports/{name}.html")
        out = capsys.readouterr().out
        assert f"\n{word}: {raw} (1.50 MB)\n" in out and f"\nreport: reports/{name}.html\n" in out
        assert "report: " + raw not in out


# ---------------------------------------------------------------------------------- a real terminal
SCREENS = (
    "PROFKIT_SCREENS"  # a folder to keep the screens in for a person to read (else the test's own)
)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_in_a_real_terminal(many, tmp_path):
    """kernels, summary, diff, runs and workloads in tmux at 80 and 120 columns (and piped, with
    COLUMNS=80 and with nothing set): no line wider than the window, the verdict columns there,
    no two kernels printed alike in `summary`'s top kernels. The screens are kept (in
    $PROFKIT_SCREENS where set) for a person to read."""
    import os

    keep = Path(os.environ.get(SCREENS) or tmp_path / "screens")
    keep.mkdir(parents=True, exist_ok=True)
    a, b = MANY[:2]
    env = f"PYTHONPATH={Path(__file__).resolve().parents[1]} PROFKIT_DB={many}"
    commands = {
        "kernels": (f"kernels {a} --limit 40", ["prec", "TC", "duration"]),
        "summary": (f"summary {a}", ["prec", "TC", "share", "launches"]),
        "diff": (f"diff {a} {b} --match exact", ["prec A->B", "TC A->B", "delta"]),
        "runs": ("runs", ["mode", "prec", "kernels", "time"]),
        "workloads": ("workloads", ["precisions", "modes", "description"]),
    }
    top = [k["name"] for k in cli_json("summary", a, db=many)["top_kernels"]]
    for width in (80, 120):
        for name, (args, must) in commands.items():
            session = f"{name}{width}"
            # a server of its own for each screen: its first session sets the window's size
            tmux = ["tmux", "-L", f"profkit-tables-{tmp_path.name}-{session}"]
            done = tmp_path / f"{session}.done"
            cmd = f"env -u COLUMNS {env} {sys.executable} -m profkit {args}; touch {done}; sleep 30"
            subprocess.run(
                [*tmux, "new-session", "-d", "-s", session, "-x", str(width), "-y", "200", cmd],
                check=True,
            )
            for _ in range(600):
                if done.exists():
                    break
                time.sleep(0.1)
            time.sleep(0.3)
            shot = subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", session, "-S", "-", "-E", "-"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            subprocess.run([*tmux, "kill-server"], check=False)
            (keep / f"{name}-{width}.txt").write_text(shot)
            lines = shot.rstrip("\n").splitlines()
            assert max(len(ln.rstrip()) for ln in lines) <= width, (name, width)
            assert "Traceback" not in shot
            for col in must:
                assert col in shot, (name, width, col)
            if name == "summary":
                assert_apart(top, cells(shot, "kernel", len(top), 0))
    for name, (args, _) in commands.items():  # and through a pipe, as `profkit ... | less` shows it
        for label, columns in (("piped-COLUMNS=80", "80"), ("piped", None)):
            child = {
                k: v
                for k, v in os.environ.items()
                if k not in ("COLUMNS", "TTY_COMPATIBLE", "FORCE_COLOR")
            }
            child.update(
                {"PYTHONPATH": str(Path(__file__).resolve().parents[1]), "PROFKIT_DB": str(many)},
                **({"COLUMNS": columns} if columns else {}),
            )
            out = subprocess.run(
                [sys.executable, "-m", "profkit", *args.split()],
                capture_output=True,
                text=True,
                env=child,
                check=True,
            ).stdout
            (keep / f"{name}-{label}.txt").write_text(out)
            assert max(len(ln) for ln in out.splitlines()) <= 80, (name, label)


@pytest.mark.parametrize("width", WIDTHS)
def test_bench_show_keeps_every_figure(tmp_path, width):
    """`bench --show` and `--list` on the stored benchmark of tests/data/behaviour: top-1
    agreement (100.0%), times and spreads whole at every width."""
    import gzip

    path = tmp_path / "b.db"
    path.write_bytes(gzip.decompress((DATA / "behaviour" / "bench.db.gz").read_bytes()))
    b = cli_json("bench", "--list", db=path)[0]
    text = screen("bench", "--show", b["id"], db=path, width=width)
    for col in (
        "median",
        "±",
        "min",
        "max",
        "items/s",
        "s/item",
        "peak MiB",
        "max abs diff",
        "top-1",
    ):
        assert col in text
    assert "100.0%" in text and "10…" not in text
    for r in cli_json("bench", "--show", b["id"], db=path)["rows"]:
        if r["status"] == "ok":
            assert f"{r['items_per_s']:,.1f}" in text
    listing = screen("bench", "--list", db=path, width=width)
    assert b["workload"] in listing
