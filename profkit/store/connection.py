"""The connection to profkit's database: the file (``db_path``), WAL, the busy timeout that
has writers wait their turn (``PROFKIT_BUSY_TIMEOUT``), ``BEGIN IMMEDIATE`` write transactions,
and SQLite's failures as one line. ``Connection`` is the base of ``Store``; the other modules
of this package add what is done over it (``migrations``, ``runs``, ``writes``, ``queries``,
``benches``)."""

from __future__ import annotations

import math
import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from ..errors import StoreError, UsageError
from ..files import file_uri
from ..processes import watch

DEFAULT_DB = "profkit.db"


def db_path(db: str | os.PathLike[str] | None) -> Path:
    return Path(db or os.environ.get("PROFKIT_DB") or DEFAULT_DB).expanduser()


# SQLite keeps its busy timeout in milliseconds in a C int: a longer one becomes no wait at all.
MAX_BUSY_TIMEOUT_S = (2**31 - 1) // 1000  # 2147483 s, about 24 days
MAX_ID = 2**63 - 1  # SQLite's largest integer: no run or benchmark id is larger


def as_id(ref: str) -> int | None:
    """The id a reference spells (ASCII digits, at most SQLite's largest integer), or None: a
    longer number names no row (and would overflow SQLite's integer)."""
    if ref.isascii() and ref.isdigit() and len(ref) <= len(str(MAX_ID)) and int(ref) <= MAX_ID:
        return int(ref)
    return None


def busy_timeout() -> float:
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


def unwritable(path: Path, exc: sqlite3.OperationalError) -> StoreError:
    """An operational failure (read-only file, locked database, full disk) as one line."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        return StoreError(f"{path} is locked by another process ({text}, after waiting {busy_timeout():g} s)",
                          "Try again once it has finished, or set PROFKIT_BUSY_TIMEOUT to wait longer.")
    return StoreError(f"cannot write to {path}: {text}", "Check the file's permissions and the free disk space.")


def is_database_error(exc: BaseException) -> bool:
    """Whether an error is SQLite's own (a damaged or unreadable database), for callers that
    must not import sqlite3 themselves."""
    return isinstance(exc, sqlite3.DatabaseError)


class Connection:
    """A profkit database file and its connection. ``Connection(path, create=False)`` refuses a
    missing file. Opening it runs :meth:`_prepare` (the store's: its layout brought up to date,
    WAL, runs of dead owners recovered)."""

    # A run whose launches a bulk import has grouped already, and those groups (the rows of
    # ``writes.write_aggregates``' ``agg_fine``), or None.
    prepared_aggregates: tuple[int, list[tuple[Any, ...]]] | None = None

    def __init__(self, path: str | os.PathLike[str] | None = None, create: bool = True):
        self.path = db_path(path)
        busy_timeout()  # a bad PROFKIT_BUSY_TIMEOUT is refused before anything is done
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
            self._prepare()
        except sqlite3.OperationalError as exc:
            raise unwritable(self.path, exc) from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a usable SQLite database: {exc}") from exc
        return self._conn

    def _prepare(self) -> None:
        """What is done once the file is open (the store's; here only WAL)."""
        self._wal()

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
            self._db = _sqlite_utils().Database(self.conn)
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

    def _insert_all(self, table: str, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
        """Rows (dicts; a key left out is NULL) into ``columns`` of ``table``, by one prepared
        statement: what a run's every write needs, without sqlite-utils (and the pandas it
        imports: a second of every ``profkit run``)."""
        self.conn.executemany(f"insert into {table} ({', '.join(columns)}) values ({', '.join('?' * len(columns))})",
                              ([r.get(c) for c in columns] for r in rows))

    def _update(self, table: str, row_id: int, values: dict[str, Any]) -> None:
        cols = list(values)
        self.conn.execute(f"update {table} set {', '.join(c + ' = ?' for c in cols)} where id = ?",
                          [*(values[c] for c in cols), row_id])

    def _connect(self) -> sqlite3.Connection:
        """Autocommit connection (transactions are explicit), WAL, waiting for other writers."""
        # Opened as a URI so that an export can be ATTACHed read-only by URI (nsys_import) on
        # every SQLite build, not only those that read URIs by default.
        conn = sqlite3.connect(file_uri(self.path), timeout=busy_timeout(), isolation_level=None,
                               check_same_thread=False, uri=True)
        conn.execute("pragma synchronous = normal")
        watch(self, conn)  # a stop signal cuts a long statement short (processes.stoppable)
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


# Set by profkit's command (``cli._open``): the process is profkit's own, so sqlite-utils may be
# imported without pandas and numpy (``_sqlite_utils``). A library user's process keeps them.
LEAN_IMPORTS = False


def _sqlite_utils() -> Any:
    """sqlite-utils; in profkit's own command (``LEAN_IMPORTS``), imported without the pandas
    and numpy it takes when they are installed (to convert their values in inserts, which
    profkit never makes through it: it only creates tables, indexes and columns). They cost a
    second of a first ``profkit run`` in a new database (the schema is made then) on the GPU
    machine. The module then keeps no pandas or numpy for the rest of the process, which is why
    a library user's process imports it as usual. Where this process imported them already,
    sqlite-utils takes them as usual too."""
    import importlib
    import sys

    if not LEAN_IMPORTS or "sqlite_utils.db" in sys.modules:
        return importlib.import_module("sqlite_utils")
    hidden = [m for m in ("pandas", "numpy") if m not in sys.modules]
    for m in hidden:
        sys.modules[m] = None  # type: ignore[assignment]  # import_module raises ImportError for these
    try:
        return importlib.import_module("sqlite_utils")
    finally:
        for m in hidden:
            if sys.modules.get(m, 0) is None:
                del sys.modules[m]
