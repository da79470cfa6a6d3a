"""The formats ``profkit import`` reads, one :class:`Format` record each: its suffixes, what it
is, its reader, and what it needs. ``detect`` and ``load`` (``parse/__init__.py``), the "don't
know how to import" hint, a run's default name and the import command's help are all made from
:data:`FORMATS`; a new importer is one more record here.

This module imports nothing heavy, and no reader: the command line reads it for its help, and a
reader (with pandas, sqlite3 or NVIDIA's ncu_report behind it) is imported only when a file of
its format is read."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, cast

if TYPE_CHECKING:
    from .schema import Capture, KernelRow

GZ = ".gz"


class Format(NamedTuple):
    """One import format (a NamedTuple, not a dataclass: this module is read for every --help,
    and the dataclasses module and its class-making are several times slower to import)."""

    name: str  # what ``detect`` calls it
    what: str  # what a file of it is, for people: "an ncu raw-page CSV export"
    suffixes: tuple[str, ...]  # its file names' endings, lower case (a name matches in any case)
    reader: str  # "module:function" in profkit.parse: Path -> Capture, imported when used
    gzipped: tuple[str, ...] = ()  # those of ``suffixes`` also taken gzipped (with ".gz" after)
    reads_gzip: bool = False  # the reader decompresses a gzipped file as it reads (else it is
    # first decompressed into a file: report readers and SQLite need one)
    needs: str | None = None  # the tool that first converts a file into what the reader reads

    @property
    def all_suffixes(self) -> tuple[str, ...]:
        return self.suffixes + tuple(s + GZ for s in self.gzipped)

    def read(self, path: Path) -> Capture[KernelRow]:
        """``path`` (plain, or gzipped where the reader reads that) through this format's reader."""
        module, _, function = self.reader.partition(":")
        read = getattr(import_module(f"{__package__}.{module}"), function)
        return cast("Callable[[Path], Capture[KernelRow]]", read)(path)

    def described(self) -> str:
        """``what (suffixes)``, and the tool it needs: one item of the formats' list."""
        needs = f"; needs {self.needs} here" if self.needs else ""
        return f"{self.what} ({', '.join(self.all_suffixes)}{needs})"


# exported to SQLite by nsys first
# made a report by nsys's QdstrmImporter, then exported
FORMATS: tuple[Format, ...] = (
    Format(
        "ncu-rep",
        "an Nsight Compute report",
        (".ncu-rep",),
        "ncu_rep:read_ncu_rep",
        gzipped=(".ncu-rep",),
    ),
    Format(
        "ncu-csv",
        "an ncu raw-page CSV export",
        (".csv",),
        "ncu_csv:read_ncu_csv",
        gzipped=(".csv",),
        reads_gzip=True,
    ),
    Format(
        "kineto",
        "a torch.profiler (Kineto) trace",
        (".json",),
        "kineto:read_kineto",
        gzipped=(".json",),
        reads_gzip=True,
    ),
    Format(
        "nsys-sqlite",
        "an Nsight Systems SQLite export",
        (".sqlite", ".db"),
        "nsys_sqlite:read_nsys_sqlite",
        gzipped=(".sqlite",),
    ),
    Format(
        "nsys-rep",
        "an Nsight Systems report",
        (".nsys-rep",),
        "nsys_sqlite:read_nsys_sqlite",
        gzipped=(".nsys-rep",),
        needs="nsys",
    ),
    Format(
        "qdstrm",
        "a raw Nsight Systems capture",
        (".qdstrm",),
        "nsys_sqlite:read_nsys_sqlite",
        gzipped=(".qdstrm",),
        needs="nsys",
    ),
)

# What ncu's raw-page CSV exports are often called ("X.raw.csv"), left out of a run's default name.
RAW = ".raw"
# profkit's own export of an Nsight Systems report is ``<report>.profkit.sqlite``: its run is
# named after the report (``parse.export_nsys``).
OWN_EXPORT = ".profkit"


class Match(NamedTuple):
    """A file name's format, and the suffix by which it was known."""

    format: Format
    suffix: str  # lower case, as in ``format.all_suffixes``

    @property
    def unpacked_first(self) -> bool:
        """A gzipped file that is decompressed into a file before it is read."""
        return self.suffix.endswith(GZ) and not self.format.reads_gzip

    @property
    def in_place(self) -> bool:
        """Read where it is: neither decompressed into a file first nor converted by a tool."""
        return not self.unpacked_first and self.format.needs is None


def match(name: str) -> Match | None:
    """The format whose suffix ends ``name`` (in any case), the longest such suffix; None if none."""
    lower = name.lower()
    found = [Match(f, s) for f in FORMATS for s in f.all_suffixes if lower.endswith(s)]
    return max(found, key=lambda m: len(m.suffix), default=None)


def run_name(name: str) -> str:
    """A file's default run name: its name less its format's suffix (and a ``.raw`` before it,
    or the ``.profkit`` of profkit's own export of a report)."""
    found = match(name)
    base = name[: -len(found.suffix)] if found else name
    if found and found.format.name == "nsys-sqlite" and base.lower().endswith(OWN_EXPORT):
        return base[: -len(OWN_EXPORT)] or base
    return base[: -len(RAW)] if base.lower().endswith(RAW) else base


def listing() -> str:
    """Every format as ``what (suffixes)``, joined: "a (.a), b (.b) or c (.c)"."""
    items = [f.described() for f in FORMATS]
    return f"{', '.join(items[:-1])} or {items[-1]}"


def unknown_hint() -> str:
    """What ``profkit import`` says to a file of no format it knows."""
    return f"profkit imports {listing()}."


def import_help() -> str:
    """The import command's help for its PATH argument."""
    return f"The capture to import: {listing()}."
