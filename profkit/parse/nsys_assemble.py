"""Profkit's own export of an Nsight Systems report, assembled from what two ``nsys export``
processes wrote at the same time: the runtime calls into a file of their own, copied into the
export of the other tables profkit reads. The export is profkit's file (never profkit's
database, which is the store's); this module writes it, as nsys does, and nothing else."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from ..errors import BadExport, ToolFailed
from ..files import file_uri
from ..processes import stage

# The table exported by a second nsys at once, into a file of its own, then copied into the
# export: nsys exports one report's tables one after another, on about one core, and the
# runtime calls take about as long as everything else profkit reads but the kernels (H200, a
# 625,000-kernel report: the kernels alone 3.5-4.1 s, the runtime calls alone 1.7-2.4 s, all
# profkit's tables 4.9-6.0 s in one process, 3.5-4.3 s in two at once).
SPLIT_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"


def export_tables(exe: str, report: Path, out: Path) -> None:
    """Only the tables profkit reads (``nsys export --tables``; nsys then works out none of the
    others: the CPU's samples, the OS runtime's calls, ...) into ``out``: SPLIT_TABLE by a second
    nsys at the same time, into a private temporary folder, then copied in. ToolFailed where
    either nsys fails or the second writes no such table (the caller then exports the whole
    report); on any error or a stop signal the second nsys is ended at once, and nothing of it
    is left."""
    import shutil
    import tempfile

    from ..tools import nsys, runner
    from .nsys_export import READ_TABLES

    rest = [t for t in READ_TABLES if t != SPLIT_TABLE]
    try:
        folder = Path(tempfile.mkdtemp(prefix="profkit-export-"))
    except OSError as exc:  # no temporary folder to write in: the whole export needs none
        raise ToolFailed(f"no temporary folder for the runtime calls' export: {exc}") from None
    side = folder / "runtime.sqlite"
    try:
        with runner.Background(
            nsys.export_sqlite_argv(exe, report, side, [SPLIT_TABLE]), folder / "nsys.log"
        ) as other:
            try:
                runner.capture(nsys.export_sqlite_argv(exe, report, out, rest), timeout=3600)
                done = other.wait(timeout=3600)
            except BaseException:
                other.kill()  # nothing to save: a second Ctrl-C must not leave it running
                raise
        stage("nsys exported (two processes)")
        if done.returncode != 0:
            last = next((line for line in reversed(done.tail) if line.strip()), "no output")
            raise ToolFailed(f"nsys export failed (exit {done.returncode}): {last}")
        if not _take_table(out, side, SPLIT_TABLE):
            raise ToolFailed(f"nsys export wrote no {SPLIT_TABLE} for {report.name}")
        stage("runtime calls copied in")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _take_table(out: Path, side: Path, table: str) -> bool:
    """Copy ``table`` from the export ``side`` into the export ``out``, as nsys declared it
    (its indexes too), where ``out`` has it not (an nsys that exported more than it was asked
    has it there already). False where ``side`` holds no such table."""
    if not side.exists():
        return False
    con = sqlite3.connect(file_uri(out), uri=True, isolation_level=None)
    try:
        con.execute("pragma synchronous = off")  # profkit's own copy: made again if lost
        con.execute("attach database ? as side", [file_uri(side, read_only=True)])
        made = con.execute(
            "select sql from side.sqlite_master where tbl_name = ? and sql is not null "
            "order by type = 'index'",
            [table],
        ).fetchall()
        declared = [sql for (sql,) in made if _creates(sql)]
        if not declared or not re.match(r"\s*create\s+table\s", declared[0], re.IGNORECASE):
            return False
        if con.execute(
            "select 1 from main.sqlite_master where name = ? collate nocase", [table]
        ).fetchone():
            return True
        con.execute("begin")
        con.execute(declared[0])
        con.execute(f'insert into main."{table}" select * from side."{table}"')
        for sql in declared[1:]:
            con.execute(sql)
        con.execute("commit")
        return True
    except sqlite3.Error as exc:
        raise BadExport(f"could not copy {table} into {out.name}: {exc}") from None
    finally:
        con.close()


def _creates(sql: str) -> bool:
    """A plain CREATE TABLE or CREATE INDEX statement, as nsys declares its tables (nothing
    else of a file's schema is run)."""
    return bool(re.match(r"\s*create\s+(table|(unique\s+)?index)\s", sql, re.IGNORECASE))


def not_a_link(path: Path) -> None:
    """Refuse to have nsys write ``path`` where it is a link (nsys would write through it)."""
    if path.is_symlink():
        from ..errors import StoreError

        raise StoreError(
            f"{path} is a link, and profkit does not write through links",
            "Remove it and try again.",
        )
