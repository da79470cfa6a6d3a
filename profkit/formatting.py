"""Formatting shared by every layer (analyses' findings, the report pages, the command's
output): plain functions of plain values, importing nothing of profkit's."""

from __future__ import annotations

import re
from typing import Any

# What a terminal would act on rather than show, and what would reorder or hide what follows:
# the C0 and C1 controls and DEL (ESC starts a screen clear or an OSC 52 clipboard write; 0x9b
# is a CSI of its own; \r overwrites the line), the bidirectional controls (U+202E shows text
# reversed), line and paragraph separators; and what no UTF-8 or XML 1.0 text may hold: lone
# surrogates (a file name's undecodable bytes), U+FFFE and U+FFFF.
UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escaped(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    return _NAMED.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def shown(text: str) -> str:
    """``text`` (a kernel, GPU, workload, range or run name; anything read from a capture or a
    database) as it may be printed: every control character written as a visible escape, as
    Python writes it (``\\x1b``, ``\\x9b``, ``\\r``, ``\\n``, ``\\u202e``), so that the text shows
    on one line and nothing in it acts on the terminal. The one function every string is
    printed through (``profkit.render``, the command's messages, JUnit XML)."""
    if text.isprintable():  # nearly every name: nothing to do (what it escapes is never printable)
        return text
    return UNSAFE.sub(_escaped, text)


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


# ------------------------------------------------------------------- notebooks (_repr_html_)
# A card per object: inline styles only (a notebook's page, an exported HTML file or a mail
# client shows it the same), no script, and every text escaped here, once.
_CARD = (
    "font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:13px;line-height:1.4;"
    "border:1px solid #c8ccd2;border-radius:6px;padding:8px 12px;max-width:900px;color:#1f2328;"
    "background:#fff;box-sizing:border-box;overflow-x:auto"
)
_CELL = "padding:2px 8px;text-align:left;vertical-align:top;border-bottom:1px solid #e4e6ea;white-space:nowrap"
_NUM = "padding:2px 8px;text-align:right;vertical-align:top;border-bottom:1px solid #e4e6ea;white-space:nowrap"


def html_card(
    kind: str,
    title: str,
    facts: list[tuple[str, str]],
    columns: list[str] | None = None,
    rows: list[list[str]] | None = None,
    caption: str | None = None,
    numeric: set[int] | None = None,
    note: str | None = None,
) -> str:
    """A self-contained HTML card: ``kind`` and ``title`` (``Run r18_fp16``), ``facts`` as
    label/value pairs, then optionally a table (``columns``, ``rows``; column indexes in
    ``numeric`` right-aligned) under its ``caption``, and a ``note``. Every text is escaped."""
    from html import escape

    out = [
        f'<div class="profkit-card" style="{_CARD}">',
        f'<div style="font-weight:600;font-size:14px;margin-bottom:4px">'
        f'<span style="color:#57606a;font-weight:400">{escape(kind)}</span> {escape(title)}</div>',
    ]
    if facts:
        out.append('<table style="border-collapse:collapse;margin:2px 0 6px 0">')
        out += [
            f'<tr><th style="{_CELL};color:#57606a;font-weight:400">{escape(k)}</th>'
            f'<td style="{_CELL}">{escape(v)}</td></tr>'
            for k, v in facts
        ]
        out.append("</table>")
    if columns and rows:
        right = numeric or set()
        if caption:
            out.append(f'<div style="font-weight:600;margin:6px 0 2px 0">{escape(caption)}</div>')
        out.append('<table style="border-collapse:collapse">')
        out.append(
            "<tr>"
            + "".join(
                f'<th style="{_NUM if i in right else _CELL};font-weight:600;white-space:normal">{escape(c)}</th>'
                for i, c in enumerate(columns)
            )
            + "</tr>"
        )
        for row in rows:
            out.append(
                "<tr>"
                + "".join(
                    f'<td style="{_NUM if i in right else _CELL}"'
                    + ("" if i in right else ' title="' + escape(v) + '"')
                    + f">{escape(cut_middle(v, 60) if i not in right else v)}</td>"
                    for i, v in enumerate(row)
                )
                + "</tr>"
            )
        out.append("</table>")
    if note:
        out.append(f'<div style="color:#57606a;margin-top:4px">{escape(note)}</div>')
    out.append("</div>")
    return "\n".join(out)


def cut_middle(text: str, width: int) -> str:
    """``text`` at most ``width`` characters, cut in the middle (``…``), so that both ends
    (what tells two long kernel names apart) stay."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: (keep + 1) // 2] + "…" + text[len(text) - keep // 2 :]


def pct(value: float | None) -> str:
    """A share as text: ``39.3%``; ``-`` for None."""
    return "-" if value is None else f"{value:.1f}%"
