"""What profkit prints or writes from the strings of a capture or a database (issue 34, items
5, 8 and 14): kernel, GPU, workload, range and run names holding a screen clear (ESC [2J), an
OSC 52 clipboard write, an 8-bit CSI (0x9b), a carriage return, a bidirectional override or
rich markup are printed with those characters escaped (``\\x1b``) by every command, in a pipe
and in a terminal; JUnit XML stays well-formed and is written whole or not at all; CSV guards
text cells against spreadsheet formulas."""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import re
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import profkit
from profkit import cli as cli_module
from profkit import render

from .conftest import NCU_DATA, cli, one_line_error
from .test_bad_inputs import kineto_edit, ncu_rows, write_csv

CLEAR = "\x1b[2J\x1b[H"
OSC52 = "\x1b]52;c;ZXZpbA==\x07"
CSI8 = "\x9b2J"
MARKUP = "[bold]markup[/bold] [/oops]"
FORMULA = '=HYPERLINK("http://x","y")'
# Kernel names of the capture, by CSV row: each a way to act on a terminal, or rich markup.
NAMES = {
    2: f"void implicit_convolve_sgemm<{CLEAR}>(int)",
    3: f"{OSC52}osc_kernel",
    4: f"{CSI8}csi\rover",
    5: f"{MARKUP} \u202eabc",
    6: FORMULA,
    7: f"void cutlass::Kernel<cutlass_80_simt_sgemm_{CLEAR}{OSC52}_128x128_8x4_nn_align1>(T1::Params)",
}
GPU = f"NVIDIA {CLEAR}H100{OSC52}"
WORKLOAD = f"res{CLEAR}net"  # from the capture's NVTX range, as profkit's runs name it
PROFKIT = [sys.executable, "-m", "profkit"]
ROOT = str(Path(__file__).resolve().parent.parent)  # this copy of profkit, in the child too
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own colours, in a terminal
# What a terminal acts on (C0, DEL, C1), bidirectional controls, line and paragraph separators.
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def shown(text: str) -> str:
    """How a name of these tests (ASCII and controls) is to be printed: ``\\x1b``, ``\\r``."""
    return text.encode("unicode_escape").decode("ascii")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    """A database of two runs of a real ncu capture (ResNet-18, H100): ``good`` as captured,
    ``evil`` with the names above; and a third (id 3) whose name and workload another program
    wrote into the database: a screen clear and markup, with no ranges."""
    tmp = tmp_path_factory.mktemp("hostile")
    rows = ncu_rows()
    head = rows[0]
    for i, name in NAMES.items():
        rows[i][head.index("Kernel Name")] = name
    for row in rows[2:]:
        row[head.index("device__attribute_display_name")] = GPU
        row[4] = row[4].replace("resnet18.fp16", f"{WORKLOAD}.fp16")
    path = tmp / "evil.csv"
    write_csv(path, rows)
    db = tmp / "h.db"
    d = profkit.open_db(db)
    d.import_file(NCU_DATA / "resnet18_fp16_eager.raw.csv.gz", name="good")
    d.import_file(path, name="evil")
    plain = ncu_rows()
    for row in plain[2:]:
        row[4] = row[5] = ""  # no NVTX ranges
    d.import_file(write_csv(tmp / "plain.csv", plain), name="third")
    con = sqlite3.connect(db)
    with con:
        con.execute(
            "update runs set name = ?, workload = ? where id = 3", (f"[/oops]{CLEAR}x", f"{OSC52}w")
        )
    con.close()
    return db


def raw_controls(text: str, terminal: bool) -> list[str]:
    """The characters of ``text`` that a terminal would act on (a newline aside; in a terminal,
    rich's own colour sequences aside)."""
    if terminal:
        text = SGR.sub("", text)
    return [c for c in UNSAFE.findall(text) if c != "\n"]


COMMANDS = {
    "runs": ["runs"],
    "kernels": ["kernels", "evil"],
    "summary": ["summary", "evil"],
    "diff": ["diff", "good", "evil", "--all"],
    "diff by kernel": ["diff", "good", "evil", "--match", "exact"],
    "check": [
        "check",
        "evil",
        "--min-tensor-core-coverage",
        "99",
        "--no-fp32-matrix",
        "--max-finding",
        "any=1",
    ],
    "ranges": ["ranges", "evil"],
    "database's names": ["summary", "3"],
    "no ranges": ["ranges", "3"],
}
TERMINALS = {
    "pipe": None,
    "terminal": {"COLUMNS": "100", "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "0"},
    "wide terminal": {"COLUMNS": "100000", "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "0"},
}


@pytest.mark.parametrize("where", TERMINALS)
@pytest.mark.parametrize("command", COMMANDS)
def test_names_from_captures_print_escaped(hostile, command, where):
    r = cli(*COMMANDS[command], db=hostile, env=TERMINALS[where])
    assert r.exit_code in (0, 1), r.output  # check fails its assertions: exit 1
    # (rich's MarkupError)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    for stream in (r.stdout, r.stderr):
        assert not raw_controls(stream, where != "pipe"), (command, where, stream)


def test_every_name_shows_escaped_and_markup_as_text(hostile):
    """What the names hold is there to read: the escapes, and markup as its brackets (in a
    window wide enough for every name whole)."""
    wide = TERMINALS["wide terminal"]
    kernels = cli("kernels", "evil", "--wide", db=hostile, env=wide).stdout
    for text in (
        "\\x1b[2J\\x1b[H",
        "\\x1b]52;c;ZXZpbA==\\x07osc_kernel",
        "\\x9b2Jcsi\\rover",
        f"{MARKUP} \\u202eabc",
    ):
        assert text in kernels
    runs = cli("runs", db=hostile, env=wide).stdout
    assert shown(GPU) in runs and f"[/oops]{shown(CLEAR)}x" in runs and shown(f"{OSC52}w") in runs
    assert shown(WORKLOAD) in runs
    summary = cli(
        "summary", "evil", "--top", "200", db=hostile, env=TERMINALS["wide terminal"]
    ).stdout
    assert shown(GPU) in summary and MARKUP in SGR.sub("", summary)
    assert f"[/oops]{shown(CLEAR)}x has no ranges" in cli("ranges", "3", db=hostile).stdout
    check = cli(
        "check",
        "evil",
        "--min-tensor-core-coverage",
        "99",
        "--no-fp32-matrix",
        db=hostile,
        env=wide,
    ).stdout
    assert "cutlass::Kernel<cutlass_80_simt_sge" in check and "\\x07_128x128" in check


def test_error_quoting_a_name_is_one_escaped_line(hostile, tmp_path):
    missing = tmp_path / f"gone{CLEAR}{OSC52}.csv"
    r = cli("import", missing, db=hostile)
    one_line_error(r, shown(str(missing)))
    assert not raw_controls(r.stderr, False)


def test_verbose_traceback_shows_names_escaped(tmp_path):
    """``profkit -v`` prints the traceback of an error, and the file name it quotes (in the
    exception's line and in the source lines) has its control characters escaped, as without -v.
    A real process: the traceback used to be Python's own, printed after profkit's code."""
    missing = tmp_path / f"nonexist{OSC52}{CLEAR}\u202e.json"
    r = subprocess.run(
        [*PROFKIT, "-v", "--db", str(tmp_path / "o.db"), "import", str(missing)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert r.returncode == 1, r.stderr
    assert "Traceback (most recent call last):" in r.stderr and shown(str(missing)) in r.stderr
    assert not raw_controls(r.stdout + r.stderr, False), r.stderr


# What no report page may hold raw: C0 but newline and tab, DEL, C1, bidirectional controls.
PAGE_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_report_page_shows_names_escaped(tmp_path):
    """A real Kineto trace whose GPU name holds a title change (OSC 0), a BEL, a bidirectional
    override, markup and an 8-bit CSI, and a kernel name an OSC 52 clipboard write, imported from
    a file whose name holds ESC: the report page (its HTML and the JSON its scripts read) holds
    none of those characters raw, and shows the names with them escaped."""
    gpu = "\x1b]0;TITLE\x07GPU\u202e[red]X[/red]\x9b2J"

    def edit(trace):
        trace["deviceProperties"][0]["name"] = gpu
        kernel = next(e for e in trace["traceEvents"] if e.get("cat") == "kernel")
        kernel["name"] = f"{OSC52}{kernel['name']}\u2066"  # in the scripts' JSON (the kernel table)

    src = kineto_edit(tmp_path, edit).rename(tmp_path / f"trace{CLEAR}.json")
    db = tmp_path / "p.db"
    assert cli("import", src, "--name", "k", db=db).exit_code == 0
    page = tmp_path / "page.html"
    r = cli("report", "k", "-o", page, db=db)
    assert r.exit_code == 0, r.output
    html = page.read_text(encoding="utf-8")
    assert not PAGE_UNSAFE.findall(html), sorted(set(PAGE_UNSAFE.findall(html)))
    assert html.count(shown(CLEAR)) >= 1 and "GPU\\u202e[red]X[/red]\\x9b2J" in html
    # the kernel's name, in JSON (its backslashes doubled)
    assert "\\\\x1b]52;c;ZXZpbA==\\\\x07" in html


def test_import_line_names_the_file_escaped(tmp_path):
    src = tmp_path / f"cap{CLEAR}.csv"
    write_csv(src, ncu_rows())
    r = cli("import", src, "--name", "cap", db=tmp_path / "p.db")
    assert r.exit_code == 0, r.output
    assert shown(str(src)) in r.stderr and not raw_controls(r.stderr, False)


def test_status_line_shows_a_kernel_name_as_text(monkeypatch, capsys):
    """In a terminal a run's status line names the kernel ncu profiles: as text (rich markup
    such as "[/oops]" raised MarkupError), its control characters escaped."""
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    monkeypatch.setenv("COLUMNS", "200")
    err = render.console(stderr=True)
    with cli_module._Stages(err) as stages:
        stages.stage(f"importing {CLEAR}.csv")
        stages.kernel(0, f"{MARKUP}{OSC52}", 3)
        err.print(f"profkit: note {CSI8}")  # what the library notes say, on that console
    text = capsys.readouterr().err  # rich's own cursor moves and colours, and the names escaped
    assert "\\x1b]52;c;ZXZpbA==\\x07" in text and "\\x9b2J" in text and MARKUP in text
    for raw in ("\x1b[2J", "\x1b[H", "\x1b]", "\x07", "\x9b"):
        assert raw not in text, raw


def test_json_keeps_every_name_and_escapes_it(hostile):
    r = cli("kernels", "evil", "-f", "json", db=hostile)
    assert r.exit_code == 0, r.output
    assert not UNSAFE.search(r.stdout.replace("\n", ""))
    names = [k["name"] for k in json.loads(r.stdout)]
    assert all(n in names for n in NAMES.values())
    for args in (["summary", "evil"], ["diff", "good", "evil"], ["runs"]):
        out = cli(*args, "-f", "json", db=hostile).stdout
        assert not UNSAFE.search(out.replace("\n", "")), args


# ------------------------------------------------------------------ JUnit (item 8)
def test_junit_with_control_characters_is_well_formed(hostile, tmp_path):
    from junitparser import JUnitXml

    out = tmp_path / "check.xml"
    args = ["check", "evil", "--min-tensor-core-coverage", "99", "--no-fp32-matrix"]
    r = cli(*args, "--format", "junit", "--junit-xml", out, db=hostile)
    assert r.exit_code == 1, r.output
    assert r.stdout == out.read_text(encoding="utf-8")
    root = ET.fromstring(out.read_bytes())
    messages = [f.get("message") for f in root.iter("failure")]
    assert len(messages) == 2 and all("cutlass::Kernel<cutlass_80_simt_sge" in m for m in messages)
    assert all("\\x" in m and not UNSAFE.search(m) for m in messages)
    suite = next(iter(JUnitXml.fromfile(str(out))))
    assert suite.failures == 2 and suite.tests == 2
    # the run named by another program: in the suite's name, escaped
    r = cli("check", "3", "--min-tensor-core-coverage", "10", "--format", "junit", db=hostile)
    assert f"profkit check [/oops]{shown(CLEAR)}x" in ET.fromstring(r.stdout).find("testsuite").get(
        "name"
    )


def _old_report(path: Path) -> bytes:
    path.write_text("<testsuites>the previous run's report</testsuites>\n")
    return path.read_bytes()


def test_junit_on_a_full_disk_leaves_the_old_file(hostile, tmp_path, monkeypatch):
    """ENOSPC part-way through the write (injected): one line naming the file and the cause,
    the previous report as it was, no temporary file left beside it."""
    out = tmp_path / "out" / "check.xml"
    out.parent.mkdir()
    before = _old_report(out)
    real_write = os.write

    def full(fd: int, data) -> int:
        real_write(fd, bytes(data[:100]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    r = cli("check", "evil", "--min-tensor-core-coverage", "10", "--junit-xml", out, db=hostile)
    monkeypatch.undo()
    one_line_error(
        r, f"cannot write {out} (No space left on device); the file there is as it was", code=2
    )
    assert out.read_bytes() == before
    assert os.listdir(out.parent) == ["check.xml"]
    # and where there was none, none is made (not an empty one)
    monkeypatch.setattr(os, "write", full)
    r = cli(
        "check",
        "evil",
        "--min-tensor-core-coverage",
        "10",
        "--junit-xml",
        out.parent / "new.xml",
        db=hostile,
    )
    monkeypatch.undo()
    one_line_error(r, "(No space left on device); no file was made", code=2)
    assert os.listdir(out.parent) == ["check.xml"]


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB tmpfs (root only; skipped where it cannot be mounted)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        p = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True
        )
    except OSError as exc:
        pytest.skip(f"cannot mount a tmpfs: {exc}")
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {p.stderr.decode(errors='replace').strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_junit_on_a_real_full_disk(hostile, tiny_tmpfs):
    out = tiny_tmpfs / "check.xml"
    before = _old_report(out)
    with open(tiny_tmpfs / "filler", "wb", buffering=0) as f:  # the rest of the disk
        try:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    r = cli(
        "check",
        "evil",
        "--min-tensor-core-coverage",
        "10",
        "--no-fp32-matrix",
        "--junit-xml",
        out,
        db=hostile,
    )
    one_line_error(r, f"cannot write {out} (No space left on device)", code=2)
    assert out.read_bytes() == before
    assert sorted(os.listdir(tiny_tmpfs)) == ["check.xml", "filler"]


def test_junit_replaces_a_file_whole_and_keeps_its_mode(hostile, tmp_path):
    out = tmp_path / "check.xml"
    _old_report(out)
    out.chmod(0o640)
    r = cli("check", "evil", "--min-tensor-core-coverage", "10", "--junit-xml", out, db=hostile)
    assert r.exit_code == 0, r.output
    assert (
        ET.fromstring(out.read_bytes()).tag == "testsuites"
        and (out.stat().st_mode & 0o777) == 0o640
    )
    assert (
        cli(
            "check",
            "evil",
            "--min-tensor-core-coverage",
            "10",
            "--junit-xml",
            "/dev/null",
            db=hostile,
        ).exit_code
        == 0
    )
    one_line_error(
        cli(
            "check", "evil", "--min-tensor-core-coverage", "10", "--junit-xml", tmp_path, db=hostile
        ),
        "it is a folder",
        code=2,
    )


def test_junit_to_a_pipe_no_process_reads_is_refused_at_once(hostile, tmp_path):
    """Hostile pass F5: ``--junit-xml`` at a named pipe no process reads blocked forever in
    open. Now: one line, exit 2, at once (a separate process, so a hang fails the test rather
    than hang it). A pipe someone reads, and ``/dev/stdout`` piped, are still written."""
    import sys
    import time

    fifo = tmp_path / "fifo.xml"
    os.mkfifo(fifo)
    argv = [
        sys.executable,
        "-m",
        "profkit",
        "check",
        "evil",
        "--min-tensor-core-coverage",
        "10",
        "--db",
        str(hostile),
        "--junit-xml",
    ]
    start = time.monotonic()
    try:
        p = subprocess.run([*argv, str(fifo)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("--junit-xml at a pipe no process reads did not end in 60 s")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith(
        f"profkit: error: cannot write {fifo}: it is a named pipe, and no process reads it"
    )
    assert time.monotonic() - start < 30
    # a pipe a process reads: written, blocking as a reader takes it
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        p = subprocess.run([*argv, str(fifo)], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert ET.fromstring(os.read(reader, 1 << 20)).tag == "testsuites"
    finally:
        os.close(reader)
    # /dev/stdout, a pipe: the XML, then the text
    p = subprocess.run([*argv, "/dev/stdout"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("<?xml") and "</testsuites>" in p.stdout, (
        p.stderr
    )


# ------------------------------------------------------------------ CSV (item 14)
def test_csv_guards_formulas_and_keeps_numbers(hostile):
    r = cli("kernels", "evil", "-f", "csv", db=hostile)
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout, newline="")))
    names = [x["name"] for x in rows]
    assert "'" + FORMULA in names and FORMULA not in names
    assert "'=HYPERLINK" in [x["short_name"] for x in rows]
    d = list(
        csv.DictReader(
            io.StringIO(
                cli("diff", "good", "evil", "--match", "exact", "-f", "csv", db=hostile).stdout,
                newline="",
            )
        )
    )
    assert "'" + FORMULA in [x["name"] for x in d]
    negative = [x["delta_time_ns"] for x in d if x["delta_time_ns"].startswith("-")]
    assert negative and all(float(v) < 0 for v in negative)  # numbers stay numbers


def test_csv_cell():
    for text in ("=1+1", "+1+1", "-1+1", "@SUM(A1)", "\tx", "\rx", "-", '=HYPERLINK("a")'):
        assert render.csv_cell(text) == "'" + text
    for value in (-1.5, "-1.5", "+2", "-3e5", 7, None, "a=b", "[x]"):
        assert render.csv_cell(value) == value
    assert render.csv_cell({"a": 1}) == '{"a": 1}'


def test_csv_to_a_terminal_escapes_control_characters(monkeypatch, capsys):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    monkeypatch.setattr("sys.stdout", out)
    render.write_csv([{"name": f"{CLEAR}k\r{OSC52}", "n": -2}], ["name", "n"])
    assert out.getvalue() == "name,n\n\\x1b[2J\\x1b[Hk\\r\\x1b]52;c;ZXZpbA==\\x07,-2\n"


# ------------------------------------------------------------------ the one function
def test_shown():
    from profkit.formatting import shown

    assert shown("plain <name> é 漢 …") == "plain <name> é 漢 …"
    assert shown("\x1b[2J\x9b\r\n\t\x00\x7f\u202e\u2066\u2028\udcff\ufffe") == (
        "\\x1b[2J\\x9b\\r\\n\\t\\x00\\x7f\\u202e\\u2066\\u2028\\udcff\\ufffe"
    )
    assert shown(shown("\x1b")) == "\\x1b"
