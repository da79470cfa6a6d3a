"""profkit's SQLite database, written through sqlite-utils: one ``runs`` row per run or import,
one ``kernels`` row per launch (or CPU operator call), and one ``ranges`` row per NVTX or
record_function range instance. ``kernels`` is a view: launches are stored in ``launches`` (each
launch's own values) and ``kernel_groups`` (what a run's launches share, once per combination),
joined by the ``kernel_rows`` view, with their texts (kernel names, ranges, operators, families,
verdict details) kept once in ``strings`` and referenced by id, so a database is smaller than
the capture it came from; the view joins them back into the documented kernel table. A benchmark (``profkit bench``) is
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
on, recorded in its ``folder``. Every query over it is a method of ``Store``; the analyses call these and never write SQL of
their own.
"""

from __future__ import annotations

import sqlite3

from ..errors import StoreError
from ..options import MAX_NAME, check_run_name
from .benches import Benches
from .connection import (
    DEFAULT_DB,
    MAX_BUSY_TIMEOUT_S,
    MAX_ID,
    as_id,
    db_path,
    is_database_error,
    read_failure,
)
from .counters import Counters
from .layout import RUN_COLUMNS
from .migrations import SCHEMA_VERSION, ensure_schema, newer_profkit
from .queries import Queries
from .runs import RunFields, Runs, raw_dir
from .tunings import Tunings

__all__ = [
    "DEFAULT_DB",
    "MAX_BUSY_TIMEOUT_S",
    "MAX_ID",
    "MAX_NAME",
    "RUN_COLUMNS",
    "SCHEMA_VERSION",
    "RunFields",
    "Store",
    "as_id",
    "check_run_name",
    "db_path",
    "is_database_error",
    "raw_dir",
    "read_failure",
]


class Store(Runs, Queries, Benches, Counters, Tunings):
    """A profkit database. ``Store(path, create=False)`` refuses a missing file.

    Made of one part per concern, each a module of this package: ``connection`` (the file,
    WAL, write transactions), ``migrations`` (the layout, brought up to date when opened),
    ``runs`` (a run's life: reserved, its raw folder, written, ended, recovered, read back),
    ``writes`` (kernel rows in bulk), ``queries`` (what the analyses read), ``benches`` and ``counters`` (ncu's counters kept across runs)."""

    def _prepare(self) -> None:
        """Once the file is open: its layout brought up to date (a new one made), WAL, and the
        runs of owners that died recovered (not where it is open read-only: it is read as it is)."""
        ensure_schema(self, self._create)
        if not self.read_only:
            self._wal()
            self._recover()

    def _unusable(self, exc: sqlite3.DatabaseError) -> StoreError:
        """A layout this SQLite cannot parse is a newer profkit's where the header says so."""
        return newer_profkit(self) or super()._unusable(exc)
