"""What another database, a planted link or another PID namespace cannot make profkit do
(issue 21, items 2-4): a run's raw folder is made for it alone (``<name>-2`` where ``<name>``
exists) and nothing of another's is deleted or overwritten; files go into run folders only as
new files, never through a link; a run is recovered only when its owner's lock is free (the
owner is dead wherever it ran), and a deleted run's id is never given again."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from profkit import cluster
from profkit.errors import StoreError
from profkit.parse import gunzip
from profkit.store import Store

from .conftest import DATA, NCU_DATA, cli, needs_torch, one_line_error

# decompressed into the run's folder on import
NSYS_GZ = DATA / "nsys" / "nsys_resnet18_fp16.sqlite.gz"
NCU_REP_GZ = NCU_DATA / "resnet18_fp16_eager.ncu-rep.gz"
TINY = str(Path(__file__).parent / "workloads" / "tiny_classifier.py")


def tree(folder: Path) -> dict[str, str]:
    """Every file (and link) under ``folder``: its content's sha256, or where a link points."""
    out = {}
    for p in sorted(folder.rglob("*")):
        key = str(p.relative_to(folder))
        if p.is_symlink():
            out[key] = "-> " + os.readlink(p)
        elif p.is_file():
            out[key] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def runs_json(db: Path) -> str:
    r = cli("runs", "-f", "json", db=db)
    assert r.exit_code == 0, r.output
    return r.stdout


def imported(db: Path, path: Path, name: str) -> Store:
    r = cli("import", path, "--name", name, db=db)
    assert r.exit_code == 0, r.output
    return Store(db, create=False)


# ------------------------------------------------------------------ 2. another run's files
def test_two_databases_of_one_stem_keep_their_own_folders(tmp_path):
    """x.db and x.sqlite share x-runs/: a run of the same name in the second gets x-runs/a-2,
    and the first's decompressed export is left as it was, through a failed import too."""
    first = imported(tmp_path / "x.db", NSYS_GZ, "a")
    run = first.get_run("a")
    assert run.folder == "a" and first.run_folder(run) == tmp_path / "x-runs" / "a"
    before = tree(tmp_path / "x-runs" / "a")
    assert "nsys_resnet18_fp16.sqlite" in before
    # A damaged export of the same name fails in the second database: its own folder goes, not the first's.
    bad = tmp_path / "nsys_resnet18_fp16.sqlite.gz"
    bad.write_bytes(NSYS_GZ.read_bytes()[:5000])
    one_line_error(
        cli("import", bad, "--name", "a", db=tmp_path / "x.sqlite"), "not a readable gzip file"
    )
    assert tree(tmp_path / "x-runs" / "a") == before and not (tmp_path / "x-runs" / "a-2").exists()
    second = imported(tmp_path / "x.sqlite", NSYS_GZ, "a")
    other = second.get_run("a")
    assert other.folder == "a-2" and second.run_folder(other) == tmp_path / "x-runs" / "a-2"
    assert tree(tmp_path / "x-runs" / "a") == before
    assert "nsys_resnet18_fp16.sqlite" in tree(tmp_path / "x-runs" / "a-2")


def test_concurrent_imports_into_two_databases_of_one_stem(tmp_path):
    """Four processes import at once into x.db and x.sqlite (one runs folder): each run has a
    folder of its own, holding its own export."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "profkit", "--db", str(tmp_path / db), "import", str(NSYS_GZ)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for db in ("x.db", "x.sqlite", "x.db", "x.sqlite")
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    folders = []
    for db in ("x.db", "x.sqlite"):
        store = Store(tmp_path / db, create=False)
        runs = store.runs()
        assert [r.status for r in runs] == ["ok", "ok"] and len({r.id for r in runs}) == 2
        folders += [store.run_folder(r) for r in runs]
    assert len(set(folders)) == 4
    for f in folders:
        assert list(tree(f)) == ["nsys_resnet18_fp16.sqlite"]


@needs_torch
def test_a_run_never_deletes_a_folder_it_did_not_make(tmp_path):
    """A folder already at <db stem>-runs/<name>/ (another database's run, or anything) is left
    as it is, links in it included; the run's files go into <name>-2, recorded with the run."""
    db = tmp_path / "p.db"
    planted = tmp_path / "p-runs" / "r"
    planted.mkdir(parents=True)
    (planted / "keep.txt").write_text("someone else's")
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    (planted / "job.json").symlink_to(victim)
    before = tree(planted)
    r = cli(
        "run",
        TINY,
        "--device",
        "cpu",
        "--tool",
        "torch",
        "--batch-size",
        "2",
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
    assert tree(planted) == before and victim.read_text() == "untouched"
    store = Store(db, create=False)
    run = store.get_run("r")
    assert run.status == "ok" and run.folder == "r-2"
    assert all(
        Path(p).parent == tmp_path / "p-runs" / "r-2" and Path(p).is_file()
        for p in run.raw_files.values()
    )


@needs_torch
def test_a_sweep_moves_its_job_folder_into_a_new_one(tmp_path, monkeypatch):
    """The sweep's store_result puts a job's files into a folder made for the run: a folder of
    that name beside the database is not deleted."""
    monkeypatch.setattr(cluster, "_dask", lambda: None)
    db = tmp_path / "s.db"
    planted = tmp_path / "s-runs" / "tiny_classifier-fp32-eager-cpu"
    planted.mkdir(parents=True)
    (planted / "keep.txt").write_text("someone else's")
    r = cli(
        "sweep",
        "--workloads",
        TINY,
        "--precisions",
        "fp32",
        "--device",
        "cpu",
        "--batch-size",
        "2",
        "--iters",
        "1",
        "--warmup",
        "1",
        "--tools",
        "torch",
        "-f",
        "json",
        db=db,
    )
    assert r.exit_code == 0, r.output
    assert tree(planted) == {"keep.txt": hashlib.sha256(b"someone else's").hexdigest()}
    store = Store(db, create=False)
    run = store.get_run("tiny_classifier-fp32-eager-cpu")
    assert run.folder == "tiny_classifier-fp32-eager-cpu-2"
    assert run.raw_files and all(
        Path(p).is_file() and Path(p).parent == store.run_folder(run)
        for p in run.raw_files.values()
    )


# ------------------------------------------------------------------ 3. writing through a planted link
@pytest.mark.parametrize("plant", ["symlink", "file"])
def test_a_planted_file_in_the_run_folder_is_never_written(tmp_path, plant):
    """A link to a victim (or a file) put where an import would decompress its export: the
    import goes into a fresh folder; the victim, the link and the file are left as they were."""
    db = tmp_path / "p.db"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    planted = tmp_path / "p-runs" / "a"
    planted.mkdir(parents=True)
    target = planted / "nsys_resnet18_fp16.sqlite"
    if plant == "symlink":
        target.symlink_to(victim)
    else:
        target.write_text("someone else's")
    before = tree(planted)
    store = imported(db, NSYS_GZ, "a")
    assert victim.read_text() == "precious" and tree(planted) == before
    assert store.get_run("a").folder == "a-2"


@pytest.mark.parametrize("export", [NSYS_GZ, NCU_REP_GZ], ids=["sqlite.gz", "ncu-rep.gz"])
def test_decompressing_refuses_a_planted_link(tmp_path, export):
    """Decompression makes its file new (O_EXCL | O_NOFOLLOW): a link planted there is refused
    in one line, and neither the link nor its target is touched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / export.name[:-3]).symlink_to(victim)
    with pytest.raises(StoreError, match="exists already"):
        gunzip(export, folder)
    assert victim.read_text() == "precious" and (folder / export.name[:-3]).is_symlink()


def test_an_import_racing_a_planted_link_fails_in_one_line(tmp_path, monkeypatch):
    """Were a link put into the run's folder just after it was made, the import fails in one
    line: the victim is unchanged, and so is the database (the folder, its own, goes)."""
    db = tmp_path / "p.db"
    imported(db, NSYS_GZ, "first")
    before = runs_json(db)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    made = Store.reserve_folder

    def racing(self, run):
        folder = made(self, run)
        (folder / "nsys_resnet18_fp16.sqlite").symlink_to(victim)
        return folder

    monkeypatch.setattr(Store, "reserve_folder", racing)
    one_line_error(cli("import", NSYS_GZ, "--name", "b", db=db), "exists already")
    assert victim.read_text() == "precious" and not (tmp_path / "p-runs" / "b").exists()
    assert runs_json(db) == before


# ------------------------------------------------------------------ 4. recovery that deletes live work
WRITER = """
import sys, time
from profkit.store import Store
store = Store(sys.argv[1])
run = store.reserve(None, sys.argv[2], {"source": "import", "started_at": "now"}, status=sys.argv[2])
print(run.id, flush=True)
time.sleep(600)
"""


def _writer(db: Path, status: str) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    p = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db), status], stdout=subprocess.PIPE, text=True, env=env
    )
    line = p.stdout.readline() if p.stdout else ""
    assert line.strip().isdigit(), "the writer did not reserve its run"
    return p, int(line)


def _statuses(db: Path) -> dict[str, str]:
    con = sqlite3.connect(db)
    try:
        return dict(con.execute("select name, status from runs order by id").fetchall())
    finally:
        con.close()


def _kill(p: subprocess.Popen) -> None:
    os.kill(p.pid, signal.SIGKILL)
    p.wait()


OPEN = "import sys; from profkit.store import Store; Store(sys.argv[1]).close()"


def _unshare_works() -> bool:
    if not shutil.which("unshare"):
        return False
    try:
        return (
            subprocess.run(
                ["unshare", "-p", "-f", "--mount-proc", "true"], capture_output=True, timeout=30
            ).returncode
            == 0
        )
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.skipif(not _unshare_works(), reason="needs unshare -p (a PID namespace of its own)")
def test_a_reader_in_another_pid_namespace_leaves_live_runs_alone(tmp_path):
    """A reader that cannot see the writers' pids (unshare -p, as in a container on the same
    host name) opens the database: both live runs survive; once their writers are killed, the
    next open recovers them (the import goes, the profiled run is interrupted)."""
    db = tmp_path / "p.db"
    importing, _ = _writer(db, "importing")
    running, _ = _writer(db, "running")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    try:
        out = subprocess.run(
            [
                "unshare",
                "-p",
                "-f",
                "--mount-proc",
                sys.executable,
                "-c",
                OPEN + "; import os; print(os.getpid())",
                str(db),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert int(out.stdout) < 10  # it did run in a namespace of its own
        assert _statuses(db) == {"importing": "importing", "running": "running"}
    finally:
        _kill(importing)
        _kill(running)
    subprocess.run(
        ["unshare", "-p", "-f", "--mount-proc", sys.executable, "-c", OPEN, str(db)],
        check=True,
        env=env,
        timeout=120,
    )
    assert _statuses(db) == {"running": "interrupted"}
    assert not list((tmp_path / "p.db-locks").iterdir())


def test_an_owner_pid_that_looks_dead_is_no_proof(tmp_path):
    """The same without a namespace: the owner's pid rewritten to one that does not exist. The
    run's lock is held, so the run survives; after SIGKILL the lock is free and it is recovered."""
    db = tmp_path / "p.db"
    p, run_id = _writer(db, "importing")
    try:
        con = sqlite3.connect(db)
        with con:
            con.execute(
                "update runs set owner = ? where id = ?",
                [f"{socket.gethostname()}:999999999+lock", run_id],
            )
        con.close()
        Store(db).close()
        assert _statuses(db) == {"importing": "importing"}
    finally:
        _kill(p)
    Store(db).close()
    assert _statuses(db) == {}


def test_owners_without_a_lock(tmp_path):
    """A row of an earlier profkit (owner host:pid, no lock) is recovered when its pid is gone
    on this host, as before; a row whose lock file was removed by hand is left alone (nothing
    proves its owner dead)."""
    db = tmp_path / "p.db"
    store = Store(db)
    old = store.reserve(None, "old", {"source": "import"}, status="importing")
    gone = store.reserve(None, "gone", {"source": "import"}, status="importing")
    store.close()
    con = sqlite3.connect(db)
    with con:
        con.execute(
            "update runs set owner = ? where id = ?", [f"{socket.gethostname()}:999999999", old.id]
        )
    con.close()
    (tmp_path / "p.db-locks" / f"{gone.id}.lock").unlink()
    sub = subprocess.run(
        [sys.executable, "-c", OPEN, str(db)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        timeout=120,
    )
    assert sub.returncode == 0
    assert _statuses(db) == {"gone": "importing"}


def test_a_deleted_runs_id_is_never_given_again(tmp_path):
    db = tmp_path / "p.db"
    store = imported(db, NSYS_GZ, "a")
    b = imported(db, NSYS_GZ, "b").get_run("b")
    store.delete_run(b.id)
    store.close()
    c = imported(db, NSYS_GZ, "c").get_run("c")
    assert c.id == b.id + 1
    # A killed import's id is not given again either.
    p, run_id = _writer(db, "importing")
    _kill(p)
    assert imported(db, NSYS_GZ, "d").get_run("d").id == run_id + 1


def test_an_earlier_schema_opens_and_gives_new_ids(tmp_path):
    """A schema-7 database (rows without folder or lock) opens, reads its runs from their old
    folders, and never gives the id of a run deleted after the upgrade."""
    path = tmp_path / "schema7.db"
    path.write_bytes(gzip.decompress((DATA / "store" / "schema7.db.gz").read_bytes()))
    store = Store(path)
    runs = store.runs()
    assert runs and all(
        r.folder is None and store.run_folder(r) == tmp_path / "schema7-runs" / r.name for r in runs
    )
    top = max(r.id for r in runs)
    store.delete_run(top)
    store.close()
    assert imported(path, NSYS_GZ, "new").get_run("new").id == top + 1


# ---------------------------------------------- folders another user planted beside a database
NOBODY = 65534


def _planted_link(at: Path, target: Path) -> None:
    """A link at ``at`` to ``target`` as another user (nobody) would plant it in a shared folder."""
    target.mkdir(exist_ok=True)
    at.symlink_to(target)
    os.lchown(at, NOBODY, NOBODY)


@pytest.mark.skipif(os.geteuid() != 0, reason="plants another user's files: needs root")
@pytest.mark.parametrize("which", ["p-runs", "p.db-locks"])
def test_a_folder_planted_by_another_user_is_refused(tmp_path, which):
    """A `<stem>-runs` or `<db>-locks` link another user put beside the database (in /tmp, say)
    would have the runs' files written elsewhere, or let that user swap a lock file under a live
    run: a run or import that would use it is refused in one line, and nothing is stored."""
    db = tmp_path / "p.db"
    imported(db, NCU_DATA / "resnet18_fp16_eager.raw.csv.gz", "first").close()
    before = runs_json(db)
    if which == "p.db-locks":
        shutil.rmtree(tmp_path / which)
    _planted_link(tmp_path / which, tmp_path / "elsewhere")
    one_line_error(cli("import", NSYS_GZ, "--name", "second", db=db), "is a link another user made")
    assert runs_json(db) == before and not list((tmp_path / "elsewhere").iterdir())


@pytest.mark.parametrize("which", ["p-runs", "p.db-locks"])
def test_a_folder_others_may_change_is_refused(tmp_path, which):
    """The same for a folder anyone may write in (and not sticky): another user could rename a
    run's folder or lock file away and put their own in its place."""
    db = tmp_path / "p.db"
    imported(db, NCU_DATA / "resnet18_fp16_eager.raw.csv.gz", "first").close()
    before = runs_json(db)
    (tmp_path / which).mkdir(exist_ok=True)
    os.chmod(tmp_path / which, 0o777)
    one_line_error(
        cli("import", NSYS_GZ, "--name", "second", db=db), "may be changed by other users"
    )
    assert runs_json(db) == before
    os.chmod(tmp_path / which, 0o1777)  # sticky, as /tmp: nobody renames what is not theirs
    assert cli("import", NSYS_GZ, "--name", "second", db=db).exit_code == 0


def test_a_lock_folder_others_may_change_proves_nothing(tmp_path):
    """A reader does not recover a run on a lock taken in a folder another user could have
    changed (they could have swapped the live owner's lock file for a free one)."""
    db = tmp_path / "p.db"
    p, run_id = _writer(db, "importing")
    try:
        locks = tmp_path / "p.db-locks"
        os.chmod(locks, 0o777)
        os.rename(locks / f"{run_id}.lock", locks / "moved")  # what such a user could do
        (locks / f"{run_id}.lock").touch()
        Store(db).close()
        assert _statuses(db) == {"importing": "importing"}
    finally:
        _kill(p)


def test_a_recovery_that_cannot_write_keeps_the_lock_file(tmp_path, monkeypatch):
    """A reader that proves an owner dead but cannot write (a read-only database) leaves the
    run, and its lock file, for a writer to recover later."""
    db = tmp_path / "p.db"
    p, run_id = _writer(db, "running")
    _kill(p)
    lock = tmp_path / "p.db-locks" / f"{run_id}.lock"
    assert lock.exists()

    def read_only(*args, **kwargs):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(Store, "_recover_run", read_only)
    Store(db).close()
    assert lock.exists() and _statuses(db) == {"running": "running"}
    monkeypatch.undo()
    Store(db).close()
    assert not lock.exists() and _statuses(db) == {"running": "interrupted"}
