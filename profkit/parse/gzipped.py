"""Gzipped captures, read as a stream with a bound on what they may expand to, so that a
small file that decompresses to gigabytes (a "gzip bomb", or a damaged file) is refused in
one line instead of exhausting memory or disk.

Real captures expand 5 to 40 times (ncu CSVs up to ~40x, torch traces ~20x, nsys exports
less); a gzipped file may expand to ``MAX_RATIO`` times its own size, or to ``MIN_LIMIT``
whatever its size.
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path
from typing import IO, Any

from ..errors import BadExport

MAX_RATIO = 100
MIN_LIMIT = 64 << 20  # bytes: a gzipped file may always expand to this much

# What reading a damaged gzip stream raises.
GZIP_ERRORS = (OSError, EOFError, zlib.error)


def is_gzip(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"\x1f\x8b"
    except OSError as exc:
        raise BadExport(f"cannot read {path}: {exc.strerror}") from exc


def limit_for(path: Path) -> int:
    """The most bytes ``path`` (gzipped) may decompress to."""
    return max(MIN_LIMIT, MAX_RATIO * path.stat().st_size)


class _Capped(io.RawIOBase):
    """A gzip stream's decompressed bytes, refused (BadExport) once past ``limit``."""

    def __init__(self, path: Path, limit: int):
        self._f: Any = gzip.open(path, "rb")
        self.path, self.limit, self.total = path, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n: int = self._f.readinto(b)
        self.total += n
        if self.total > self.limit:
            raise BadExport(
                f"{self.path.name} decompresses to more than {self.limit:,} bytes ({MAX_RATIO} times "
                f"its size): not a real capture (a gzip bomb?)",
                "Decompress it yourself and import the plain file if it is one.",
            )
        return n

    def close(self) -> None:
        self._f.close()
        super().close()


def open_capped(path: Path) -> IO[bytes]:
    """``path`` decompressed, as a binary stream that refuses to expand past :func:`limit_for`."""
    return io.BufferedReader(_Capped(path, limit_for(path)), 1 << 16)


def open_text(path: Path, encoding: str = "utf-8") -> IO[str]:
    """``path`` as text: decompressed through :func:`open_capped` if it is gzipped, else as it is."""
    if is_gzip(path):
        return io.TextIOWrapper(open_capped(path), encoding=encoding, newline="")
    try:
        return open(path, encoding=encoding, newline="")
    except OSError as exc:
        raise BadExport(f"cannot read {path}: {exc.strerror}") from exc
