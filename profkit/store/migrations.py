"""profkit's database layout as a named, ordered list of steps (``STEPS``), each applied once
to a database, in order, in a write transaction of its own together with the record of it:
a row in ``_sqlite_migrations`` (the table and columns of sqlite-utils' ``Migrations``, set
``profkit``: id, name, applied_at). A new database gets every step, from the first (``runs``).
A step brings its part of the layout to today's and does nothing where that is already there
(the first step of a new database makes today's ``runs``, so the later steps that add columns
to it find them): a database of any earlier profkit reaches the same layout as a new one.

Each step also has the schema version it brings the database to (its place in the list), and
``meta``'s ``schema_version`` is kept at the last applied step's, as earlier profkits wrote it:
they refuse a database of a newer schema than theirs, so a step added here is a new version
to them too. A database written before steps were recorded (schema 1 to 9: no record table;
schema 1 had no ``meta``) has had the steps up to its version: those are recorded, with no
time, in the transaction of the first step it still needs. One that is up to date is read as
it is, without writing (a read-only file opens). A database of a newer profkit (a schema
version above ``SCHEMA_VERSION``, or a step recorded that this profkit does not know) is
refused in one line. Each step also sets the file header's ``user_version`` to the schema
version: SQLite reads it even where the layout holds something this SQLite cannot parse (a
newer profkit's table option), so such a database is refused as a newer profkit's too, not as
a damaged file.
"""

from __future__ import annotations

import datetime
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import StoreError
from .connection import Connection
from .layout import (
    AGG_KEYS,
    AGG_MEASURES,
    BENCH_COLUMNS,
    BENCH_ROW_COLUMNS,
    COUNTER_COLUMNS,
    COUNTER_KEY,
    GROUP_COLUMNS,
    HOST_SYNC_TABLE_COLUMNS,
    INTERNED,
    KERNEL_COLUMNS,
    KERNEL_ROWS_VIEW,
    KERNELS_VIEW,
    LAUNCH_COLUMNS,
    PATH_AGG_KEYS,
    PATH_AGG_MEASURES,
    RANGE_TABLE_COLUMNS,
    RUN_COLUMNS,
    STORED_COLUMNS,
    TUNE_TRIAL_COLUMNS,
    split_statements,
    stored_type,
)

MIGRATIONS_TABLE = "_sqlite_migrations"
MIGRATION_SET = "profkit"


@dataclass(frozen=True)
class Step:
    """One change of the layout: ``apply`` makes it, inside the step's write transaction."""

    name: str
    version: (
        int  # the schema version a database has once this step (and those before it) is applied
    )
    apply: Callable[[Connection], None]


STEPS: list[Step] = []


def step(func: Callable[[Connection], None]) -> Callable[[Connection], None]:
    """Append ``func`` to STEPS under its own name (the next schema version)."""
    STEPS.append(Step(func.__name__, len(STEPS) + 1, func))
    return func


# ------------------------------------------------------------------ the steps, oldest first
@step
def runs(s: Connection) -> None:
    """Schema 1: ``runs`` (a run's name taken once), and ``meta`` (made by the recording)."""
    if "runs" not in s._tables():
        s.db.table("runs").create(RUN_COLUMNS, pk="id", not_null={"name"})
        s.db.table("runs").create_index(["name"], unique=True)


@step
def cpu_runs_and_ranges(s: Connection) -> None:
    """Schema 2: a run's ``activity`` (the runs before it were of kernels) and ``ranges``."""
    if "activity" not in _columns(s, "runs"):
        s.db.table("runs").add_column("activity", str)
        s.execute("update runs set activity = 'kernel'")
    if "ranges" not in s._tables():
        s.db.table("ranges").create(
            RANGE_TABLE_COLUMNS, pk=("run_id", "range_id"), foreign_keys=[("run_id", "runs", "id")]
        )


@step
def kernel_op(s: Connection) -> None:
    """Schema 3: the kernels' launching operator (``op``), where the kernels are still a table."""
    if _kind(s, "kernels") == "table":
        _add_columns(s, "kernels", {"op": KERNEL_COLUMNS["op"]})


@step
def kernel_start_ns(s: Connection) -> None:
    """Schema 4: the kernels' ``start_ns``, where the kernels are still a table."""
    if _kind(s, "kernels") == "table":
        _add_columns(s, "kernels", {"start_ns": KERNEL_COLUMNS["start_ns"]})


@step
def run_owner(s: Connection) -> None:
    """Schema 5: a run's ``owner`` (the process writing it)."""
    _add_columns(s, "runs", {"owner": RUN_COLUMNS["owner"]})


@step
def strings_and_kernel_rows(s: Connection) -> None:
    """Schema 6: texts kept once in ``strings``, launches in ``kernel_rows`` (one row per launch,
    clustered by run and launch: no rowid, no second copy of the key) and ``kernels`` a view
    over them. A ``kernels`` table of an earlier profkit is copied in (in launch order; the
    columns it lacks are added first), dropped and the view put in its place (a user's own
    views over ``kernels`` read the view from then on)."""
    if _kind(s, "kernel_rows") is not None:
        return  # done (a view: schema 16's layout already, a new database's recorded as older)
    old = _kind(s, "kernels") == "table"
    if old:
        _add_columns(s, "kernels", KERNEL_COLUMNS)
    s.execute("create table strings (id integer primary key, text text not null unique)")
    cols = ", ".join(f"{c} {'integer' if t is int else 'text'}" for c, t in STORED_COLUMNS.items())
    # No other index: every query reads one run's rows, which the key clusters.
    s.execute(
        f"create table kernel_rows ({cols}, primary key (run_id, launch_id), "
        "foreign key (run_id) references runs (id)) without rowid"
    )
    if old:
        for c in INTERNED:
            s.execute(
                f"insert or ignore into strings (text) select distinct {c} from kernels where {c} is not null"
            )
        select = ", ".join(
            f"(select id from strings where text = o.{c})"
            if c in INTERNED
            else ("nullif(o.metrics, '{}')" if c == "metrics" else f"o.{c}")
            for c in KERNEL_COLUMNS
        )
        s.execute(
            f"insert into kernel_rows ({', '.join(STORED_COLUMNS)}) select {select} from kernels o "
            "order by o.run_id, o.launch_id"
        )
        s.execute("drop table kernels")
    s.execute(KERNELS_VIEW)


@step
def benches(s: Connection) -> None:
    """Schema 7: ``benches`` and ``bench_rows`` (profkit bench), one row per precision and mode."""
    if "benches" not in s._tables():
        s.db.table("benches").create(BENCH_COLUMNS, pk="id", not_null={"workload"})
        s.db.table("bench_rows").create(
            BENCH_ROW_COLUMNS, pk=("bench_id", "seq"), foreign_keys=[("bench_id", "benches", "id")]
        )
        s.db.table("bench_rows").create_index(["bench_id", "precision", "mode"], unique=True)


@step
def ranks(s: Connection) -> None:
    """Schema 8: ``rank`` in kernel_rows (the view, which names every column, made anew: rank
    after ``device``) and in ranges."""
    if _add_columns(s, "kernel_rows", STORED_COLUMNS):
        s.execute("drop view if exists kernels")
        s.execute(KERNELS_VIEW)
    _add_columns(s, "ranges", RANGE_TABLE_COLUMNS)


@step
def run_folders_and_ids(s: Connection) -> None:
    """Schema 9: a run's raw ``folder``, and run ids never given twice (meta ``max_run_id``).
    (Owners that hold their run's lock say so in ``owner``: no column.)"""
    _add_columns(s, "runs", RUN_COLUMNS)
    set_max_run_id(s)


@step
def host_syncs(s: Connection) -> None:
    """Schema 10: ``host_syncs``, a timeline run's runtime calls that blocked the host (runs
    imported before it have none recorded)."""
    if "host_syncs" not in s._tables():
        s.db.table("host_syncs").create(
            HOST_SYNC_TABLE_COLUMNS,
            pk=("run_id", "sync_id"),
            foreign_keys=[("run_id", "runs", "id")],
        )


@step
def attribution(s: Connection) -> None:
    """Schema 11: each kernel's ``module``, ``module_type``, ``shapes`` and ``phase`` (issue
    23's attribution; interned like ``op``), the view made anew with them after ``op``."""
    if _add_columns(s, "kernel_rows", STORED_COLUMNS):
        s.execute("drop view if exists kernels")
        s.execute(KERNELS_VIEW)


@step
def aggregates(s: Connection) -> None:
    """Schema 12: a run's aggregates, ``kernel_aggs`` and ``path_aggs`` (see ``writes``: what
    the analyses read instead of every row), made and filled for every run that has rows."""
    if "kernel_aggs" in s._tables():
        return
    for table, keys, measures in (
        ("kernel_aggs", AGG_KEYS, AGG_MEASURES),
        ("path_aggs", PATH_AGG_KEYS, PATH_AGG_MEASURES),
    ):
        cols = ", ".join(
            f"{c} {'text' if c in ('kind', 'precision', 'evidence') else 'integer'}" for c in keys
        )
        s.execute(
            f"create table {table} (run_id integer not null, {cols}, "
            f"{', '.join(f'{m} integer' for m in measures)}, foreign key (run_id) references runs (id))"
        )
        s.execute(f"create index {table}_run on {table} (run_id)")
    from .writes import (
        write_aggregates,  # the writer of a new run's aggregates fills the old runs' too
    )

    for (run_id,) in s.execute(
        "select id from runs where id in (select distinct run_id from kernel_rows)"
    ).fetchall():
        write_aggregates(s, run_id)


@step
def counters(s: Connection) -> None:
    """Schema 13: ``counters``, ncu's counters of each kernel function kept across runs (the
    per-function plan looks a function up before it profiles it: ``store.counters``)."""
    if "counters" not in s._tables():
        s.db.table("counters").create(COUNTER_COLUMNS, pk=COUNTER_KEY)


@step
def counters_per_launch(s: Connection) -> None:
    """Schema 14: kept counters keyed by the run's ``signature`` (workload and options) and the
    counted launch's ``config`` (grid and block) too, op counts being a launch's. Schema 13's
    rows are dropped, not carried over: they were kept per function across workloads and batch
    sizes (a row held whichever run counted the function last) under an environment that named
    no native library, so no run could take them safely; the next run counts afresh."""
    if "config" not in _columns(s, "counters"):
        s.execute("drop table counters")
        s.db.table("counters").create(COUNTER_COLUMNS, pk=COUNTER_KEY)


@step
def tune_trials(s: Connection) -> None:
    """Schema 15: ``tune_trials``, each fix profkit tune tried (or estimated) on a run."""
    if "tune_trials" not in s._tables():
        s.db.table("tune_trials").create(
            TUNE_TRIAL_COLUMNS,
            pk=("run_id", "tuning", "seq"),
            foreign_keys=[("run_id", "runs", "id")],
        )


@step
def launch_groups(s: Connection) -> None:
    """Schema 16: a launch's own columns in ``launches``, what its run's launches share once per
    distinct combination in ``kernel_groups`` (``layout``), ``kernel_rows`` a view over both
    with the columns it had. Schema 15's table is split: each run's distinct combinations
    numbered (NULLs alike), each launch given its group's number, the table dropped and the
    view put in its place (the ``kernels`` view, and a user's own views, read it from then on)."""
    if (_kind(s, "kernel_rows"), _kind(s, "launches"), _kind(s, "kernel_groups")) == (
        "view",
        "table",
        "table",
    ):
        return
    for name in ("launches", "kernel_groups"):
        if (kind := _kind(s, name)) is not None:  # the user's own: a view or table of that name
            raise StoreError(
                f"{s.path} holds a {kind} named {name} that profkit did not make, and this "
                f"profkit stores its launches under that name",
                f"Rename or drop that {kind} (sqlite3 {s.path.name} 'drop {kind} {name}'), "
                "then open the database again.",
            )
    types = {c: stored_type(c) for c in STORED_COLUMNS}
    s.execute(
        f"create table kernel_groups (run_id integer not null, id integer not null, "
        f"{', '.join(f'{c} {types[c]}' for c in GROUP_COLUMNS)}, primary key (run_id, id), "
        "foreign key (run_id) references runs (id)) without rowid"
    )
    # No other index: every query reads one run's launches, which the key clusters.
    s.execute(
        f"create table launches (run_id integer not null, launch_id integer not null, group_id integer not null, "
        f"{', '.join(f'{c} {types[c]}' for c in LAUNCH_COLUMNS[3:])}, primary key (run_id, launch_id), "
        "foreign key (run_id) references runs (id)) without rowid"
    )
    if _kind(s, "kernel_rows") == "table":
        for sql in split_statements("kernel_rows"):
            s.execute(sql)
        s.execute("drop table kernel_rows")
    s.execute(KERNEL_ROWS_VIEW)


SCHEMA_VERSION = len(STEPS)


# ------------------------------------------------------------------ helpers of the steps
def set_max_run_id(s: Connection) -> None:
    """Record the highest run id given so far (meta ``max_run_id``): a new run's id is above
    it, so the id of a deleted run is never given again (runs has no AUTOINCREMENT)."""
    s.execute(
        "insert or replace into meta (key, value) values ('max_run_id', "
        "(select max(coalesce((select max(id) from runs), 0), "
        "coalesce((select cast(value as integer) from meta where key = 'max_run_id'), 0))))"
    )


def _columns(s: Connection, table: str) -> set[str]:
    return {r[1] for r in s.execute(f"pragma table_info({table})")}


def _kind(s: Connection, name: str) -> str | None:
    """'table', 'view' or None: what ``name`` is in the database."""
    row = s.execute("select type from sqlite_master where name = ?", [name]).fetchone()
    return str(row[0]) if row else None


def _add_columns(s: Connection, table: str, columns: dict[str, type]) -> list[str]:
    """Add to ``table`` those of ``columns`` it lacks (an earlier schema's table); return them."""
    have = _columns(s, table)
    added = [c for c in columns if c not in have]
    for col in added:
        s.db.table(table).add_column(col, columns[col])
    return added


# ------------------------------------------------------------------ applying them
def schema_version(s: Connection) -> int:
    """The schema version the file says it has (1: written before versions were kept; 0: a new
    database, no ``runs`` yet)."""
    tables = s._tables()
    if "runs" not in tables:
        return 0
    row = (
        s.execute("select value from meta where key = 'schema_version'").fetchone()
        if "meta" in tables
        else None
    )
    value = row[0] if row else "1"
    try:
        return int(value)
    except (TypeError, ValueError):
        raise StoreError(
            f"{s.path} has a schema version profkit does not know ({value!r})"
        ) from None


def recorded(s: Connection) -> list[str]:
    """The names of the steps the database records as applied, in order (read only)."""
    if MIGRATIONS_TABLE not in s._tables():
        return []
    return [
        r[0]
        for r in s.execute(
            f"select name from {MIGRATIONS_TABLE} where migration_set = ? order by id",
            [MIGRATION_SET],
        )
    ]


def applied(s: Connection) -> set[str]:
    """The steps the database has had: those recorded, and those its schema version implies
    (a database written before steps were recorded)."""
    version = schema_version(s)
    return set(recorded(s)) | {st.name for st in STEPS if st.version <= version}


def ensure_schema(s: Connection, create: bool) -> None:
    """Bring the database to today's layout: every step it has not had, in order; nothing
    written where it has had them all. Refuses a file that is not profkit's, an empty one
    where ``create`` is false, and a database of a newer profkit."""
    tables = s._tables()
    if tables and "runs" not in tables:
        raise StoreError(f"{s.path} is a SQLite database but not a profkit one (no runs table)")
    if not tables and not create:
        raise StoreError(
            f"{s.path} is not a profkit database (it holds no tables)",
            "Run or import something first, or choose another `db`.",
        )
    version = schema_version(s)
    if version > SCHEMA_VERSION:
        raise _newer(s, f"schema {version}, this one reads up to {SCHEMA_VERSION}")
    known = {st.name for st in STEPS}
    unknown = [name for name in recorded(s) if name not in known]
    if unknown:
        raise _newer(s, f"its layout step {unknown[0]!r} is not one this profkit knows")
    done = applied(s)
    pending = [st for st in STEPS if st.name not in done]
    if not pending:
        return
    # an earlier profkit's: its kernels are a table or kernel_rows
    if tables and MIGRATIONS_TABLE not in tables:
        if _kind(s, "kernels") != "table" and _kind(s, "kernel_rows") is None:
            raise StoreError(
                f"{s.path} says schema {version} but its kernels are not a table: not a layout "
                "profkit wrote"
            )
    try:
        for st in pending:
            _apply(s, st)
    except sqlite3.OperationalError as exc:
        if tables and ("readonly" in str(exc) or "read-only" in str(exc)):
            raise StoreError(
                f"{s.path} was written by an earlier profkit (schema {version}) and is upgraded "
                f"in place the first time it is opened, but it cannot be written ({exc})",
                "Open it once where it is writable (or as its owner).",
            ) from exc
        raise


def _newer(s: Connection, what: str) -> StoreError:
    return StoreError(f"{s.path} was made by a newer profkit ({what})", "Upgrade profkit.")


def newer_profkit(s: Connection) -> StoreError | None:
    """The error for a database whose header says a newer profkit made it (``user_version``
    above ``SCHEMA_VERSION``), read where the layout itself could not be; else None."""
    if s._conn is None:  # never opened: nothing to read it from (and nothing to reopen here)
        return None
    try:
        version = int(s._conn.execute("pragma user_version").fetchone()[0])
    except (sqlite3.Error, TypeError, ValueError):
        return None
    return (
        _newer(s, f"schema {version}, this one reads up to {SCHEMA_VERSION}")
        if version > SCHEMA_VERSION
        else None
    )


def _apply(s: Connection, st: Step) -> None:
    """One step and its record in one write transaction, unless another process applied it
    meanwhile (read again under the write lock). The steps an earlier profkit applied (its
    schema version's) are recorded with the first."""
    with s.write():
        have = recorded(s)
        done = applied(s)
        if st.name in done:
            return
        s.db.table("meta").create({"key": str, "value": str}, pk="key", if_not_exists=True)
        version = schema_version(s)
        st.apply(s)
        if MIGRATIONS_TABLE not in s._tables():  # as sqlite-utils' Migrations makes it
            s.db.table(MIGRATIONS_TABLE).create(
                {"id": int, "migration_set": str, "name": str, "applied_at": str}, pk="id"
            )
            s.db.table(MIGRATIONS_TABLE).create_index(["migration_set", "name"], unique=True)
        # no time known
        earlier = [(x.name, None) for x in STEPS if x.name in done and x.name not in have]
        now = str(datetime.datetime.now(datetime.UTC))
        s.conn.executemany(
            f"insert into {MIGRATIONS_TABLE} (migration_set, name, applied_at) values (?, ?, ?)",
            [(MIGRATION_SET, name, at) for name, at in [*earlier, (st.name, now)]],
        )
        s.execute(
            "insert or replace into meta (key, value) values ('schema_version', ?)",
            [str(max(version, st.version))],
        )
        s.execute(f"pragma user_version = {int(max(version, st.version))}")
