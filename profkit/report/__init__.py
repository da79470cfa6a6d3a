"""HTML kernel reports: one self-contained file per run, per pair of runs (``--vs``), and an
index of a database's runs. ``model`` gathers what a page shows from the library; ``page``
renders it (Jinja2 template, inlined CSS, scripts and the vendored Chart.js).

>>> run.report()                        # reports/<run>.html
>>> run.report(vs=other, output="pr.html")
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .page import DEFAULT_DIR

if TYPE_CHECKING:
    from ..api import Database, Run

__all__ = ["DEFAULT_DIR", "default_path", "write_index", "write_report"]


def default_path(run: Run, vs: Run | None = None, folder: Path = DEFAULT_DIR) -> Path:
    """``reports/<run>.html``, or ``reports/<run>_vs_<other>.html``."""
    return folder / (f"{run.name}_vs_{vs.name}.html" if vs is not None else f"{run.name}.html")


def write_report(run: Run, output: str | Path | None = None, vs: Run | None = None, match: str = "exact",
                 threshold_pct: float = 10.0) -> Path:
    """Write the run's report (side by side with ``vs`` when given); return its path."""
    from . import model, page

    data = model.vs_page(run, vs, match, threshold_pct) if vs is not None else model.run_page(run)
    return page.write(page.render(data), Path(output) if output is not None else default_path(run, vs))


def write_index(db: Database, folder: str | Path = DEFAULT_DIR) -> Path:
    """Write ``<folder>/index.html`` linking every run's report, writing the reports that the
    folder does not have yet; return the index's path."""
    from . import model, page

    folder = Path(folder)
    reports = {}
    for run in db.list_runs():
        path = default_path(run, folder=folder)
        if not path.exists():
            write_report(run, path)
        reports[run.name] = path.name
    return page.write(page.render(model.index_page(db, reports)), folder / "index.html")
