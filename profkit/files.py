"""How profkit makes the files it keeps in a run's folder: each one new, never written
through a link or into a file someone else put there (``O_CREAT | O_EXCL | O_NOFOLLOW``); and
which folders it trusts with them (:func:`untrusted`: those beside a database, the reports
folder); how it replaces a file of its own in such a folder (:func:`replace_file`, the HTML
reports); how a file is named to SQLite (:func:`file_uri`); a write that found the disk full,
as one line naming where (:func:`disk_full`); how a file the user named is replaced whole or
not at all (:func:`write_atomic`); and how a file the user names is read
(:func:`read_user_file`, :func:`load_toml`): only a regular file, of bounded size and nesting,
refused in one line."""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from pathlib import Path
from typing import IO, Any

from .errors import ProfkitError, StoreError, UsageError

_FLAGS = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def open_new(
    path: str | os.PathLike[str], mode: str = "wb", *, replace: bool = False, **kwargs: Any
) -> IO[Any]:
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
        raise StoreError(
            f"{path} exists already, and profkit writes only files it makes itself",
            "Remove it (or the link) if it is yours, and try again.",
        ) from None
    return os.fdopen(fd, mode, **kwargs)


def write_new(path: str | os.PathLike[str], data: str | bytes, *, replace: bool = False) -> None:
    """Write ``data`` into a new file at ``path`` (see :func:`open_new`); a full disk is a
    StoreError naming the file (:func:`disk_full`)."""
    try:
        if isinstance(data, str):
            with open_new(path, "w", replace=replace, encoding="utf-8") as f:
                f.write(data)
        else:
            with open_new(path, "wb", replace=replace) as f:
                f.write(data)
    except OSError as exc:
        raise disk_full(Path(path), exc) or exc from None


# Below this much room, a write that failed with an I/O error is put down to a full disk.
NEARLY_FULL_BYTES = 1 << 20


def nearly_full(where: Path) -> bool:
    """Whether the disk holding ``where`` (or its nearest existing folder) has next to no room."""
    for folder in (where, *where.absolute().parents):
        try:
            st = os.statvfs(folder)
        except OSError:
            continue
        return st.f_bavail * st.f_frsize < NEARLY_FULL_BYTES
    return False


def disk_full(where: Path, exc: BaseException) -> StoreError | None:
    """A write into ``where`` (a file, or the folder written in) that failed for want of room
    (ENOSPC, EDQUOT) as one line naming it; None for any other failure."""
    if not (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)):
        return None
    return full_disk(where, "quota exceeded" if exc.errno == errno.EDQUOT else "no space left")


def full_disk(where: Path, why: str = "no space left") -> StoreError:
    return StoreError(
        f"the disk is full: cannot write {where} ({why})",
        "Free some space on it, or use a database on another disk (`db`).",
    )


def write_atomic(
    path: str | os.PathLike[str], text: str, hint: str | None = None, *, files_only: bool = False
) -> None:
    """Write ``text`` (UTF-8) to ``path``, a file the user named (``--junit-xml``, a report's
    ``output``), whole or not at all: into a new file beside it, flushed to the disk (fsync),
    then renamed over it, so a reader (a CI job) never sees half a file, and a full disk leaves
    no empty one. On any error that file is removed, what was at ``path`` is left as it was,
    and a ProfkitError (with ``hint``) names ``path`` and the cause ("No space left on
    device"). A link of this user's (or root's) is written through (its target replaced); a
    link another user made is refused (:func:`_through_links`). An existing file keeps its
    permissions. A device or a pipe (``/dev/stdout``) is written as it is, since nothing can be
    renamed over it (or, ``files_only``, refused); a pipe no process reads is refused at once,
    never waited on."""
    path = Path(path)
    data = text.encode("utf-8")
    refuse_foreign_link(
        path,
        "profkit writes nothing through it",
        "Remove it if it should not be there, or write elsewhere.",
    )
    target = _through_links(path)
    try:
        st: os.stat_result | None = os.stat(path)  # as the kernel finds it (/dev/stdout: a pipe)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _cannot_write(path, exc, False, hint) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ProfkitError(f"cannot write {path}: it is a folder", hint)
    if st is not None and not stat.S_ISREG(st.st_mode):
        if files_only:
            raise ProfkitError(f"cannot write {path}: it is not a regular file", hint)
        _write_stream(path, data, hint)
        return
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _cannot_write(path, exc, False, hint) from None
    # short: any legal name's file has one
    tmp = target.parent / f".profkit-{secrets.token_hex(8)}.tmp"
    try:
        fd = os.open(tmp, _FLAGS, 0o666)  # the umask applies, as to any new file
    except OSError as exc:
        raise _cannot_write(path, exc, st is not None, hint) from None
    try:
        try:
            if st is not None:
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
            _write_all(fd, data)
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


LINK_HOPS = 40  # as the kernel's own limit (ELOOP)


def foreign_link(path: str | os.PathLike[str]) -> tuple[Path, int] | None:
    """The first link on the way to ``path`` (a folder on it, or its own name) that another
    user made (neither this user nor root), with that user's id; None if there is none. Every
    part of the path is walked as the kernel would follow it, a link's target in its place,
    so a link planted as a folder on the way (``/tmp/shared/out -> /root/secret``) is found
    whatever ``fs.protected_symlinks`` says. The walk stops where the path no longer exists."""
    me = os.geteuid()
    parts = Path(os.path.abspath(path)).parts
    here, pending = Path(parts[0]), list(parts[1:])
    for _ in range(LINK_HOPS * 8):
        if not pending:
            return None
        step = here / pending.pop(0)
        try:
            st = os.lstat(step)
        except OSError:
            return None  # nothing there: the rest is made new, or the write says what is wrong
        if not stat.S_ISLNK(st.st_mode):
            here = step
            continue
        if st.st_uid not in (me, 0):
            return step, st.st_uid
        try:
            target = Path(os.readlink(step))
        except OSError:
            return None
        if target.is_absolute():
            here = Path(target.parts[0])
            pending[:0] = target.parts[1:]
        else:
            pending[:0] = target.parts
    return None  # a loop: the kernel's ELOOP says so when the path is used


def refuse_foreign_link(path: str | os.PathLike[str], what: str, hint: str) -> None:
    """A ProfkitError where a link another user made lies on the way to ``path``
    (:func:`foreign_link`): ``what`` says what profkit will not do through it."""
    found = foreign_link(path)
    if found is not None:
        raise ProfkitError(f"{found[0]} is a link another user made: {what}", hint)


def _through_links(path: Path) -> Path:
    """The name a file the user named is to be renamed over: ``path``, or where the links at
    ``path`` lead, one link at a time. Each link must be this user's or root's: a link another
    user made (in a shared folder, such as /tmp) is refused, as the kernel's
    ``fs.protected_symlinks`` would refuse following it, since renaming over its target would
    replace a file that user could not write. The folders on the way are left to the kernel
    to follow, with its protections. A link whose target is no name (``/proc/self/fd/1`` of
    a pipe) ends the walk."""
    me = os.geteuid()
    for _ in range(LINK_HOPS):
        try:
            st = os.lstat(path)
        except OSError:
            return path  # nothing there (made new), or an error the write itself reports
        if not stat.S_ISLNK(st.st_mode):
            return path
        if st.st_uid not in (me, 0):
            raise ProfkitError(
                f"{path} is a link another user made: profkit writes nothing through it",
                "Remove it if it should not be there, or write elsewhere.",
            )
        try:
            path = path.parent / os.readlink(path)
        except OSError:
            return path
    raise ProfkitError(f"cannot write {path}: {os.strerror(errno.ELOOP)}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # never for a regular file; no endless loop if it were
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        view = view[written:]


def _write_stream(path: Path, data: bytes, hint: str | None) -> None:
    """Write ``data`` to ``path``, a device or a pipe, as it is. Opened without blocking, so
    a named pipe no process reads is refused at once (ENXIO) rather than waited on forever;
    then written blocking, as a reader takes it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise ProfkitError(
                f"cannot write {path}: it is a named pipe, and no process reads it", hint
            ) from None
        raise _cannot_write(path, exc, False, hint) from None
    try:
        # changed since it was looked at: never written in place
        if stat.S_ISREG(os.fstat(fd).st_mode):
            raise ProfkitError(f"cannot write {path}: it changed while it was opened", hint)
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        _write_all(fd, data)
    except OSError as exc:
        raise _cannot_write(path, exc, False, hint) from None
    finally:
        os.close(fd)


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
    try:
        link = os.lstat(folder)
        st = os.stat(folder)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return _untrusted(link, st)


def _untrusted(link: os.stat_result, st: os.stat_result) -> str | None:
    """:func:`untrusted` of a folder whose name's ``lstat`` is ``link`` and whose own is ``st``."""
    me = os.geteuid()
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


OWN_FOLDER_ADVICE = "Remove it (profkit makes its own), or use a database in a folder of your own."


def own_folder(folder: Path, what: str, advice: str = OWN_FOLDER_ADVICE) -> Path:
    """``folder`` (the ``what``: "folder of runs' files", "lock folder"), made if missing, and
    refused (a StoreError, ending with ``advice``) where it is not to be trusted
    (:func:`untrusted`)."""
    try:
        folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot make the {what} {folder}: {exc.strerror or exc}",
            "Check the folder's permissions and the free disk space.",
        ) from None
    why = untrusted(folder)
    if why:
        raise StoreError(f"the {what} {folder} {why}", advice)
    return folder


# A file the user names for profkit to read whole (a check file: a few hundred bytes): at most
# this large (small enough that no parse of it takes long), and nested at most this deep.
MAX_USER_FILE_BYTES = 64 << 10
MAX_NESTING = 32


def read_user_file(path: str | os.PathLike[str], what: str) -> str:
    """A file the user names (``what``: "check file") read whole as UTF-8 text: only a regular
    file, of at most MAX_USER_FILE_BYTES. A FIFO or a device (``/dev/zero``) is refused at
    once, never read or waited on; anything else wrong is a UsageError naming the file, in one
    line."""
    name = str(path)
    try:
        # O_NONBLOCK: opening a FIFO no one writes to returns at once (and is refused below).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"{name}: cannot read it ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{name}: cannot read it (Is a directory)")
        if not stat.S_ISREG(st.st_mode):
            kind = (
                "a named pipe"
                if stat.S_ISFIFO(st.st_mode)
                else "a device"
                if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a socket"
                if stat.S_ISSOCK(st.st_mode)
                else "no regular file"
            )
            raise UsageError(f"{name}: not a {what} ({kind}, not a file)")
        limit = MAX_USER_FILE_BYTES
        data = b""
        if st.st_size <= limit:
            chunks, size = [], 0
            while size <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - size))):
                chunks.append(chunk)
                size += len(chunk)
            data = b"".join(chunks)
        if st.st_size > limit or len(data) > limit:
            raise UsageError(f"{name}: not a {what} (larger than {limit >> 10} KiB)")
    except OSError as exc:
        raise UsageError(f"{name}: cannot read it ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{name}: not a {what} (not UTF-8 text)") from None


# A dotted key (``a.b.c``, ``"x".'y'``, in a table header or before ``=``) of more than
# MAX_NESTING parts, anywhere in the text: it would nest deeper than allowed. Its quoted parts
# are first made one letter (a quote left open runs to the end of its line); possessive
# quantifiers and a start only where a name starts keep both searches linear on any text. A
# valid check file has no such run of dotted names, not even in a string or a comment.
_QUOTED = re.compile(r"""'[^'\n]*+'?|"(?:[^"\\\n]|\\.)*+"?""")
_DOTTED_TOO_DEEP = re.compile(
    rf"(?<![A-Za-z0-9_-])[A-Za-z0-9_-]++(?:[ \t]*+\.[ \t]*+[A-Za-z0-9_-]++){{{MAX_NESTING},}}"
)


def _nests_too_deep(text: str) -> bool:
    return _DOTTED_TOO_DEEP.search(_QUOTED.sub("q", text)) is not None


def load_toml(path: str | os.PathLike[str], what: str) -> dict[str, Any]:
    """A TOML file the user names (:func:`read_user_file`), parsed; invalid TOML, or values
    nested more than MAX_NESTING deep, is a UsageError naming the file, in one line."""
    import tomllib

    name = str(path)
    text = read_user_file(path, what)
    too_deep = UsageError(f"{name}: not a {what} (nested more than {MAX_NESTING} deep)")
    if _nests_too_deep(text):  # before tomllib, whose time grows as the square of a key's parts
        raise too_deep
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{name}: not valid TOML ({exc})") from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise too_deep from None
    # The depth counted without recursing (a dotted key a.b.c... nests tables without it).
    level: list[Any] = [data]
    for _ in range(MAX_NESTING):
        level = [
            v
            for x in level
            for v in (x.values() if isinstance(x, dict) else x)
            if isinstance(v, (dict, list))
        ]
        if not level:
            return data
    raise too_deep


def open_own_folder(folder: Path, what: str, advice: str = OWN_FOLDER_ADVICE) -> int:
    """:func:`own_folder`, opened: a descriptor of the very folder that was checked (its
    identity held against the name's), for :func:`replace_file`. The caller closes it."""
    own_folder(folder, what, advice)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StoreError(
            f"cannot open the {what} {folder}: {exc.strerror or exc}", advice
        ) from None
    try:
        link, st = os.lstat(folder), os.fstat(fd)
        why = _untrusted(link, st) or (
            None if os.path.samestat(os.stat(folder), st) else "changed while it was opened"
        )
    except OSError as exc:
        why = f"cannot be read ({exc.strerror})"
    if why:
        os.close(fd)
        raise StoreError(f"the {what} {folder} {why}", advice)
    return fd


def replace_file(folder_fd: int, name: str, data: bytes, shown: Path) -> None:
    """Make ``data`` the file ``name`` in the folder ``folder_fd`` (from
    :func:`open_own_folder`; ``shown`` is the path messages name), atomically: a new temporary
    file beside it (``O_CREAT | O_EXCL | O_NOFOLLOW``) renamed over ``name``, so a reader never
    sees half a file and a link at ``name`` is replaced, never written through. A name another
    user made (a link, a file) is refused (a StoreError), as is anything there that is not a
    file or a link (a folder, a pipe: a UsageError); a file of this user's keeps its mode."""
    import secrets

    try:
        st: os.stat_result | None = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise StoreError(f"cannot write {shown}: {exc.strerror or exc}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(
                f"cannot write {shown}: it is a folder", "Remove it, or write elsewhere."
            )
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            raise UsageError(
                f"cannot write {shown}: it is not a regular file", "Remove it, or write elsewhere."
            )
        if st.st_uid not in (os.geteuid(), 0):
            kind = "a link" if stat.S_ISLNK(st.st_mode) else "a file"
            raise StoreError(
                f"{shown} is {kind} another user made: profkit writes no page through it or over it",
                "Remove it if it should not be there, and try again.",
            )
    mode = (
        stat.S_IMODE(st.st_mode)
        if st is not None and stat.S_ISREG(st.st_mode)
        else 0o666 & ~_umask()
    )
    tmp = f".profkit-{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, _FLAGS, 0o600, dir_fd=folder_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=folder_fd)
        except OSError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
