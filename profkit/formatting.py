"""Formatting shared by every layer (analyses' findings, the report pages, the command's
output): plain functions of plain values, importing nothing of profkit's."""

from __future__ import annotations

from typing import Any


def fmt_ns(ns: Any) -> str:
    """A duration in nanoseconds as text: ``-`` for None, else ns, us or ms."""
    if ns is None:
        return "-"
    ns = int(ns)
    if ns >= 1_000_000:
        return f"{ns / 1e6:,.3f} ms"
    if ns >= 1_000:
        return f"{ns / 1e3:,.1f} us"
    return f"{ns} ns"


def num(x: float) -> float:
    """Whole numbers as int (JSON 162, not 162.0); fractions (per-iteration figures) rounded
    to 3 places."""
    return int(x) if float(x).is_integer() else round(x, 3)
