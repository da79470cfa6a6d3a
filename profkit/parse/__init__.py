"""Importers: one module per export format, each producing the canonical kernel table
(``profkit.parse.schema``). ``load(path)`` picks the importer from the file itself."""

from __future__ import annotations

from pathlib import Path

from ..errors import BadExport
from .schema import Capture, KernelRow

__all__ = ["Capture", "detect", "load"]

def detect(path: Path) -> str:
    """Which importer reads ``path``, by its suffix; each importer then checks the content."""
    if not path.exists():
        if path.is_symlink():
            raise BadExport(f"{path} is a symbolic link that leads nowhere (a loop, or its target is gone)")
        raise BadExport(f"no such file: {path}")
    if path.is_dir():
        raise BadExport(f"{path} is a folder, not a profiler export")
    if not path.is_file():
        raise BadExport(f"{path} is not a regular file (a pipe or a device)", "Save the export to a file first.")
    name = path.name.lower()
    if name.endswith((".ncu-rep.gz", ".sqlite.gz", ".nsys-rep.gz", ".qdstrm.gz")):
        return "gzip"
    if name.endswith(".ncu-rep"):
        return "ncu-rep"
    if name.endswith((".csv", ".csv.gz")):
        return "ncu-csv"
    if name.endswith((".json", ".json.gz")):
        return "kineto"
    if name.endswith((".sqlite", ".db")):
        return "nsys-sqlite"
    if name.endswith(".nsys-rep"):
        return "nsys-rep"
    if name.endswith(".qdstrm"):
        return "qdstrm"
    raise BadExport(
        f"don't know how to import {path.name}",
        "profkit imports .ncu-rep reports, ncu raw-page CSV exports (.csv, .csv.gz), "
        "torch.profiler traces (.json, .json.gz), and Nsight Systems reports (.nsys-rep, .qdstrm) "
        "and their SQLite exports (.sqlite), and gzipped reports and exports (.ncu-rep.gz, .sqlite.gz).",
    )


def load(path: str | Path, workdir: Path | None = None) -> Capture[KernelRow]:
    """Read an export. Nsight Systems reports are first exported to SQLite (by nsys, into
    ``workdir``, default beside the report); a .qdstrm is first converted by nsys's importer."""
    path = Path(path)
    kind = detect(path)
    if kind == "gzip":
        return load(gunzip(path, workdir), workdir)
    if kind in ("nsys-rep", "qdstrm", "nsys-sqlite"):
        from .nsys_sqlite import read_nsys_sqlite

        if kind != "nsys-sqlite":
            path = export_nsys(path, workdir)
        return read_nsys_sqlite(path)
    if kind == "ncu-rep":
        from .ncu_rep import read_ncu_rep

        return read_ncu_rep(path)
    if kind == "kineto":
        from .kineto import read_kineto

        return read_kineto(path)
    from .ncu_csv import read_ncu_csv

    return read_ncu_csv(path)


def gunzip(path: Path, workdir: Path | None = None) -> Path:
    """A gzipped report or export, decompressed into ``workdir`` (a new temporary folder if
    none): the report readers and SQLite need a plain file."""
    import shutil
    import tempfile

    from ..files import open_new
    from .gzipped import GZIP_ERRORS, open_capped

    folder = workdir or Path(tempfile.mkdtemp(prefix="profkit-"))
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / path.name[:-3]
    dst = open_new(out)  # never through a link, never into a file that is there already
    try:
        # Streamed to disk, and refused once past gzipped.limit_for (a gzip bomb fills no disk).
        with dst, open_capped(path) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
    except GZIP_ERRORS as exc:
        out.unlink(missing_ok=True)  # made above
        raise BadExport(f"{path.name} is not a readable gzip file: {exc}") from None
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    return out


def export_nsys(report: Path, workdir: Path | None = None) -> Path:
    """.nsys-rep (or .qdstrm) -> SQLite export, through the nsys installed here."""
    from ..errors import ToolNotFound
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
    out = (workdir or report.parent) / (report.name.removesuffix(".nsys-rep") + ".sqlite")
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.is_symlink():  # nsys would write through it
        from ..errors import StoreError

        raise StoreError(f"{out} is a link, and profkit does not write through links", "Remove it and try again.")
    runner.capture(nsys.export_sqlite_argv(exe, report, out), timeout=3600)
    if not out.exists():
        raise BadExport(f"nsys export wrote no {out.name} for {report.name}")
    return out
