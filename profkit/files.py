"""How profkit makes the files it keeps in a run's folder: each one new, never written
through a link or into a file someone else put there (``O_CREAT | O_EXCL | O_NOFOLLOW``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

from .errors import StoreError

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def open_new(path: str | os.PathLike[str], mode: str = "wb", *, replace: bool = False, **kwargs: Any) -> IO[Any]:
    """Open ``path`` for writing as a file made now. Where something is at ``path`` already it
    is refused (a StoreError), or with ``replace`` (a file profkit itself rewrites, such as a
    job file or a log) its name is removed first: a link is removed, never written through, and
    a hard link's other names keep their contents."""
    path = Path(path)
    if replace:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            pass  # refused below, as exists
    try:
        fd = os.open(path, _FLAGS, 0o666)
    except FileExistsError:
        raise StoreError(f"{path} exists already, and profkit writes only files it makes itself",
                         "Remove it (or the link) if it is yours, and try again.") from None
    return os.fdopen(fd, mode, **kwargs)


def write_new(path: str | os.PathLike[str], data: str | bytes, *, replace: bool = False) -> None:
    """Write ``data`` into a new file at ``path`` (see :func:`open_new`)."""
    if isinstance(data, str):
        with open_new(path, "w", replace=replace, encoding="utf-8") as f:
            f.write(data)
    else:
        with open_new(path, "wb", replace=replace) as f:
            f.write(data)
