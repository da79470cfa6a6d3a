"""Importers: one module per export format, each producing the canonical kernel table
(``profkit.parse.schema``). ``load(path)`` picks the importer by the file's suffix, from the
formats' registry (``formats.FORMATS``)."""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BadExport, ProfkitError
from ..processes import stage
from .formats import FORMATS, OWN_EXPORT, Format, Match, match, unknown_hint

# imported when first asked for (below): --help reads parse.formats, and needs no schema
if TYPE_CHECKING:
    from .schema import Capture, KernelRow

__all__ = ["Capture", "FORMATS", "Format", "detect", "load"]


def __getattr__(name: str) -> Any:
    if name in ("Capture", "KernelRow"):
        from . import schema

        return getattr(schema, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def detect(path: Path) -> Match:
    """Which format ``path`` is, by its suffix (``formats.FORMATS``); its reader then checks the content."""
    if not path.exists():
        if path.is_symlink():
            raise BadExport(
                f"{path} is a symbolic link that leads nowhere (a loop, or its target is gone)"
            )
        raise BadExport(f"no such file: {path}")
    if path.is_dir():
        raise BadExport(f"{path} is a folder, not a profiler export")
    if not path.is_file():
        raise BadExport(
            f"{path} is not a regular file (a pipe or a device)", "Save the export to a file first."
        )
    found = match(path.name)
    if found is None:
        raise BadExport(f"don't know how to import {path.name}", unknown_hint())
    return found


def load(path: str | Path, workdir: Path | None = None) -> Capture[KernelRow]:
    """Read an export. A gzipped report or SQLite export is first decompressed, and an Nsight
    Systems report first exported to SQLite (by nsys; a .qdstrm is first converted by nsys's
    importer), into ``workdir`` (default: a new temporary folder, or beside the report)."""
    path = Path(path)
    found = detect(path)
    if found.unpacked_first:
        return load(gunzip(path, workdir), workdir)
    if found.format.needs == "nsys":
        path = export_nsys(path, workdir)
    return found.format.read(path)


def gunzip(path: Path, workdir: Path | None = None) -> Path:
    """A gzipped report or export, decompressed into ``workdir`` (a new temporary folder if
    none): the report readers and SQLite need a plain file."""
    import tempfile

    from ..files import open_new
    from .gzipped import GZIP_ERRORS, open_capped

    folder = workdir or Path(tempfile.mkdtemp(prefix="profkit-"))
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / path.name[:-3]
    dst = open_new(out)  # never through a link, never into a file that is there already
    try:
        # Streamed to disk, and refused once past gzipped.limit_for (a gzip bomb fills no disk).
        # What fails reading is the gzip file's fault; what fails writing (a full disk), the folder's.
        with dst, open_capped(path) as src:
            chunk = b"-"
            while chunk:
                try:
                    chunk = src.read(1 << 20)
                except GZIP_ERRORS as exc:
                    raise BadExport(f"{path.name} is not a readable gzip file: {exc}") from None
                try:
                    dst.write(chunk)
                    if not chunk:
                        dst.flush()  # the last bytes, where a full disk refuses them
                except OSError as exc:
                    raise _unwritable(path, folder, exc, temporary=workdir is None) from None
    except BaseException:
        out.unlink(missing_ok=True)  # made above
        raise
    return out


def _unwritable(path: Path, folder: Path, exc: OSError, temporary: bool) -> ProfkitError:
    """A failed write of ``path``'s decompressed copy into ``folder``, said as the folder's
    trouble (a full disk most often), not the gzip file's."""
    import errno

    from ..errors import StoreError

    where = f"the temporary folder {folder}" if temporary else str(folder)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = f"The disk holding {folder} is full (or your quota on it is used up): free some space there"
        hint += ", or set TMPDIR to a folder on a disk with room." if temporary else "."
    else:
        hint = "Check that folder's permissions and free disk space."
    return StoreError(f"cannot decompress {path.name} into {where}: {exc.strerror or exc}", hint)


# What reading an nsys export imports (the columnar path's driver, with Arrow, numpy and pandas:
# 0.3 s on the 2-core machine, 0.8 s and several cores busy on the GPU machine): imported while
# nsys exports, in its own process, rather than after. (The store's own modules of the import
# take milliseconds, and are the store's to import.)
EXPORT_READERS = ("adbc_driver_sqlite.dbapi", "profkit.parse.nsys_sqlite")


def _warm_imports() -> threading.Thread:
    """A thread importing EXPORT_READERS (one missing, or failing, is left to its reader) while nsys
    exports. Joined before anything reads the export: two threads importing packages that
    import each other (pyarrow and numpy) at once can each see the other's half made."""

    def load() -> None:
        for name in EXPORT_READERS:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 (its reader imports it again, and says what fails)
                pass

    thread = threading.Thread(target=load, name="profkit-imports", daemon=True)
    thread.start()
    return thread


# The export profkit makes of a report, beside it (or in the run's folder): named apart from
# ``<stem>.sqlite``, the whole export that ``nsys stats`` makes and reuses, since it holds only
# the tables profkit reads.
EXPORT_SUFFIX = OWN_EXPORT + ".sqlite"


def export_nsys(report: Path, workdir: Path | None = None) -> Path:
    """.nsys-rep (or .qdstrm) -> SQLite export, through the nsys installed here: the tables
    profkit reads alone (``nsys export --tables``), or the whole report where this nsys cannot
    export it so (its error then the whole export's), into ``<stem>.profkit.sqlite``."""
    from ..errors import ToolFailed, ToolNotFound
    from ..tools import nsys, runner
    from . import nsys_assemble

    try:
        exe = nsys.find()
    except ToolNotFound as exc:
        raise ToolNotFound(
            f"importing {report.name} needs Nsight Systems to export it, and {exc.message}",
            f"Where nsys exists: nsys export --type sqlite {report.name}, then import the .sqlite.",
        ) from None
    if report.stat().st_size == 0:
        raise BadExport(f"{report} is empty")
    if report.name.endswith(".qdstrm"):
        report = nsys.import_qdstrm(report, exe)
    out = (workdir or report.parent) / (report.name.removesuffix(".nsys-rep") + EXPORT_SUFFIX)
    out.parent.mkdir(parents=True, exist_ok=True)
    nsys_assemble.not_a_link(out)
    warming = _warm_imports()
    try:
        try:
            nsys_assemble.export_tables(exe, report, out)
        except ToolFailed:
            # an nsys without --tables, or a report it cannot export: then the whole export's error
            runner.capture(nsys.export_sqlite_argv(exe, report, out), timeout=3600)
    except BaseException:
        out.unlink(missing_ok=True)  # profkit's own file, half made: never left to be imported
        raise
    finally:
        warming.join()
        stage("export's readers imported")
    if not out.exists():
        raise BadExport(f"nsys export wrote no {out.name} for {report.name}")
    return out
