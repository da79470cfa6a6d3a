"""How profkit makes the files it keeps in a run's folder: each one new, never written
through a link or into a file someone else put there (``O_CREAT | O_EXCL | O_NOFOLLOW``); and
which folders beside a database it trusts with them (:func:`untrusted`); and how a file is
named to SQLite (:func:`file_uri`)."""

from __future__ import annotations

import os
import stat
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


def untrusted(folder: Path) -> str | None:
    """Why ``folder`` (one profkit keeps files or locks in: ``<db stem>-runs``, ``<db>-locks``)
    is not to be trusted, or None. Trusted: a folder (or a link to one, the link itself this
    user's) owned by this user or root, that no one else may rename things in (not writable by
    group or others, unless sticky like /tmp). Anything else could be a link or folder another
    user planted beside a database in a shared place, to have profkit write elsewhere or to
    swap a lock file under a live run."""
    me = os.geteuid()
    try:
        link = os.lstat(folder)
        st = os.stat(folder)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (me, 0):
        return "is a link another user made"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid not in (me, 0):
        return "belongs to another user"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return "may be changed by other users (writable by them, and not sticky)"
    return None


def file_uri(path: Path, read_only: bool = False) -> str:
    """A SQLite ``file:`` URI for ``path``: every character a URI reserves (``?``, ``#``, ``%``,
    spaces) escaped, so that a file named so is the file opened."""
    from urllib.parse import quote

    # The path's bytes, as the file system has them: a name that is not UTF-8 (a str with
    # surrogate escapes) is percent-escaped byte by byte, and SQLite opens those bytes.
    return f"file:{quote(os.fsencode(Path(path).absolute()))}" + ("?mode=ro" if read_only else "")


def own_folder(folder: Path, what: str) -> Path:
    """``folder`` (the ``what``: "folder of runs' files", "lock folder"), made if missing, and
    refused (a StoreError) where it is not to be trusted (:func:`untrusted`)."""
    try:
        folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot make the {what} {folder}: {exc.strerror or exc}",
                         "Check the folder's permissions and the free disk space.") from None
    why = untrusted(folder)
    if why:
        raise StoreError(f"the {what} {folder} {why}",
                         "Remove it (profkit makes its own), or use a database in a folder of your own.")
    return folder
