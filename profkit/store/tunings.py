"""Tunings (``profkit tune``): each a set of ``tune_trials`` rows of one run, the baseline first
and the fixes in their rank, written in one transaction, read back as ``Tuning`` records."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import fields
from typing import Any

from ..records import TuneTrial, Tuning
from .connection import Connection, unwritable
from .layout import JSON_TUNE_COLUMNS, TUNE_TRIAL_COLUMNS

_HEAD = ("run_id", "tuning", "created_at", "target", "device", "iters", "warmup")
_TRIAL = tuple(f.name for f in fields(TuneTrial))


class Tunings(Connection):
    """Storing and reading tunings."""

    def add_tuning(self, tuning: Tuning) -> Tuning:
        """Store a tuning with its run (one transaction); return it as stored."""
        try:
            with self.write():
                number = 1 + next(
                    iter(
                        self.execute(
                            "select coalesce(max(tuning), 0) from tune_trials where run_id = ?",
                            [tuning.run_id],
                        ).fetchone()
                    )
                )
                head = {
                    "run_id": tuning.run_id,
                    "tuning": number,
                    "created_at": tuning.created_at,
                    "target": tuning.target,
                    "device": tuning.device,
                    "iters": tuning.iters,
                    "warmup": tuning.warmup,
                }
                for seq, trial in enumerate([tuning.baseline, *tuning.trials]):
                    row = {**head, "seq": seq}
                    for k in _TRIAL:
                        v = getattr(trial, k)
                        row[k] = json.dumps(v) if k in JSON_TUNE_COLUMNS else v
                    self._insert("tune_trials", row)
        except sqlite3.Error as exc:
            raise unwritable(self.path, exc) from exc
        return tuning

    def tunings(self, run_id: int, run_name: str) -> list[Tuning]:
        """A run's tunings, oldest first (none in a database from before tunings)."""
        if "tune_trials" not in self._tables():
            return []
        by: dict[int, list[dict[str, Any]]] = {}
        for r in self.query(
            "select * from tune_trials where run_id = ? order by tuning, seq", [run_id]
        ):
            by.setdefault(r["tuning"], []).append(r)
        return [_tuning(rows, run_name) for _, rows in sorted(by.items())]

    def latest_tuning(self, run_id: int, run_name: str) -> Tuning | None:
        """A run's last tuning, or None where it has none."""
        found = self.tunings(run_id, run_name)
        return found[-1] if found else None


def _trial(row: dict[str, Any]) -> TuneTrial:
    return TuneTrial(
        **{
            k: (json.loads(row[k]) if row[k] is not None else [])
            if k in JSON_TUNE_COLUMNS
            else row[k]
            for k in _TRIAL
        }
    )


def _tuning(rows: list[dict[str, Any]], run_name: str) -> Tuning:
    first = rows[0]
    trials = [_trial(r) for r in rows]
    return Tuning(
        run=run_name,
        **{k: first[k] for k in _HEAD if k != "tuning"},
        baseline=trials[0],
        trials=trials[1:],
    )


assert set(_HEAD) | set(_TRIAL) | {"seq"} == set(TUNE_TRIAL_COLUMNS)
