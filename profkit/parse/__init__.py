"""Importers: one module per export format, each producing the canonical kernel table
(``profkit.parse.schema``). ``load(path)`` picks the importer by the file's suffix, from the
formats' registry (``formats.FORMATS``)."""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BadExport, ProfkitError
from .formats import FORMATS, Format, Match, match, unknown_hint

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
EXPORT_SUFFIX = ".profkit.sqlite"


def export_nsys(report: Path, workdir: Path | None = None) -> Path:
    """.nsys-rep (or .qdstrm) -> SQLite export, through the nsys installed here: the tables
    profkit reads alone (``nsys export --tables``), or the whole report where this nsys cannot
    export it so (its error then the whole export's), into ``<stem>.profkit.sqlite``."""
    from ..errors import ToolFailed, ToolNotFound
    from ..tools import nsys, runner

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
    _not_a_link(out)
    warming = _warm_imports()
    try:
        try:
            _export_tables(exe, report, out)
        except ToolFailed:
            # an nsys without --tables, or a report it cannot export: then the whole export's error
            runner.capture(nsys.export_sqlite_argv(exe, report, out), timeout=3600)
    finally:
        warming.join()
    if not out.exists():
        raise BadExport(f"nsys export wrote no {out.name} for {report.name}")
    return out


# The table exported by a second nsys at once, into a file of its own, then copied into the
# export: nsys exports one report's tables one after another, on about one core, and the
# runtime calls take about as long as everything else profkit reads but the kernels (H200, a
# 625,000-kernel report: the kernels alone 3.5-4.1 s, the runtime calls alone 1.7-2.4 s, all
# profkit's tables 4.9-6.0 s in one process, 3.5-4.3 s in two at once).
SPLIT_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"


def _export_tables(exe: str, report: Path, out: Path) -> None:
    """Only the tables profkit reads (``nsys export --tables``; nsys then works out none of the
    others: the CPU's samples, the OS runtime's calls, ...) into ``out``: SPLIT_TABLE by a second
    nsys at the same time, into a file beside it, then copied in. ToolFailed where either nsys
    fails (nothing of the second left)."""
    from ..errors import ToolFailed
    from ..tools import nsys, runner
    from .nsys_export import READ_TABLES

    side = out.with_name(out.name.removesuffix(".sqlite") + "-runtime.sqlite")
    log = side.with_name(side.name + ".log")
    for path in (side, log):
        _not_a_link(path)
    rest = [t for t in READ_TABLES if t != SPLIT_TABLE]
    try:
        with runner.Background(
            nsys.export_sqlite_argv(exe, report, side, [SPLIT_TABLE]), log
        ) as other:
            runner.capture(nsys.export_sqlite_argv(exe, report, out, rest), timeout=3600)
            done = other.wait(timeout=3600)
        if done.returncode != 0:
            last = next((line for line in reversed(done.tail) if line.strip()), "no output")
            raise ToolFailed(f"nsys export failed (exit {done.returncode}): {last}")
        _take_table(out, side, SPLIT_TABLE)
    finally:
        side.unlink(missing_ok=True)
        log.unlink(missing_ok=True)


def _take_table(out: Path, side: Path, table: str) -> None:
    """Copy ``table`` from the export ``side`` into the export ``out``, as nsys declared it
    (its indexes too), where ``side`` has it and ``out`` has not (a report without runtime
    calls has none; an nsys that exported more than it was asked, both)."""
    import sqlite3

    if not side.exists():
        return
    con = sqlite3.connect(out, isolation_level=None)
    try:
        con.execute("pragma synchronous = off")  # profkit's own copy: made again if lost
        con.execute("attach database ? as side", [str(side)])
        if con.execute(
            "select 1 from main.sqlite_master where name = ? collate nocase", [table]
        ).fetchone():
            return
        made = con.execute(
            "select sql from side.sqlite_master where tbl_name = ? and sql is not null "
            "order by type = 'index'",
            [table],
        ).fetchall()
        declared = [sql for (sql,) in made if _creates(sql)]
        if not declared:
            return
        con.execute("begin")
        con.execute(declared[0])
        con.execute(f'insert into main."{table}" select * from side."{table}"')
        for sql in declared[1:]:
            con.execute(sql)
        con.execute("commit")
    except sqlite3.Error as exc:
        raise BadExport(f"could not copy {table} into {out.name}: {exc}") from None
    finally:
        con.close()


def _creates(sql: str) -> bool:
    """A plain CREATE TABLE or CREATE INDEX statement, as nsys declares its tables (nothing
    else of a file's schema is run)."""
    import re

    return bool(re.match(r"\s*create\s+(table|(unique\s+)?index)\s", sql, re.IGNORECASE))


def _not_a_link(path: Path) -> None:
    """Refuse to have nsys write ``path`` where it is a link (nsys would write through it)."""
    if path.is_symlink():
        from ..errors import StoreError

        raise StoreError(
            f"{path} is a link, and profkit does not write through links",
            "Remove it and try again.",
        )
