"""HTML kernel reports: one self-contained file per run, per pair of runs (``--vs``), and an
index of a database's runs. ``model`` gathers what a page shows from the library; ``page``
renders it (Jinja2 template, inlined CSS, scripts and the vendored Chart.js).

Default places, under ``reports/``: ``<run>.html``; ``vs/<run>+<other>.html`` (a folder of
their own, so no run's page can collide with a pair's); ``index.html`` (a run named ``index``
gets ``index+<id>.html``). A run name never holds a ``+`` (letters, digits, ``.``, ``_`` and
``-`` only), so each run and each ordered pair has a page of its own: no run's page is the
index's, and no two pairs share one (``x_vs_y`` with ``z`` and ``x`` with ``y_vs_z`` differ).

>>> run.report()                        # reports/<run>.html
>>> run.report(vs=other, output="pr.html")
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from ..choices import DEFAULT_MATCH
from ..errors import UsageError
from .page import DEFAULT_DIR

if TYPE_CHECKING:
    from ..records import RunRecord
    from ..store import Store

__all__ = ["DEFAULT_DIR", "default_path", "side_by_side_pages", "write_index", "write_report"]

INDEX = "index"  # the index page's name, index.html
SEPARATOR = (
    "+"  # in no run name (check_run_name): it joins a pair's names, and a run named index to its id
)


def default_path(run: RunRecord, vs: RunRecord | None = None, folder: Path = DEFAULT_DIR) -> Path:
    """Where a report goes unless told: see the module's docstring."""
    if vs is not None:
        return folder / "vs" / f"{run.name}{SEPARATOR}{vs.name}.html"
    # Any case: on a file system that ignores case (macOS, Windows) Index.html is index.html.
    if run.name.lower() == INDEX.lower():
        return folder / f"{run.name}{SEPARATOR}{run.id}.html"
    return folder / f"{run.name}.html"


def identity(store: Store, run: RunRecord) -> str:
    """What a run's page is of: the database, the run and the profkit that wrote it. Written in
    the page's head so that an index reuses a page only if it is this run's, by this profkit."""
    from ..version import __version__

    return f"{store.path.resolve()}|{run.id}|{run.name}|{run.finished_at}|{__version__}"


def write_report(
    store: Store,
    run: RunRecord,
    output: str | Path | None = None,
    vs: RunRecord | None = None,
    match: str = DEFAULT_MATCH.value,
    threshold_pct: float = 10.0,
    *,
    folder: Path = DEFAULT_DIR,
) -> Path:
    """Write the report of ``store``'s run (side by side with ``vs``, of the same store, when
    given) at ``output``, or where :func:`default_path` puts it in ``folder`` (a folder of this
    user's only: :func:`page.write_own`); return its path."""
    from . import model, page

    data = (
        model.vs_page(store, run, vs, match, threshold_pct)
        if vs is not None
        else model.run_page(store, run)
    )
    data["identity"] = (
        identity(store, run) if vs is None else f"{identity(store, run)} vs {identity(store, vs)}"
    )
    if output is not None:
        return page.write(page.render(data), Path(output))
    return page.write_own(page.render(data), default_path(run, vs, folder), folder)


def _profkits(path: Path) -> bool:
    """Whether ``path`` may be a page profkit wrote: a regular file (not a link) of this user
    (or root), as :func:`page.write_own` leaves it. Another user's page in a shared folder is
    never reused or linked, whatever its head says."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid in (os.geteuid(), 0)


def _head(path: Path) -> str:
    """The start of a page profkit wrote (:func:`_profkits`), read without following a link;
    "" for anything else."""
    if not _profkits(path):
        return ""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, encoding="utf-8", errors="replace") as f:
            return f.read(4096)
    except OSError:
        return ""


def _is_page_of(store: Store, path: Path, run: RunRecord) -> bool:
    from html import escape

    from .page import printable

    return (
        f'<meta name="profkit-report" content="{printable(escape(identity(store, run)))}">'
        in _head(path)
    )


def side_by_side_pages(store: Store, folder: Path, names: set[str]) -> list[tuple[str, str, str]]:
    """The side-by-side pages in ``folder``/vs/ of two runs of ``names``: (A, B, link from
    ``folder``), by A then B: only pages profkit wrote for this database (:func:`_profkits`,
    and a head that names this database), in a folder no other user may change (refused as
    :func:`page.write_own` refuses it); a page another user or database wrote is left out."""
    from html import escape

    from ..errors import StoreError
    from ..files import untrusted
    from .page import FOLDER, FOLDER_ADVICE, printable

    vs = folder / "vs"
    if not vs.exists() and not vs.is_symlink():
        return []
    for f in (folder, vs):
        why = untrusted(f)
        if why:
            raise StoreError(f"the {FOLDER} {f} {why}", FOLDER_ADVICE)
    mark = '<meta name="profkit-report" content="'
    this = printable(escape(f"{store.path.resolve()}|"))
    out = []
    for path in sorted(vs.glob("*.html")):
        a, sep, b = path.stem.partition(SEPARATOR)
        if sep and a in names and b in names and mark + this in _head(path):
            out.append((a, b, f"vs/{path.name}"))
    return sorted(out)


def write_index(store: Store, output: str | Path | None = None) -> Path:
    """Write the index page (``reports/index.html`` unless ``output``) linking every run's
    report in the index's folder; a run's page there is written anew unless it is already this
    run's, by this profkit. Returns the index's path."""
    from . import model, page

    index = Path(output) if output is not None else DEFAULT_DIR / f"{INDEX}.html"
    folder = index.parent
    runs = [r for r in store.runs() if r.status in (None, "ok")]
    if not runs:
        raise UsageError(
            f"{store.path} holds no runs: nothing to index", "Run or import something first."
        )
    paths = {run.name: default_path(run, folder=folder) for run in runs}
    for name, path in paths.items():
        if path.resolve() == index.resolve():
            raise UsageError(
                f"the index would overwrite run {name}'s report ({path})",
                "Give the index another name.",
            )
    # The run pages' names are profkit's, in the index's folder: written as default pages are.
    for run in runs:
        if not _is_page_of(store, paths[run.name], run):
            write_report(store, run, folder=folder)
    pairs = side_by_side_pages(store, folder, set(paths))
    html = page.render(model.index_page(store, {n: p.name for n, p in paths.items()}, pairs))
    return page.write(html, index) if output is not None else page.write_own(html, index, folder)
