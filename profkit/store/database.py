"""profkit's SQLite database, written through sqlite-utils: one ``runs`` row per run or import,
one ``kernels`` row per launch (or CPU operator call), and one ``ranges`` row per NVTX or
record_function range instance. ``kernels`` is a view: launches are stored in ``kernel_rows``
with their texts (kernel names, ranges, operators, families, verdict details) kept once in
``strings`` and referenced by id, so a database is no larger than the capture it came from;
the view joins them back into the documented kernel table. A benchmark (``profkit bench``) is
one ``benches`` row and a ``bench_rows`` row per (precision, mode) combination, written in one
transaction. Plain tables, views and JSON columns: ``sqlite-utils`` and ``datasette`` browse it
as it is.

Many profkit processes may use one database at once. It is in WAL mode (readers never wait
for a writer), writers wait their turn (a busy timeout, ``PROFKIT_BUSY_TIMEOUT`` seconds,
default 600) and write in short ``BEGIN IMMEDIATE`` transactions. A run's name is reserved
atomically first (a ``runs`` row with status ``running`` or ``importing`` and its owner's
host and pid); its kernels follow in batches; the last transaction fills in its counts and
ranges and sets status ``ok``. Only ``ok`` runs are complete: a failed import leaves nothing,
a failed or interrupted profiled run keeps its row (status ``failed`` / ``interrupted``, the
error in ``info``) and its raw files but no kernels, and a row whose owner died (SIGKILL) is
recovered so the next time the database is opened. An owner holds a lock (``flock``) on
``<db file name>-locks/<run id>.lock`` from the moment its row exists until the run ends, and
the kernel drops it when the process dies, in whatever PID namespace or container it ran: a
run is recovered only by a process that takes that lock itself, never on a pid check alone
(except rows of an earlier profkit, which made no lock: those are recovered, as then, when
their owner's pid is gone on the same host). Run ids are never reused.

The database is ``./profkit.db`` unless a path or ``PROFKIT_DB`` says otherwise. Raw
captures are kept beside it, in ``<db stem>-runs/<run name>/``, a folder made as exclusively
as the name (:meth:`Store.reserve_folder`): where that folder exists already (another
database of the same stem, something left or put there) the run's is ``<run name>-2`` and so
on, recorded in its ``folder``. Every query over it is a method here; the analyses call these
and never write SQL of their own.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import socket
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence, TypedDict

from ..errors import BadExport, BenchNotFound, EmptyCapture, RunExists, RunNotFound, StoreError, UsageError
from ..files import file_uri, untrusted
from ..parse.schema import (GPU_KINDS, KERNEL_FIELDS, RANGE_COLUMNS, Capture, ClassifiedRow,
                            RangeRow, check_row)
from ..processes import alive
from ..records import BenchRecord, BenchRow, RunRecord
from .layout import INTERNED, KERNEL_COLUMNS, STORED_COLUMNS

if TYPE_CHECKING:
    from ..parse.nsys_export import NsysExport

DEFAULT_DB = "profkit.db"
# 2: CPU runs and ranges; 3: the kernels' launching operator (op); 4: start_ns; 5: owner;
# 6: texts kept once in `strings`, launches in `kernel_rows`, `kernels` a view; 7: `benches`, `bench_rows`;
# 8: `rank` in kernel_rows (and the view, after `device`) and in ranges; 9: `folder` in runs (its raw
# folder's name), run ids never reused (meta `max_run_id`), owners that hold a lock
SCHEMA_VERSION = 9
BATCH_ROWS = 20_000  # kernel rows per write transaction: other writers get their turn between batches
MAX_NAME = 120       # characters in a run name (it names a folder)
# Run statuses: complete, and being written by the owner process. (A run that ended without
# kernels is "failed" or "interrupted".)
OK, WRITING = "ok", ("running", "importing")

RUN_COLUMNS: dict[str, type] = {
    "id": int, "name": str, "source": str, "status": str, "workload": str, "precision": str, "mode": str,
    "batch_size": int, "iters": int, "device": str, "tool": str, "tool_version": str, "metric_set": str,
    "metrics": str, "gpu_name": str, "compute_capability": str, "command": str, "started_at": str,
    "finished_at": str, "raw_files": str, "source_sha256": str, "activity": str, "kernel_count": int,
    "gpu_time_ns": int, "profiled_wall_s": float, "info": str, "owner": str, "folder": str,
}  # documented on RunRecord (but owner: "host:pid" of the process writing it, "host:pid+lock" where it holds
# the run's lock file, see Store._recover); metrics, command, raw_files and info hold JSON
LOCKED = "+lock"     # an owner that holds its run's lock (schema 9 on); without it, an owner of an earlier profkit
MAX_FOLDERS = 1000   # names a run's raw folder tries (<name>, <name>-2, ...) before it gives up
JSON_RUN_COLUMNS = ("metrics", "command", "raw_files", "info")

# The kernels view: kernel_rows with each id replaced by its text, the columns and order of
# the table it replaced (schema 5); metrics '{}' where none were stored (NULL).
KERNELS_VIEW = "create view kernels as select " + ", ".join(
    f"s_{c}.text as {c}" if c in INTERNED else ("coalesce(k.metrics, '{}') as metrics" if c == "metrics" else f"k.{c}")
    for c in KERNEL_COLUMNS) + " from kernel_rows k " + " ".join(
    f"left join strings s_{c} on s_{c}.id = k.{c}_id" for c in INTERNED)
RANGE_TABLE_COLUMNS: dict[str, type] = {"run_id": int, **{c: {"int": int}.get(t, str) for c, t in RANGE_COLUMNS.items()}}

# Benchmarks (``profkit bench``, schema 7): one ``benches`` row each (the fields of
# records.BenchRecord; precisions, modes and info hold JSON) and one ``bench_rows`` row per
# combination (records.BenchRow's fields; iter_ns holds JSON, reference_only 0 or 1), in the
# order ``seq`` the benchmark ran them.
BENCH_COLUMNS: dict[str, type] = {
    "id": int, "workload": str, "batch_size": int, "device": str, "iters": int, "warmup": int, "precisions": str,
    "modes": str, "created_at": str, "gpu_name": str, "torch_version": str, "info": str,
}
JSON_BENCH_COLUMNS = ("precisions", "modes", "info")
BENCH_ROW_COLUMNS: dict[str, type] = {
    "bench_id": int, "seq": int, "precision": str, "mode": str, "status": str, "reference_only": int, "error": str,
    "median_ms": float, "spread_ms": float, "p25_ms": float, "p75_ms": float, "min_ms": float, "max_ms": float,
    "items_per_s": float, "s_per_item": float, "peak_memory_bytes": int, "max_abs_diff": float,
    "top1_agreement": float, "note": str, "iter_ns": str,
}


class RunFields(TypedDict, total=False):
    """A new run's columns, as a caller of :meth:`Store.add_run` gives them (see RunRecord);
    the store adds the id, the counts and the capture's notes."""

    name: str
    source: str
    status: str
    workload: str | None
    precision: str | None
    mode: str | None
    batch_size: int | None
    iters: int | None
    device: str | None
    tool: str | None
    tool_version: str | None
    metric_set: str | None
    metrics: list[str]
    gpu_name: str | None
    compute_capability: str | None
    command: list[str]
    started_at: str
    finished_at: str
    raw_files: dict[str, str]
    source_sha256: str
    profiled_wall_s: float
    info: dict[str, Any]


def db_path(db: str | os.PathLike[str] | None) -> Path:
    return Path(db or os.environ.get("PROFKIT_DB") or DEFAULT_DB).expanduser()


def raw_dir(db: Path, run_name: str) -> Path:
    """``<db stem>-runs/<run name>/`` beside the database (the folder a run of an earlier
    profkit has; a run's own is :meth:`Store.run_folder`); refused if it would lead elsewhere
    (a name that is not a plain file name, or a run folder that is a link out)."""
    check_run_name(run_name)
    return _in_runs(db, run_name)


def _in_runs(db: Path, folder_name: str) -> Path:
    base = db.resolve().parent / f"{db.stem}-runs"
    folder = base / folder_name
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", folder_name) or folder.resolve().parent != base.resolve():
        raise StoreError(f"the raw folder {folder} leads outside {base}", "Remove that link, or choose another `name`.")
    return folder


# Run locks this process holds, by lock file path (any Store of this process releases them): flock
# locks belong to an open file, so another open of the same file (another process, or another
# Store here) cannot take them while the owner lives.
_HELD: dict[str, int] = {}


def check_run_name(name: str) -> None:
    """Refuse a run name that is not usable: it names the run's folder and must not read as an id."""
    if len(name) > MAX_NAME:
        raise UsageError(f"`name` is {len(name)} characters long; a run name has at most {MAX_NAME}")
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name) or name.isdigit():
        raise UsageError(
            f"`name` {name!r} is not a usable run name",
            "Use letters, digits, '.', '_' and '-', starting with a letter, digit or '_', and not only digits "
            "(a number means a run id).",
        )


# SQLite keeps its busy timeout in milliseconds in a C int: a longer one becomes no wait at all.
MAX_BUSY_TIMEOUT_S = (2**31 - 1) // 1000  # 2147483 s, about 24 days
MAX_ID = 2**63 - 1  # SQLite's largest integer: no run or benchmark id is larger


def as_id(ref: str) -> int | None:
    """The id a reference spells (ASCII digits, at most SQLite's largest integer), or None: a
    longer number names no row (and would overflow SQLite's integer)."""
    if ref.isascii() and ref.isdigit() and len(ref) <= len(str(MAX_ID)) and int(ref) <= MAX_ID:
        return int(ref)
    return None


def _busy_timeout() -> float:
    """Seconds a writer waits for another's lock: ``PROFKIT_BUSY_TIMEOUT``, default 600; a value
    that is not a number of seconds from 0 to MAX_BUSY_TIMEOUT_S is a UsageError."""
    text = os.environ.get("PROFKIT_BUSY_TIMEOUT") or ""
    if not text.strip():
        return 600.0
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 <= value <= MAX_BUSY_TIMEOUT_S):  # also NaN
        raise UsageError(f"PROFKIT_BUSY_TIMEOUT must be a number of seconds from 0 to {MAX_BUSY_TIMEOUT_S}, "
                         f"not {text!r}", "Unset it to wait the default 600 s.")
    return value


def _unwritable(path: Path, exc: sqlite3.OperationalError) -> StoreError:
    """An operational failure (read-only file, locked database, full disk) as one line."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        return StoreError(f"{path} is locked by another process ({text}, after waiting {_busy_timeout():g} s)",
                          "Try again once it has finished, or set PROFKIT_BUSY_TIMEOUT to wait longer.")
    return StoreError(f"cannot write to {path}: {text}", "Check the file's permissions and the free disk space.")


class Store:
    """A profkit database. ``Store(path, create=False)`` refuses a missing file."""

    def __init__(self, path: str | os.PathLike[str] | None = None, create: bool = True):
        self.path = db_path(path)
        _busy_timeout()  # a bad PROFKIT_BUSY_TIMEOUT is refused before anything is done
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a folder, not a database file", "Choose a file for `db`.")
        existed = self.path.exists()
        if not create and not existed:
            raise StoreError(f"no database at {self.path}", "Run or import something first, or choose another `db`.")
        if self.path.parent and not self.path.parent.exists():
            raise StoreError(f"folder {self.path.parent} does not exist (for database {self.path})")
        self._create = create
        self._db: Any = None
        self._conn: sqlite3.Connection | None = None
        # An existing file is checked now; a new one is made only when first used, so that a
        # command that fails before it stores anything leaves no database behind (and no
        # process ever removes a database file another may have open).
        if existed:
            self._open()

    def _open(self) -> sqlite3.Connection:
        try:
            self._conn = self._connect()
            self._ensure_schema(self._create)
            self._wal()
            self._recover()
        except sqlite3.OperationalError as exc:
            raise _unwritable(self.path, exc) from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a usable SQLite database: {exc}") from exc
        return self._conn

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection, opening (and for a new database, making) the file on first use."""
        return self._conn if self._conn is not None else self._open()

    @property
    def db(self) -> Any:
        """sqlite-utils over the same connection, made on first use: creating tables, adding
        columns, bulk inserts. (sqlite-utils imports pandas and numpy when they are installed,
        half a second that reading commands need not pay: they use the connection directly.)"""
        if self._db is None:
            import sqlite_utils

            self._db = sqlite_utils.Database(self.conn)
        return self._db

    def query(self, sql: str, params: Sequence[Any] = ()) -> Iterator[dict[str, Any]]:
        """Rows as dicts, streamed."""
        cur = self.conn.execute(sql, params)
        names = [d[0] for d in cur.description or ()]
        for row in cur:
            yield dict(zip(names, row))

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def _insert(self, table: str, row: dict[str, Any]) -> int:
        cols = list(row)
        cur = self.conn.execute(f"insert into {table} ({', '.join(cols)}) values ({', '.join('?' * len(cols))})",
                                [row[c] for c in cols])
        return int(cur.lastrowid or 0)

    def _update(self, table: str, row_id: int, values: dict[str, Any]) -> None:
        cols = list(values)
        self.conn.execute(f"update {table} set {', '.join(c + ' = ?' for c in cols)} where id = ?",
                          [*(values[c] for c in cols), row_id])

    def _connect(self) -> sqlite3.Connection:
        """Autocommit connection (transactions are explicit), WAL, waiting for other writers."""
        # Opened as a URI so that an export can be ATTACHed read-only by URI (nsys_import) on
        # every SQLite build, not only those that read URIs by default.
        conn = sqlite3.connect(file_uri(self.path), timeout=_busy_timeout(), isolation_level=None,
                               check_same_thread=False, uri=True)
        conn.execute("pragma synchronous = normal")
        return conn

    def _wal(self) -> None:
        """WAL mode (persistent in the file), set once the file is known to be profkit's."""
        try:
            if self.execute("pragma journal_mode").fetchone()[0].lower() != "wal":
                self.execute("pragma journal_mode = wal")
        except sqlite3.OperationalError:
            pass  # a read-only file or folder: reading still works, and writing says why

    @contextmanager
    def write(self) -> Iterator[None]:
        """One write transaction, taken at once (``BEGIN IMMEDIATE``) so that it waits its turn
        behind other writers instead of failing when it would upgrade a read."""
        conn = self.conn
        if conn.in_transaction:
            conn.execute("rollback")  # left open by an interrupt between its begin and its end
        conn.execute("begin immediate")
        try:
            yield
        except BaseException:
            if conn.in_transaction:
                conn.execute("rollback")
            raise
        else:
            conn.execute("commit")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def _tables(self) -> set[str]:
        return {r[0] for r in self.conn.execute("select name from sqlite_master where type = 'table'")}

    def _ensure_schema(self, create: bool) -> None:
        tables = self._tables()
        if tables and "runs" not in tables:
            raise StoreError(f"{self.path} is a SQLite database but not a profkit one (no runs table)")
        if not tables and not create:
            raise StoreError(f"{self.path} is not a profkit database (it holds no tables)",
                             "Run or import something first, or choose another `db`.")
        if "runs" in tables:
            self._upgrade(tables)
            return
        with self.write():
            if "runs" in self._tables():  # another process made it meanwhile (under the same lock)
                return
            self.db.table("runs").create(RUN_COLUMNS, pk="id", not_null={"name"})
            self.db.table("runs").create_index(["name"], unique=True)
            self._create_kernel_rows()
            self._create_ranges()
            self._create_benches()
            self.db.table("meta").create({"key": str, "value": str}, pk="key")
            self.db.table("meta").insert({"key": "schema_version", "value": str(SCHEMA_VERSION)})

    def _create_kernel_rows(self) -> None:
        """``strings``, ``kernel_rows`` (one row per launch, clustered by run and launch: no
        rowid, no second copy of the key) and the ``kernels`` view over them."""
        self._create_kernel_tables()
        self.execute(KERNELS_VIEW)

    def _create_kernel_tables(self) -> None:
        self.execute("create table strings (id integer primary key, text text not null unique)")
        cols = ", ".join(f"{c} {'integer' if t is int else 'text'}" for c, t in STORED_COLUMNS.items())
        # No other index: every query reads one run's rows, which the key clusters.
        self.execute(f"create table kernel_rows ({cols}, primary key (run_id, launch_id), "
                     "foreign key (run_id) references runs (id)) without rowid")

    def _migrate_kernels(self) -> None:
        """Schema 5 -> 6: copy the ``kernels`` table's rows into ``strings`` and ``kernel_rows``
        (in launch order), drop it and put the view in its place (a user's own views over
        ``kernels`` read the view from then on)."""
        self._create_kernel_tables()
        for c in INTERNED:
            self.execute(f"insert or ignore into strings (text) select distinct {c} from kernels "
                         f"where {c} is not null")
        select = ", ".join(f"(select id from strings where text = o.{c})" if c in INTERNED else
                           ("nullif(o.metrics, '{}')" if c == "metrics" else f"o.{c}") for c in KERNEL_COLUMNS)
        self.execute(f"insert into kernel_rows ({', '.join(STORED_COLUMNS)}) select {select} from kernels o "
                     "order by o.run_id, o.launch_id")
        self.execute("drop table kernels")
        self.execute(KERNELS_VIEW)

    def _create_ranges(self) -> None:
        self.db.table("ranges").create(RANGE_TABLE_COLUMNS, pk=("run_id", "range_id"),
                                 foreign_keys=[("run_id", "runs", "id")])

    def _schema_version(self) -> int:
        """The schema version the file says it has (1: written before versions were kept)."""
        row = self.execute("select value from meta where key = 'schema_version'").fetchone() \
            if "meta" in self._tables() else None
        value = row[0] if row else "1"
        try:
            return int(value)
        except (TypeError, ValueError):
            raise StoreError(f"{self.path} has a schema version profkit does not know ({value!r})") from None

    def _upgrade(self, tables: set[str]) -> None:
        """Bring a database written by an earlier profkit up to SCHEMA_VERSION."""
        version = self._schema_version()
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer profkit (schema {version}; this one reads {SCHEMA_VERSION})",
                             "Upgrade profkit.")
        if version == SCHEMA_VERSION:
            return
        kinds = dict(self.execute("select name, type from sqlite_master where name in ('kernels', 'kernel_rows')").fetchall())
        if kinds.get("kernels") != "table" and "kernel_rows" not in kinds:
            raise StoreError(f"{self.path} says schema {version} but its kernels are not a table: not a layout "
                             "profkit wrote")
        try:
            self._upgrade_to_current(tables)
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc) or "read-only" in str(exc):
                raise StoreError(f"{self.path} was written by an earlier profkit (schema {version}) and is upgraded "
                                 f"in place the first time it is opened, but it cannot be written ({exc})",
                                 "Open it once where it is writable (or as its owner).") from exc
            raise

    def _upgrade_to_current(self, tables: set[str]) -> None:
        with self.write():
            if self._schema_version() == SCHEMA_VERSION:
                return  # another process upgraded it meanwhile
            if "activity" not in self.db.table("runs").columns_dict:
                self.db.table("runs").add_column("activity", str)
                self.execute("update runs set activity = 'kernel'")
            self._add_columns("runs", RUN_COLUMNS)
            if "kernel_rows" not in tables:  # schema 5 or earlier: the kernels were a table
                self._add_columns("kernels", KERNEL_COLUMNS)
                self._migrate_kernels()
            elif self._add_columns("kernel_rows", STORED_COLUMNS):  # schema 6 or 7: rank
                self.execute("drop view if exists kernels")  # the view names every column: made anew
                self.execute(KERNELS_VIEW)
            if "ranges" not in tables:
                self._create_ranges()
            else:
                self._add_columns("ranges", RANGE_TABLE_COLUMNS)
            if "benches" not in tables:  # schema 6 or earlier
                self._create_benches()
            self.db.table("meta").upsert({"key": "schema_version", "value": str(SCHEMA_VERSION)}, pk="key")
            self._set_max_run_id()

    def _set_max_run_id(self) -> None:
        """Record the highest run id given so far (meta ``max_run_id``): a new run's id is above
        it, so the id of a deleted run is never given again (runs has no AUTOINCREMENT)."""
        self.execute("insert or replace into meta (key, value) values ('max_run_id', "
                     "(select max(coalesce((select max(id) from runs), 0), "
                     "coalesce((select cast(value as integer) from meta where key = 'max_run_id'), 0))))")

    def _add_columns(self, table: str, columns: dict[str, type]) -> list[str]:
        """Add to ``table`` those of ``columns`` it lacks (an earlier schema's table); return them."""
        have = set(self.db.table(table).columns_dict)
        added = [c for c in columns if c not in have]
        for col in added:
            self.db.table(table).add_column(col, columns[col])
        return added

    # ------------------------------------------------------------------ names
    def unique_name(self, base: str) -> str:
        """``base`` made a usable run name, with ``-2``, ``-3``... if taken (read at this moment:
        :meth:`reserve` takes the name under the write lock)."""
        base = re.sub(r"[^A-Za-z0-9_.-]+", "-", base).strip("-.")[:MAX_NAME - 8].strip("-.") or "run"
        if base.isdigit():
            base = f"run-{base}"
        taken = {r["name"] for r in self.query("select name from runs where name = ? or name like ?", [base, base + "-%"])}
        if base not in taken:
            return base
        n = 2
        while f"{base}-{n}" in taken:
            n += 1
        return f"{base}-{n}"

    def check_name_free(self, name: str) -> None:
        check_run_name(name)
        row = self.execute("select status from runs where name = ?", [name]).fetchone()
        if row:
            what = "" if row[0] == OK else f" ({row[0]}; it keeps its files)"
            raise RunExists(f"a run named {name!r} already exists in {self.path}{what}", "Choose another `name`.")

    def runs_of_file(self, sha256: str) -> list[str]:
        """Names of the complete runs imported from a file with this SHA-256."""
        return [r["name"] for r in self.query("select name from runs where source_sha256 = ? and status = ? "
                                                 "order by id", [sha256, OK])]

    # ------------------------------------------------------------------ writing
    def reserve(self, name: str | None, base: str, fields: RunFields, status: str = "importing") -> RunRecord:
        """Take a run name atomically: ``name`` (refused if taken) or the first free one made
        from ``base``; insert the run's row with ``status`` (``running`` or ``importing``) and
        this process as its owner. Nothing else may take the name from now on."""
        row = _encoded({**fields, "status": status, "owner": _owner() + LOCKED, "kernel_count": 0, "gpu_time_ns": 0})
        row.pop("folder", None)
        run_id = 0
        try:
            with self.write():
                if name is not None:
                    self.check_name_free(name)
                row["name"] = name if name is not None else self.unique_name(base)
                self._set_max_run_id()
                run_id = row["id"] = int(self.execute(
                    "select cast(value as integer) + 1 from meta where key = 'max_run_id'").fetchone()[0])
                # The lock is held before the row can be seen: a reader never finds a new run unlocked.
                self._lock(run_id)
                self._insert("runs", row)
                self._set_max_run_id()
        except BaseException as exc:
            if run_id:
                self._unlock(run_id)
            if isinstance(exc, sqlite3.OperationalError):
                raise _unwritable(self.path, exc) from exc
            raise
        return self.get_run(run_id)

    # ------------------------------------------------------------------ run locks and raw folders
    def _lock_path(self, run_id: int) -> Path:
        return self.path.resolve().parent / f"{self.path.name}-locks" / f"{run_id}.lock"

    def _lock(self, run_id: int) -> None:
        """Take run ``run_id``'s lock (held until :meth:`_unlock` or this process ends)."""
        path = self._lock_path(run_id)
        try:
            path.parent.mkdir(mode=0o755, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot make the lock folder {path.parent}: {exc.strerror}",
                             "Check the folder's permissions and the free disk space.") from None
        why = untrusted(path.parent)
        if why:
            raise StoreError(f"the lock folder {path.parent} {why}",
                             "Remove it (profkit makes its own), or use a database in a folder of your own.")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot make the lock file {path}: {exc.strerror}",
                             "Check the folder's permissions and the free disk space.") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StoreError(f"cannot lock {path}: {exc.strerror}",
                             "Another process holds it; check what else uses this database.") from None
        _HELD[str(path)] = fd

    def _unlock(self, run_id: int) -> None:
        """Give up a run's lock, if this process holds it: the file goes first, then the lock."""
        path = self._lock_path(run_id)
        fd = _HELD.pop(str(path), None)
        if fd is not None:
            path.unlink(missing_ok=True)
            os.close(fd)

    def _dead_owner_lock(self, run_id: int) -> int | None:
        """The lock of a run whose owner is gone, taken (an open file to close), or None while
        its owner holds it (or its lock file is missing, or in a folder another user could have
        swapped it in: nothing proves the owner dead)."""
        path = self._lock_path(run_id)
        if untrusted(path.parent):
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd

    def run_folder(self, run: RunRecord) -> Path:
        """A run's raw folder: the one made for it (:meth:`reserve_folder`), or for a run of an
        earlier profkit (none recorded) ``<db stem>-runs/<run name>/``."""
        return _in_runs(self.path, run.folder) if run.folder else raw_dir(self.path, run.name)

    def runs_base(self) -> Path:
        """``<db stem>-runs/`` beside the database, made if missing, and refused (a StoreError)
        where it is not this user's to trust (:func:`profkit.files.untrusted`: a link or folder
        another user put there would have the runs' files written elsewhere)."""
        base = self.path.resolve().parent / f"{self.path.stem}-runs"
        try:
            base.mkdir(mode=0o755, parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot make the folder of runs' files {base}: {exc.strerror or exc}",
                             "Check the folder's permissions and the free disk space.") from None
        why = untrusted(base)
        if why:
            raise StoreError(f"the folder of runs' files {base} {why}",
                             "Remove it (profkit makes its own), or use a database in a folder of your own.")
        return base

    def reserve_folder(self, run: RunRecord) -> Path:
        """Make a reserved run's raw folder, as exclusively as its name: ``<db stem>-runs/<name>/``,
        or where that exists already (a database of the same stem has a run of that name, a
        folder was left or put there) ``<name>-2``, ``<name>-3``... Made now by this process
        (``os.mkdir``, never an existing folder) and recorded with the run. profkit deletes or
        overwrites no folder it did not make for the run."""
        base = self.runs_base()
        try:
            for n in range(1, MAX_FOLDERS + 1):
                folder = base / (run.name if n == 1 else f"{run.name}-{n}")
                try:
                    os.mkdir(folder)
                except FileExistsError:
                    continue
                break
            else:
                raise StoreError(f"no free raw folder for run {run.name!r} in {base} ({MAX_FOLDERS} names taken)",
                                 "Clear out that folder, or use another database.")
        except OSError as exc:
            raise StoreError(f"cannot make the raw folder of run {run.name!r} in {base}: {exc.strerror or exc}",
                             "Check the folder's permissions and the free disk space.") from None
        try:
            with self.write():
                self._update("runs", run.id, {"folder": folder.name})
        except BaseException as exc:
            folder.rmdir()  # made just now, and still empty
            if isinstance(exc, sqlite3.OperationalError):
                raise _unwritable(self.path, exc) from exc
            raise
        return folder

    def insert_gpu_ops(self, run_id: int, export: NsysExport, names: list[tuple], ranges: list[tuple],
                       segments: list[tuple], windows: list[tuple], ranks: dict[int, int] | None = None) -> dict[str, Any]:
        """An nsys export's GPU operations as ``run_id``'s kernel rows, by SQL straight from the
        file: the bulk import a capture's ``bulk`` calls (see ``nsys_import.insert_gpu_ops``)."""
        from .nsys_import import insert_gpu_ops

        return insert_gpu_ops(self, run_id, export, names, ranges, segments, windows, ranks)

    def fill_run(self, run: RunRecord, capture: Capture[ClassifiedRow], fields: RunFields | None = None) -> RunRecord:
        """Write a reserved run's classified rows (streamed, in batches of short transactions),
        then in one last transaction its counts, ranges, notes, ``fields`` and status ``ok``.
        If anything fails (or is interrupted) the rows written so far are removed again before
        the error goes on; the run's row is the caller's to end (:meth:`end_run`,
        :meth:`delete_run`)."""
        try:
            if capture.bulk is not None:
                activity, count, total = capture.bulk(self, run.id)
                if not count:
                    raise EmptyCapture("the capture holds no kernel launches and no CPU operator calls")
            else:
                activity, count, total = self._insert_kernels(run.id, capture.rows)
            info = {**run.info, **((fields or {}).get("info") or {}), "notes": list(capture.notes)}
            update = _encoded({**(fields or {}), "activity": activity, "kernel_count": count, "gpu_time_ns": total,
                               "info": info, "status": OK, "owner": None})
            if activity == "cpu_op" and not (run.device or update.get("device")):
                update["device"] = "cpu"  # CPU operators ran on the CPU, whatever the file said
            with self.write():
                if capture.ranges:
                    self.db.table("ranges").insert_all(({"run_id": run.id, **r} for r in capture.ranges),
                                                       batch_size=2000)
                self._update("runs", run.id, update)
        except BaseException as exc:
            self._clear_rows(run.id)
            if isinstance(exc, sqlite3.OperationalError):
                raise _unwritable(self.path, exc) from exc
            if isinstance(exc, OverflowError):  # a value, or the run's summed time, past 2^63
                raise BadExport(f"the capture holds a number too large to store ({exc})") from None
            raise
        self._unlock(run.id)
        return self.get_run(run.id)

    def add_run(self, fields: RunFields, capture: Capture[ClassifiedRow]) -> RunRecord:
        """Reserve ``fields["name"]`` and write the capture as a complete run; on any failure
        nothing of it stays. Returns the run."""
        run = self.reserve(fields["name"], fields["name"], fields)
        try:
            return self.fill_run(run, capture)
        except BaseException:
            self.delete_run(run.id)
            raise

    def set_raw_files(self, run_id: int, files: dict[str, str]) -> None:
        """Record where a run's kept files are (``profkit sweep`` moves a job's folder here)."""
        with self.write():
            self._update("runs", run_id, _encoded({"raw_files": files}))

    def end_run(self, run_id: int, status: str, error: str) -> None:
        """Mark a reserved run that ended without kernels (``failed`` or ``interrupted``),
        with the error in its info; its row and raw files stay, its name stays taken."""
        run = self.get_run(run_id)
        info = {**run.info, "error": error}
        with self.write():
            self._update("runs", run_id, _encoded({"status": status, "owner": None, "info": info}))
        self._unlock(run_id)

    def delete_run(self, run_id: int) -> None:
        """Remove a run and everything of it from the database (not its raw files); its id is
        never given again."""
        with self.write():
            self._delete_rows(run_id)
            self.execute("delete from runs where id = ?", [run_id])
        self._unlock(run_id)

    def _clear_rows(self, run_id: int) -> None:
        """Remove a run's kernel and range rows, keeping its row; best effort."""
        try:
            with self.write():
                self._delete_rows(run_id)
        except sqlite3.Error:
            pass  # the recovery at the next open removes them

    def _delete_rows(self, run_id: int) -> None:
        for table in ("kernel_rows", "ranges"):
            self.execute(f"delete from {table} where run_id = ?", [run_id])

    def _recover(self) -> None:
        """Runs whose owner is gone (killed mid-write): an import leaves nothing; a profiled run
        is marked interrupted and keeps its row and raw files. An owner is proved gone by taking
        its run's lock (the kernel released it when the owner died), in whatever PID namespace
        either process runs: a pid is no proof (another namespace's pids are not seen here).
        An owner of an earlier profkit (no lock, no ``+lock`` in ``owner``) is gone when its pid
        is gone on this host, as then."""
        rows = list(self.query("select id, status, owner from runs where status in (?, ?)", list(WRITING)))
        for r in rows:
            owner = r["owner"] or ""
            fd = None
            if owner.endswith(LOCKED):
                fd = self._dead_owner_lock(r["id"])
                if fd is None:
                    continue  # alive (or its lock file was removed: nothing proves it dead)
            else:
                host, _, pid = owner.rpartition(":")
                if not (host == socket.gethostname() and pid.isdigit() and not alive(int(pid))):
                    continue
            ended = False
            try:
                ended = self._recover_run(r["id"], owner)
            except sqlite3.OperationalError:
                pass  # a read-only database: reading it still works; a writer recovers the rows later
            finally:
                if fd is not None:
                    if ended:  # the lock file goes with the run's recovery, never before it
                        try:
                            self._lock_path(r["id"]).unlink(missing_ok=True)
                        except OSError:
                            pass  # a read-only folder: the file stays, harmless
                    os.close(fd)

    def _recover_run(self, run_id: int, owner: str) -> bool:
        """In one transaction, if the run is still being written by ``owner``: an import is
        deleted, a profiled run marked interrupted (its rows removed). True once the run is no
        longer ``owner``'s to write (recovered here, or it ended meanwhile)."""
        with self.write():
            row = self.execute("select status, owner, info from runs where id = ?", [run_id]).fetchone()
            if row is None or row[0] not in WRITING or row[1] != owner:
                return True  # it ended meanwhile
            self._delete_rows(run_id)
            if row[0] == "importing":
                self.execute("delete from runs where id = ?", [run_id])
                return True
            info = {**json.loads(row[2] or "{}"),
                    "error": f"the profkit process {owner.removesuffix(LOCKED)} ended before the run was stored"}
            self._update("runs", run_id, _encoded({"status": "interrupted", "owner": None, "info": info}))
        return True

    def _insert_kernels(self, run_id: int, rows: Iterable[ClassifiedRow]) -> tuple[str, int, int]:
        """Bulk insert through one prepared statement (sqlite-utils' insert_all re-checks every
        value of every row, which made a 2-million-kernel import three times slower), one
        transaction per BATCH_ROWS rows, texts replaced by their ids in ``strings``. Returns
        the run's activity and the count and summed duration of its rows of that activity: a
        run's rows are CPU operators or GPU work, never both."""
        cols = [c for c in KERNEL_COLUMNS if c != "run_id"]
        sql = (f"insert into kernel_rows (run_id, {', '.join(c for c in STORED_COLUMNS if c != 'run_id')}) "
               f"values (?, {', '.join('?' * len(cols))})")
        text_at = [i + 1 for i, c in enumerate(cols) if c in INTERNED]  # positions in a row's values
        ids: dict[str, int] = {}
        dumps = json.dumps
        batch: list[list[Any]] = []
        kinds: set[str] = set()
        count = {"kernel": 0, "cpu_op": 0}
        total = {"kernel": 0, "cpu_op": 0}

        def flush() -> None:
            with self.write():
                self._intern(ids, {v for values in batch for i in text_at if (v := values[i]) is not None
                                   and v not in ids})
                for values in batch:
                    for i in text_at:
                        if (v := values[i]) is not None:
                            values[i] = ids[v]
                self.conn.executemany(sql, batch)

        try:
            for r in rows:
                check_row(r)
                kind = r["kind"]
                kinds.add(kind)
                if kind in count:
                    count[kind] += 1
                    total[kind] += r["duration_ns"] or 0
                values: list[Any] = [run_id]
                for c in cols:
                    v = r[c]  # type: ignore[literal-required]
                    if c == "metrics":
                        v = _metrics_json(v) if v else None
                    elif c == "tensor_core" and v is not None:
                        v = int(bool(v))
                    values.append(v)
                batch.append(values)
                if len(batch) >= BATCH_ROWS:
                    flush()
                    batch = []
            if batch:
                flush()
        except sqlite3.IntegrityError as exc:
            raise BadExport(f"the capture lists a launch twice ({exc})") from exc
        if "cpu_op" in kinds and kinds & set(GPU_KINDS):
            raise BadExport("the capture mixes CPU operators and GPU activities")
        activity = "cpu_op" if "cpu_op" in kinds else "kernel"
        if not count[activity]:
            raise EmptyCapture("the capture holds no kernel launches and no CPU operator calls")
        return activity, count[activity], total[activity]

    def intern(self, texts: Iterable[str]) -> dict[str, int]:
        """The ids of ``texts`` in ``strings``, adding those not there yet; inside a write
        transaction (a bulk importer's)."""
        ids: dict[str, int] = {}
        self._intern(ids, set(texts))
        return ids

    def _intern(self, ids: dict[str, int], texts: set[str]) -> None:
        """Put ``texts`` in ``strings`` (those not there yet) and their ids in ``ids``; inside a
        write transaction."""
        if not texts:
            return
        self.conn.executemany("insert or ignore into strings (text) values (?)", ((t,) for t in texts))
        for t in texts:
            ids[t] = self.execute("select id from strings where text = ?", [t]).fetchone()[0]

    # ------------------------------------------------------------------ reading runs
    def runs(self) -> list[RunRecord]:
        return [_run(r) for r in self.query("select * from runs order by id")]

    def get_run(self, ref: str | int) -> RunRecord:
        """A run by id (digits) or name."""
        ref = str(ref)
        row = None
        if (run_id := as_id(ref)) is not None:
            row = next(self.query("select * from runs where id = ?", [run_id]), None)
        if row is None:
            row = next(self.query("select * from runs where name = ?", [ref]), None)
        if row is None:
            names = [r["name"] for r in self.query("select name from runs order by id desc limit 5")]
            hint = f"Recent runs: {', '.join(names)}." if names else "The database has no runs yet."
            raise RunNotFound(f"no run {ref!r} in {self.path}", hint)
        return _run(row)

    # ------------------------------------------------------------------ reading kernels
    def iter_kernels(self, run_id: int) -> Iterator[ClassifiedRow]:
        """Kernel rows (KERNEL_FIELDS, in that order) in launch order, streamed, with metrics
        decoded and tensor_core as bool."""
        cur = self.execute(f"select {', '.join(KERNEL_FIELDS)} from kernels where run_id = ? order by launch_id",
                              [run_id])
        loads = json.loads
        while batch := cur.fetchmany(5000):
            for values in batch:
                row = dict(zip(KERNEL_FIELDS, values))
                row["metrics"] = loads(row["metrics"]) if row["metrics"] else {}
                if row["tensor_core"] is not None:
                    row["tensor_core"] = bool(row["tensor_core"])
                yield row  # type: ignore[misc]  # KERNEL_FIELDS are ClassifiedRow's keys

    def iter_kernels_json(self, run_id: int) -> Iterator[str]:
        """The rows of :meth:`iter_kernels` as JSON objects (one text each, same keys, order and
        values), made by SQLite itself: the fast path of ``kernels --format json``."""
        def field(c: str) -> str:
            if c == "tensor_core":
                return "case tensor_core when 1 then json('true') when 0 then json('false') end"
            return "json(metrics)" if c == "metrics" else c
        obj = "json_object(" + ", ".join(f"'{c}', {field(c)}" for c in KERNEL_FIELDS) + ")"
        cur = self.execute(f"select {obj} from kernels where run_id = ? order by launch_id", [run_id])
        while batch := cur.fetchmany(5000):
            for (text,) in batch:
                yield text

    def count_by_kind(self, run_id: int) -> dict[str, int]:
        """How many rows of each kind (kernel, memcpy, memset, cpu_op) a run has."""
        return {k: int(n) for k, n in self.execute(
            "select kind, count(*) from kernels where run_id = ? group by kind order by kind", [run_id])}

    def totals(self, run_id: int, kind: str) -> dict[str, int]:
        """Over a run's rows of one kind: count, summed duration, tensor-core launches and time,
        and the time of launches whose tensor-core use is unknown."""
        count, total, tc_count, tc_time, unknown_time = self.execute(
            "select count(*), coalesce(sum(duration_ns), 0), coalesce(sum(tensor_core = 1), 0), "
            "coalesce(sum(case when tensor_core = 1 then duration_ns else 0 end), 0), "
            "coalesce(sum(case when tensor_core is null then duration_ns else 0 end), 0) "
            "from kernels where run_id = ? and kind = ?", [run_id, kind]).fetchone()
        return {"count": int(count), "time_ns": int(total), "tensor_core_count": int(tc_count),
                "tensor_core_time_ns": int(tc_time), "unknown_time_ns": int(unknown_time)}

    GROUPABLE = ("precision", "family", "evidence", "kind", "name", "short_name")

    def grouped(self, run_id: int, by: str, kinds: Iterable[str], missing: str = "unknown") -> list[tuple[str, int, int]]:
        """(value of ``by``, count, summed duration) over a run's rows of these kinds, largest
        time first; a NULL value counts as ``missing``."""
        return self.breakdown(run_id, (by,), kinds, missing)[by]

    def breakdown(self, run_id: int, bys: Sequence[str], kinds: Iterable[str],
                  missing: str | dict[str, str] = "unknown") -> dict[str, list[tuple[str, int, int]]]:
        """:meth:`grouped` for several columns in one pass over the run's rows (texts by their
        ids, read once each): ``missing`` names a NULL value, for all or per column."""
        bad = [b for b in bys if b not in self.GROUPABLE]
        if bad:
            raise ValueError(f"cannot group kernels by {bad[0]!r}")
        kinds = list(kinds)
        cols = [f"{b}_id" if b in INTERNED else b for b in bys]
        q = f"""select {', '.join(cols)}, count(*), coalesce(sum(duration_ns), 0) from kernel_rows
                where run_id = ? and kind in ({', '.join('?' * len(kinds))}) group by {', '.join(cols)}"""
        combos = self.execute(q, [run_id, *kinds]).fetchall()
        texts = self._texts({v for row in combos for b, v in zip(bys, row) if b in INTERNED and v is not None})
        out = {}
        for i, b in enumerate(bys):
            acc: dict[str, list[int]] = {}
            absent = missing if isinstance(missing, str) else missing.get(b, "unknown")
            for row in combos:
                v = row[i]
                key = absent if v is None else (texts[v] if b in INTERNED else str(v))
                cell = acc.setdefault(key, [0, 0])
                cell[0] += int(row[-2])
                cell[1] += int(row[-1])
            out[b] = sorted(((k, n, t) for k, (n, t) in acc.items()), key=lambda r: (-r[2], r[0]))
        return out

    def _texts(self, ids: Iterable[int]) -> dict[int, str]:
        """The texts of these ``strings`` ids."""
        ids = list(ids)
        out: dict[int, str] = {}
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            out.update(self.execute(f"select id, text from strings where id in ({', '.join('?' * len(chunk))})",
                                    chunk).fetchall())
        return out

    def top_names(self, run_id: int, kind: str, limit: int) -> list[dict[str, Any]]:
        """The most expensive (name, precision) pairs of a run's rows of one kind: launches,
        summed time, and the tensor-core verdict and evidence of the first launch."""
        # One min() aggregate: SQLite takes the bare columns from the group's first launch.
        q = """select name_id, min(launch_id), count(*) as n, coalesce(sum(duration_ns), 0) as t, precision,
                      tensor_core, evidence
               from kernel_rows where run_id = ? and kind = ? group by name_id, precision"""
        groups = self.execute(q, [run_id, kind]).fetchall()
        texts = self._texts({g[0] for g in groups if g[0] is not None})
        named = sorted(((texts.get(g[0], ""), *g[1:]) for g in groups), key=lambda g: (-g[3], g[0]))[:limit]
        return [{"name": name, "launches": int(n), "total_ns": int(t), "precision": precision,
                 "tensor_core": None if tc is None else bool(tc), "evidence": ev}
                for name, _, n, t, precision, tc, ev in named]

    def kernel_groups(self, run_id: int, in_iterations: bool = False) -> list[dict[str, Any]]:
        """A run's rows grouped by (kind, name, launching operator, precision): launches, summed
        time, tensor-core time, family and short name (the least of each group's). What a
        diff aligns; a run has far fewer of these than launches. ``in_iterations``: only rows
        launched inside a measured-iteration range (``<tag>.iterN``)."""
        args: list[Any] = [run_id]
        where = ""
        if in_iterations:
            paths = [r[0] for r in self.execute("select id from strings where text glob '*.iter[0-9]*'")]
            where = f" and nvtx_path_id in ({', '.join('?' * len(paths))})" if paths else " and 0"
            args += paths
        # Grouped on ids in one pass over kernel_rows; the few groups are named and merged here.
        q = f"""select kind, name_id, op_id, coalesce(precision, 'unknown'), short_name_id, family_id, min(launch_id),
                       count(*), coalesce(sum(duration_ns), 0),
                       coalesce(sum(case when tensor_core = 1 then duration_ns else 0 end), 0)
                from kernel_rows where run_id = ?{where}
                group by kind, name_id, op_id, coalesce(precision, 'unknown'), short_name_id, family_id"""
        rows = self.execute(q, args).fetchall()
        texts = self._texts({i for r in rows for i in (r[1], r[2], r[4], r[5]) if i is not None})
        merged: dict[tuple[Any, ...], dict[str, Any]] = {}
        for kind, name, op, precision, short, family, first, calls, time_ns, tc_ns in rows:
            key = (kind, texts.get(name), texts.get(op), precision)
            g = merged.get(key)
            if g is None:
                merged[key] = {"kind": kind, "name": key[1], "op": key[2], "short_name": texts.get(short),
                               "family": texts.get(family), "calls": calls, "time_ns": time_ns, "tc_time_ns": tc_ns,
                               "precisions": precision, "first": first}
                continue
            g["calls"] += calls
            g["time_ns"] += time_ns
            g["tc_time_ns"] += tc_ns
            g["first"] = min(g["first"], first)
            for col, value in (("short_name", texts.get(short)), ("family", texts.get(family))):
                if value is not None and (g[col] is None or value < g[col]):
                    g[col] = value
        out = sorted(merged.values(), key=lambda g: g["first"])
        for g in out:
            del g["first"]
        return out

    def name_groups(self, run_id: int, kind: str) -> list[dict[str, Any]]:
        """A run's rows of one kind grouped by (name, precision), most time first: launches,
        summed/min/max duration, launches on and off tensor cores, family, and the distinct
        evidence kinds and details behind the verdicts (JSON lists). What the report's kernel
        table shows."""
        q = """select name, precision, min(short_name) as short_name, min(family) as family, count(*) as calls,
                      coalesce(sum(duration_ns), 0) as time_ns, min(duration_ns) as min_ns, max(duration_ns) as max_ns,
                      coalesce(sum(tensor_core = 1), 0) as tc_calls, coalesce(sum(tensor_core = 0), 0) as cuda_calls,
                      json_group_array(distinct evidence) as evidences,
                      json_group_array(distinct evidence_detail) as details, min(op) as op, min(launch_id) as first
               from kernels where run_id = ? and kind = ? group by name, precision order by time_ns desc, name"""
        out = []
        for r in self.query(q, [run_id, kind]):
            r = dict(r)
            r["evidences"] = [e for e in json.loads(r["evidences"]) if e is not None]
            r["details"] = [d for d in json.loads(r["details"]) if d]
            out.append(r)
        return out

    def first_launches(self, run_id: int, kind: str, per_group: int) -> list[dict[str, Any]]:
        """The first ``per_group`` launches of each (name, precision) group of one kind, in
        launch order: where and how each ran (no counters)."""
        cols = ("launch_id", "name", "precision", "duration_ns", "start_ns", "grid_x", "grid_y", "grid_z",
                "block_x", "block_y", "block_z", "stream", "thread_id", "nvtx_range", "tensor_core", "evidence_detail")
        q = f"""select {', '.join(cols)} from (
                  select {', '.join(cols)}, row_number() over (partition by name, precision order by launch_id) as nth
                  from kernels where run_id = ? and kind = ?)
               where nth <= ? order by launch_id"""
        return [dict(zip(cols, r)) for r in self.execute(q, [run_id, kind, per_group])]

    def metric_sums(self, run_id: int, metrics: Sequence[str]) -> list[dict[str, Any]]:
        """Per kernel (name, precision) with any of ``metrics`` non-zero: launches, summed
        duration of the launches that have the counters, and each metric's sum."""
        if not metrics:
            return []
        sums = ", ".join(f"coalesce(sum(json_extract(metrics, ?)), 0) as m{i}" for i in range(len(metrics)))
        q = f"""select name, precision, min(short_name) as short_name, count(*) as calls,
                       coalesce(sum(duration_ns), 0) as time_ns, {sums}
                from kernels where run_id = ? and kind = 'kernel' and metrics != '{{}}'
                group by name, precision order by time_ns desc, name"""
        paths = [f'$."{m}"' for m in metrics]
        out = []
        for row in self.execute(q, [*paths, run_id]):
            name, precision, short, calls, time_ns, *values = row
            found = {m: float(v) for m, v in zip(metrics, values) if v}
            if found:
                out.append({"name": name, "precision": precision, "short_name": short, "calls": int(calls),
                            "time_ns": int(time_ns), "metrics": found})
        return out

    def timeline(self, run_id: int, start_ns: int | None, end_ns: int | None, limit: int) -> tuple[list[dict[str, Any]], int]:
        """GPU rows that started in [start_ns, end_ns) on the capture's clock (either bound may
        be None: open), launched by any thread, in start order, at most ``limit``; and how many
        there were."""
        where = "run_id = ? and start_ns is not null and kind != 'cpu_op'"
        args: list[Any] = [run_id]
        if start_ns is not None:
            where += " and start_ns >= ?"
            args.append(start_ns)
        if end_ns is not None:
            where += " and start_ns < ?"
            args.append(end_ns)
        total = int(self.execute(f"select count(*) from kernels where {where}", args).fetchone()[0])
        cols = ("launch_id", "kind", "name", "short_name", "stream", "device", "rank", "start_ns", "duration_ns",
                "precision", "tensor_core")
        rows = [dict(zip(cols, r)) for r in self.execute(
            f"select {', '.join(cols)} from kernels where {where} order by start_ns, launch_id limit ?", [*args, limit])]
        return rows, total

    # ------------------------------------------------------------------ reading ranges
    def ranges(self, run_id: int) -> list[RangeRow]:
        """The ranges a timeline capture recorded, in start order."""
        return [{k: r[k] for k in RANGE_COLUMNS} for r in  # type: ignore[misc]
                self.query("select * from ranges where run_id = ? order by range_id", [run_id])]

    def kernel_paths(self, run_id: int) -> list[dict[str, Any]]:
        """Per NVTX stack the launches were made in (first launch first): the innermost range's
        name, the launching thread, kernels (or CPU operators), GPU operations and the kernels'
        summed time (CPU self time)."""
        q = """select nvtx_path, min(launch_id) as first, min(nvtx_range) as name, min(thread_id) as thread_id,
                      sum(kind in ('kernel', 'cpu_op')) as kernels, count(*) as gpu_ops,
                      sum(case when kind in ('kernel', 'cpu_op') then duration_ns else 0 end) as gpu_time_ns
               from kernels where run_id = ? and nvtx_path is not null group by nvtx_path order by first"""
        return [{k: r[k] for k in ("nvtx_path", "name", "thread_id", "kernels", "gpu_ops", "gpu_time_ns")}
                for r in self.query(q, [run_id])]

    # ------------------------------------------------------------------ reading ranks (distributed runs)
    def _string_id(self, text: str) -> int:
        row = self.execute("select id from strings where text = ?", [text]).fetchone()
        return int(row[0]) if row else -1

    def rank_totals(self, run_id: int, kind: str, family: str) -> list[dict[str, Any]]:
        """Per rank (in order) of a run's rows of one kind: launches, summed duration, the
        launches and time of ``family`` (communication), and the devices they ran on."""
        fid = self._string_id(family)
        q = """select rank, count(*), coalesce(sum(duration_ns), 0), coalesce(sum(family_id = ?), 0),
                      coalesce(sum(case when family_id = ? then duration_ns else 0 end), 0),
                      group_concat(distinct device)
               from kernel_rows where run_id = ? and kind = ? and rank is not null group by rank order by rank"""
        return [{"rank": int(r), "kernels": int(n), "time_ns": int(t), "family_kernels": int(fn), "family_ns": int(ft),
                 "devices": sorted({int(d) for d in (devs or "").split(",") if d})}
                for r, n, t, fn, ft, devs in self.execute(q, [fid, fid, run_id, kind])]

    def rank_intervals(self, run_id: int, family: str) -> Iterator[tuple[int, int | None, int, int, bool]]:
        """(rank, device, start_ns, duration_ns, of ``family``) of a run's kernels that have a
        start time, ordered by rank, device and start: streamed."""
        fid = self._string_id(family)
        cur = self.execute("""select rank, device, start_ns, coalesce(duration_ns, 0), family_id = ? from kernel_rows
                              where run_id = ? and kind = 'kernel' and rank is not null and start_ns is not null
                              order by rank, device, start_ns""", [fid, run_id])
        while batch := cur.fetchmany(5000):
            for rank, device, start, duration, of_family in batch:
                yield int(rank), device, int(start), int(duration), bool(of_family)

    def rank_path_times(self, run_id: int, kind: str, family: str) -> list[dict[str, Any]]:
        """Per rank and NVTX stack of a run's rows of one kind: launches, summed duration and
        the time of ``family``."""
        fid = self._string_id(family)
        rows = self.execute("""select rank, nvtx_path_id, count(*), coalesce(sum(duration_ns), 0),
                                      coalesce(sum(case when family_id = ? then duration_ns else 0 end), 0)
                               from kernel_rows where run_id = ? and kind = ? and rank is not null
                               group by rank, nvtx_path_id""", [fid, run_id, kind]).fetchall()
        texts = self._texts({r[1] for r in rows if r[1] is not None})
        return [{"rank": int(r), "nvtx_path": texts.get(p) if p is not None else None, "kernels": int(n),
                 "time_ns": int(t), "family_ns": int(ft)} for r, p, n, t, ft in rows]

    def rank_name_counts(self, run_id: int, kind: str) -> list[tuple[int, str, str, int]]:
        """(rank, name, precision, launches) of a run's rows of one kind."""
        rows = self.execute("""select rank, name_id, coalesce(precision, 'unknown'), count(*) from kernel_rows
                               where run_id = ? and kind = ? and rank is not null group by rank, name_id, precision""",
                            [run_id, kind]).fetchall()
        texts = self._texts({r[1] for r in rows if r[1] is not None})
        return [(int(r), texts.get(n, ""), p, int(c)) for r, n, p, c in rows]

    # ------------------------------------------------------------------ benchmarks (profkit bench)
    def _create_benches(self) -> None:
        self.db.table("benches").create(BENCH_COLUMNS, pk="id", not_null={"workload"})
        self.db.table("bench_rows").create(BENCH_ROW_COLUMNS, pk=("bench_id", "seq"),
                                           foreign_keys=[("bench_id", "benches", "id")])
        self.db.table("bench_rows").create_index(["bench_id", "precision", "mode"], unique=True)

    def check_writable(self) -> None:
        """Refuse now a database that would refuse a write later: what ``profkit bench`` checks
        before its combinations run, so that their results are not lost at the end. A new
        database's folder must be writable (the file is still made only when first written)."""
        if not self.path.exists():
            folder = self.path.parent
            if not os.access(folder, os.W_OK | os.X_OK):
                raise StoreError(f"cannot make {self.path}: folder {folder} is not writable",
                                 "Choose another `db`, or check the folder's permissions.")
            return
        try:
            with self.write():
                self.execute("delete from bench_rows where 0")  # a write statement that changes nothing
        except sqlite3.OperationalError as exc:
            raise _unwritable(self.path, exc) from exc

    def add_bench(self, bench: BenchRecord) -> BenchRecord:
        """Store a benchmark and its rows in one transaction (all or nothing); return it with its id."""
        head = {k: getattr(bench, k) for k in BENCH_COLUMNS if k != "id"}
        head = {k: json.dumps(v) if k in JSON_BENCH_COLUMNS else v for k, v in head.items()}
        try:
            with self.write():
                bench_id = self._insert("benches", head)
                for seq, r in enumerate(bench.rows):
                    row = {k: getattr(r, k) for k in BENCH_ROW_COLUMNS if k not in ("bench_id", "seq")}
                    row.update(bench_id=bench_id, seq=seq, reference_only=int(r.reference_only),
                               iter_ns=json.dumps(r.iter_ns))
                    self._insert("bench_rows", row)
        except sqlite3.IntegrityError as exc:
            raise UsageError(f"a benchmark has one row per precision and mode ({exc})") from None
        except sqlite3.OperationalError as exc:
            raise _unwritable(self.path, exc) from exc
        return self.get_bench(bench_id)

    def benches(self) -> list[BenchRecord]:
        """Every stored benchmark with its rows, oldest first."""
        rows: dict[int, list[BenchRow]] = {}
        for r in self.query("select * from bench_rows order by bench_id, seq"):
            rows.setdefault(r["bench_id"], []).append(_bench_row(r))
        return [_bench(b, rows.get(b["id"], [])) for b in self.query("select * from benches order by id")]

    def get_bench(self, bench_id: int | str) -> BenchRecord:
        """A stored benchmark by id."""
        ref = str(bench_id)
        row = next(self.query("select * from benches where id = ?", [bid]), None) \
            if (bid := as_id(ref)) is not None else None
        if row is None:
            ids = [str(r["id"]) for r in self.query("select id from benches order by id desc limit 5")]
            hint = (f"Recent benchmarks: {', '.join(ids)}." if ids else "The database has no benchmarks yet.")
            raise BenchNotFound(f"no benchmark {ref!r} in {self.path}", hint)
        rows = [_bench_row(r) for r in self.query("select * from bench_rows where bench_id = ? order by seq",
                                                  [row["id"]])]
        return _bench(row, rows)


def _metrics_json(metrics: dict[str, Any]) -> str:
    """A row's metrics as JSON text; a value that is not a finite number (NaN, infinity: not
    JSON) is stored as null."""
    try:
        return json.dumps(metrics, allow_nan=False)
    except ValueError:
        return json.dumps({k: v if not isinstance(v, float) or math.isfinite(v) else None for k, v in metrics.items()})


def is_database_error(exc: BaseException) -> bool:
    """Whether an error is SQLite's own (a damaged or unreadable database), for callers that
    must not import sqlite3 themselves."""
    return isinstance(exc, sqlite3.DatabaseError)


def _encoded(row: dict[str, Any]) -> dict[str, Any]:
    """A runs row with its JSON columns (metrics, command, raw_files, info) as JSON text."""
    return {k: json.dumps(v) if k in JSON_RUN_COLUMNS and v is not None else v for k, v in row.items()}


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _bench(row: dict[str, Any], rows: list[BenchRow]) -> BenchRecord:
    values = {k: json.loads(v) if k in JSON_BENCH_COLUMNS and v is not None else v for k, v in row.items()}
    return BenchRecord(**values, rows=rows)


def _bench_row(row: dict[str, Any]) -> BenchRow:
    values = {k: v for k, v in row.items() if k not in ("bench_id", "seq")}
    values["reference_only"] = bool(values["reference_only"])
    values["iter_ns"] = json.loads(values["iter_ns"] or "[]")
    return BenchRow(**values)


def _run(row: dict[str, Any]) -> RunRecord:
    row = dict(row)
    row.pop("owner", None)
    for key in JSON_RUN_COLUMNS:
        if row.get(key) is not None:
            row[key] = json.loads(row[key])
        else:
            row.pop(key, None)
    for key in ("activity", "kernel_count", "gpu_time_ns"):
        if row.get(key) is None:
            row.pop(key, None)
    return RunRecord(**row)

