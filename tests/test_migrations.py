"""profkit.store.migrations: the database's layout as a named, ordered list of steps recorded in
the database (``_sqlite_migrations``, set ``profkit``). A new database gets every step; a
database of an earlier profkit (the committed schema 5 and 7 ones, and schema 9 as the profkit
before steps were recorded left it) gets those it lacks, with those its schema version implies
recorded, and reaches the layout of a new one; an up-to-date one is opened without a write
(read-only too); one of a newer profkit is refused in one line, unchanged."""

from __future__ import annotations

import gzip
import hashlib
import sqlite3
from pathlib import Path

import pytest

from profkit.errors import StoreError
from profkit.ingest import import_file
from profkit.store import Store
from profkit.store.layout import STORED_COLUMNS
from profkit.store.migrations import MIGRATIONS_TABLE, SCHEMA_VERSION, STEPS

from .conftest import DATA, NCU_DATA, cli, cli_json, one_line_error

STORE_DATA = DATA / "store"
CSV = NCU_DATA / "resnet18_fp16_eager.raw.csv.gz"
NAMES = [st.name for st in STEPS]


def record(path: Path) -> list[tuple[str, str, bool]]:
    """(set, step, whether a time is recorded) per recorded step, in order."""
    con = sqlite3.connect(path)
    try:
        return [
            (s, n, at is not None)
            for s, n, at in con.execute(
                f"select migration_set, name, applied_at from {MIGRATIONS_TABLE} order by id"
            )
        ]
    finally:
        con.close()


def layout(path: Path) -> dict[str, list[tuple]]:
    """Every table's and view's columns (name, type, not null, key) and every index's columns,
    but the record of steps'. A table's columns in any order (a column a step adds comes last),
    a view's in order (the ``kernels`` view puts ``rank`` after ``device`` whatever the table)."""
    con = sqlite3.connect(path)
    try:
        out: dict[str, list[tuple]] = {}
        for name, kind in con.execute(
            "select name, type from sqlite_master where name not like 'sqlite_%' "
            f"and name not like '%{MIGRATIONS_TABLE}%'"
        ):
            pragma = "index_info" if kind == "index" else "table_info"
            out[f"{kind} {name}"] = [
                tuple(r[1:]) if kind == "index" else (r[1], r[2], r[3], r[5])
                for r in con.execute(f"pragma {pragma}({name})")
            ]
            if kind == "table":
                out[f"{kind} {name}"].sort()
        return out
    finally:
        con.close()


def version(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        return con.execute("select value from meta where key = 'schema_version'").fetchone()[0]
    finally:
        con.close()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def no_writes(monkeypatch) -> None:
    """Any write transaction from now on fails the test."""

    def refuse(self):
        raise AssertionError("a write transaction on opening an up-to-date database")

    monkeypatch.setattr(Store, "write", refuse)


def read_only(monkeypatch) -> None:
    """Stores open their file read-only (SQLite's mode=ro: root's tests cannot chmod it away)."""

    def connect(self):
        return sqlite3.connect(
            f"file:{self.path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
        )

    monkeypatch.setattr(Store, "_connect", connect)


def old_copy(tmp_path: Path, schema: int) -> Path:
    path = tmp_path / f"schema{schema}.db"
    path.write_bytes(gzip.decompress((STORE_DATA / f"schema{schema}.db.gz").read_bytes()))
    return path


def test_the_steps_are_named_once_and_numbered_in_order():
    assert len(set(NAMES)) == len(NAMES) == SCHEMA_VERSION == 16
    assert [st.version for st in STEPS] == list(range(1, SCHEMA_VERSION + 1))
    assert NAMES[0] == "runs" and NAMES[-3:] == [
        "counters_per_launch",
        "tune_trials",
        "launch_groups",
    ]


def test_a_new_database_records_every_step(db):
    Store(db).runs()  # made on first use
    assert record(db) == [("profkit", n, True) for n in NAMES]
    assert version(db) == str(SCHEMA_VERSION)
    from sqlite_utils import Database
    from sqlite_utils.migrations import Migrations

    # sqlite-utils reads the record
    assert [m.name for m in Migrations("profkit").applied(Database(db))] == NAMES
    assert {
        "table runs",
        "table launches",
        "table kernel_groups",
        "view kernel_rows",
        "view kernels",
        "table strings",
        "table ranges",
        "table benches",
        "table bench_rows",
        "table host_syncs",
        "table meta",
    } <= set(layout(db))


@pytest.mark.parametrize("schema", [5, 7])
def test_each_committed_old_database_upgrades_and_lists_every_step(tmp_path, schema):
    """The steps up to the database's schema are recorded without a time (an earlier profkit
    applied them), the others with theirs; the layout is then a new database's."""
    path = old_copy(tmp_path, schema)
    con = sqlite3.connect(path)
    assert MIGRATIONS_TABLE not in {r[0] for r in con.execute("select name from sqlite_master")}
    assert con.execute("select value from meta where key = 'schema_version'").fetchone() == (
        str(schema),
    )
    con.close()
    runs = [r.name for r in Store(path).runs()]
    assert record(path) == [("profkit", n, i + 1 > schema) for i, n in enumerate(NAMES)]
    assert version(path) == str(SCHEMA_VERSION)
    Store(tmp_path / "new.db").runs()
    assert layout(path) == layout(tmp_path / "new.db")
    assert [r["name"] for r in cli_json("runs", db=path)] == runs and runs


@pytest.mark.parametrize("schema", [5, 7, SCHEMA_VERSION])
def test_opening_again_applies_nothing(tmp_path, monkeypatch, schema):
    path = old_copy(tmp_path, schema) if schema != SCHEMA_VERSION else tmp_path / "new.db"
    store = Store(path)
    store.runs()
    store.close()
    before = (record(path), sha256(path))
    no_writes(monkeypatch)
    again = Store(path)
    assert again.runs() == Store(path).runs()
    again.close()
    assert (record(path), sha256(path)) == before


def test_an_up_to_date_database_opens_read_only(db, monkeypatch):
    store = Store(db)
    import_file(store, CSV, name="a")
    store.close()
    before = sha256(db)
    read_only(monkeypatch)
    assert [r.name for r in Store(db, create=False).runs()] == ["a"]
    assert sha256(db) == before


def test_a_schema_9_database_of_the_profkit_before_steps_opens_as_it_is(db, monkeypatch):
    """The profkit before steps were recorded left schema 9 and no record: it is up to date,
    so it opens without a write (read-only too) and gets no record until it needs a step."""
    store = Store(db)
    import_file(store, CSV, name="a")
    store.close()
    con = sqlite3.connect(db)
    con.execute(f"drop table {MIGRATIONS_TABLE}")
    con.commit()
    con.close()
    before = sha256(db)
    with monkeypatch.context() as m:
        no_writes(m)
        read_only(m)
        assert [r.name for r in Store(db).runs()] == ["a"]
    assert sha256(db) == before and MIGRATIONS_TABLE not in layout(db)


def test_a_step_left_out_is_applied_and_recorded_with_the_earlier_ones(db):
    """A database at schema 8 (no record) gets the steps after 8 only; 1 to 8 are recorded with them."""
    Store(db).runs()
    con = sqlite3.connect(db)
    con.executescript(
        f"drop table {MIGRATIONS_TABLE}; alter table runs drop column folder; drop table host_syncs; "
        "delete from meta where key = 'max_run_id'; update meta set value = '8' where key = 'schema_version';"
    )
    con.close()
    Store(db).runs()
    assert record(db) == [("profkit", n, i >= 8) for i, n in enumerate(NAMES)]
    assert version(db) == str(SCHEMA_VERSION)
    assert "folder" in [c[0] for c in layout(db)["table runs"]]


def test_a_schema_13_database_drops_the_counters_it_kept_per_function(db):
    """Issue 34: schema 13 kept a function's counters across workloads and batch sizes (the last
    run to count it won) under an environment without native libraries: step 14 keys them per
    signature and launch configuration, and drops those rows rather than let a run take them."""
    Store(db).runs()
    new = db.parent / "new.db"
    Store(new).runs()
    con = sqlite3.connect(db)
    con.executescript(f"""
        drop table counters;
        create table counters (gpu text, environment text, metric_set text, scope text, mangled text, name text,
            short_name text, metrics text, metric_units text, run_id integer, run_name text, launch_id integer,
            created_at text, primary key (gpu, environment, metric_set, scope, mangled));
        insert into counters values ('H100', 'e', 'full:x', '', '_Z6kernelv', 'kernel()', 'kernel', '{{"ops": 1}}',
            '{{}}', 2, 'mobilenet_v2-fp16', 0, 'then');
        drop table tune_trials;
        drop view kernel_rows;
        drop table launches;
        drop table kernel_groups;
        create table kernel_rows ({", ".join(STORED_COLUMNS)}, primary key (run_id, launch_id)) without rowid;
        delete from {MIGRATIONS_TABLE} where name in ('counters_per_launch', 'tune_trials', 'launch_groups');
        update meta set value = '13' where key = 'schema_version';""")
    con.close()
    assert Store(db).runs() == []
    assert record(db)[-3:] == [
        ("profkit", "counters_per_launch", True),
        ("profkit", "tune_trials", True),
        ("profkit", "launch_groups", True),
    ] and version(db) == str(SCHEMA_VERSION)
    assert layout(db) == layout(new)
    con = sqlite3.connect(db)
    assert con.execute("select count(*) from counters").fetchone() == (0,)
    con.close()


@pytest.mark.parametrize("kind", ["view", "table"])
@pytest.mark.parametrize("name", ["launches", "kernel_groups"])
def test_a_users_own_object_under_schema_16s_names_is_refused_in_one_line(tmp_path, kind, name):
    """An earlier database where the user made a view or table named ``launches`` or
    ``kernel_groups``: schema 16 needs the name, so opening it says so in one line (not as a
    file that cannot be written), changes nothing, and opens once the user's object is renamed."""
    path = old_copy(tmp_path, 7)
    con = sqlite3.connect(path)
    con.execute(f"create {kind} {name} as select run_id, count(*) as n from kernels group by 1")
    con.commit()
    con.close()
    before = sha256(path)
    one_line_error(cli("runs", db=path), f"holds a {kind} named {name} that profkit did not make")
    assert sha256(path) == before
    con = sqlite3.connect(path)
    con.execute(f"alter table {name} rename to mine" if kind == "table" else f"drop view {name}")
    con.commit()
    con.close()
    assert cli("runs", db=path).exit_code == 0 and version(path) == str(SCHEMA_VERSION)


def test_an_old_database_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    path = old_copy(tmp_path, 7)
    before = sha256(path)
    read_only(monkeypatch)
    with pytest.raises(
        StoreError, match=r"written by an earlier profkit \(schema 7\) and is upgraded in place"
    ):
        Store(path)
    assert sha256(path) == before


@pytest.mark.parametrize(
    "change, message",
    [
        (
            f"insert into {MIGRATIONS_TABLE} (migration_set, name, applied_at) values ('profkit', 'from_the_future', 'x')",
            "its layout step 'from_the_future' is not one this profkit knows",
        ),
        (
            f"update meta set value = '{SCHEMA_VERSION + 1}' where key = 'schema_version'",
            f"schema {SCHEMA_VERSION + 1}, this one reads up to {SCHEMA_VERSION}",
        ),
    ],
)
def test_a_database_of_a_newer_profkit_is_refused_in_one_line(db, change, message):
    store = Store(db)
    import_file(store, CSV, name="a")
    store.close()
    con = sqlite3.connect(db)
    con.execute(change)
    con.commit()
    con.close()
    before = sha256(db)
    one_line_error(cli("runs", db=db), f"was made by a newer profkit ({message})")
    with pytest.raises(StoreError, match="Upgrade profkit"):
        Store(db)
    assert sha256(db) == before


def test_a_newer_layout_this_sqlite_cannot_parse_is_refused_as_a_newer_profkits(db):
    """Issue 34, item 9: a newer profkit's layout may hold what this SQLite cannot parse (a
    table option it does not know); it was "not a usable SQLite database: malformed database
    schema". The header's user_version, which every step sets, says whose it is."""
    store = Store(db)
    import_file(store, CSV, name="a")
    store.close()
    con = sqlite3.connect(db, isolation_level=None)
    assert con.execute("pragma user_version").fetchone()[0] == SCHEMA_VERSION
    con.execute(f"pragma user_version = {SCHEMA_VERSION + 1}")
    con.execute("pragma writable_schema = on")
    con.execute(
        "insert into sqlite_master (type, name, tbl_name, rootpage, sql) values ('table', 't_future', "
        "'t_future', 0, 'create table t_future (x int) with_a_future_option')"
    )
    con.close()
    before = sha256(db)
    for command in (("runs",), ("summary", "a"), ("import", CSV)):
        one_line_error(
            cli(*command, db=db),
            f"was made by a newer profkit (schema {SCHEMA_VERSION + 1}, this one reads "
            f"up to {SCHEMA_VERSION}). Upgrade profkit",
        )
    assert sha256(db) == before


def test_another_set_in_the_record_is_left_alone(db):
    """The record is sqlite-utils' table: another tool's migration set in it is not profkit's."""
    Store(db).runs()
    con = sqlite3.connect(db)
    con.execute(
        f"insert into {MIGRATIONS_TABLE} (migration_set, name, applied_at) values ('mine', 'x', 'y')"
    )
    con.commit()
    con.close()
    assert Store(db).runs() == []
    assert ("mine", "x", True) in record(db)


def test_profkits_own_process_makes_the_same_schema_without_pandas(tmp_path):
    """``store.connection.LEAN_IMPORTS`` (set by the command): a new database's schema is made
    through sqlite-utils imported without pandas and numpy (a second of a first run on the GPU
    machine), and it is the schema a library user's process makes."""
    import subprocess
    import sys

    code = """
import sqlite3, sys
from profkit.store import Store, connection
connection.LEAN_IMPORTS = sys.argv[2] == "lean"
Store(sys.argv[1]).conn
print("pandas" in sys.modules, "numpy" in sys.modules)
print(sorted(r for r in sqlite3.connect(sys.argv[1]).execute("select type, name, sql from sqlite_master")))
"""
    out = {}
    for how in ("lean", "library"):
        p = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / f"{how}.db"), how],
            capture_output=True,
            text=True,
            check=True,
        )
        out[how] = p.stdout.splitlines()
    assert out["lean"][0] == "False False" and out["library"][0] == "True True"
    assert out["lean"][1] == out["library"][1] and "kernel_rows" in out["lean"][1]


@pytest.mark.parametrize(
    "args",
    [
        ("run", "no-such-workload"),
        ("compare", "no-such-workload"),
        ("bench", "no-such-workload"),
        ("tune", "--run", "no-such-run"),
        ("runs",),
    ],
)
def test_every_command_that_opens_a_database_says_its_process_is_profkits(
    tmp_path, args, monkeypatch
):
    """The commands that hand the database to the library (run, compare, bench, tune, sweep)
    mark the process as profkit's own too, as those that open it themselves do: a first run
    into a new database makes its schema without importing pandas."""
    from profkit.store import connection

    monkeypatch.setattr(connection, "LEAN_IMPORTS", False)
    cli(*args, db=tmp_path / "p.db")
    assert connection.LEAN_IMPORTS is True
