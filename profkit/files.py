"""How profkit makes the files it keeps in a run's folder: each one new, never written
through a link or into a file someone else put there (``O_CREAT | O_EXCL | O_NOFOLLOW``); and
which folders beside a database it trusts with them (:func:`untrusted`); how a file the user
named is replaced whole or not at all (:func:`write_atomic`); and how a file is named to
SQLite (:func:`file_uri`)."""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from typing import IO, Any

from .errors import ProfkitError, StoreError

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


def write_atomic(path: str | os.PathLike[str], text: str, hint: str | None = None) -> None:
    """Write ``text`` (UTF-8) to ``path``, a file the user named (``--junit-xml``), whole or not
    at all: into a new file beside it, flushed to the disk (fsync), then renamed over it, so a
    reader (a CI job) never sees half a file, and a full disk leaves no empty one. On any
    error that file is removed, what was at ``path`` is left as it was, and a ProfkitError
    (with ``hint``) names ``path`` and the cause ("No space left on device"). A link is
    written through (its target replaced, as a report's page is); an existing file keeps its
    permissions; a device or a pipe (``/dev/stdout``) is written as it is: nothing can be
    renamed over it."""
    path = Path(path)
    data = text.encode("utf-8")
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _cannot_write(path, exc, False, hint) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ProfkitError(f"cannot write {path}: it is a folder", hint)
    if st is not None and not stat.S_ISREG(st.st_mode):
        try:
            with open(target, "wb") as f:
                f.write(data)
        except OSError as exc:
            raise _cannot_write(path, exc, False, hint) from None
        return
    tmp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(tmp, _FLAGS, 0o666)  # the umask applies, as to any new file
    except OSError as exc:
        raise _cannot_write(path, exc, st is not None, hint) from None
    try:
        try:
            if st is not None:
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                if written <= 0:  # never for a regular file; no endless loop if it were
                    raise OSError(errno.EIO, os.strerror(errno.EIO))
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _cannot_write(path, exc, st is not None, hint) from None
        raise
    try:  # the rename itself on the disk too
        folder = os.open(target.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    except OSError:
        pass  # a folder that cannot be opened or synced (some network file systems): the file is written


def _cannot_write(path: Path, exc: OSError, existed: bool, hint: str | None) -> ProfkitError:
    left = "the file there is as it was" if existed else "no file was made"
    return ProfkitError(f"cannot write {path} ({exc.strerror or exc}); {left}", hint)


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
