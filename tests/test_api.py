"""profkit.api, the Python API, tested directly: the docs' API example (docs/api/index.md) runs as written;
for the same run, Run.summary() equals `summary --format json`, Run.kernels() equals `kernels
--format json` and Run.ranges() equals `ranges --format json`; errors name parameters, not
flags; importing profkit stays cheap."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import profkit
from profkit.parse.schema import CLASSIFIED, COLUMNS, KERNEL_FIELDS, RANGE_FIELDS
from profkit.records import RunInfo

from .conftest import DATA, NCU_DATA, cli_json, needs_torch

ROOT = Path(__file__).parents[1]
CAPTURES = [
    NCU_DATA / "resnet18_fp16_eager.raw.csv.gz",
    DATA / "torch" / "torch_run_resnet18_train_amp.json.gz",
    DATA / "torch" / "cpu_resnet18_fp32.json.gz",
]


def readme_example() -> str:
    """The first example of the Python API's page (docs/api/index.md)."""
    text = (ROOT / "docs" / "api" / "index.md").read_text()
    section = text.split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_python_example_runs(tmp_path):
    """The notebook example, as a user pastes it, from a folder holding the repo's captures."""
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    p = subprocess.run(
        [sys.executable, "-c", readme_example()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert re.search(r"90 launches, \d+\.\d% of GPU time on tensor cores", p.stdout)
    assert "layout transforms:" in p.stdout and "resnet18_train.amp.eager.iter0" in p.stdout
    assert (tmp_path / "notebook.db").exists()


def same(a, b) -> bool:
    """Equal as JSON text: 8 and 8.0, or 1 and True, differ."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def plain(v):
    """A DataFrame cell as JSON would hold it."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_library_and_command_agree(db, path):
    run = profkit.open_db(db).import_file(path)
    assert same(run.summary().to_dict(), cli_json("summary", run.name, db=db))
    assert same(run.summary(top=3).to_dict(), cli_json("summary", run.name, "--top", "3", db=db))

    k = run.kernels()
    assert list(k.columns) == list(KERNEL_FIELDS)
    assert {c: str(t) for c, t in k.dtypes.items()} == {
        c: {"object": "object"}.get(t, t) for c, t in {**COLUMNS, **CLASSIFIED}.items()
    }
    records = [{c: plain(v) for c, v in r.items()} for r in k.to_dict("records")]
    assert same(records, cli_json("kernels", run.name, db=db))
    assert same(list(run.iter_kernels()), cli_json("kernels", run.name, db=db))

    ranges = run.ranges()
    assert list(ranges.columns) == list(RANGE_FIELDS)
    assert same(
        [{c: plain(v) for c, v in r.items()} for r in ranges.to_dict("records")],
        cli_json("ranges", run.name, db=db),
    )

    runs = profkit.open_db(db).runs()
    assert same(
        [{c: plain(v) for c, v in r.items()} for r in runs.to_dict("records")],
        cli_json("runs", db=db),
    )


def test_run_fields_are_decoded(db):
    run = profkit.open_db(db).import_file(NCU_DATA / "resnet18_fp16_eager.raw.csv.gz", name="r")
    assert isinstance(run, profkit.Run) and isinstance(run, profkit.RunRecord)
    assert (
        isinstance(run.info, RunInfo)
        and isinstance(run.raw_files, dict)
        and isinstance(run.metrics, list)
    )
    assert run.raw_files == {
        "ncu-csv": str((NCU_DATA / "resnet18_fp16_eager.raw.csv.gz").resolve())
    }
    assert (run.workload, run.precision, run.mode, run.tool, run.activity) == (
        "resnet18",
        "fp16",
        "eager",
        "ncu",
        "kernel",
    )
    again = profkit.open_db(db).run("r")
    assert again == run and profkit.open_db(db).run(run.id) == run
    assert run.count_by_kind() == {"kernel": 162}
    assert isinstance(run.summary(), profkit.Summary)


def test_second_import_warns(db):
    database = profkit.open_db(db)
    database.import_file(NCU_DATA / "resnet18_fp16_eager.raw.csv.gz")
    with pytest.warns(profkit.ProfkitWarning, match="imported before as resnet18_fp16_eager"):
        second = database.import_file(NCU_DATA / "resnet18_fp16_eager.raw.csv.gz")
    assert second.name == "resnet18_fp16_eager-2"


def test_errors_name_parameters_not_flags(tmp_path):
    with pytest.raises(profkit.RunNotFound, match="no run 'x'"):
        profkit.open_db(tmp_path / "a.db").run("x")
    with pytest.raises(profkit.StoreError) as exc:
        profkit.open_db(tmp_path / "missing.db", create=False)
    assert "--" not in str(exc.value) and "`db`" in str(exc.value)
    for options, message in [
        ({"iters": 0}, "`iters` must be at least 1"),
        ({"warmup": -1}, "`warmup` must be"),
        ({"precision": "fp7"}, "unknown `precision` 'fp7'"),
        ({"batch_size": 0}, "`batch_size`"),
        ({"device": "cpu", "tool": "ncu"}, "`device` cpu needs `tool` torch"),
        ({"tool": "perf"}, "unknown `tool` 'perf'"),
        ({"iters": "2"}, "`iters` must be a whole number"),
        ({"batch_size": 1.5}, "`batch_size` must be a whole number"),
        ({"iters": True}, "`iters` must be a whole number"),
        ({"warmup": "x"}, "`warmup`"),
        ({"timeout_s": float("nan")}, "`timeout_s` must be a number of seconds"),
        ({"timeout_s": "5"}, "`timeout_s`"),
        ({"precision": None}, "unknown `precision` None"),
        ({"name": "1"}, "`name` '1' is not a usable run name"),
        ({"name": ".."}, "is not a usable run name"),
    ]:
        with pytest.raises(profkit.UsageError) as exc:
            profkit.profile("resnet18", db=tmp_path / "p.db", **options)
        assert message in str(exc.value) and "--" not in str(exc.value), str(exc.value)
    with pytest.raises(profkit.WorkloadError, match="unknown workload 'nosuch'"):
        profkit.profile("nosuch", db=tmp_path / "p.db")
    with pytest.raises(profkit.WorkloadError, match="not 5"):
        profkit.profile(5, db=tmp_path / "p.db")  # type: ignore[arg-type]
    with pytest.raises(profkit.StoreError, match="not attached to a database"):
        profkit.Run(id=1, name="x").kernels()
    assert not (tmp_path / "p.db").exists()  # options are checked before the database is made
    with pytest.raises(profkit.BadExport, match="don't know how to import"):
        profkit.open_db(tmp_path / "a.db").import_file(ROOT / "README.md")


@needs_torch
def test_failed_profile_is_recorded_failed(tmp_path):
    """A workload that fails in the profiled process: one WorkloadError; the run is recorded as
    failed with the error, keeps its files (the log) and its name until a run of that name
    replaces it, and has no kernels."""
    with pytest.raises(profkit.WorkloadError, match="weights file missing"):
        profkit.profile(
            str(ROOT / "tests" / "workloads" / "broken_build.py"),
            device="cpu",
            db=tmp_path / "p.db",
            name="broken",
        )
    db = profkit.open_db(tmp_path / "p.db", create=False)
    run = db.run("broken", complete=False)
    assert (
        run.status == "failed"
        and "weights file missing" in run.info["error"]
        and run.kernel_count == 0
    )
    assert (tmp_path / "p-runs" / "broken" / "harness.log").exists() or list(
        (tmp_path / "p-runs" / "broken").iterdir()
    )
    with pytest.raises(
        profkit.RunIncomplete, match="run 'broken' is failed: .*weights file missing"
    ):
        db.run("broken")
    # issue 37: its name can be used again; the run that fails again replaces it
    with pytest.raises(profkit.WorkloadError, match="weights file missing"):
        profkit.profile(
            str(ROOT / "tests" / "workloads" / "broken_build.py"),
            device="cpu",
            db=db,
            name="broken",
        )
    assert [(r.name, r.status, r.id > run.id) for r in db.list_runs()] == [
        ("broken", "failed", True)
    ]


@needs_torch
def test_profile_on_the_cpu(tmp_path):
    run = profkit.profile(
        "resnet18", device="cpu", batch_size=1, warmup=1, db=tmp_path / "p.db", name="cpu"
    )
    assert (run.name, run.tool, run.activity, run.device, run.source) == (
        "cpu",
        "torch",
        "cpu_op",
        "cpu",
        "run",
    )
    assert run.summary().kernels == run.kernel_count == len(run.kernels()) > 100
    assert list(run.ranges()["name"]) == ["resnet18.fp32.eager.iter0"]
    assert run.info["tool_choice"]["tool"] == "torch" and run.report_path.endswith("trace.json.gz")
    assert profkit.open_db(tmp_path / "p.db").run("cpu") == run


def test_import_profkit_stays_cheap():
    code = (
        "import sys, profkit; profkit.__version__; dir(profkit); "
        "print(','.join(m for m in ('torch', 'pandas', 'sqlite_utils', 'rich', 'typer', 'profkit.api') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == ""
    assert set(profkit.__all__) >= {
        "open_db",
        "profile",
        "Database",
        "Run",
        "Summary",
        "ProfkitError",
        "BadExport",
    }
    for name in profkit.__all__:
        assert getattr(profkit, name) is not None
    with pytest.raises(AttributeError):
        profkit.nosuch  # noqa: B018


def test_compare_checks_keep_bn_fp32_is_a_bool(tmp_path):
    import profkit
    from profkit.errors import UsageError

    with pytest.raises(UsageError, match="`keep_bn_fp32` is true or false"):
        profkit.compare(
            "resnet18",
            precisions=("fp32", "fp16"),
            device="cpu",
            keep_bn_fp32="no",
            db=tmp_path / "d.db",
        )
    with pytest.raises(UsageError, match="needs fp16 or bf16"):
        profkit.compare(
            "resnet18",
            precisions=("fp32", "amp"),
            device="cpu",
            keep_bn_fp32=True,
            db=tmp_path / "d.db",
        )
    assert not (tmp_path / "d.db").exists()


def test_an_unknown_option_is_named_with_the_nearest_one(tmp_path):
    """profile() takes the run options' record (profkit.options.RunOptions): a misspelt option is
    refused before anything runs, never silently dropped."""
    import profkit
    from profkit.errors import UsageError

    with pytest.raises(
        UsageError, match=r"unknown option `chanels_last` \(did you mean `channels_last`\?\)"
    ):
        profkit.profile("resnet18", chanels_last=True, device="cpu", db=tmp_path / "x.db")
    assert not (tmp_path / "x.db").exists()
