"""The SQLite database, written through sqlite-utils: one ``runs`` row per run or import and
one ``kernels`` row per launch (or CPU operator call), and one ``ranges`` row per NVTX or
record_function range instance. A run, its kernels and its ranges are written in one
transaction, so a failure leaves the database as it was. Plain tables and JSON columns: ``sqlite-utils`` and
``datasette`` browse it as it is.

The database is ``./profkit.db`` unless ``--db`` or ``PROFKIT_DB`` says otherwise. Raw
captures are kept beside it, in ``<db stem>-runs/<run name>/``.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any, Iterator

from .errors import RunExists, RunNotFound, StoreError, UsageError
from .parse.schema import CLASSIFIED, COLUMNS, RANGE_COLUMNS

DEFAULT_DB = "profkit.db"
SCHEMA_VERSION = 2

RUN_COLUMNS: dict[str, type] = {
    "id": int,
    "name": str,
    "source": str,  # "run" (profkit launched it) or "import"
    "status": str,
    "workload": str,
    "precision": str,
    "mode": str,
    "batch_size": int,
    "iters": int,
    "device": str,
    "tool": str,
    "tool_version": str,
    "metric_set": str,
    "metrics": str,  # JSON list
    "gpu_name": str,
    "compute_capability": str,
    "command": str,  # JSON list
    "started_at": str,
    "finished_at": str,
    "raw_files": str,  # JSON {kind: path}
    "source_sha256": str,
    "activity": str,  # "kernel" (GPU kernels) or "cpu_op" (CPU operators, --device cpu)
    "kernel_count": int,  # kernel launches, or CPU operator calls for activity cpu_op
    "gpu_time_ns": int,  # their summed duration (CPU self time for activity cpu_op)
    "profiled_wall_s": float,
    "info": str,  # JSON: versions, per-iteration wall times, notes
}

KERNEL_COLUMNS: dict[str, type] = {"run_id": int}
for _col, _dtype in {**COLUMNS, **CLASSIFIED}.items():
    KERNEL_COLUMNS[_col] = {"int64": int, "Int64": int, "boolean": int, "object": str}.get(_dtype, str)
RANGE_TABLE_COLUMNS: dict[str, type] = {"run_id": int, **{c: {"int": int}.get(t, str) for c, t in RANGE_COLUMNS.items()}}


def db_path(db: str | os.PathLike | None) -> Path:
    return Path(db or os.environ.get("PROFKIT_DB") or DEFAULT_DB).expanduser()


def raw_dir(db: Path, run_name: str) -> Path:
    return db.resolve().parent / f"{db.stem}-runs" / run_name


class Store:
    """A profkit database. ``Store(path, create=False)`` refuses a missing file."""

    def __init__(self, path: str | os.PathLike | None = None, create: bool = True):
        import sqlite_utils

        self.path = db_path(path)
        if not create and not self.path.exists():
            raise StoreError(f"no database at {self.path}", "Run or import something first, or pass --db.")
        if self.path.parent and not self.path.parent.exists():
            raise StoreError(f"folder {self.path.parent} does not exist (for database {self.path})")
        try:
            self.db = sqlite_utils.Database(self.path)
            self._ensure_schema()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a usable SQLite database: {exc}") from exc

    def _ensure_schema(self) -> None:
        tables = set(self.db.table_names())
        if tables and "runs" not in tables:
            raise StoreError(f"{self.path} is a SQLite database but not a profkit one (no runs table)")
        if "runs" in tables:
            self._upgrade(tables)
            return
        with self.db.atomic():
            self.db["runs"].create(RUN_COLUMNS, pk="id", not_null={"name"})
            self.db["runs"].create_index(["name"], unique=True)
            self.db["kernels"].create(KERNEL_COLUMNS, pk=("run_id", "launch_id"), foreign_keys=[("run_id", "runs", "id")])
            self.db["kernels"].create_index(["run_id", "name"])
            self._create_ranges()
            self.db["meta"].create({"key": str, "value": str}, pk="key")
            self.db["meta"].insert({"key": "schema_version", "value": str(SCHEMA_VERSION)})

    def _create_ranges(self) -> None:
        self.db["ranges"].create(RANGE_TABLE_COLUMNS, pk=("run_id", "range_id"), foreign_keys=[("run_id", "runs", "id")])

    def _upgrade(self, tables: set[str]) -> None:
        """Bring a database written by an earlier profkit up to SCHEMA_VERSION."""
        row = self.db.execute("select value from meta where key = 'schema_version'").fetchone() if "meta" in tables else None
        version = int(row[0]) if row else 1
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer profkit (schema {version}; this one reads {SCHEMA_VERSION})",
                             "Upgrade profkit.")
        if version == SCHEMA_VERSION:
            return
        with self.db.atomic():
            runs_cols = set(self.db["runs"].columns_dict)
            if "activity" not in runs_cols:
                self.db["runs"].add_column("activity", str)
                self.db.execute("update runs set activity = 'kernel'")
            kernel_cols = set(self.db["kernels"].columns_dict)
            for col, typ in KERNEL_COLUMNS.items():
                if col not in kernel_cols:
                    self.db["kernels"].add_column(col, typ)
            if "ranges" not in tables:
                self._create_ranges()
            self.db["meta"].upsert({"key": "schema_version", "value": str(SCHEMA_VERSION)}, pk="key")

    # ------------------------------------------------------------------ names
    def unique_name(self, base: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_.-]+", "-", base).strip("-.") or "run"
        taken = {r["name"] for r in self.db.query("select name from runs where name = ? or name like ?", [base, base + "-%"])}
        if base not in taken:
            return base
        n = 2
        while f"{base}-{n}" in taken:
            n += 1
        return f"{base}-{n}"

    def check_name_free(self, name: str) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name.isdigit():
            raise UsageError(
                f"bad run name {name!r}",
                "Use letters, digits, '.', '_' and '-', not only digits (a number means a run id).",
            )
        if self.db.execute("select 1 from runs where name = ?", [name]).fetchone():
            raise RunExists(f"a run named {name!r} already exists in {self.path}", "Choose another --name.")

    # ------------------------------------------------------------------ writing
    def add_run(self, run: dict[str, Any], kernels, ranges=None, late=None) -> dict[str, Any]:
        """Insert a run, its classified kernels and its ranges in one transaction; return the run
        row. ``kernels`` is a classified kernel table (DataFrame), or an iterator of classified
        row dicts in launch order, written as it is read (for captures too big to hold);
        ``ranges`` is a list of RANGE_COLUMNS rows, or a callable giving it once the kernels
        have been read; ``late``, a callable giving run fields known only then."""
        run = dict(run)
        for key in ("metrics", "command", "raw_files", "info"):
            if key in run and not isinstance(run[key], str) and run[key] is not None:
                run[key] = json.dumps(run[key])
        run.setdefault("status", "ok")
        if hasattr(kernels, "columns"):
            table_rows = lambda run_id: _kernel_rows(kernels, run_id)  # noqa: E731
        else:
            table_rows = lambda run_id: _stream_rows(kernels, run_id)  # noqa: E731
        totals = {"activity": "kernel", "count": 0, "time": 0}
        with self.db.atomic():
            self.check_name_free(run["name"])
            run_id = self.db["runs"].insert(run).last_pk
            self._insert_kernels(_counted(table_rows(run_id), totals))
            updates = dict(late() if late else {})
            updates.update(activity=totals["activity"], kernel_count=totals["count"], gpu_time_ns=totals["time"])
            self.db["runs"].update(run_id, {k: json.dumps(v) if isinstance(v, (dict, list)) else v
                                            for k, v in updates.items()})
            ranges = ranges() if callable(ranges) else ranges
            if ranges:
                self.db["ranges"].insert_all(({"run_id": run_id, **r} for r in ranges), batch_size=2000)
        return self.get_run(str(run_id))

    def _insert_kernels(self, rows: Iterator[dict[str, Any]]) -> None:
        """Bulk insert through one prepared statement: sqlite-utils' insert_all re-checks every
        value of every row, which made a 2-million-kernel import three times slower."""
        cols = list(KERNEL_COLUMNS)
        sql = f"insert into kernels ({', '.join(cols)}) values ({', '.join('?' * len(cols))})"
        batch: list[tuple] = []
        for r in rows:
            batch.append(tuple(r.get(c) for c in cols))
            if len(batch) >= 5000:
                self.db.conn.executemany(sql, batch)
                batch = []
        if batch:
            self.db.conn.executemany(sql, batch)

    def delete_run(self, run_id: int) -> None:
        with self.db.atomic():
            for table in ("kernels", "ranges"):
                self.db.execute(f"delete from {table} where run_id = ?", [run_id])
            self.db.execute("delete from runs where id = ?", [run_id])

    # ------------------------------------------------------------------ reading
    def runs(self) -> list[dict[str, Any]]:
        return list(self.db.query("select * from runs order by id"))

    def get_run(self, ref: str) -> dict[str, Any]:
        ref = str(ref)
        row = None
        if ref.isdigit():
            row = next(self.db.query("select * from runs where id = ?", [int(ref)]), None)
        if row is None:
            row = next(self.db.query("select * from runs where name = ?", [ref]), None)
        if row is None:
            names = [r["name"] for r in self.db.query("select name from runs order by id desc limit 5")]
            hint = f"Recent runs: {', '.join(names)}." if names else "The database has no runs yet."
            raise RunNotFound(f"no run {ref!r} in {self.path}", hint)
        return row

    def iter_kernels(self, run_id: int) -> Iterator[dict[str, Any]]:
        """Kernel rows in launch order, streamed, with metrics decoded and tensor_core as bool."""
        for row in self.db.query("select * from kernels where run_id = ? order by launch_id", [run_id]):
            yield _decode_kernel(row)

    def ranges(self, run_id: int) -> list[dict[str, Any]]:
        return list(self.db.query("select * from ranges where run_id = ? order by range_id", [run_id]))



def _kernel_rows(kernels, run_id: int) -> Iterator[dict[str, Any]]:
    import pandas as pd

    cols = [c for c in KERNEL_COLUMNS if c != "run_id" and c in kernels.columns]
    for rec in kernels[cols].to_dict("records"):
        row = {"run_id": run_id}
        for k, v in rec.items():
            if k == "metrics":
                row[k] = json.dumps(v or {})
            elif v is None or v is pd.NA or (isinstance(v, float) and v != v):
                row[k] = None
            elif isinstance(v, bool) or k == "tensor_core":
                row[k] = int(bool(v))
            elif hasattr(v, "item"):
                row[k] = v.item()
            else:
                row[k] = v
        yield row


def _stream_rows(rows, run_id: int) -> Iterator[dict[str, Any]]:
    """Classified row dicts, as a streamed capture yields them, into table rows."""
    from .parse.schema import KINDS

    for r in rows:
        if r["kind"] not in KINDS:
            raise StoreError(f"unknown kind {r['kind']!r} in launch {r['launch_id']}")
        out = {"run_id": run_id, **r}
        out["metrics"] = json.dumps(r.get("metrics") or {})
        if out.get("tensor_core") is not None:
            out["tensor_core"] = int(bool(out["tensor_core"]))
        yield out


def _counted(rows: Iterator[dict[str, Any]], totals: dict) -> Iterator[dict[str, Any]]:
    """Pass table rows through, counting the run's main activity (kernels, or CPU operators:
    a run's rows are never both) and its summed duration."""
    for r in rows:
        if r["kind"] == "cpu_op":
            totals["activity"] = "cpu_op"
        if r["kind"] == totals["activity"]:
            totals["count"] += 1
            totals["time"] += r["duration_ns"] or 0
        yield r


def _decode_kernel(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    row["metrics"] = json.loads(row["metrics"]) if row.get("metrics") else {}
    if row.get("tensor_core") is not None:
        row["tensor_core"] = bool(row["tensor_core"])
    return row
