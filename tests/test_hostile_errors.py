"""What a hostile tester found (issue 21, items 7 and 9): inputs that gave a traceback instead
of one line, a timeout silently not applied, and report pages that overwrote each other. Each
bad input ends in one line on stderr and a non-zero exit, with the database unchanged; every
run and every pair of runs has a report page of its own."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import profkit
from tests.conftest import NCU_DATA, cli, one_line_error

ZOO_REP = NCU_DATA / "precision_zoo.ncu-rep.gz"  # 18 launches, H100
ZOO_CSV = NCU_DATA / "precision_zoo.raw.csv.gz"
PROFKIT = [sys.executable, "-m", "profkit"]


def digest(path: Path) -> str | None:
    """What the database holds (``profkit runs -f json``: every run, its status and counts);
    None where there is no file. (Not the file's bytes: SQLite may fold its write-ahead log
    into the file whenever a connection closes.)"""
    if not path.exists():
        return None
    r = cli("runs", "-f", "json", db=path)
    assert r.exit_code == 0, r.output
    return r.stdout


@pytest.fixture
def seeded(tmp_path) -> Path:
    """A database holding one imported run (id 1, named zoo)."""
    db = tmp_path / "seeded.db"
    profkit.open_db(db).import_file(ZOO_CSV, name="zoo")
    return db


def _out(p: subprocess.CompletedProcess) -> str:
    return f"exit {p.returncode}\nstdout: {p.stdout!r}\nstderr: {p.stderr!r}"


def one_line_error_of(p: subprocess.CompletedProcess, message: str, code: int = 1) -> None:
    """``one_line_error`` for a process run from a shell: what it wrote to file descriptor 2,
    its C libraries' output included."""
    err = p.stderr.decode(errors="replace") if isinstance(p.stderr, bytes) else p.stderr
    lines = err.strip().splitlines()
    assert p.returncode == code, _out(p)
    assert len(lines) == 1 and lines[0].startswith("profkit: error:") and message in lines[0], _out(
        p
    )


# ------------------------------------------------------------------ a damaged .ncu-rep
def _damaged_reports(tmp_path: Path) -> dict[str, Path]:
    """The real capture cut at many points (what an interrupted ncu leaves) and with bytes
    flipped at many places."""
    src = gzip.decompress(ZOO_REP.read_bytes())
    out = {}
    for k in (1, 2, 5, 10, 20, 33, 50, 67, 80, 90, 95, 99):
        out[f"cut{k}"] = src[: len(src) * k // 100]
    out["cut-last-byte"] = src[:-1]
    for k in range(1, 40):
        b = bytearray(src)
        b[len(src) * k // 40] ^= 0xFF
        out[f"flip{k}"] = bytes(b)
    paths = {}
    for name, data in out.items():
        paths[name] = tmp_path / f"{name}.ncu-rep"
        paths[name].write_bytes(data)
    return paths


def test_damaged_ncu_rep_is_one_line(tmp_path, seeded):
    """Every truncation is refused; a flipped byte either is refused in one line or changes
    nothing the reader checks (a byte of a metric's value) and imports."""
    refused = 0
    for name, path in _damaged_reports(tmp_path).items():
        before = digest(seeded)
        r = cli("import", path, db=seeded)
        if name.startswith("cut") or r.exit_code != 0:
            assert r.exit_code == 1, (name, r.output)
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("profkit: error:"), (name, r.output)
            assert re.search(
                r"is damaged or incomplete|could not be read as an Nsight Compute report", lines[0]
            ), lines
            assert "Traceback" not in r.output and digest(seeded) == before, name
            refused += 1
        else:
            assert profkit.open_db(seeded).run(r.stdout.split()[-1]).kernel_count == 18
    assert refused >= 13 + 10  # every cut, and most flips


def test_a_truncated_report_names_the_problem(tmp_path, seeded):
    src = gzip.decompress(ZOO_REP.read_bytes())
    path = tmp_path / "cut.ncu-rep"
    path.write_bytes(src[: len(src) // 2])
    one_line_error(
        cli("import", path, db=seeded),
        "cut.ncu-rep is damaged or incomplete (kernel launch 9 has no name)",
    )
    with pytest.raises(profkit.BadExport, match="damaged or incomplete"):
        profkit.open_db(seeded).import_file(path)
    assert [r.name for r in profkit.open_db(seeded).list_runs()] == ["zoo"]


def test_the_readers_own_log_stays_off_stderr(tmp_path, seeded):
    """NVIDIA's reader logs what it cannot parse (absl: ``E0000 ... Can't parse message``)
    straight to file descriptor 2; profkit's one line is still all a user sees."""
    src = bytearray(gzip.decompress(ZOO_REP.read_bytes()))
    src[len(src) * 5 // 60] ^= 0xFF  # a flip the reader logs about (as it reads the 15th launch)
    path = tmp_path / "logged.ncu-rep"
    path.write_bytes(bytes(src))
    before = digest(seeded)
    p = subprocess.run(
        [*PROFKIT, "import", str(path), "--db", str(seeded)], capture_output=True, text=True
    )
    one_line_error_of(p, "logged.ncu-rep is damaged or incomplete")
    assert "Can't parse" not in p.stderr and digest(seeded) == before


# ------------------------------------------------------------------ PROFKIT_BUSY_TIMEOUT
@pytest.mark.parametrize(
    "value", ["abc", "-1", "inf", "-inf", "nan", "1e10", "2147484", "1e308", "0x10"]
)
def test_bad_busy_timeout_is_one_line(seeded, tmp_path, value):
    env = {"PROFKIT_BUSY_TIMEOUT": value}
    before = digest(seeded)
    for args in (["runs"], ["summary", "zoo"], ["import", ZOO_CSV]):
        one_line_error(
            cli(*args, db=seeded, env=env),
            f"PROFKIT_BUSY_TIMEOUT must be a number of seconds from 0 to 2147483, not {value!r}",
            2,
        )
    assert digest(seeded) == before
    one_line_error(
        cli("import", ZOO_CSV, db=tmp_path / "new.db", env=env), "PROFKIT_BUSY_TIMEOUT", 2
    )
    assert not (tmp_path / "new.db").exists()


@pytest.mark.parametrize("value", ["0", "0.5", "2147483", " 30 ", ""])
def test_good_busy_timeout(seeded, value):
    assert cli("runs", db=seeded, env={"PROFKIT_BUSY_TIMEOUT": value}).exit_code == 0


# ------------------------------------------------------------------ ids past SQLite's integers
@pytest.mark.parametrize(
    "ref",
    ["12345678901234567890", "9223372036854775808", "9" * 5000],
    ids=["20-digits", "2**63", "5000-digits"],
)
def test_huge_run_and_bench_ids(seeded, tmp_path, ref):
    before = digest(seeded)
    monkey_cwd = tmp_path / "cwd"
    monkey_cwd.mkdir()
    for args in (
        ["kernels", ref],
        ["summary", ref],
        ["ranges", ref],
        ["diff", "zoo", ref],
        ["diff", ref, "zoo"],
        ["report", ref, "-o", monkey_cwd / "r.html"],
        ["report", "zoo", "--vs", ref, "-o", monkey_cwd / "v.html"],
    ):
        one_line_error(cli(*args, db=seeded), "no run '")
    if len(ref) < 4300:  # Python's longest int string: a longer one is the parser's one-line error
        one_line_error(cli("bench", "--show", ref, db=seeded), "no benchmark '")
    else:
        one_line_error(cli("bench", "--show", ref, db=seeded), "Invalid value for '--show'", 2)
    with pytest.raises(profkit.BenchNotFound):
        profkit.open_db(seeded).store.get_bench(ref)
    assert digest(seeded) == before and not list(monkey_cwd.iterdir())
    for big in (int(ref[:30]), 2**63 - 1, 2**63):
        with pytest.raises(profkit.RunNotFound):
            profkit.open_db(seeded).run(big)
    assert cli("summary", "1", db=seeded).exit_code == 0  # an ordinary id still finds its run


# ------------------------------------------------------------------ a database path that is not UTF-8
def test_database_path_not_utf8(tmp_path):
    """``--db $'x\\xff.db'`` and ``PROFKIT_DB`` with such bytes, as a shell passes them: the
    file of those very bytes is made and read; its reports and output name it with an escape."""
    folder = os.fsencode(tmp_path)
    db = folder + b"/x\xff.db"
    csv = os.fsencode(ZOO_CSV)

    def run(*args, env=None):
        return subprocess.run(
            [*(a.encode() for a in PROFKIT), *args], cwd=tmp_path, capture_output=True, env=env
        )

    for args in (
        [b"import", csv, b"--name", b"zoo", b"--db", db],
        [b"runs", b"--db", db],
        [b"kernels", b"zoo", b"--db", db],
        [b"summary", b"1", b"--db", db],
        [b"diff", b"zoo", b"zoo", b"--db", db],
        [b"report", b"zoo", b"--db", db],
        [b"report", b"--index", b"--db", db],
    ):
        p = run(*args)
        assert p.returncode == 0 and b"Traceback" not in p.stderr, _out(p)
    p = run(b"doctor", b"--db", db)  # exit 1 where this machine cannot profile: the GPU checks
    assert b"x\\udcff.db: 1 runs, writable" in p.stdout and b"Traceback" not in p.stderr, _out(p)
    assert os.listdir(folder).count(b"x\xff.db") == 1
    page = (tmp_path / "reports" / "zoo.html").read_text(encoding="utf-8")  # valid UTF-8
    assert "x\\udcff.db" in page
    # Read again, the index keeps the run's page: it is known as this run's.
    mtime = (tmp_path / "reports" / "zoo.html").stat().st_mtime_ns
    assert run(b"report", b"--index", b"--db", db).returncode == 0
    assert (tmp_path / "reports" / "zoo.html").stat().st_mtime_ns == mtime
    env = {**os.environb, b"PROFKIT_DB": folder + b"/y\xfe.db"}
    env.pop(b"PYTHONSAFEPATH", None)
    for args in ([b"import", csv], [b"runs"], [b"summary", b"1"]):
        p = run(*args, env=env)
        assert p.returncode == 0 and b"Traceback" not in p.stderr, _out(p)
    assert b"y\xfe.db" in os.listdir(folder)
    p = run(b"runs", b"--db", folder + b"/none\xff.db")
    one_line_error_of(p, "no database at ")
    assert b"\\udcff" in p.stderr


# ------------------------------------------------------------------ standard output closed
@pytest.mark.parametrize("redirect", [">&-", "1</dev/null"])
def test_closed_stdout_is_one_line(seeded, redirect):
    before = digest(seeded)
    for args in (
        "runs",
        "kernels zoo",
        "summary zoo",
        "runs -f json",
        f"import {ZOO_CSV}",
        "--help",
    ):
        p = subprocess.run(
            ["bash", "-c", f"{sys.executable} -m profkit {args} --db {seeded} {redirect}"],
            capture_output=True,
            text=True,
        )
        one_line_error_of(p, "standard output is ")
        assert "nothing could be printed" in p.stderr
    assert digest(seeded) == before


def test_closed_pipe_stays_quiet(seeded):
    """A reader that went away (``| head``) is still no error."""
    p = subprocess.run(
        [
            "bash",
            "-c",
            f"set -o pipefail; {sys.executable} -m profkit kernels zoo --db {seeded} | head -1",
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0 and p.stderr == "", _out(p)


# ------------------------------------------------------------------ --timeout
@pytest.mark.parametrize("value", ["1e308", "2592001", "inf", "-inf", "nan", "0", "-5", "0.5"])
def test_timeout_never_silently_ignored(tmp_path, value):
    db = tmp_path / "t.db"
    message = "--timeout must be a number of seconds, at least 1 and at most 2592000 (30 days)"
    one_line_error(cli("run", "resnet18", "--device", "cpu", "--timeout", value, db=db), message, 2)
    one_line_error(
        cli("sweep", "--workloads", "resnet18", "--device", "cpu", "--timeout", value, db=db),
        message,
        2,
    )
    assert not db.exists()
    with pytest.raises(
        profkit.UsageError, match=r"`timeout_s` must be a number of seconds, at least 1 and at most"
    ):
        profkit.profile("resnet18", device="cpu", timeout_s=float(value), db=db)
    assert not db.exists()


def test_longest_timeout_is_accepted():
    from profkit import launch
    from profkit.options import MAX_TIMEOUT_S, RunOptions

    launch.check(launch.RunRequest("resnet18", RunOptions(device="cpu", timeout_s=MAX_TIMEOUT_S)))
    assert MAX_TIMEOUT_S == 30 * 24 * 3600


# ------------------------------------------------------------------ report pages
NAMES = [
    "index",
    "index-run-1",
    "index-1",
    "Index",
    "x_vs_y",
    "z",
    "x",
    "y_vs_z",
    "vs",
    "a",
    "a_vs_a",
]


def _identity_of(page: Path) -> str:
    m = re.search(r'<meta name="profkit-report" content="([^"]*)">', page.read_text())
    assert m, page
    return m.group(1)


def test_every_run_and_pair_has_its_own_page(tmp_path, monkeypatch):
    """Runs named so that the old names collided (index / index-run-1; x_vs_y with z and x with
    y_vs_z): each run's page, each pair's page and the index are distinct files, each holding
    what it says, and the index links every run's page."""
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "r.db"
    d = profkit.open_db(db)
    captures = [ZOO_CSV, NCU_DATA / "resnet18_fp16_eager.raw.csv.gz"]
    with pytest.warns(profkit.ProfkitWarning):  # the same capture imported again: a note
        runs = {n: d.import_file(captures[i % 2], name=n) for i, n in enumerate(NAMES)}
    pages = {}
    for name in runs:
        r = cli("report", name, db=db)
        assert r.exit_code == 0, r.output
        pages[name] = tmp_path / r.stdout.split(": ", 1)[1].strip()
    pairs = [
        ("x_vs_y", "z"),
        ("x", "y_vs_z"),
        ("x", "y"),
        ("a", "a_vs_a"),
        ("a_vs_a", "a"),
        ("a", "a"),
        ("index", "vs"),
        ("vs", "index"),
    ]
    with pytest.warns(profkit.ProfkitWarning):
        runs["y"] = d.import_file(ZOO_CSV, name="y")
    vs_pages = {}
    for a, b in pairs:
        r = cli("report", a, "--vs", b, db=db)
        assert r.exit_code == 0, r.output
        vs_pages[a, b] = tmp_path / r.stdout.split(": ", 1)[1].strip()
    index = tmp_path / cli("report", "--index", db=db).stdout.split(": ", 1)[1].strip()
    everything = [*pages.values(), *vs_pages.values(), index]
    assert len({p.resolve() for p in everything}) == len(everything), everything
    # also where case is ignored
    assert len({str(p.resolve()).lower() for p in everything}) == len(everything)
    assert all(p.is_file() for p in everything)
    for name, page in pages.items():  # each run's page is that run's (the index kept or rewrote it)
        assert _identity_of(page).split("|")[1:3] == [str(runs[name].id), name]
    for (a, b), page in vs_pages.items():
        assert f"<title>{a} vs {b}</title>" in page.read_text()
    assert (
        pages["index"].name == f"index+{runs['index'].id}.html"
        and pages["Index"].name == f"Index+{runs['Index'].id}.html"
    )
    assert (
        vs_pages["x_vs_y", "z"].name == "x_vs_y+z.html"
        and vs_pages["x", "y_vs_z"].name == "x+y_vs_z.html"
    )
    assert index == tmp_path / "reports" / "index.html" and "profkit runs in" in index.read_text()
    links = re.findall(r'"report": "([^"]+)"', index.read_text())
    assert sorted(links) == sorted([p.name for p in pages.values()] + ["y.html"])
    for link in links:
        assert (index.parent / link).is_file()


def test_index_of_a_run_named_index(tmp_path):
    """The index and a run named index, written in either order, keep both pages."""
    from profkit.report import default_path

    d = profkit.open_db(tmp_path / "i.db")
    run = d.import_file(ZOO_CSV, name="index")
    out = tmp_path / "out"
    page = run.report(default_path(run, folder=out))
    index = d.write_index(out / "index.html")
    assert page == out / f"index+{run.id}.html" and page.is_file() and index.is_file()
    assert _identity_of(page).split("|")[1:3] == [str(run.id), "index"]
    assert "profkit runs in" in index.read_text()
    run.report(page)
    assert "profkit runs in" in index.read_text()


def test_a_pair_of_the_longest_names_has_its_page(tmp_path):
    """Two runs with names as long as a name may be: their side-by-side page is written (the
    page's own name is legal, and the temporary file it is written through is short)."""
    from profkit.store.database import MAX_NAME

    db = tmp_path / "p.db"
    a, b = "a" * MAX_NAME, "b" * MAX_NAME
    for name in (a, b):
        assert cli("import", ZOO_CSV, "--name", name, db=db).exit_code == 0
    r = cli("report", a, "--vs", b, "-o", tmp_path / "vs" / f"{a}+{b}.html", db=db)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "vs" / f"{a}+{b}.html").is_file()
