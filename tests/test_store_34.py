"""A database this user cannot write, on a full disk, of a newer profkit, or being made by
another process (issue 34, items 9 and 11): read commands read it (read-only where SQLite
cannot keep its -shm and -wal files beside it), a write says why it cannot in one line (the
file or folder is another user's; the disk is full, naming where), a run that meets a full
disk ends ``failed`` saying so, and a reader finds no database or a complete one, never one
half made. Another user is nobody (uid 65534) in a child of this process; a full disk a
small tmpfs, or an ENOSPC injected into a real `profkit run`."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from profkit.errors import StoreError
from profkit.store import Store, migrations

from .conftest import DATA, cli, one_line_error

CAPTURE = DATA / "diff" / "r18_fp16_eager_torch.json.gz"
RUN = "r18_fp16_eager_torch"
OTHER = DATA / "diff" / "r18_fp16_compile_torch.json.gz"
TINY = str(Path(__file__).parent / "workloads" / "tiny_classifier.py")
NOBODY = 65534
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="plays another user (nobody) or mounts a disk: needs root"
)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def reads(out: Path) -> list[tuple[str, ...]]:
    """The commands that only read a database (``report`` writing its page into ``out``)."""
    return [
        ("runs",),
        ("kernels", RUN, "--limit", "3"),
        ("kernels", RUN, "-f", "json"),
        ("summary", RUN),
        ("ranges", RUN),
        ("diff", RUN, RUN),
        ("check", RUN, "--max-launches", "500"),
        ("report", RUN, "-o", str(out / "r.html")),
    ]


def profkit(*args, db: Path) -> str:
    """``profkit ARGS --db DB`` in a process of its own; its stdout (it must succeed)."""
    r = subprocess.run(
        [sys.executable, "-m", "profkit", *map(str, args), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def as_nobody(commands: list[tuple[str, ...]], db: Path) -> list[list]:
    """Each command run in-process by a child of this process that became nobody: its
    (exit code, stdout, stderr). The child can import nothing new (the interpreter's files
    may be root's alone): the caller runs the same commands here first."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = []
            for args in commands:
                res = cli(*args, db=db)
                out.append(
                    [
                        res.exit_code,
                        res.stdout,
                        res.stderr or (repr(res.exception) if res.exit_code else ""),
                    ]
                )
            data = json.dumps(out).encode()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            data = json.dumps(f"the child failed: {exc!r}").encode()
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    got = json.loads(data)
    assert isinstance(got, list), got
    return got


@pytest.fixture
def shared(tmp_path):
    """A folder nobody can reach (pytest's own is root's alone): ``db/`` root's (0755), ``out/``
    anyone's."""
    base = Path(tempfile.mkdtemp(prefix="profkit-34-", dir="/tmp"))
    os.chmod(base, 0o755)
    (base / "db").mkdir(mode=0o755)
    (base / "out").mkdir()
    os.chmod(base / "out", 0o777)
    yield base
    shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ item 9: read-only databases
@needs_root
@pytest.mark.parametrize("writer_open", [False, True], ids=["closed", "a-writer-has-it-open"])
def test_a_database_in_a_folder_this_user_cannot_write_is_read(shared, writer_open):
    """Another user's database, in their folder (0755), readable by all: every read command
    read it (no -shm or -wal can be made beside it: they failed with "cannot write ... check
    free disk space"), whether or not its owner has it open; an import says the file or
    folder is not this user's to write. Nothing of it changes."""
    db = shared / "db" / "p.db"
    profkit("import", CAPTURE, db=db)  # a process of its own, ended: no -wal or -shm left
    assert sorted(os.listdir(db.parent)) == ["p.db", "p.db-locks"]
    warm = shared / "warm" / "p.db"  # the same commands once here: the child imports nothing new
    warm.parent.mkdir()
    shutil.copy(db, warm)
    for args in [*reads(shared / "warm"), ("import", OTHER)]:
        assert cli(*args, db=warm).exit_code == 0, args
    holder = None
    if writer_open:  # its -wal and -shm exist, root's, 0644
        holder = sqlite3.connect(db)
        holder.execute("select count(*) from runs").fetchone()
        assert Path(f"{db}-shm").exists()
    try:
        before, files = sha(db), sorted(os.listdir(db.parent))
        *got, imported = as_nobody([*reads(shared / "out"), ("import", OTHER)], db)
        after = sha(db), sorted(os.listdir(db.parent))
    finally:
        if holder is not None:
            holder.close()
    for args, (code, out, err) in zip(reads(shared / "out"), got):
        assert code == 0 and not err, (args, code, err)
        assert RUN in out or args[0] in ("kernels", "check", "report"), (args, out)
    assert len(json.loads(got[2][1])) == 162
    assert (shared / "out" / "r.html").stat().st_uid == NOBODY
    code, out, err = imported
    assert (
        code == 1
        and err.count("\n") == 1
        and "this user may not write the file or its folder" in err
    ), err
    assert after == (before, files)


def test_an_up_to_date_database_opens_read_only_without_its_wal_files(tmp_path, monkeypatch):
    """Where SQLite cannot make a WAL database's -shm (a connection that may write, and one
    with mode=ro, both fail), it is read as an immutable file; a write then says why."""
    db = tmp_path / "p.db"
    profkit("import", CAPTURE, db=db)
    real = Store._connect

    def no_shm(self, params=""):
        if "immutable" not in params:
            raise sqlite3.OperationalError("unable to open database file")
        return real(self, params)

    monkeypatch.setattr(Store, "_connect", no_shm)
    store = Store(db, create=False)
    assert store.read_only and [r.name for r in store.runs()] == [RUN]
    one_line_error(cli("import", OTHER, db=db), "this user may not write the file or its folder")


def test_a_wal_holding_changes_is_not_read_past(tmp_path, monkeypatch):
    """A -wal file with changes the database file lacks (its writer was killed) is not
    skipped by an immutable read: where it cannot be read with it, the open fails in one line."""
    db = tmp_path / "p.db"
    profkit("import", CAPTURE, db=db)
    Path(f"{db}-wal").write_bytes(b"x" * 100)
    monkeypatch.setattr(
        Store,
        "_connect",
        lambda self, params="": (_ for _ in ()).throw(
            sqlite3.OperationalError("unable to open database file")
        ),
    )
    with pytest.raises(StoreError, match="cannot open .*unable to open database file"):
        Store(db, create=False)


# ------------------------------------------------------------------ item 11: full disks
@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB tmpfs (skipped where it cannot be mounted)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True
    ).returncode:
        pytest.skip("cannot mount a tmpfs here")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def fill(disk: Path) -> None:
    fd = os.open(disk / "fill", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


@needs_root
def test_a_full_disk_is_said_so_and_reading_still_works(small_disk):
    """On a full disk: the database is read (it could not be: "disk I/O error"); an import
    into it, or into a new database there, says the disk is full naming the file (not
    "check the file's permissions"), leaving no database half made."""
    db = small_disk / "p.db"
    before = profkit("import", CAPTURE, db=db) and profkit("runs", "-f", "json", db=db)
    fill(small_disk)
    for args in (("runs",), ("summary", RUN), ("kernels", RUN, "-f", "json")):
        r = cli(*args, db=db)
        assert r.exit_code == 0 and not r.stderr, (args, r.output)
    one_line_error(cli("import", OTHER, db=db), f"the disk is full: cannot write {db}")
    one_line_error(
        cli("import", OTHER, db=small_disk / "new.db"),
        f"the disk is full: cannot write {small_disk / 'new.db'}",
    )
    # no new.db, no half-made one
    assert not [name for name in os.listdir(small_disk) if "new" in name]
    (small_disk / "fill").unlink()
    assert cli("runs", "-f", "json", db=db).stdout == before


def test_a_full_disk_met_reading_is_no_damaged_database(tmp_path, monkeypatch):
    """SQLite's "full" met while a read streams (room for temporary data) was put down to a
    damaged database."""
    from profkit.store.queries import Queries

    db = tmp_path / "p.db"
    assert cli("import", CAPTURE, db=db).exit_code == 0

    def full(self, run_id):
        yield "{}"
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Queries, "iter_kernels_json", full)
    r = cli("kernels", RUN, "-f", "json", db=db)
    one_line_error(r, f"the disk is full: reading {db} needs room SQLite could not find")
    assert "damaged" not in r.stderr


# A `profkit run` whose writes meet a full disk: its job file (ENOSPC on write) and then the
# database (SQLite's "full") take nothing more.
FULL_DISK_RUN = """
import contextlib, errno, sqlite3, sys
import profkit.files as files
from profkit.store.connection import Connection

full = []
open_new = files.open_new

def no_room(path, *args, **kwargs):
    f = open_new(path, *args, **kwargs)
    if str(path).endswith("job.json"):
        def write(data):
            full.append(path)
            raise OSError(errno.ENOSPC, "No space left on device")
        f.write = write
    return f

files.open_new = no_room
write = Connection.write

@contextlib.contextmanager
def full_write(self):
    if full:
        raise sqlite3.OperationalError("database or disk is full")
    with write(self):
        yield

Connection.write = full_write
sys.argv[0] = "profkit"
from profkit.cli import main
main()
"""


def test_a_run_that_meets_a_full_disk_ends_failed_saying_so(tmp_path):
    """It said "cannot write the output" and the run ended interrupted (its end could not be
    stored: the recovery took it for a killed process). Now the error names the file, and the
    run ends failed with it: noted in its lock file's room, where the database had none."""
    db = tmp_path / "p.db"
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            FULL_DISK_RUN,
            "run",
            TINY,
            "--device",
            "cpu",
            "--tool",
            "torch",
            "--no-report",
            "--db",
            str(db),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    folder = tmp_path / "p-runs" / "tiny_classifier-fp32-eager-cpu"
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == (
        f"profkit: error: the disk is full: cannot write {folder / 'job.json'} (no space "
        "left). Free some space on it, or use a database on another disk (--db)."
    ), r.stderr
    (run,) = json.loads(cli("runs", "-f", "json", db=db).stdout)  # the recovery ends it, as noted
    assert run["status"] == "failed", run
    stored = Store(db, create=False).get_run(run["name"])
    assert stored.info.error.startswith(f"the disk is full: cannot write {folder / 'job.json'}"), (
        stored.info
    )
    assert not list((tmp_path / "p.db-locks").iterdir())  # the recovery removed the lock file


# ------------------------------------------------------------------ item 11: a database being made
def test_a_reader_never_finds_a_database_half_made(tmp_path, monkeypatch):
    """A database was made step by step at its own path: a reader between the steps found no
    tables ("not a profkit database") or an early layout. It is made under another name and
    linked into place: a reader finds no database, then a complete one."""
    db = tmp_path / "p.db"
    seen: list[str] = []
    apply = migrations._apply

    def apply_and_read(s, st):
        if seen and seen[-1] == "reading":
            return apply(s, st)
        for when in ("before", "after"):
            if when == "after":
                apply(s, st)
            seen.append("reading")
            try:
                reader = Store(db, create=False)
                seen[-1] = (
                    f"read {[r.name for r in reader.runs()]} at schema {migrations.schema_version(reader)}"
                )
                reader.close()
            except StoreError as exc:
                seen[-1] = str(exc)

    monkeypatch.setattr(migrations, "_apply", apply_and_read)
    Store(db).runs()  # made on first use
    assert len(seen) == 2 * migrations.SCHEMA_VERSION
    assert set(seen) == {
        f"no database at {db}. Run or import something first, or choose another `db`."
    }, seen
    monkeypatch.undo()
    assert Store(db, create=False).runs() == [] and not [
        p for p in os.listdir(tmp_path) if p.endswith(".new")
    ]


def test_readers_while_another_process_makes_the_database(tmp_path):
    """The issue's case with real processes: reads while `profkit import` makes a new
    database find none, or a complete one (15 of 36 found "not a profkit database")."""
    db = tmp_path / "db0.db"
    errors: list[str] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                Store(db, create=False).close()
            except StoreError as exc:
                if "no database at" not in str(exc):
                    errors.append(str(exc))

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for n in range(3):
            path = tmp_path / f"db{n}.db"
            db = path
            r = subprocess.run(
                [sys.executable, "-m", "profkit", "import", str(CAPTURE), "--db", str(path)],
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
            )
            assert r.returncode == 0, r.stderr
    finally:
        done.set()
        for t in readers:
            t.join()
    assert not errors, errors[:3]


# ------------------------------------------- a database another user planted, or not a file at all
@needs_root
def test_a_link_another_user_made_is_no_database(shared):
    """A dangling link another user left in a sticky shared folder, pointing into their own
    folder: ``import`` is refused in one line, and nothing (no database, no -locks folder) is
    made where it points; reading through it is refused too."""
    sticky, theirs = shared / "j", shared / "att"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    db = sticky / "p.db"
    db.symlink_to(theirs / "p.db")
    os.lchown(db, NOBODY, NOBODY)
    one_line_error(
        cli("import", CAPTURE, db=db), f"{db} is a link another user (user {NOBODY}) made"
    )
    one_line_error(cli("runs", db=db), "is a link another user")
    assert os.listdir(theirs) == [] and sorted(os.listdir(sticky)) == ["p.db"]


@needs_root
def test_a_database_file_another_user_owns_is_read_never_written(shared):
    """Another user's database file (planted in a folder this user may write): reading it
    works, read-only; an import is refused in one line and the file is left as it was."""
    db = shared / "db" / "p.db"
    profkit("import", CAPTURE, db=db)
    os.chown(db, NOBODY, NOBODY)  # the file alone: its folder and -locks folder are this user's
    before = sha(db)
    r = cli("runs", "-f", "json", db=db)
    assert r.exit_code == 0 and [run["name"] for run in json.loads(r.stdout)] == [RUN], r.output
    one_line_error(
        cli("import", OTHER, db=db),
        f"{db} belongs to user {NOBODY}: profkit writes no run into another user's database",
    )
    assert sha(db) == before
    assert [run["name"] for run in json.loads(profkit("runs", "-f", "json", db=db))] == [RUN]


def test_a_database_holding_triggers_is_refused(tmp_path):
    """profkit makes no triggers; one planted in a database (rewriting a run's kernel times once
    it is written) makes it not profkit's: every command refuses it in one line, and nothing
    is written."""
    db = tmp_path / "q.db"
    assert cli("import", CAPTURE, db=db).exit_code == 0
    with sqlite3.connect(db) as conn:
        assert not conn.execute("select 1 from sqlite_master where type = 'trigger'").fetchall()
        conn.execute(
            "create trigger evil after update on runs begin "
            "update kernel_aggs set time_ns = 1 where run_id = new.id; end"
        )
    conn.close()
    before = sha(db)
    for args in (("import", OTHER), ("runs",), ("summary", RUN)):
        one_line_error(
            cli(*args, db=db), f"{db} holds triggers: not a profkit database as profkit makes it"
        )
    assert sha(db) == before


@pytest.mark.parametrize("command", [("runs",), ("import", str(CAPTURE))])
def test_a_fifo_given_as_the_database_is_refused_at_once(tmp_path, command):
    """``--db`` naming a FIFO (no writer): refused before SQLite opens it, where it would block
    for good, deaf to SIGTERM."""
    fifo = tmp_path / "ff"
    os.mkfifo(fifo)
    r = subprocess.run(
        [sys.executable, "-m", "profkit", "--db", str(fifo), *command],
        capture_output=True,
        text=True,
        timeout=20,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert r.returncode == 1 and f"{fifo} is not a regular file" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_a_fifo_put_in_place_while_the_database_is_made_is_refused(tmp_path):
    """Where something else appears at the path while a new database is being made (another
    process made it first: theirs is opened), it is checked as a given path is: a FIFO there is
    refused, not opened for good."""
    fifo = tmp_path / "ff"
    code = (
        "import os, sys\nfrom profkit.store import Store\nfrom profkit.errors import StoreError\n"
        "Store._make = lambda self: os.mkfifo(self.path)\n"
        f"try:\n    Store({str(fifo)!r}).conn\nexcept StoreError as exc:\n    sys.exit(str(exc))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=20,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert r.returncode == 1 and f"{fifo} is not a regular file" in r.stderr, r.stderr


@needs_root
def test_a_wal_another_user_planted_beside_a_database_is_refused(shared):
    """The second hostile pass: in a sticky shared folder, another user put a write-ahead log
    of their own (``s.db-wal``, made from a copy of the readable database) beside this user's
    database; SQLite read it as part of the database and checkpointed it in, renaming a run
    for good. A companion file (``-wal``, ``-shm``, ``-journal``) that is another user's, a
    link or not a regular file is now refused in one line, and the database is left as it was."""
    sticky = shared / "j"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    db = sticky / "s.db"
    profkit("import", CAPTURE, "--name", "mine", db=db)
    before = sha(db)
    forged = shared / "forged.db"
    shutil.copy(db, forged)
    con = sqlite3.connect(forged)
    con.execute("pragma wal_autocheckpoint = 0")
    con.execute("pragma journal_mode = wal")
    con.execute("update runs set name = 'pwned'")
    con.commit()
    shutil.copy(str(forged) + "-wal", str(db) + "-wal")  # while the forger's connection holds it
    con.close()
    os.chown(str(db) + "-wal", NOBODY, NOBODY)
    one_line_error(cli("runs", db=db), f"{db}-wal belongs to another user (user {NOBODY})")
    one_line_error(cli("import", CAPTURE, db=db), f"{db}-wal belongs to another user")
    assert sha(db) == before
    os.unlink(str(db) + "-wal")
    os.mkfifo(str(db) + "-wal")
    one_line_error(cli("runs", db=db), f"{db}-wal is not a regular file")
    os.unlink(str(db) + "-wal")
    os.symlink(forged, str(db) + "-shm")
    one_line_error(cli("runs", db=db), f"{db}-shm is a link")
    os.unlink(str(db) + "-shm")
    assert "mine" in cli("runs", db=db).output and sha(db) == before
