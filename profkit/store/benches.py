"""Benchmarks (``profkit bench``): one ``benches`` row and a ``bench_rows`` row per (precision,
mode) combination, written in one transaction, read back as ``BenchRecord``s."""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any

from ..errors import BenchNotFound, StoreError, UsageError
from ..records import BenchRecord, BenchRow
from .connection import Connection, as_id, unwritable
from .layout import BENCH_COLUMNS, BENCH_ROW_COLUMNS, JSON_BENCH_COLUMNS


class Benches(Connection):
    """Storing and reading benchmarks."""

    def check_writable(self) -> None:
        """Refuse now a database that would refuse a write later: what ``profkit bench`` checks
        before its combinations run, so that their results are not lost at the end. A new
        database's folder must be writable (the file is still made only when first written)."""
        if not self.path.exists():
            folder = self.path.parent
            if not os.access(folder, os.W_OK | os.X_OK):
                raise StoreError(
                    f"cannot make {self.path}: folder {folder} is not writable",
                    "Choose another `db`, or check the folder's permissions.",
                )
            return
        try:
            with self.write():
                # a write statement that changes nothing
                self.execute("delete from bench_rows where 0")
        except sqlite3.OperationalError as exc:
            raise unwritable(self.path, exc) from exc

    def add_bench(self, bench: BenchRecord) -> BenchRecord:
        """Store a benchmark and its rows in one transaction (all or nothing); return it with its id."""
        head = {k: getattr(bench, k) for k in BENCH_COLUMNS if k != "id"}
        head = {k: json.dumps(v) if k in JSON_BENCH_COLUMNS else v for k, v in head.items()}
        try:
            with self.write():
                bench_id = self._insert("benches", head)
                for seq, r in enumerate(bench.rows):
                    row = {
                        k: getattr(r, k) for k in BENCH_ROW_COLUMNS if k not in ("bench_id", "seq")
                    }
                    row.update(
                        bench_id=bench_id,
                        seq=seq,
                        reference_only=int(r.reference_only),
                        iter_ns=json.dumps(r.iter_ns),
                    )
                    self._insert("bench_rows", row)
        except sqlite3.IntegrityError as exc:
            raise UsageError(f"a benchmark has one row per precision and mode ({exc})") from None
        except sqlite3.OperationalError as exc:
            raise unwritable(self.path, exc) from exc
        return self.get_bench(bench_id)

    def benches(self) -> list[BenchRecord]:
        """Every stored benchmark with its rows, oldest first."""
        rows: dict[int, list[BenchRow]] = {}
        for r in self.query("select * from bench_rows order by bench_id, seq"):
            rows.setdefault(r["bench_id"], []).append(_bench_row(r))
        return [
            _bench(b, rows.get(b["id"], []))
            for b in self.query("select * from benches order by id")
        ]

    def get_bench(self, bench_id: int | str) -> BenchRecord:
        """A stored benchmark by id."""
        ref = str(bench_id)
        row = (
            next(self.query("select * from benches where id = ?", [bid]), None)
            if (bid := as_id(ref)) is not None
            else None
        )
        if row is None:
            ids = [
                str(r["id"]) for r in self.query("select id from benches order by id desc limit 5")
            ]
            hint = (
                f"Recent benchmarks: {', '.join(ids)}."
                if ids
                else "The database has no benchmarks yet."
            )
            raise BenchNotFound(f"no benchmark {ref!r} in {self.path}", hint)
        rows = [
            _bench_row(r)
            for r in self.query(
                "select * from bench_rows where bench_id = ? order by seq", [row["id"]]
            )
        ]
        return _bench(row, rows)


def _bench(row: dict[str, Any], rows: list[BenchRow]) -> BenchRecord:
    values = {
        k: json.loads(v) if k in JSON_BENCH_COLUMNS and v is not None else v for k, v in row.items()
    }
    return BenchRecord(**values, rows=rows)


def _bench_row(row: dict[str, Any]) -> BenchRow:
    values = {k: v for k, v in row.items() if k not in ("bench_id", "seq")}
    values["reference_only"] = bool(values["reference_only"])
    values["iter_ns"] = json.loads(values["iter_ns"] or "[]")
    return BenchRow(**values)
