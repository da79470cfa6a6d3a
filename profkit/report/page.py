"""Render a report page (``report.model``'s dict) as one self-contained HTML file.

Jinja2 autoescapes every string placed in the HTML, and the page's data reaches its scripts as
JSON inside ``<script type="application/json">`` through Jinja2's ``tojson`` (which writes
``<``, ``>``, ``&`` and ``'`` as ``\\u`` escapes, so no kernel name can close the element). The
scripts build the table and charts with ``textContent`` and Chart.js's canvas, never
``innerHTML``. A Content-Security-Policy allows only the page's own scripts (by hash) and no
network at all. Chart.js (MIT) is vendored in ``report/vendor`` and inlined. Every string of
the model (a kernel, GPU, range or file name read from a capture) is passed through
:func:`profkit.formatting.shown` before either: its control and bidirectional characters show
as escapes (``\\x1b``, ``\\u202e``) in the HTML and in the scripts' data alike, as on the terminal.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import sys
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from ..errors import UsageError
from ..formatting import fmt_ns, shown
from .palette import css_variables

DEFAULT_DIR = Path("reports")


def _asset(name: str) -> str:
    return resources.files("profkit").joinpath("report", name).read_text(encoding="utf-8")


# How the page's template is compiled (and so what its compiled code is).
SETTINGS: dict[str, Any] = {
    "autoescape": True,
    "undefined": jinja2.StrictUndefined,
    "trim_blocks": True,
    "lstrip_blocks": True,
}


class _Compiled(jinja2.FileSystemBytecodeCache):
    """The page's template as Jinja2 compiled it, kept between processes: compiling it took
    0.17 s of the 0.34 s a report took to write. Jinja2's own cache, in a folder of profkit's in
    this user's cache (:func:`_cache_folder`), each entry checked against a digest of the
    template's source, the settings it was compiled with (:data:`SETTINGS`: autoescaping is
    one), and profkit's, Jinja2's and Python's versions: anything else compiles it again. A
    cache that cannot be read or written is no cache: the template is compiled as before."""

    def __init__(self, folder: Path, salt: str):
        super().__init__(str(folder))
        self.salt = salt

    def get_source_checksum(self, source: str) -> str:
        return hashlib.sha256(f"{self.salt}\0{source}".encode()).hexdigest()

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # a damaged or unreadable file: compile
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:  # a full disk or a folder gone: the next report compiles again
            pass


def _cache_folder() -> Path | None:
    """Where the compiled template is kept: ``profkit/templates`` in this user's cache
    ($XDG_CACHE_HOME, else ~/.cache), made ``0700``; None (no cache) where it cannot be made, or
    is not a folder of this user's (a link is not) that only this user can write to."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    try:
        root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
        folder = root / "profkit" / "templates"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return None
        if st.st_mode & 0o077:  # this user's, made by hand or with another umask
            os.chmod(folder, 0o700)
    except (OSError, RuntimeError):  # RuntimeError: no home folder
        return None
    return folder


def _compiled() -> jinja2.BytecodeCache | None:
    folder = _cache_folder()
    if folder is None:
        return None
    from .. import formatting
    from ..version import __version__

    # what the compiled code depends on: the settings, the versions, and the filters' and this
    # module's own code (a filter's kind is compiled in), each file by its digest
    sources = hashlib.sha256()
    for module_file in (__file__, formatting.__file__):
        try:
            sources.update(Path(module_file).read_bytes())
        except OSError:
            return None
    salt = (
        f"profkit {__version__}; jinja2 {getattr(jinja2, '__version__', '?')}; "
        f"python {sys.version}; {sorted((k, repr(v)) for k, v in SETTINGS.items())}; "
        f"code {sources.hexdigest()}"
    )
    return _Compiled(folder, salt)


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        **SETTINGS,
        loader=jinja2.FunctionLoader(lambda name: _asset(name)),
        bytecode_cache=_compiled(),
    )
    env.filters["ns"] = fmt_ns
    # Keep the data's order (time by precision is largest first); Jinja2 sorts keys by default.
    env.policies["json.dumps_kwargs"] = {"sort_keys": False}
    return env


def _csp_hash(script: str) -> str:
    return (
        "'sha256-"
        + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
        + "'"
    )


def _shown_all(value: Any) -> Any:
    """``value`` (the model, or a part of it) with every string in it, keys too, as
    :func:`shown` writes it; numbers, None and the rest as they are."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {_shown_all(k): _shown_all(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_shown_all(v) for v in value]
    return value


def render(model: dict[str, Any]) -> str:
    """The page for a model from ``report.model`` (run, vs or index)."""
    model = _shown_all(model)
    scripts = (
        [_asset("vendor/chart.umd.min.js"), _asset("report.js")]
        if model["page"] != "index"
        else [_asset("report.js")]
    )
    for s in scripts:
        if "</script" in s.lower():
            raise ValueError("a bundled script contains '</script': it cannot be inlined")
    csp = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src " + " ".join(
        _csp_hash(s) for s in scripts
    )
    template = _env().get_template("template.html")
    return template.render(
        m=model, css=css_variables() + "\n" + _asset("report.css"), scripts=scripts, csp=csp
    )


def _check_parents(path: Path) -> None:
    """Refuse a path whose nearest existing parent is not a folder (a UsageError)."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(
                    f"cannot write the report to {path}: {parent} is a file, not a folder",
                    "Give a file path to `output`.",
                )
            break


def printable(text: str) -> str:
    """Text that UTF-8 can hold: a file name's bytes that are not UTF-8 (surrogate escapes in
    a path, as Python reads them) written as escapes (``\\udcff``), as profkit prints them."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


FOLDER = "reports folder"
FOLDER_ADVICE = (
    "Remove it (profkit makes its own), or give `output` a path in a folder of your own."
)


def write_own(html: str, path: Path, base: Path) -> Path:
    """Write a page whose name profkit chose (``reports/<run>.html``, ``reports/vs/...``, the
    index and the run pages beside it) in ``base`` or a folder below it: each of those folders
    made if missing and trusted as a run's folders are (:func:`profkit.files.own_folder`: a
    link another user made, or a folder others may write in that is not sticky, is refused),
    and the page written atomically, never through a link (:func:`profkit.files.replace_file`:
    a name another user made there is refused). Returns the path given."""
    from ..files import open_own_folder, own_folder, replace_file

    data = printable(html).encode("utf-8")
    _check_parents(path)
    below = path.parent.relative_to(base).parts
    chain = [base, *(base.joinpath(*below[: i + 1]) for i in range(len(below)))]
    for folder in chain[:-1]:
        own_folder(folder, FOLDER, FOLDER_ADVICE)
    fd = open_own_folder(chain[-1], FOLDER, FOLDER_ADVICE)
    try:
        replace_file(fd, path.name, data, path)
    except OSError as exc:
        raise UsageError(
            f"cannot write the report to {path}: {exc.strerror or exc}",
            "Check the folder's permissions and the free disk space.",
        ) from None
    finally:
        os.close(fd)
    return path


def write(html: str, path: Path) -> Path:
    """Write a page at a path the user gave (``output``), making its folder, as every file the
    user names is written (:func:`profkit.files.write_atomic`): atomically (a reader never
    sees half a file); through a link of this user's to its target, and never through a link
    another user made; keeping an existing file's permissions; never over a folder, a pipe or
    a device. Returns the path given. (Pages at paths profkit chose: :func:`write_own`.)"""
    from ..errors import ProfkitError
    from ..files import write_atomic

    if not str(path) or str(path) == ".":
        raise UsageError("no path to write the report to", "Give a file path to `output`.")
    _check_parents(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"cannot write the report to {path}: {exc.strerror or exc}",
            "Give a writable file path to `output`.",
        ) from None
    try:
        write_atomic(path, printable(html), "Give a file path to `output`.", files_only=True)
    except ProfkitError as exc:
        raise UsageError(exc.message, exc.hint) from None
    return path
