"""The connection to profkit's database: the file (``db_path``), WAL, the busy timeout that
has writers wait their turn (``PROFKIT_BUSY_TIMEOUT``), ``BEGIN IMMEDIATE`` write transactions,
and SQLite's failures as one line (a full disk, a read-only file or folder, a lock, named as
such). A new database is made whole under a temporary name and linked into place, so that no
reader finds it half made. One that cannot be written (its folder or disk will not take the
files SQLite keeps beside it) is opened read-only, so reading it still works. ``Connection``
is the base of ``Store``; the other modules of this package add what is done over it
(``migrations``, ``runs``, ``writes``, ``queries``, ``benches``)."""

from __future__ import annotations

import math
import os
import secrets
import sqlite3
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import StoreError, UsageError
from ..files import disk_full, file_uri, foreign_link, full_disk, nearly_full
from ..processes import watch

DEFAULT_DB = "profkit.db"


def db_path(db: str | os.PathLike[str] | None) -> Path:
    return Path(db or os.environ.get("PROFKIT_DB") or DEFAULT_DB).expanduser()


# SQLite keeps its busy timeout in milliseconds in a C int: a longer one becomes no wait at all.
MAX_BUSY_TIMEOUT_S = (2**31 - 1) // 1000  # 2147483 s, about 24 days
MAX_ID = 2**63 - 1  # SQLite's largest integer: no run or benchmark id is larger
# A new database's page size: a large import's rows are written 15% quicker than in SQLite's
# default 4 KiB pages (2-core machine: a million rows 1.04 -> 0.87 s, their commit included).
PAGE_SIZE = 16384


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
        raise UsageError(
            f"PROFKIT_BUSY_TIMEOUT must be a number of seconds from 0 to {MAX_BUSY_TIMEOUT_S}, "
            f"not {text!r}",
            "Unset it to wait the default 600 s.",
        )
    return value


_SQLITE_FULL, _SQLITE_IOERR, _SQLITE_READONLY = 13, 10, 8


def _cause(path: Path, exc: BaseException) -> str | None:
    """What SQLite's failure over the database at ``path`` comes from, where it is one of
    these: ``locked`` (another process's lock), ``full`` (SQLite's "full", or an I/O error or
    a read-only connection where the disk has next to no room left: one opened read-only on
    a full disk, see Connection._read_only), ``readonly`` (a file or folder this user cannot
    write)."""
    text = str(exc)
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    readonly = code == _SQLITE_READONLY or "readonly" in text
    if "locked" in text or "busy" in text:
        return "locked"
    if (
        code == _SQLITE_FULL
        or "disk is full" in text
        or ((code == _SQLITE_IOERR or readonly) and nearly_full(path))
    ):
        return "full"
    return "readonly" if readonly else None


def _locked(path: Path, exc: BaseException) -> StoreError:
    return StoreError(
        f"{path} is locked by another process ({exc}, after waiting {busy_timeout():g} s)",
        "Try again once it has finished, or set PROFKIT_BUSY_TIMEOUT to wait longer.",
    )


def unwritable(path: Path, exc: BaseException) -> StoreError:
    """A failure to open or write the database at ``path`` as one line naming its cause: a
    lock, a full disk, a file or folder this user cannot write (:func:`_cause`)."""
    text = str(exc)
    cause = _cause(path, exc)
    if cause == "locked":
        return _locked(path, exc)
    if cause == "full":
        return full_disk(path)
    if cause == "readonly":
        return StoreError(
            f"cannot write to {path}: this user may not write the file or its folder ({text})",
            "Reading it works; to store runs, use a database in a folder of your own (`db`).",
        )
    if "unable to open" in text:
        return StoreError(
            f"cannot open {path} ({text})",
            "Check the permissions of the file and its folder, and the free disk space.",
        )
    return StoreError(
        f"cannot write to {path}: {text}", "Check the file's permissions and the free disk space."
    )


def read_failure(path: Path, exc: BaseException) -> StoreError:
    """A failure met reading the database at ``path`` once open (a full disk where SQLite
    wanted room for temporary data, a lock, a damaged page) as one line naming its cause."""
    cause = _cause(path, exc)
    if cause == "locked":
        return _locked(path, exc)
    if cause == "full":
        return StoreError(
            f"the disk is full: reading {path} needs room SQLite could not find ({exc})",
            "Free some space there, or where SQLite keeps temporary files ($SQLITE_TMPDIR, "
            "else /var/tmp or /tmp).",
        )
    return StoreError(f"the database is damaged or unreadable ({path}: {exc})")


def is_database_error(exc: BaseException) -> bool:
    """Whether an error is SQLite's own (a damaged or unreadable database), for callers that
    must not import sqlite3 themselves."""
    return isinstance(exc, sqlite3.DatabaseError)


def _check_file(path: Path) -> int | None:
    """Refuse, before SQLite opens it, a database path that is a folder, a link another user
    made (in a shared folder, it would have profkit make or write a file where that user
    chose), or not a regular file (a FIFO blocks SQLite's open for good, deaf to signals; a
    device or socket is no database). The owner of an existing file where it is another
    user's (not this user, not root), else None."""
    me = os.geteuid()
    found = foreign_link(path)  # its own name, or a folder on the way to it
    if found is not None:
        raise StoreError(
            f"{found[0]} is a link another user (user {found[1]}) made: profkit opens no database "
            "through it",
            "Remove the link, or use a database in a folder of your own.",
        )
    _check_companions(path, me)
    try:
        os.lstat(path)
    except OSError:
        return None  # nothing there (or unreadable): opening it says what is wrong
    try:
        st = os.stat(path)
    except OSError:
        return None  # a dangling link of this user's: the database is made where it points
    if stat.S_ISDIR(st.st_mode):
        raise StoreError(f"{path} is a folder, not a database file", "Choose a file for `db`.")
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(
            f"{path} is not a regular file (a FIFO, device or socket), not a database file",
            "Choose a file for `db`.",
        )
    return st.st_uid if st.st_uid not in (me, 0) else None


# The files SQLite keeps beside a database, which it reads as part of it: a write-ahead log
# another user planted beside a database would be checkpointed into it.
COMPANIONS = ("-wal", "-shm", "-journal")


def _check_companions(path: Path, me: int) -> None:
    """Refuse a database whose companion files (``-wal``, ``-shm``, ``-journal``, beside the
    name given and beside the file it leads to) are links, not regular files, or another
    user's (neither this user, root, nor the database file's own owner): SQLite would read them
    as part of the database, so another user could change its figures or hang its open."""
    try:
        owner = os.stat(path).st_uid
    except OSError:
        owner = me
    names = {str(path), os.path.realpath(path)}
    for name in sorted(names):
        for suffix in COMPANIONS:
            companion = name + suffix
            try:
                st = os.lstat(companion)
            except OSError:
                continue
            why = (
                "is a link"
                if stat.S_ISLNK(st.st_mode)
                else "is not a regular file"
                if not stat.S_ISREG(st.st_mode)
                else f"belongs to another user (user {st.st_uid})"
                if st.st_uid not in (me, 0, owner)
                else None
            )
            if why:
                raise StoreError(
                    f"{companion} {why}: SQLite would read it as part of the database {path}",
                    "Remove it if it should not be there, or use a database in a folder of your own.",
                )


class Connection:
    """A profkit database file and its connection. ``Connection(path, create=False)`` refuses a
    missing file. Opening it runs :meth:`_prepare` (the store's: its layout brought up to date,
    WAL, runs of dead owners recovered)."""

    # A run whose launches a bulk import has grouped already, and those groups (the rows of
    # ``writes.write_aggregates``' ``agg_fine``), or None.
    prepared_aggregates: tuple[int, list[tuple[Any, ...]]] | None = None
    # Opened read-only (:meth:`_read_only`): nothing is written (no recovery, no WAL set).
    read_only = False

    def __init__(self, path: str | os.PathLike[str] | None = None, create: bool = True):
        self.path = db_path(path)
        busy_timeout()  # a bad PROFKIT_BUSY_TIMEOUT is refused before anything is done
        # Another user's file is read, read-only, and never written (:meth:`write`).
        self.foreign_owner = _check_file(self.path)
        existed = self.path.exists()
        if not create and not existed:
            raise StoreError(
                f"no database at {self.path}",
                "Run or import something first, or choose another `db`.",
            )
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
        if self._create and not os.path.lexists(self.path):
            self._make()
            # Checked again: where another process made the file first, theirs is opened.
            self.foreign_owner = _check_file(self.path)
        if self.foreign_owner is not None:
            if not self._read_only():
                raise self._foreign()
            assert self._conn is not None
            return self._conn
        try:
            self._attach()
            self._prepare()
        except sqlite3.OperationalError as exc:
            self._drop()
            if "locked" in str(exc) or "busy" in str(exc) or not self._read_only():
                raise unwritable(self.path, exc) from exc
        except sqlite3.DatabaseError as exc:
            error = self._unusable(exc)
            self._drop()
            raise error from exc
        assert self._conn is not None
        return self._conn

    def _foreign(self) -> StoreError:
        return StoreError(
            f"{self.path} belongs to user {self.foreign_owner}: profkit writes no run into another "
            "user's database",
            "Reading it works; to store runs, use a database of your own (`db`).",
        )

    def _unusable(self, exc: sqlite3.DatabaseError) -> StoreError:
        """A file SQLite cannot read as a database (damaged, not SQLite, or a layout this
        profkit's SQLite cannot parse: the store's refuses a newer profkit's)."""
        return StoreError(f"{self.path} is not a usable SQLite database: {exc}")

    def _read_only(self) -> bool:
        """Open the file read-only, after a connection that may write could not read it: its
        folder (another user's) or its full disk will not take the ``-shm`` and ``-wal`` files
        SQLite keeps beside a WAL database. ``mode=ro`` reads it where those exist (a writer has
        it open); else, where no ``-wal`` file holds changes the file lacks, ``immutable``
        reads the file alone (SQLite then takes no locks: a writer that starts meanwhile and
        checkpoints could change pages under this reader, which a reading command only
        risks for its own second or two). True once open (``read_only`` set)."""
        try:
            pending = os.stat(f"{self.path}-wal").st_size > 0
        except FileNotFoundError:
            pending = False
        except OSError:
            pending = True
        for params in ("mode=ro", *(() if pending else ("mode=ro&immutable=1",))):
            try:
                self._attach(params)
                self.read_only = True
                self._prepare()
                return True
            except sqlite3.OperationalError:
                self._drop()
            except sqlite3.DatabaseError as exc:
                error = self._unusable(exc)
                self._drop()
                raise error from exc
            except BaseException:
                self._drop()
                raise
        return False

    def _drop(self) -> None:
        """Close a connection that failed to open (a later try starts afresh)."""
        if self._conn is not None:
            self._conn.close()
        self._conn = self._db = None
        self.read_only = False

    def _make(self) -> None:
        """Make a new database where none is: its whole layout built under a temporary name
        beside it (made exclusively, never through a link), then linked into place. A process
        that opens the path meanwhile finds no file, or a complete database, never an empty or
        half-made one; where another process made it first, theirs is kept."""
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(8)}.new")
        try:
            os.close(
                os.open(
                    tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666
                )
            )
        except OSError as exc:
            raise disk_full(self.path, exc) or StoreError(
                f"cannot make the database {self.path}: {exc.strerror or exc}",
                "Check the folder's permissions, or choose another `db`.",
            ) from None
        try:
            try:
                made = type(self)(tmp)
                try:
                    # Every change in the file itself, no -wal left to lose when it is linked.
                    made.execute("pragma wal_checkpoint(truncate)")
                finally:
                    made.close()
            except StoreError as exc:
                raise StoreError(exc.message.replace(str(tmp), str(self.path)), exc.hint) from None
            except sqlite3.OperationalError as exc:
                raise unwritable(self.path, exc) from None
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                pass  # another process made it first: theirs is opened
            except OSError:  # a file system without hard links: made in place, as before
                pass
        finally:
            for suffix in ("", "-wal", "-shm", "-journal"):
                try:
                    os.unlink(f"{tmp}{suffix}")
                except FileNotFoundError:
                    pass

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

    def _texts(self, ids: Iterable[int]) -> dict[int, str]:
        """The texts of these ``strings`` ids (the queries' and the writes' alike)."""
        ids = list(ids)
        out: dict[int, str] = {}
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            out.update(
                self.execute(
                    f"select id, text from strings where id in ({', '.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
            )
        return out

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def _insert(self, table: str, row: dict[str, Any]) -> int:
        cols = list(row)
        cur = self.conn.execute(
            f"insert into {table} ({', '.join(cols)}) values ({', '.join('?' * len(cols))})",
            [row[c] for c in cols],
        )
        return int(cur.lastrowid or 0)

    def _insert_all(
        self,
        table: str,
        columns: Sequence[str],
        rows: Iterable[Mapping[str, Any]],
        fixed: dict[str, Any] | None = None,
    ) -> None:
        """Rows (dicts; a key left out is NULL) into ``columns`` of ``table``, by one prepared
        statement: what a run's every write needs, without sqlite-utils (and the pandas it
        imports: a second of every ``profkit run``). ``fixed``: columns with one value for
        every row (a run's id), taken over the rows' own."""
        fixed = fixed or {}
        varying = [c for c in columns if c not in fixed]
        head = tuple(fixed.values())
        names = [*fixed, *varying]
        self.conn.executemany(
            f"insert into {table} ({', '.join(names)}) values ({', '.join('?' * len(names))})",
            (head + tuple(map(r.get, varying)) for r in rows),
        )

    def _update(self, table: str, row_id: int, values: dict[str, Any]) -> None:
        cols = list(values)
        self.conn.execute(
            f"update {table} set {', '.join(c + ' = ?' for c in cols)} where id = ?",
            [*(values[c] for c in cols), row_id],
        )

    def _connect(self, params: str = "") -> sqlite3.Connection:
        """Autocommit connection (transactions are explicit), waiting for other writers;
        ``params`` the URI's (``mode=ro``)."""
        # Opened as a URI so that an export can be ATTACHed read-only by URI (nsys_import) on
        # every SQLite build, not only those that read URIs by default.
        conn = sqlite3.connect(
            file_uri(self.path) + (f"?{params}" if params else ""),
            timeout=busy_timeout(),
            isolation_level=None,
            check_same_thread=False,
            uri=True,
        )
        watch(self, conn)  # a stop signal cuts a long statement short (processes.stoppable)
        return conn

    def _attach(self, params: str = "") -> None:
        """Connect (``_conn``, held before its first statement: a failure there can read the
        header and close it)."""
        self._conn = self._connect(params) if params else self._connect()
        self._conn.execute("pragma synchronous = normal")
        # a new file's pages, set before its first table
        if not params and not self._conn.execute("pragma page_count").fetchone()[0]:
            self._conn.execute(f"pragma page_size = {PAGE_SIZE}")
        # profkit makes no triggers: one would change what profkit writes behind its back (a
        # planted ``after insert`` rewriting kernel times), so such a file is not opened.
        if self._conn.execute(
            "select 1 from sqlite_master where type = 'trigger' limit 1"
        ).fetchone():
            self._drop()
            raise StoreError(
                f"{self.path} holds triggers: not a profkit database as profkit makes it "
                "(a trigger would change its figures behind profkit's back)",
                "Use a database profkit made, or drop its triggers.",
            )

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
        if self.foreign_owner is not None:
            raise self._foreign()
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
        return {
            r[0] for r in self.conn.execute("select name from sqlite_master where type = 'table'")
        }


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
