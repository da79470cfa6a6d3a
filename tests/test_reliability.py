"""Reliability (issue 11): many profkit processes on one database at once, interruptions by
signal, and what is left afterwards. Every case runs real `profkit` processes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import profkit

from .conftest import DATA, NCU_DATA, needs_torch

PROFKIT = [sys.executable, "-m", "profkit"]


def start(*args: object, db: Path, cwd: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [*PROFKIT, "--db", str(db), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )


def finish(p: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def consistent(db: Path) -> dict[str, tuple[str, int]]:
    """Every run's status and launch count, checked against its kernel rows."""
    con = sqlite3.connect(db)
    assert con.execute("pragma integrity_check").fetchone()[0] == "ok"
    out = {}
    for name, status, count, rid in con.execute(
        "select name, status, kernel_count, id from runs order by id"
    ):
        rows = con.execute(
            "select count(*) from kernels where run_id = ? and kind in ('kernel', 'cpu_op')", [rid]
        ).fetchone()[0]
        assert rows == (count if status == "ok" else 0), (name, status, count, rows)
        out[name] = (status, count)
    orphans = con.execute(
        "select count(*) from kernels where run_id not in (select id from runs)"
    ).fetchone()[0]
    assert orphans == 0
    con.close()
    return out


@pytest.mark.parametrize("round_", range(3))  # repeated: a race shows only now and then
def test_eight_imports_and_queries_at_once(tmp_path, round_):
    """Eight imports of one file into a fresh database, with automatic names, while other
    processes list runs and stream a run's kernels: all finish, no run lost, names distinct."""
    db = tmp_path / "p.db"
    src = NCU_DATA / "resnet18_fp16_eager.raw.csv.gz"
    first = start("import", src, "--name", "seed", db=db)
    assert finish(first)[0] == 0
    procs = [start("import", src, db=db) for _ in range(8)]
    readers = [
        start("kernels", "seed", "--format", "json", db=db),
        start("runs", "--format", "json", db=db),
        start("summary", "seed", db=db),
    ]
    results = [finish(p) for p in procs + readers]
    for rc, _out, err in results:
        assert rc == 0 and "Traceback" not in err, err
    runs = consistent(db)
    assert len(runs) == 9 and all(v == ("ok", 162) for v in runs.values())
    assert sorted(runs) == sorted(
        [
            "seed",
            *[f"resnet18_fp16_eager-{i}" if i > 1 else "resnet18_fp16_eager" for i in range(1, 9)],
        ]
    )
    assert len(json.loads(results[8][1])) == 162


def test_reader_during_a_long_import_is_not_blocked(tmp_path):
    """A long import holds no lock that readers wait for: `runs` answers at once meanwhile,
    without the unfinished run."""
    import shutil

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from nsys_scale import synthesize

    big = tmp_path / "big.sqlite"
    synthesize(big, 300_000)
    db = tmp_path / "p.db"
    shutil.copy(DATA / "torch" / "cpu_resnet18_fp32.json.gz", tmp_path / "small.json.gz")
    assert finish(start("import", tmp_path / "small.json.gz", "--name", "small", db=db))[0] == 0
    importer = start("import", big, "--name", "big", db=db)
    seen_importing = False
    try:
        for _ in range(200):
            t0 = time.monotonic()
            rc, out, err = finish(start("runs", "--format", "json", db=db), timeout=60)
            assert rc == 0, err
            assert time.monotonic() - t0 < 20
            statuses = {r["name"]: r["status"] for r in json.loads(out)}
            if statuses.get("big") == "importing":
                seen_importing = True
                rc, _, err = finish(start("summary", "big", db=db))
                assert rc == 1 and "run 'big' is importing" in err
                break
            if importer.poll() is not None:
                break
            time.sleep(0.2)
    finally:
        rc, out, err = finish(importer, timeout=600)
    assert rc == 0, err
    assert seen_importing
    assert consistent(db)["big"] == ("ok", 301_200) or consistent(db)["big"][0] == "ok"


@needs_torch
def test_three_cpu_runs_at_once_keep_their_own_names_and_files(tmp_path):
    """Three `run --device cpu` of one workload, no --name, batch 1, 2, 3: three complete runs,
    each with its own name, raw folder and a job file of its own batch size."""
    db = tmp_path / "p.db"
    procs = [
        start(
            "run",
            "resnet18",
            "--device",
            "cpu",
            "--batch-size",
            n,
            "--warmup",
            "1",
            "--no-report",
            db=db,
        )
        for n in (1, 2, 3)
    ]
    results = [finish(p, timeout=600) for p in procs]
    for rc, _out, err in results:
        assert rc == 0 and "Traceback" not in err, err
    runs = consistent(db)
    assert sorted(runs) == [
        "resnet18-fp32-eager-cpu",
        "resnet18-fp32-eager-cpu-2",
        "resnet18-fp32-eager-cpu-3",
    ]
    stored = profkit.open_db(db)
    for name in runs:
        r = stored.run(name)
        job = json.loads((tmp_path / "p-runs" / name / "job.json").read_text())
        assert job["spec"]["batch_size"] == r.batch_size and r.status == "ok"
    assert sorted(stored.run(n).batch_size for n in runs) == [1, 2, 3]


def _wait_for(db: Path, status: str, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if db.exists():
            try:
                con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
                hit = con.execute("select 1 from runs where status = ?", [status]).fetchone()
                con.close()
                if hit:
                    return
            except sqlite3.Error:
                pass
        time.sleep(0.1)
    raise AssertionError(f"no run reached status {status}")


def _children(folder: Path) -> list[int]:
    """The profiled (harness) processes of runs under ``folder``: their job file is there."""
    out = subprocess.run(
        ["ps", "-e", "-ww", "-o", "pid=,args="], capture_output=True, text=True
    ).stdout
    return [
        int(line.split()[0])
        for line in out.splitlines()
        if "profkit.harness" in line and str(folder) in line
    ]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_a_large_import(tmp_path, sig):
    """SIGINT or SIGTERM during a large import: exit 130 / 143, nothing of the run stays, the
    database is consistent, and importing the file again works."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from nsys_scale import synthesize

    big = tmp_path / "big.sqlite"
    synthesize(big, 600_000)  # about 3 s to import on two cores
    db = tmp_path / "p.db"
    assert (
        finish(
            start("import", NCU_DATA / "resnet18_fp16_eager.raw.csv.gz", "--name", "keep", db=db)
        )[0]
        == 0
    )
    p = start("import", big, "--name", "big", db=db)
    _wait_for(db, "importing")
    time.sleep(0.5)
    p.send_signal(sig)
    rc, out, err = finish(p)
    assert rc == (130 if sig == signal.SIGINT else 143), err
    assert "Traceback" not in err
    assert consistent(db) == {"keep": ("ok", 162)}
    rc, out, err = finish(start("import", big, "--name", "big", db=db), timeout=600)
    assert rc == 0, err and consistent(db)["big"][0] == "ok"


@needs_torch
@pytest.mark.parametrize(
    "sigs",
    [
        (signal.SIGINT,),
        (signal.SIGTERM,),
        (signal.SIGINT, signal.SIGINT),
        (signal.SIGINT, signal.SIGTERM),
    ],
    ids=["int", "term", "int-int", "int-term"],
)
def test_signal_during_a_cpu_run(tmp_path, sigs):
    """SIGINT or SIGTERM (or two signals 50 ms apart, the second while profkit stops its child)
    to `profkit run --device cpu` while it profiles: no harness process is left, the run is
    recorded interrupted with its raw folder, and the database is consistent."""
    sig = sigs[0]
    db = tmp_path / "p.db"
    p = start(
        "run",
        "resnet18",
        "--device",
        "cpu",
        "--batch-size",
        "8",
        "--warmup",
        "50",
        "--name",
        "cut",
        "--no-report",
        db=db,
    )
    _wait_for(db, "running")
    deadline = time.monotonic() + 60
    while not _children(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _children(tmp_path), "the harness never started"
    for i, one in enumerate(sigs):
        if i:
            time.sleep(0.05)
        p.send_signal(one)
    rc, out, err = finish(p)
    assert rc == (130 if sig == signal.SIGINT else 143), err
    assert "Traceback" not in err
    time.sleep(0.5)
    assert _children(tmp_path) == []
    assert consistent(db) == {"cut": ("interrupted", 0)}
    assert (tmp_path / "p-runs" / "cut" / "job.json").exists()


def test_killed_import_is_recovered_at_the_next_open(tmp_path):
    """SIGKILL leaves a half-written import behind: the next profkit to open the database
    removes it, and the name is free again."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from nsys_scale import synthesize

    big = tmp_path / "big.sqlite"
    synthesize(big, 600_000)  # about 3 s to import on two cores
    db = tmp_path / "p.db"
    p = subprocess.Popen(
        [*PROFKIT, "--db", str(db), "import", str(big), "--name", "big"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PROFKIT_TIMINGS": "1"},
    )
    # Killed in the rows' write transaction: its stage after the operations are grouped, whichever
    # way they were read (an import of 200,000 kernels now ends within a second or two).
    for line in p.stderr:  # type: ignore[union-attr]
        if line.startswith("profkit: states:"):
            break
    else:
        raise AssertionError("the import never reached its rows")
    os.kill(p.pid, signal.SIGKILL)
    p.communicate()
    assert consistent_after_open(db) == {}


def consistent_after_open(db: Path) -> dict[str, tuple[str, int]]:
    profkit.open_db(db).close()
    return consistent(db)
