"""profkit.store: the one entry point that writes a run (rows streamed, ranges and notes after
them, all in one transaction), what it refuses, how runs and rows come back (typed, decoded),
schema upgrades, and the rule that SQL lives in this package alone."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from pathlib import Path

import pytest

from profkit.classify import classified
from profkit.errors import BadExport, EmptyCapture, RunExists, RunNotFound, StoreError, UsageError
from profkit.ingest import store_capture
from profkit.parse import load
from profkit.parse.ranks import merge_ranks
from profkit.parse.schema import KERNEL_FIELDS, Capture, kernel_row
from profkit.records import RunRecord
from profkit.store import Store
from profkit.store.database import RUN_COLUMNS, SCHEMA_VERSION

from .conftest import DATA, NCU_DATA, cli_json

CSV = NCU_DATA / "resnet18_fp16_eager.raw.csv.gz"
PACKAGE = Path(__file__).parents[1] / "profkit"


def counts(path) -> tuple[int, int, int]:
    con = sqlite3.connect(path)
    return tuple(
        con.execute(f"select count(*) from {t}").fetchone()[0]
        for t in ("runs", "kernels", "ranges")
    )


def add(store: Store, path, name: str) -> RunRecord:
    return store.add_run({"name": name, "source": "import", "tool": "x"}, classified(load(path)))


def test_add_run_writes_rows_ranges_and_counts(db):
    store = Store(db)
    capture = load(DATA / "torch" / "kineto_resnet18_fp16.json.gz")
    run = store.add_run({"name": "k", "source": "import", "info": {"mine": 1}}, classified(capture))
    assert isinstance(run, RunRecord) and (run.name, run.activity, run.kernel_count) == (
        "k",
        "kernel",
        324,
    )
    rows = list(store.iter_kernels(run.id))
    assert [r["launch_id"] for r in rows] == list(range(324)) and list(rows[0]) == list(
        KERNEL_FIELDS
    )
    assert run.gpu_time_ns == sum(r["duration_ns"] for r in rows)
    assert all(
        isinstance(r["metrics"], dict) and r["tensor_core"] in (True, False, None) for r in rows
    )
    assert [r["kernels"] for r in store.ranges(run.id)] == [162, 162]
    # JSON columns come decoded
    assert run.info["mine"] == 1 and isinstance(run.info["notes"], list)
    assert store.count_by_kind(run.id) == {"kernel": 324}


def test_streamed_capture_ranges_and_notes_after_rows(db, nsys_dir):
    """An nsys capture's ranges and notes are only complete once its rows are read: the store
    writes them after the rows, in the same transaction."""
    store = Store(db)
    run = add(store, nsys_dir / "nsys_resnet18_train_amp.sqlite", "t")
    assert [
        (r["kernels"], r["gpu_ops"], r["other_thread_kernels"]) for r in store.ranges(run.id)
    ] == [(182, 187, 238)] * 2
    assert any("nsys export schema" in n for n in run.info["notes"])
    assert store.count_by_kind(run.id) == {"kernel": 2102, "memcpy": 199, "memset": 39}


def test_failure_while_writing_leaves_nothing(db):
    store = Store(db)
    add(store, CSV, "a")
    before = counts(db)
    capture = load(CSV)
    rows = capture.rows

    def broken():
        for i, row in enumerate(rows):
            if i == 100:
                raise OSError("disk full")
            yield row

    capture.rows = broken()
    with pytest.raises(OSError):
        store.add_run({"name": "b", "source": "import"}, classified(capture))
    assert counts(db) == before


def _capture(rows) -> Capture:
    return classified(Capture(rows=iter(rows), tool="x", source_format="test"))


@pytest.mark.parametrize(
    "rows, error, message",
    [
        ([], EmptyCapture, "no kernel launches and no CPU operator calls"),
        (
            [
                kernel_row(0, "kernel", "k", "k", duration_ns=5),
                kernel_row(0, "kernel", "k", "k", duration_ns=5),
            ],
            BadExport,
            "lists a launch twice",
        ),
        (
            [
                kernel_row(0, "kernel", "k", "k", duration_ns=5),
                kernel_row(1, "cpu_op", "aten::mm", "mm", duration_ns=5),
            ],
            BadExport,
            "mixes CPU operators and GPU activities",
        ),
        ([kernel_row(0, "graph", "k", "k")], BadExport, "unknown kind 'graph'"),
        ([kernel_row(0, "kernel", "k", "k", duration_ns=-1)], BadExport, "negative duration"),
    ],
)
def test_bad_captures_refused_and_nothing_written(db, rows, error, message):
    store = Store(db)
    add(store, CSV, "keep")
    before = counts(db)
    with pytest.raises(error, match=message):
        store.add_run({"name": "bad", "source": "import"}, _capture(rows))
    assert counts(db) == before


def test_names(db):
    store = Store(db)
    add(store, CSV, "a")
    assert store.unique_name("a") == "a-2" and store.unique_name("b c/d") == "b-c-d"
    with pytest.raises(RunExists, match="Choose another `name`"):
        add(store, CSV, "a")
    for bad in ("bad name", "123", "", ".", "..", ".hidden", "a/b"):
        with pytest.raises(UsageError, match="`name` .* is not a usable run name"):
            store.check_name_free(bad)


def test_runs_come_back_typed(db):
    from profkit.ingest import import_file

    store = Store(db)
    a = import_file(store, CSV, name="a")
    assert store.get_run("a") == store.get_run(a.id) == store.get_run(str(a.id)) == store.runs()[0]
    assert isinstance(a.metrics, list) and "gpu__time_duration.sum" in a.metrics
    # owner: the writer, internal
    assert {f for f in RunRecord.__dataclass_fields__} == set(RUN_COLUMNS) - {"owner"}
    with pytest.raises(RunNotFound, match="no run 'zz'.*Recent runs: a"):
        store.get_run("zz")


def test_cpu_run_is_on_the_cpu(db):
    run = add(Store(db), DATA / "torch" / "cpu_resnet18_fp32.json.gz", "c")
    assert (run.activity, run.device, run.kernel_count) == ("cpu_op", "cpu", 850)


def test_refuses_what_is_not_a_profkit_database(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite" * 200)
    with pytest.raises(StoreError, match="not a usable SQLite database"):
        Store(junk)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("create table t (x)")
    with pytest.raises(StoreError, match="not a profkit one"):
        Store(other)
    with pytest.raises(StoreError, match="no database at .*choose another `db`"):
        Store(tmp_path / "absent.db", create=False)
    assert not (tmp_path / "absent.db").exists()
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "no" / "folder.db")


def test_upgrades_a_schema_1_database(db):
    """A database from before CPU runs and ranges (schema 1) is brought up to date in place."""
    store = Store(db)
    add(store, CSV, "old")
    store.close()
    con = sqlite3.connect(db)
    # as an earlier profkit left it: no record of steps
    con.executescript(
        "drop table ranges; drop table meta; drop table _sqlite_migrations; "
        "alter table runs drop column activity;"
    )
    con.commit()
    con.close()
    store = Store(db)
    assert store.get_run("old").activity == "kernel" and store.ranges(1) == []
    assert add(store, DATA / "torch" / "kineto_resnet18_fp16.json.gz", "new").kernel_count == 324


STORE_DATA = DATA / "store"


def _schema5_copy(tmp_path: Path) -> Path:
    path = tmp_path / "schema5.db"
    path.write_bytes(gzip.decompress((STORE_DATA / "schema5.db.gz").read_bytes()))
    return path


def _ranked(row: dict) -> dict:
    """A kernel row as schema 8 prints it: ``rank`` (None: one process) after ``device``."""
    out = {}
    for k, v in row.items():
        out[k] = v
        if k == "device":
            out["rank"] = None
        if k == "op":  # schema 10's attribution, none in an older database
            out.update(module=None, module_type=None, shapes=None, phase=None)
    return out


def test_migrates_a_schema_5_database_and_prints_the_same(tmp_path):
    """A database written before texts were kept once (schema 5, by profkit a820881) is moved
    to strings + kernel_rows in place; kernels (both JSON paths), summaries and ranges come
    back as that profkit printed them, keys in the same order, with schema 8's ``rank`` and
    schema 10's attribution columns (None)."""
    path = _schema5_copy(tmp_path)
    store = Store(path)
    tables = {
        r[0]: r[1] for r in sqlite3.connect(path).execute("select name, type from sqlite_master")
    }
    assert (
        tables["kernels"] == "view"
        and tables["kernel_rows"] == "view"
        and tables["launches"] == "table"
        and tables["strings"] == "table"
    )
    for run_name in ("ncu-vgg16", "nsys-r18", "cpu-r18"):
        old = [
            _ranked(r)
            for r in json.loads(
                gzip.decompress((STORE_DATA / f"schema5_{run_name}.kernels.json.gz").read_bytes())
            )
        ]
        run = store.get_run(run_name)
        from_sql = [json.loads(t) for t in store.iter_kernels_json(run.id)]
        from_rows = list(store.iter_kernels(run.id))
        assert from_sql == old and from_rows == old, run_name
        assert [list(r) for r in from_sql] == [list(r) for r in old]  # key order too
        summary = json.loads((STORE_DATA / f"schema5_{run_name}.summary.json").read_text())
        got = cli_json("summary", run_name, "-f", "json", db=path)
        # issue 23 added the coverage of matrix work (None for CPU operators)
        matrix = got.pop("matrix_work")
        got.pop("time_by_evidence_ns")  # issue 23: the time each kind of evidence decided
        # issue 38: the run's latest profkit tune (None: it has none)
        assert got == {**summary, "ranks": None, "modules": None, "tuning": None}, run_name
        assert (matrix is None) == (run_name == "cpu-r18"), run_name
        assert cli_json("kernels", run_name, "-f", "json", db=path) == old, run_name
    ranges = json.loads((STORE_DATA / "schema5_nsys-r18.ranges.json").read_text())
    assert cli_json("ranges", "nsys-r18", "-f", "json", db=path) == [
        {**r, "rank": None} for r in ranges
    ]
    # A new run goes in beside the migrated ones.
    assert add(store, CSV, "after").kernel_count == 162


def test_a_new_database_has_large_pages_and_an_earlier_one_keeps_its_own(tmp_path):
    """A database profkit makes has PAGE_SIZE-byte pages (a large import's rows written 10-15%
    quicker); one made with SQLite's default 4 KiB pages (an earlier profkit's) keeps them, and
    takes new runs."""
    from profkit.store.connection import PAGE_SIZE

    new = Store(tmp_path / "new.db")
    assert add(new, CSV, "r").kernel_count == 162
    assert new.execute("pragma page_size").fetchone()[0] == PAGE_SIZE == 16384
    path = _schema5_copy(tmp_path)
    assert sqlite3.connect(path).execute("pragma page_size").fetchone()[0] == 4096
    old = Store(path)
    assert add(old, CSV, "after").kernel_count == 162
    assert old.execute("pragma page_size").fetchone()[0] == 4096


def test_migrates_a_schema_7_database_adding_rank(tmp_path):
    """A database written before distributed runs (schema 7, profkit 0a4521b) gets ``rank`` in
    kernel_rows (the kernels view after ``device``) and in ranges, in place; its runs read back
    as a fresh import of the same captures does, and a new run with ranks goes in beside them."""
    path = tmp_path / "schema7.db"
    path.write_bytes(gzip.decompress((STORE_DATA / "schema7.db.gz").read_bytes()))
    store = Store(path)
    con = sqlite3.connect(path)
    assert con.execute("select value from meta where key = 'schema_version'").fetchone()[0] == str(
        SCHEMA_VERSION
    )
    view = [r[1] for r in con.execute("pragma table_info(kernels)")]
    assert view[view.index("device") + 1] == "rank"
    assert "rank" in [r[1] for r in con.execute("pragma table_info(ranges)")]
    fresh = Store(tmp_path / "fresh.db")
    for name, source in (
        ("nsys-r18", DATA / "nsys" / "nsys_resnet18_fp16.sqlite.gz"),
        ("cpu-r18", DATA / "torch" / "cpu_resnet18_fp32.json.gz"),
    ):
        new = add(fresh, source, name)
        old = store.get_run(name)

        # Verdicts are stored as the rules gave them at import: the families rules.toml has
        # changed since (issue 24: implicit-GEMM convolutions are conv, not gemm) are left out.
        def rows(st: Store, run_id: int) -> list[dict]:
            return [{k: v for k, v in r.items() if k != "family"} for r in st.iter_kernels(run_id)]

        assert rows(store, old.id) == rows(fresh, new.id)
        assert store.ranges(old.id) == fresh.ranges(new.id)
        assert all(r["rank"] is None for r in store.ranges(old.id))
        was, now = (
            cli_json("summary", name, db=path),
            cli_json("summary", name, db=tmp_path / "fresh.db"),
        )
        for s in (was, now):
            for key in ("time_by_family_ns", "matrix_work", "modules"):
                s.pop(key, None)
        assert was == now
    cpu = DATA / "ddp" / "cpu_resnet50_ddp_train_fp32"
    reserved = store.reserve(
        None, "ddp", {"name": "ddp", "source": "run", "info": {"world_size": 2}}, status="running"
    )
    ranked = store_capture(
        store,
        merge_ranks({r: load(Path(f"{cpu}.rank{r}.json.gz")) for r in (0, 1)}),
        {"name": "ddp", "source": "run", "info": {"world_size": 2}},
        reserved,
    )
    assert {r["rank"] for r in store.iter_kernels(ranked.id)} == {0, 1}


def test_texts_are_kept_once(db):
    """Each kernel name, range and verdict text is stored once however many launches share it."""
    store = Store(db)
    add(store, DATA / "nsys" / "nsys_resnet18_fp16.sqlite.gz", "a")
    add(store, DATA / "nsys" / "nsys_resnet18_fp16.sqlite.gz", "b")
    con = sqlite3.connect(db)
    distinct = con.execute("select count(distinct name) from kernels").fetchone()[0]
    names = con.execute(
        "select count(*) from strings where id in (select name_id from kernel_rows)"
    ).fetchone()[0]
    assert names == distinct and con.execute("select count(*) from strings").fetchone()[0] < 200
    assert con.execute("select count(*) from kernel_rows").fetchone()[0] == 2 * 1038


def test_newer_schema_refused(db):
    Store(db).runs()  # made on first use
    con = sqlite3.connect(db)
    con.execute("update meta set value = '99' where key = 'schema_version'")
    con.commit()
    with pytest.raises(StoreError, match="newer profkit"):
        Store(db)


SQL = re.compile(
    r"\b(select\s+.+\s+from|insert\s+into|create\s+table|delete\s+from|update\s+\w+\s+set|pragma\s+\w+)\b",
    re.IGNORECASE,
)


WRITES = re.compile(
    r"\b(insert\s+into|create\s+(temp\s+)?(table|index|view)|delete\s+from|update\s+\w+\s+set|attach)\b",
    re.IGNORECASE,
)


def test_sql_lives_in_the_store_alone():
    """Outside profkit/store/ (profkit's own database), no module imports sqlite3 or holds SQL,
    but for the reader of the one foreign database profkit reads, parse/nsys_export.py, which
    only reads (an export opened read-only), and parse/nsys_assemble.py, which writes profkit's
    own export of a report (one table copied in from a second nsys's file), never the store's
    database (it knows nothing of the store)."""
    offenders = []
    reader = PACKAGE / "parse" / "nsys_export.py"
    assert not WRITES.search(reader.read_text()) and "read_only=True" in reader.read_text()
    assembler = PACKAGE / "parse" / "nsys_assemble.py"
    assert "store" not in re.findall(r"^\s*from \.+(\w+)", assembler.read_text(), re.M)
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "store" or path in (reader, assembler):
            continue
        text = path.read_text()
        if (
            re.search(r"^\s*(import sqlite3|from sqlite3 )", text, re.M)
            or "sqlite_utils" in text
            or SQL.search(text)
        ):
            offenders.append(str(path.relative_to(PACKAGE)))
    assert offenders == []


def test_locked_database_is_one_error_not_a_traceback(db, monkeypatch):
    """Another process holds the write lock past the busy timeout (or the file is read-only): a
    StoreError that says so, and nothing half-written."""
    monkeypatch.setenv("PROFKIT_BUSY_TIMEOUT", "1")
    store = Store(db)
    add(store, CSV, "a")
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("begin immediate")
    try:
        with pytest.raises(StoreError, match="is locked by another process"):
            add(store, CSV, "b")
    finally:
        other.execute("rollback")
    assert counts(db)[0] == 1 and add(store, CSV, "b").name == "b"


def test_empty_file_is_no_database_to_read(tmp_path):
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with pytest.raises(StoreError, match="not a profkit database"):
        Store(empty, create=False)
    assert empty.stat().st_size == 0
    with pytest.raises(StoreError, match="is a folder"):
        Store(tmp_path)


def test_a_new_database_is_made_when_first_used(tmp_path):
    """Opening a new path makes no file; the first use makes it. No profkit ever removes a
    database file (another process may have it open)."""
    store = Store(tmp_path / "new.db")
    assert not (tmp_path / "new.db").exists()
    assert store.runs() == [] and (tmp_path / "new.db").exists()
    store.close()
    Store(tmp_path / "unused.db").close()
    assert not (tmp_path / "unused.db").exists()


def test_migration_keeps_a_users_view_over_kernels(tmp_path):
    path = _schema5_copy(tmp_path)
    con = sqlite3.connect(path)
    con.execute("create view per_name as select name, count(*) as n from kernels group by name")
    con.commit()
    before = sorted(con.execute("select * from per_name").fetchall())
    con.close()
    Store(path).runs()
    assert sorted(sqlite3.connect(path).execute("select * from per_name").fetchall()) == before


def test_a_schema_5_database_whose_kernels_are_a_view_is_refused(tmp_path):
    path = _schema5_copy(tmp_path)
    con = sqlite3.connect(path)
    con.executescript("alter table kernels rename to k5; create view kernels as select * from k5;")
    con.close()
    with pytest.raises(StoreError, match="kernels are not a table"):
        Store(path)


def test_metrics_that_are_not_numbers_are_stored_as_null(db):
    """NaN or infinity (a report reader may pass them through) is not JSON: stored as null, so
    both JSON paths print the row."""
    store = Store(db)
    row = kernel_row(
        0, "kernel", "k", "k", duration_ns=5, metrics={"a": float("nan"), "b": float("inf"), "c": 2}
    )
    run = store.add_run(
        {"name": "nan", "source": "import"},
        classified(Capture(rows=iter([row]), tool="ncu", source_format="test")),
    )
    (text,) = list(store.iter_kernels_json(run.id))
    assert json.loads(text)["metrics"] == {"a": None, "b": None, "c": 2}
    assert next(store.iter_kernels(run.id))["metrics"] == {"a": None, "b": None, "c": 2}
