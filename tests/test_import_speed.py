"""The fast nsys import (issue 25, part 3) writes what the slower one wrote.

tests/data/import_speed/golden.json holds, for every committed nsys export (tests/data/**/
*.sqlite.gz), the sha256 of ``profkit kernels RUN --format json``, of ``profkit ranges RUN
--format json``, of the run's host syncs and its notes, and the run's kernel count and GPU
time. These digests are golden data: they were made by the import as it was BEFORE it was
made faster (commit aaa232e), by ``python tests/test_import_speed.py --write``, and must
not be regenerated to make a change pass: a different digest is a different import.

Issue 36 changed verdicts, not the import: kernels whose names now give a precision (integer
and boolean work, cuDNN's first-layer convolution, opaque copies and gathers, cuDNN's SDPA by
the run's 2-byte type, a workspace's integer setup). The kernels digests of the 17 exports
that hold such kernels were written again with ``--write`` after checking, export by export,
that ``profkit kernels -f json`` of the commit before (69d02af) and after differ only in the
verdict columns (precision, tensor_core, family, evidence, evidence_detail).
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import DATA, cli  # noqa: E402

GOLDEN = DATA / "import_speed" / "golden.json"
# Exports committed after issue 25 have no digest from before it: their own tests read them
# (nsys/autograd_shapes: tests/test_program_imports.py; findings/: tests/test_findings_36.py).
LATER = {"nsys/autograd_shapes.sqlite.gz", "findings/"}
EXPORTS = sorted(
    e
    for p in DATA.rglob("*.sqlite.gz")
    if not any((e := p.relative_to(DATA).as_posix()).startswith(later) for later in LATER)
)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def digests(export: Path, db: Path) -> dict[str, object]:
    """What the golden file records of one export, imported by ``profkit import`` into ``db``."""
    from profkit.store import Store

    r = cli("import", export, "--name", "g", db=db)
    assert r.exit_code == 0, r.output
    kernels = cli("kernels", "g", "--format", "json", db=db)
    ranges = cli("ranges", "g", "--format", "json", db=db)
    assert kernels.exit_code == 0 and ranges.exit_code == 0, (kernels.output, ranges.output)
    store = Store(db)
    run = store.get_run("g")
    syncs = json.dumps(store.host_syncs(run.id), sort_keys=True)
    return {
        "kernels": _sha(kernels.stdout),
        "ranges": _sha(ranges.stdout),
        "host_syncs": _sha(syncs),
        "notes": list(run.info.notes or []),
        "kernel_count": run.kernel_count,
        "gpu_time_ns": run.gpu_time_ns,
    }


@pytest.mark.parametrize("export", EXPORTS)
def test_import_is_what_it_was(tmp_path, export):
    """Rows, ranges, host syncs and notes of each committed nsys capture, as the import
    before issue 25 made them (golden digests, see the module's docstring)."""
    golden = json.loads(GOLDEN.read_text())
    assert digests(DATA / export, tmp_path / "p.db") == golden[export]


# Exports with host syncs of several kinds: a DDP job, a training step, a step that syncs.
PARALLEL = (
    "ddp/nsys_resnet50_ddp_train_amp.sqlite.gz",
    "steps/bert_encoder_train_amp.nsys.sqlite.gz",
    "where/host_sync_train-fp32-eager-nsys/report.sqlite.gz",
)


@pytest.mark.parametrize("read_as", ["columns", "sql"])
@pytest.mark.parametrize("export", PARALLEL)
def test_host_syncs_found_by_another_thread_are_the_same(tmp_path, export, read_as, monkeypatch):
    """An export large enough (here: any) has its host syncs found beside the import: from the
    operations and the blocking calls the columnar path read (in the importing thread, no second
    thread competing with its readers, no second scan of the runtime calls), or, where SQL imports them, by a second thread while the import writes
    them: the same rows, ranges, host syncs and notes either way."""
    from profkit.parse import nsys_export

    found_in: list[tuple[str, bool, bool]] = []
    search = nsys_export.NsysExport.host_syncs

    def host_syncs(self, operations=None, calls=None):
        found_in.append(
            (threading.current_thread().name, operations is not None, calls is not None)
        )
        return search(self, operations, calls)

    monkeypatch.setattr(nsys_export, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(nsys_export, "cores", lambda: 2)
    monkeypatch.setattr(nsys_export.NsysExport, "host_syncs", host_syncs)
    if read_as == "sql":
        monkeypatch.setattr("profkit.store.nsys_columns.read", lambda *a, **k: None)
    else:  # the columnar path for an export of any size
        monkeypatch.setattr("profkit.store.nsys_columns.MIN_EXPORT_BYTES", 0)
    golden = json.loads(GOLDEN.read_text())
    assert digests(DATA / export, tmp_path / "p.db") == golden[export]
    if read_as == "sql":
        assert found_in == [("profkit host syncs", False, False)]
    else:  # the blocking calls read with the runtime calls' columns: no second search
        assert found_in == [("MainThread", True, True)]


def test_host_syncs_found_here_where_the_other_thread_fails(tmp_path, monkeypatch):
    """Where the other thread fails, the import finds the host syncs itself (so a bad export's
    error is the import's own), and the streamed capture has them after its rows."""
    import gzip

    from profkit.parse import nsys_export, nsys_sqlite

    export = tmp_path / "e.sqlite"
    export.write_bytes(gzip.decompress((DATA / PARALLEL[2]).read_bytes()))
    here = nsys_sqlite.read_nsys_sqlite(export)
    list(here.rows)
    search = nsys_export.NsysExport.host_syncs

    def host_syncs(self):
        if threading.current_thread().name == "profkit host syncs":
            raise RuntimeError("lost")
        return search(self)

    monkeypatch.setattr(nsys_export, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(nsys_export, "cores", lambda: 2)
    monkeypatch.setattr(nsys_export.NsysExport, "host_syncs", host_syncs)
    there = nsys_sqlite.read_nsys_sqlite(export)
    rows = there.rows
    assert there.host_syncs == [] or there.host_syncs == here.host_syncs
    list(rows)
    assert there.host_syncs == here.host_syncs and len(here.host_syncs) > 0


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import tempfile

    out = {}
    for export in EXPORTS:
        with tempfile.TemporaryDirectory() as tmp:
            out[export] = digests(DATA / export, Path(tmp) / "p.db")
            print(export, out[export]["kernel_count"], file=sys.stderr)
    GOLDEN.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


def _trimmed(export: Path, out: Path) -> Path:
    """``export`` decompressed with every table the reader does not read dropped (what
    ``nsys export --tables`` of those tables writes)."""
    import gzip
    import sqlite3

    from profkit.parse.nsys_export import READ_TABLES

    out.write_bytes(gzip.decompress(export.read_bytes()))
    con = sqlite3.connect(out)
    kept = {t.lower() for t in READ_TABLES}
    for (name,) in con.execute("select name from sqlite_master where type = 'table'").fetchall():
        if name.lower() not in kept and not name.startswith("sqlite_"):
            con.execute(f'drop table "{name}"')
    con.commit()
    con.execute("vacuum")
    con.close()
    return out


@pytest.mark.parametrize("export", EXPORTS)
def test_the_tables_the_reader_reads_are_all_it_needs(tmp_path, export):
    """An export of only ``READ_TABLES`` imports exactly as the whole export does (the golden
    digests): the reader reads no other table, so that its check of those tables (plain tables,
    no views: ``NsysExport``) covers everything it reads, and an export of those tables alone
    (``nsys export --tables``, Parquet) would be enough."""
    golden = json.loads(GOLDEN.read_text())
    trimmed = _trimmed(DATA / export, tmp_path / Path(export).name.removesuffix(".gz"))
    assert digests(trimmed, tmp_path / "p.db") == golden[export]


@pytest.mark.parametrize(
    "export",
    ["nsys/autograd_shapes.sqlite.gz", "findings/bert-amp-nsys/report.sqlite.gz"],
)
def test_the_tables_the_reader_reads_are_all_it_needs_for_later_exports(tmp_path, export):
    """The same for the exports committed after the golden digests: PyTorch's own annotation
    (nsys --pytorch=autograd-shapes-nvtx) and a findings capture, against their whole export."""
    import gzip

    whole = tmp_path / "whole.sqlite"
    whole.write_bytes(gzip.decompress((DATA / export).read_bytes()))
    trimmed = _trimmed(DATA / export, tmp_path / "trimmed.sqlite")
    assert digests(trimmed, tmp_path / "t.db") == digests(whole, tmp_path / "w.db")


RUNTIME_CALL = r"--tables \^CUPTI_ACTIVITY_KIND_RUNTIME\$ "  # the second nsys's call


@pytest.mark.parametrize(
    ("refuse", "empty"),
    [("", ""), ("--tables", ""), (RUNTIME_CALL, ""), ("", RUNTIME_CALL)],
    ids=["tables", "nsys-without-tables", "runtime-export-fails", "runtime-export-writes-nothing"],
)
def test_a_report_is_exported_with_the_tables_profkit_reads(tmp_path, monkeypatch, refuse, empty):
    """profkit exports a .nsys-rep with only the tables it reads (``nsys export --tables``, each
    name matched whole), the runtime calls by a second nsys at the same time into a private
    temporary folder, copied in after as nsys declared them; into ``<stem>.profkit.sqlite``,
    never ``<stem>.sqlite`` (the whole export ``nsys stats`` makes and reuses). The run is what
    the whole export gives (the golden digests). Where nsys refuses --tables, or the second
    export fails or writes no runtime calls, the whole report is exported instead. Nothing else
    is left, beside the export or in the temporary folder."""
    import gzip
    import sqlite3
    import tempfile

    from conftest import fake_nsys

    export = "nsys/nsys_resnet18_train_amp.sqlite.gz"
    log = fake_nsys(tmp_path, monkeypatch, DATA / export, refuse, empty)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    report = tmp_path / "train.nsys-rep"
    report.write_bytes(b"a report nsys would read")
    golden = json.loads(GOLDEN.read_text())
    assert digests(report, tmp_path / "p.db") == golden[export]
    calls = [line.split() for line in log.read_text().splitlines()]
    tables = sorted(c[4] for c in calls if c[3] == "--tables")
    rest = (
        "^META_DATA_EXPORT$,^CUPTI_ACTIVITY_KIND_KERNEL$,^StringIds$,^CUPTI_ACTIVITY_KIND_MEMCPY$,"
        "^CUPTI_ACTIVITY_KIND_MEMSET$,^NVTX_EVENTS$,^TARGET_INFO_GPU$,^ENUM_CUDA_MEMCPY_OPER$"
    )
    # Where nsys refuses --tables, the second nsys is killed as soon as the first has failed:
    # on a busy machine before it began, and wrote its call to the log.
    began = tables[0] == "^CUPTI_ACTIVITY_KIND_RUNTIME$"
    assert tables == (["^CUPTI_ACTIVITY_KIND_RUNTIME$", rest] if began else [rest])
    assert began or refuse == "--tables"
    fell_back = bool(refuse or empty)
    assert len(calls) == len(tables) + fell_back and ("--tables" not in calls[-1]) == fell_back
    outputs = {Path(c[c.index("--output") + 1]) for c in calls}
    assert {p.name for p in outputs} == {"train.profkit.sqlite", "runtime.sqlite"} - (
        set() if began else {"runtime.sqlite"}
    )
    (made,) = tmp_path.rglob("train.profkit.sqlite")
    assert sorted(p.name for p in made.parent.iterdir()) == ["train.profkit.sqlite"]
    assert not list((tmp_path / "tmp").iterdir())  # the second export's folder is gone
    whole = tmp_path / "whole.sqlite"
    whole.write_bytes(gzip.decompress((DATA / export).read_bytes()))
    with sqlite3.connect(made) as a, sqlite3.connect(whole) as b:
        for q in (
            "select type, name, sql from sqlite_master where tbl_name = 'CUPTI_ACTIVITY_KIND_RUNTIME'",
            "select rowid, * from CUPTI_ACTIVITY_KIND_RUNTIME order by rowid",
        ):
            assert a.execute(q).fetchall() == b.execute(q).fetchall()


def test_a_report_nsys_cannot_export_leaves_no_export(tmp_path, monkeypatch):
    """Where every export fails (the tables', then the whole report's), the import says nsys's
    error in one line and leaves no part of profkit's export beside the report."""
    from conftest import fake_nsys, one_line_error

    fake_nsys(tmp_path, monkeypatch, DATA / "nsys/nsys_resnet18_train_amp.sqlite.gz", "export")
    report = tmp_path / "train.nsys-rep"
    report.write_bytes(b"a report nsys cannot read")
    one_line_error(cli("import", report, db=tmp_path / "p.db"), "nsys: cannot do export")
    from profkit.errors import ToolFailed
    from profkit.parse import export_nsys

    with pytest.raises(ToolFailed):
        export_nsys(report)
    assert sorted(p.name for p in tmp_path.iterdir() if "train" in p.name) == ["train.nsys-rep"]


def test_a_stop_during_the_export_ends_the_second_nsys_at_once(tmp_path, monkeypatch):
    """Ctrl-C while the tables are exported: the second nsys (the runtime calls'), which has
    nothing to save, is killed at once, even one that ignores SIGINT (a second Ctrl-C while it
    was given its grace would have left it running), and nothing of it is left."""
    import tempfile
    import time

    from conftest import fake_nsys, processes_mentioning

    from profkit.parse import export_nsys
    from profkit.tools import runner

    fake_nsys(
        tmp_path, monkeypatch, DATA / "nsys/nsys_resnet18_train_amp.sqlite.gz", stall=RUNTIME_CALL
    )
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))

    def interrupted(argv, timeout=60):
        time.sleep(0.5)  # the second nsys is running (and ignoring SIGINT) by now
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "capture", interrupted)
    report = tmp_path / "train.nsys-rep"
    report.write_bytes(b"a report")
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        export_nsys(report)
    assert time.monotonic() - t0 < runner.GRACE_S / 2  # killed, not given its grace
    assert processes_mentioning(str(tmp_path / "tmp")) == []
    assert not list((tmp_path / "tmp").iterdir())
    assert sorted(p.name for p in tmp_path.iterdir() if "train" in p.name) == ["train.nsys-rep"]


def test_no_temporary_folder_for_the_second_export_exports_the_whole_report(tmp_path, monkeypatch):
    """Where the temporary folder cannot be written (TMPDIR gone), the runtime calls' export has
    nowhere to go: the whole report is exported instead, and imports as it should."""
    import tempfile

    from conftest import fake_nsys

    export = "nsys/nsys_resnet18_train_amp.sqlite.gz"
    log = fake_nsys(tmp_path, monkeypatch, DATA / export)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no such folder"))
    report = tmp_path / "train.nsys-rep"
    report.write_bytes(b"a report nsys would read")
    assert digests(report, tmp_path / "p.db") == json.loads(GOLDEN.read_text())[export]
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and "--tables" not in calls[0]
