"""Nothing stored under a false label (issue 37, item 4), and ``run`` without PyTorch saying how
to install it (item 5): options a workload's own step cannot apply refused, runs deleted with
their rows and folder, failed runs' names reused, the README's notebook cell run twice, CPU
diffs of too few iterations called noise-bound, CPU attribution counted once, CPU findings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import profkit
from profkit.errors import (
    RunExists,
    RunNotFound,
    TorchNotInstalled,
    UsageError,
    WorkloadError,
)

from .conftest import DATA, cli, needs_torch, one_line_error

ROOT = Path(__file__).parents[1]


# ------------------------------------------------------------------ run without PyTorch (item 5)
BLOCK_TORCH = """
import sys

class _NoTorch:  # as if PyTorch were not installed: importing it (or finding it) fails
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return None

sys.meta_path.insert(0, _NoTorch())
"""


def test_run_without_torch_says_how_to_install_it(tmp_path):
    """Without PyTorch, ``run`` (CLI and API) stops before anything is written, in one line that
    says how to install it, CPU-only build included; a TorchNotInstalled (a ProfkitError)."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(BLOCK_TORCH)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)])}
    env.pop("PROFKIT_DB", None)
    db = tmp_path / "p.db"
    p = subprocess.run(
        [sys.executable, "-m", "profkit", "--db", str(db), "run", "resnet18", "--device", "cpu"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("profkit: error: PyTorch is not installed"), (
        p.stderr
    )
    assert (
        "pip install torch" in lines[0]
        and "--index-url https://download.pytorch.org/whl/cpu" in lines[0]
    )
    assert not db.exists()
    code = (
        "import profkit, sys\nfrom profkit.errors import TorchNotInstalled\n"
        f"try:\n    profkit.profile('resnet18', device='cpu', db={str(db)!r})\n"
        "except TorchNotInstalled as exc:\n    print(type(exc).__mro__[1].__name__, exc.one_line())\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0 and p.stdout.startswith("ToolNotFound PyTorch is not installed"), (
        p.stdout,
        p.stderr,
    )
    assert issubclass(TorchNotInstalled, profkit.errors.ProfkitError) and not db.exists()


# ------------------------------------------------------------------ options a step cannot apply (item 4)
STEP_FILE = """
def build(spec):
    import torch

    x = torch.randn(spec.batch_size, 64)
    w = torch.randn(64, 64)

    def step():
        return x @ w

    return step
"""
# The same step, built where reading the file cannot tell (a call's result): building it tells.
STEP_BY_CALL = """
def make(spec):
    import torch

    x = torch.randn(spec.batch_size, 64)
    return lambda: x @ x.T


def build(spec):
    return make(spec)
"""


@pytest.mark.parametrize(
    "option, value", [("precision", "bf16"), ("mode", "torchscript"), ("precision", "amp")]
)
def test_a_step_that_cannot_apply_an_option_is_refused_before_the_run(tmp_path, option, value):
    """A workload that returns its own step and declares nothing: asked for a precision or mode
    it may not apply, it is refused before anything is written, naming the option and why,
    instead of a run stored as bf16 or torchscript that is neither."""
    path = tmp_path / "my_step.py"
    path.write_text(STEP_FILE)
    db = tmp_path / "p.db"
    with pytest.raises(WorkloadError) as exc:
        profkit.profile(str(path), device="cpu", db=db, **{option: value})
    line = exc.value.one_line()
    assert f"builds its own step and does not say that it applies `{option}` {value}" in line
    assert ("PRECISIONS" if option == "precision" else "MODES") in line
    assert not db.exists()


def test_a_step_that_declares_what_it_applies_is_not_refused(tmp_path):
    from profkit import launch
    from profkit.options import RunOptions

    path = tmp_path / "my_step.py"
    path.write_text('PRECISIONS = ("fp32", "bf16")\n' + STEP_FILE)
    launch.check(launch.RunRequest(str(path), RunOptions.make(device="cpu", precision="bf16")))
    with pytest.raises(WorkloadError, match="`mode` compile"):
        launch.check(launch.RunRequest(str(path), RunOptions.make(device="cpu", mode="compile")))


def test_the_builtin_that_ignores_precision_says_so():
    from profkit import launch
    from profkit.options import RunOptions

    with pytest.raises(WorkloadError, match="does not support precision 'fp16'"):
        launch.check(
            launch.RunRequest(
                str(ROOT / "workloads" / "precision_zoo.py"),
                RunOptions.make(device="cpu", precision="fp16"),
            )
        )


@needs_torch
def test_a_step_found_when_built_is_refused_there(tmp_path):
    """Where only building tells that a workload returns its own step, the build refuses the
    option, before any iteration: the run is failed with that one line, no run labelled bf16."""
    path = tmp_path / "by_call.py"
    path.write_text(STEP_BY_CALL)
    db = tmp_path / "p.db"
    with pytest.raises(WorkloadError, match="does not say that it applies `precision` bf16"):
        profkit.profile(
            str(path), device="cpu", db=db, precision="bf16", iters=1, warmup=0, batch_size=2
        )
    runs = profkit.open_db(db).list_runs()
    assert [(r.status, r.kernel_count) for r in runs] == [("failed", 0)]


# ------------------------------------------------------------------ deleting a run (item 4)
# an H100 nsys export: ranges, host syncs
NSYS_GZ = DATA / "diff" / "r18_fp16_heuristic_nsys.sqlite.gz"


def _rows_of(db_path: Path, run_id: int) -> dict[str, int]:
    """Rows holding ``run_id`` in every table of the database that has a run_id column."""
    import sqlite3

    con = sqlite3.connect(db_path)
    tables = [
        t
        for (t,) in con.execute("select name from sqlite_master where type = 'table'")
        if any(c[1] == "run_id" for c in con.execute(f"pragma table_info({t})"))
    ]
    out = {
        t: con.execute(f"select count(*) from {t} where run_id = ?", [run_id]).fetchone()[0]
        for t in tables
    }
    out["runs"] = con.execute("select count(*) from runs where id = ?", [run_id]).fetchone()[0]
    con.close()
    return out


# the same file imported twice, on purpose
@pytest.mark.filterwarnings("ignore::profkit.errors.ProfkitWarning")
def test_remove_deletes_a_run_its_rows_in_every_table_and_its_folder(tmp_path):
    from profkit.records import CountedFunction

    path = tmp_path / "p.db"
    db = profkit.open_db(path)
    gone = db.import_file(NSYS_GZ, name="gone")
    kept = db.import_file(NSYS_GZ, name="kept")
    key = ("H100", "env", "full", "sig")
    db.store.keep_counters(
        key,
        [
            CountedFunction("k1", "", "grid 1", "k1", "k1", {}, {}, gone.id, "gone", 0),
            CountedFunction("k2", "", "grid 1", "k2", "k2", {}, {}, kept.id, "kept", 0),
        ],
    )
    before = _rows_of(path, gone.id)
    assert all(
        before[t]
        for t in (
            "runs",
            "launches",
            "kernel_groups",
            "kernel_aggs",
            "path_aggs",
            "ranges",
            "counters",
        )
    ), before
    assert set(before) >= {
        "launches",
        "kernel_groups",
        "kernel_aggs",
        "path_aggs",
        "ranges",
        "host_syncs",
        "counters",
    }
    folder = tmp_path / "p-runs" / gone.folder
    assert gone.folder and folder.is_dir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    # a link inside the run's folder is removed, never followed
    (folder / "link").symlink_to(outside)

    removed = db.remove("gone")
    assert (removed.run.name, removed.run.id, removed.folder) == ("gone", gone.id, str(folder))
    assert not any(_rows_of(path, gone.id).values())
    assert not folder.exists() and (outside / "precious.txt").read_text() == "keep me"
    assert _rows_of(path, kept.id) == _rows_of(path, kept.id) and all(
        _rows_of(path, kept.id)[t] for t in ("runs", "launches", "ranges", "counters")
    )
    assert db.run("kept").summary().kernels == kept.kernel_count
    with pytest.raises(RunNotFound):
        db.run("gone")
    with pytest.raises(RunNotFound):
        db.remove("gone")
    again = db.import_file(NSYS_GZ, name="gone")  # the name is free again; the id is a new one
    assert again.id > kept.id


def test_remove_refuses_a_folder_profkit_did_not_make_before_deleting_anything(tmp_path):
    path = tmp_path / "p.db"
    db = profkit.open_db(path)
    run = db.import_file(NSYS_GZ, name="r")
    folder = tmp_path / "p-runs" / run.folder
    import shutil

    shutil.rmtree(folder)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "data.txt").write_text("x")
    folder.symlink_to(elsewhere)  # the run's folder swapped for a link out
    with pytest.raises(profkit.StoreError, match="leads outside|not one profkit made"):
        db.remove(run)
    assert db.run("r").id == run.id and (elsewhere / "data.txt").exists()
    other = profkit.open_db(tmp_path / "q.db")
    with pytest.raises(UsageError, match="another database"):
        other.remove(run)


def test_remove_refuses_a_run_being_written(tmp_path):
    db = profkit.open_db(tmp_path / "p.db")
    # as a live `profkit run` holds it
    reserved = db.store.reserve("busy", "busy", {"source": "run"}, status="running")
    with pytest.raises(profkit.StoreError, match="being written now"):
        db.remove("busy")
    assert db.run("busy", complete=False).status == "running"
    db.store.end_run(reserved.id, "failed", "stopped")
    assert db.remove("busy").run.status == "failed"


# ------------------------------------------------------------------ a failed run's name (item 4)
@needs_torch
def test_a_failed_runs_name_can_be_used_again(tmp_path):
    """Running the same named run again after it failed replaces the failure: its row and its
    folder go, the new run takes the name (and the folder's name)."""
    path = tmp_path / "p.db"
    with pytest.raises(WorkloadError, match="weights file missing"):
        profkit.profile(
            str(ROOT / "tests" / "workloads" / "broken_build.py"),
            device="cpu",
            db=path,
            name="mine",
        )
    db = profkit.open_db(path)
    failed = db.run("mine", complete=False)
    assert failed.status == "failed" and (tmp_path / "p-runs" / "mine").is_dir()
    workload = tmp_path / "my_step.py"
    workload.write_text(STEP_FILE)
    notes: list[str] = []
    run = profkit.profile(
        str(workload),
        device="cpu",
        db=db,
        name="mine",
        iters=1,
        warmup=0,
        batch_size=2,
        progress=profkit.Progress(on_note=notes.append),
    )
    assert (run.name, run.status, run.folder) == ("mine", "ok", "mine") and run.id > failed.id
    assert [r.name for r in db.list_runs()] == ["mine"] and not any(
        _rows_of(path, failed.id).values()
    )
    assert any("failed before: this run replaces it" in n for n in notes), notes
    with pytest.raises(RunExists):  # a complete run's name stays taken
        profkit.profile(
            str(workload), device="cpu", db=db, name="mine", iters=1, warmup=0, batch_size=2
        )


# ------------------------------------------------------------------ the README's notebook cell (item 4)
def _notebook_cell() -> str:
    """The notebook example of the README or the docs (the API page): the Python block that shows
    cards (``display``)."""
    import re

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    blocks = [
        b for p in pages for b in re.findall(r"```python\n(.*?)```", p.read_text(), re.DOTALL)
    ]
    cells = [b for b in blocks if "display(" in b and "import_file(" in b]
    assert len(cells) == 1, "the notebook cell moved: point this test at it"
    return cells[0]


def test_the_readme_notebook_cell_runs_twice(tmp_path, monkeypatch):
    """A notebook cell is run again as a matter of course: importing the same capture under the
    same name gives back the run it made (no RunExists), while another file under a taken name
    is still refused, and the same file without a name is a new run, as before."""
    monkeypatch.chdir(tmp_path)  # its notebook.db here; its captures through a link to tests/
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    shown: list[object] = []
    cell = compile(_notebook_cell(), "README.md", "exec")
    first: dict[str, object] = {"display": lambda *x: shown.extend(x)}
    exec(cell, first)  # noqa: S102  (the README cell, as a notebook runs it)
    again: dict[str, object] = {"display": lambda *x: shown.extend(x)}
    exec(cell, again)  # noqa: S102
    assert first["eager"] == again["eager"] and first["compiled"] == again["compiled"]
    db = profkit.open_db(tmp_path / "notebook.db")
    assert [r.name for r in db.list_runs()] == ["r18_eager", "r18_compiled"]
    with pytest.raises(RunExists):  # another file under a taken name
        db.import_file(DATA / "diff" / "r18_fp16_compile_torch.json.gz", name="r18_eager")
    with pytest.raises(RunExists):  # the same file split into other steps
        db.import_file(
            DATA / "diff" / "r18_fp16_eager_torch.json.gz", name="r18_eager", step_ranges=["x"]
        )
    with pytest.warns(profkit.ProfkitWarning, match="imported before as r18_eager"):
        assert db.import_file(DATA / "diff" / "r18_fp16_eager_torch.json.gz").name != "r18_eager"


# ------------------------------------------------------------------ CPU diffs of few iterations (item 4)
CPU_FP32 = DATA / "torch" / "cpu_resnet18_fp32.json.gz"  # torch.profiler on a CPU: 2 iterations
CPU_BF16 = DATA / "torch" / "cpu_resnet18_bf16.json.gz"  # and 1


def test_a_cpu_diff_of_few_iterations_says_it_is_noise_bound(tmp_path):
    """CPU operators' times over fewer than 5 iterations are noise: the diff (and a comparison's
    counts) call a row changed only where its calls differ, and say why, in its notes (printed
    under the diff and compare) and in JSON (``totals.noise_bound``)."""
    from profkit.analyze.diff import MIN_CPU_ITERS

    db = profkit.open_db(tmp_path / "p.db")
    a, b = db.import_file(CPU_FP32, name="a"), db.import_file(CPU_BF16, name="b")
    d = a.diff(b)
    t = d.totals
    assert t.noise_bound and (t.iterations_a, t.iterations_b) == (2, 1) and MIN_CPU_ITERS == 5
    timed_only = [r for r in d.rows if r.status == "same" and r.delta_pct and abs(r.delta_pct) > 10]
    assert timed_only, (
        "the capture's times moved by more than the threshold: what this test is about"
    )
    assert all(r.delta_calls != 0 for r in d.rows if r.status == "changed")
    note = next(n for n in t.notes if n.startswith("noise-bound: "))
    assert (
        "a holds 2 measured iterations and b holds 1 measured iteration" in note
        and "--iters 5" in note
    )
    data = json.loads(json.dumps(d.to_dict()))
    assert data["totals"]["noise_bound"] is True and note in data["totals"]["notes"]
    assert "noise-bound" in d._repr_html_()
    from profkit.api import Comparison

    cmp = Comparison("resnet18", "exact", ["fp32", "bf16"], [a, b], [d])
    assert (
        cmp.variant_rows()[1].changed == t.status.changed == sum(r.delta_calls != 0 for r in d.rows)
    )
    same = a.diff(a)
    assert same.totals.noise_bound and same.totals.status.changed == 0


# ------------------------------------------------------------------ CPU attribution and findings (item 4)
# slow fp16 convolutions
CPU_FP16_ATTRIBUTED = DATA / "torch" / "cpu_resnet18_fp16_attribution.json.gz"
# heads split with .contiguous()
CPU_HEADS = DATA / "torch" / "cpu_heads_contiguous_attribution.json.gz"


# the same file imported twice, on purpose
@pytest.mark.filterwarnings("ignore::profkit.errors.ProfkitWarning")
def test_a_cpu_run_with_attribution_counts_each_operator_once_and_shows_its_modules(tmp_path):
    """A CPU run with --attribution: each operator call once (ResNet-18's 20 convolutions are 20
    calls, not 40, and its calls are those of the capture's operators), and the by-module view
    of its CPU self time (summary, Run.modules, the report's module tree), adding up to the run."""
    db = profkit.open_db(tmp_path / "p.db")
    run = db.import_file(CPU_FP16_ATTRIBUTED, name="r")
    calls = run.kernels().groupby("name")["launch_id"].count()
    assert calls["aten::conv2d"] == calls["aten::_slow_conv2d_forward"] == 20
    view = run.summary().modules
    assert view is not None and view.depth == 2
    assert sum(r.time_ns for r in view.rows) == run.gpu_time_ns
    assert sum(r.launches for r in view.rows) == run.kernel_count
    conv1 = next(r for r in view.rows if r.module == "conv1")
    assert (
        conv1.module_type == "Conv2d"
        and conv1.matrix_tensor_core_pct is None
        and conv1.time_by_phase_ns
    )
    assert "layer4.1" in set(run.modules(depth=1)["module"])  # a list's index counts with its name
    from profkit.report.model import modules as report_modules

    tree = report_modules(db.store, run)
    assert tree["note"] is None and tree["time_ns"] == run.gpu_time_ns
    other = db.import_file(CPU_FP16_ATTRIBUTED, name="s")
    by_module = run.diff(other, match="module")
    assert by_module.totals.status.changed == 0 and {r.kind for r in by_module.rows} == {"cpu_op"}
    from .conftest import cli

    out = cli("summary", "r", db=tmp_path / "p.db", env={"COLUMNS": "120"})
    assert (
        out.exit_code == 0
        and "CPU self time by module" in out.stdout
        and "TC of matrix" not in out.stdout
    )


def test_cpu_findings_on_real_cpu_captures(tmp_path):
    """A CPU run gets the findings that apply to a CPU: half-precision operators on PyTorch's slow
    fallback (fp16 convolutions, aten::_slow_conv2d_forward) and time converting layouts (the
    copies transpose().contiguous() makes); neither where it holds none, and no GPU finding."""
    db = profkit.open_db(tmp_path / "p.db")
    fp16 = db.import_file(CPU_FP16_ATTRIBUTED, name="fp16")
    heads = db.import_file(CPU_HEADS, name="heads")
    fp32 = db.import_file(CPU_FP32, name="fp32")
    [slow] = fp16.findings()
    assert slow.id == "cpu_slow_fallback" and slow.share_pct > 80
    assert [k.name for k in slow.kernels] == ["aten::_slow_conv2d_forward"] and slow.kernels[
        0
    ].launches == 20
    assert (
        "20 fp16 calls of aten::_slow_conv2d_forward took" in slow.detail
        and "CPU self time" in slow.detail
    )
    assert [w.where for w in slow.where] == ["aten::conv2d"]
    [layout] = heads.findings()
    assert layout.id == "cpu_layout_conversions" and 30 < layout.share_pct < 45
    assert layout.detail.startswith("20 layout conversions (aten::contiguous) took")
    assert (
        "aten::copy_" in [k.name for k in layout.kernels]
        and layout.where[0].where == "aten::contiguous"
    )
    assert fp32.findings() == []
    from profkit.analyze.findings import finding_rules

    assert {r.settings.get("activity") for r in finding_rules().values()} == {None, "cpu_op"}


@needs_torch
def test_rm_deletes_a_run_and_its_folder_from_the_command_line(tmp_path):
    """`profkit rm RUN`: the run, its rows and its folder go; one line says so (JSON: the same as
    an object); an unknown run is one line and exit 1, and the name is free again."""
    db = tmp_path / "p.db"
    r = cli(
        "run",
        "resnet18",
        "--device",
        "cpu",
        "--batch-size",
        "1",
        "--iters",
        "1",
        "--warmup",
        "1",
        "--name",
        "r",
        "--no-report",
        db=db,
    )
    assert r.exit_code == 0, r.output
    folder = tmp_path / "p-runs" / profkit.open_db(db).run("r").folder
    assert folder.is_dir()
    r = cli("rm", "r", db=db)
    assert r.exit_code == 0 and r.stdout == f"removed run r (id 1) and its folder {folder}\n", (
        r.output
    )
    assert not folder.exists() and profkit.open_db(db).list_runs() == []
    one_line_error(cli("rm", "r", db=db), "no run 'r'")
    imported = cli("import", NSYS_GZ, "--name", "r", db=db)
    assert imported.exit_code == 0, imported.output
    gone = json.loads(cli("rm", "r", "-f", "json", db=db).stdout)
    assert {k: gone[k] for k in ("id", "name", "status")} == {"id": 2, "name": "r", "status": "ok"}
    assert gone["folder"] is None or not Path(gone["folder"]).exists()
