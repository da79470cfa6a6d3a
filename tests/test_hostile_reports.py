"""What another local user cannot make profkit's HTML reports do (issue 34, item 3): a page
whose name profkit chose (``reports/<run>.html`` of ``report RUN`` and ``run``,
``reports/vs/<a>+<b>.html`` of ``report --vs`` and ``compare``, the index and the run pages
beside it) goes into a folder trusted as a run's folders are (a folder others may write in
that is not sticky, or a link another user made, is refused), is written atomically and never
through a link, and a name another user made there is refused; the index links only pages
profkit wrote (regular files of this user that name this database). The other user is real:
a child forked and setuid to nobody plants the links and pages (so these tests need root)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from .conftest import NCU_DATA, cli, needs_torch, one_line_error

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="plants another user's files: needs root")

NOBODY = 65534
CSV = NCU_DATA / "resnet18_fp16_eager.raw.csv.gz"
TINY = str(Path(__file__).parent / "workloads" / "tiny_classifier.py")
CPU = ("--device", "cpu", "--tool", "torch", "--batch-size", "2", "--iters", "1", "--warmup", "0")
SECRET = "root's own file\n"


def as_nobody(action) -> None:
    """Run ``action`` in a child that is another user (nobody), as that user would."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            action()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the other user's action failed"


@pytest.fixture
def shared(monkeypatch):
    """A folder another user can reach (pytest's own are root's alone), the current folder,
    with a database of one run (``r``) and a root-only file (``victim``) outside it."""
    root = Path(tempfile.mkdtemp(prefix="profkit-shared-"))
    try:
        root.chmod(0o755)
        victim = root / "victim"
        victim.write_text(SECRET)
        victim.chmod(0o600)
        work = root / "work"
        work.mkdir()
        monkeypatch.chdir(work)
        assert cli("import", CSV, "--name", "r", db=work / "p.db").exit_code == 0
        yield work, victim
    finally:
        shutil.rmtree(root)


def reports_folder(work: Path, mode: int, *sub: str) -> Path:
    """``reports/`` (and the folders ``sub`` below it) with ``mode``, as a shared project
    folder may have them."""
    folder = work / "reports"
    for part in ("", *sub):
        folder = folder / part if part else folder
        folder.mkdir(exist_ok=True)
        folder.chmod(mode)
    return folder


def plant_link(at: Path, target: Path) -> None:
    as_nobody(lambda: os.symlink(target, at))
    assert os.lstat(at).st_uid == NOBODY


def untouched(victim: Path) -> bool:
    return victim.read_text() == SECRET and stat.S_IMODE(victim.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "mode, message",
    [(0o777, "may be changed by other users"), (0o1777, "is a link another user made")],
)
def test_report_run_never_writes_through_a_planted_link(shared, mode, message):
    """``report RUN`` where another user linked ``reports/r.html`` to a root-only file: a
    reports folder anyone may change is refused; a sticky one (as /tmp) is trusted, but the
    link is another user's: refused. The file is never written."""
    work, victim = shared
    folder = reports_folder(work, mode)
    plant_link(folder / "r.html", victim)
    one_line_error(cli("report", "r", db=work / "p.db"), message)
    assert untouched(victim) and os.path.islink(folder / "r.html")


def test_report_refuses_a_reports_folder_another_user_made(shared):
    """``reports`` itself a link another user made in a shared (sticky) folder, to a folder of
    root's: refused, nothing written there."""
    work, _ = shared
    elsewhere = work.parent / "elsewhere"
    elsewhere.mkdir()
    work.chmod(0o1777)
    as_nobody(lambda: os.symlink(elsewhere, work / "reports"))
    one_line_error(cli("report", "r", db=work / "p.db"), "is a link another user made")
    assert list(elsewhere.iterdir()) == []


def test_report_vs_and_its_folder(shared):
    """``report A --vs B`` writes ``reports/vs/A+B.html``: a link planted there (vs/ sticky),
    or a vs/ folder others may change (reports/ trusted), is refused."""
    work, victim = shared
    db = work / "p.db"
    assert cli("import", CSV, "--name", "s", db=db).exit_code == 0
    vs = reports_folder(work, 0o755, "vs")
    vs.chmod(0o1777)
    plant_link(vs / "r+s.html", victim)
    one_line_error(cli("report", "r", "--vs", "s", db=db), "is a link another user made")
    vs.chmod(0o777)
    one_line_error(cli("report", "r", "--vs", "s", db=db), "may be changed by other users")
    assert untouched(victim)


def test_a_page_of_ones_own_replaces_a_link_of_ones_own(shared):
    """In a folder of this user's, the page replaces whatever this user had at its name (a
    link included: it is not written through) and keeps an existing file's mode."""
    work, _ = shared
    folder = reports_folder(work, 0o755)
    elsewhere = work / "elsewhere.html"
    elsewhere.write_text("mine")
    (folder / "r.html").symlink_to(elsewhere)
    r = cli("report", "r", db=work / "p.db")
    assert r.exit_code == 0 and r.stdout == "report: reports/r.html\n", r.output
    page = folder / "r.html"
    assert (
        not page.is_symlink()
        and "profkit-report" in page.read_text()
        and elsewhere.read_text() == "mine"
    )
    page.chmod(0o640)
    assert cli("report", "r", db=work / "p.db").exit_code == 0
    assert stat.S_IMODE(page.stat().st_mode) == 0o640
    # no temporary file left
    assert not [p for p in folder.iterdir() if p.name.startswith(".profkit-")]


@needs_torch
def test_run_never_writes_its_report_through_a_planted_link(shared):
    """``profkit run`` (torch on the CPU): the run is stored, its report refused in one line."""
    work, victim = shared
    folder = reports_folder(work, 0o1777)
    plant_link(folder / "tiny_classifier-fp32-eager-cpu.html", victim)
    one_line_error(cli("run", TINY, *CPU, db=work / "p.db"), "is a link another user made")
    assert untouched(victim)
    assert "tiny_classifier-fp32-eager-cpu" in cli("runs", db=work / "p.db").stdout


@needs_torch
def test_compare_never_writes_its_reports_through_a_planted_link(shared):
    work, victim = shared
    vs = reports_folder(work, 0o755, "vs")
    vs.chmod(0o1777)
    plant_link(vs / "tiny_classifier-fp32-eager-cpu+tiny_classifier-fp16-eager-cpu.html", victim)
    r = cli("compare", TINY, "--precisions", "fp32,fp16", *CPU, db=work / "p.db")
    # Its notes (a line for each variant), then the one error line.
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("profkit: error:") and "is a link another user made" in last, r.stderr
    assert untouched(victim)


def test_the_index_links_only_pages_profkit_wrote(shared):
    """``report --index``: a side-by-side page another user planted in a sticky reports/vs/
    (its head copied from a real one, naming this database) is not linked; one this user's
    profkit wrote is. A run page another user planted at a run's name is refused, not reused,
    however well it names the run."""
    work, victim = shared
    db = work / "p.db"
    assert cli("import", CSV, "--name", "s", db=db).exit_code == 0
    assert cli("report", "r", "--vs", "s", db=db).exit_code == 0
    folder = work / "reports"
    vs = folder / "vs"
    vs.chmod(0o1777)
    forged = (
        (vs / "r+s.html")
        .read_text()
        .replace("</body>", '<a href="https://example.com">phish</a></body>')
    )
    as_nobody(lambda: (vs / "s+r.html").write_text(forged))
    r = cli("report", "--index", db=db)
    assert r.exit_code == 0, r.output
    index = (folder / "index.html").read_text()
    assert "vs/r+s.html" in index and "vs/s+r.html" not in index
    # A run page another user made, reusing the real page's head: refused, not linked as r's.
    real = (folder / "r.html").read_text()
    (folder / "r.html").unlink()
    folder.chmod(0o1777)
    as_nobody(
        lambda: (folder / "r.html").write_text(
            re.sub("<body.*", "<body>forged</body></html>", real, flags=re.S)
        )
    )
    one_line_error(cli("report", "--index", db=db), "is a file another user made")
    assert "forged" in (folder / "r.html").read_text()  # left as it is, never linked
    # And a link planted at the index's own name.
    (folder / "r.html").unlink()
    (folder / "index.html").unlink()
    plant_link(folder / "index.html", victim)
    one_line_error(cli("report", "--index", db=db), "is a link another user made")
    assert untouched(victim)


def test_the_index_refuses_a_vs_folder_others_may_change(shared):
    work, _ = shared
    vs = reports_folder(work, 0o755, "vs")
    vs.chmod(0o777)
    one_line_error(cli("report", "--index", db=work / "p.db"), "may be changed by other users")


def test_junit_xml_and_output_never_write_through_another_users_link(shared):
    """Hostile pass F3: in a shared sticky folder (1777), another user links ``junit.xml`` and
    ``page.html`` to a root-only file; ``check --junit-xml`` and ``report -o`` resolved the
    link and renamed over its target (sidestepping the kernel's fs.protected_symlinks). Now
    each is refused in one line naming the link, and the file is as it was. A link of one's
    own there is still written through."""
    work, victim = shared
    drop = work.parent / "drop"
    drop.mkdir()
    drop.chmod(0o1777)
    plant_link(drop / "junit.xml", victim)
    plant_link(drop / "page.html", victim)
    said = "is a link another user made: profkit writes nothing through it"
    r = cli(
        "check",
        "r",
        "--min-tensor-core-coverage",
        "10",
        "--junit-xml",
        drop / "junit.xml",
        db=work / "p.db",
    )
    # check's "could not deliver": not a FAIL
    one_line_error(r, f"{drop / 'junit.xml'} {said}", code=2)
    assert untouched(victim)
    r = cli("report", "r", "-o", drop / "page.html", db=work / "p.db")
    one_line_error(r, f"{drop / 'page.html'} {said}", code=2)
    assert (
        untouched(victim)
        and os.path.islink(drop / "page.html")
        and os.path.islink(drop / "junit.xml")
    )
    # a chain: one's own link to the other user's link is refused as well
    (drop / "mine.xml").symlink_to(drop / "junit.xml")
    r = cli(
        "check",
        "r",
        "--min-tensor-core-coverage",
        "10",
        "--junit-xml",
        drop / "mine.xml",
        db=work / "p.db",
    )
    assert r.exit_code != 0 and said in r.stderr and untouched(victim)
    # one's own links are written through, to their targets
    (drop / "mine.xml").unlink()
    (drop / "mine.xml").symlink_to(work / "junit.xml")
    (drop / "mine.html").symlink_to(work / "page.html")
    r = cli(
        "check",
        "r",
        "--min-tensor-core-coverage",
        "10",
        "--junit-xml",
        drop / "mine.xml",
        db=work / "p.db",
    )
    assert r.exit_code in (0, 1) and "<testsuites" in (work / "junit.xml").read_text(), r.output
    assert cli("report", "r", "-o", drop / "mine.html", db=work / "p.db").exit_code == 0
    assert "profkit-report" in (work / "page.html").read_text() and os.path.islink(
        drop / "mine.html"
    )


def test_a_link_another_user_made_as_a_folder_on_the_way_is_refused(shared):
    """The second hostile pass: another user's link as a folder on the way
    (``drop/out -> a root-only folder``) had ``--junit-xml drop/out/junit.xml`` and ``report -o
    drop/out/page.html`` replace root's files there wherever ``fs.protected_symlinks`` is off.
    Every part of the path is walked now: refused in one line naming the link."""
    work, victim = shared
    secret = work.parent / "secret"
    secret.mkdir(mode=0o700)
    for name in ("junit.xml", "page.html"):
        (secret / name).write_text(SECRET)
        (secret / name).chmod(0o600)
    drop = work.parent / "drop"
    drop.mkdir()
    drop.chmod(0o1777)
    plant_link(drop / "out", secret)
    said = f"{drop / 'out'} is a link another user made: profkit writes nothing through it"
    r = cli(
        "check",
        "r",
        "--min-tensor-core-coverage",
        "10",
        "--junit-xml",
        drop / "out" / "junit.xml",
        db=work / "p.db",
    )
    one_line_error(r, said, code=2)
    r = cli("report", "r", "-o", drop / "out" / "page.html", db=work / "p.db")
    one_line_error(r, said, code=2)
    assert all(untouched(secret / name) for name in ("junit.xml", "page.html"))
