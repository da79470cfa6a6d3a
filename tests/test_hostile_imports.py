"""Hostile exports, round three (issue 34, items 6, 10, 11, 12 and 14): real captures edited so
that an importer would run without end, store what no capture holds, count a launch twice, lose
a name, or fail with a traceback or with the wrong words. Each is refused in one line naming the
file (and the table, event or id), with the database as it was; and a stop signal ends an import
within moments even inside a long SQLite statement, leaving nothing of it stored."""

from __future__ import annotations

import errno
import gzip
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import profkit
from profkit.errors import BadExport, EmptyCapture, StoreError
from profkit.parse import gunzip, load
from profkit.parse.schema import check_row, kernel_row

from .conftest import DATA, cli, cli_json, one_line_error
from .test_bad_inputs import NCU_CSV, NSYS, kineto_edit, ncu_edit, nsys_edit, seeded, unchanged  # noqa: F401 (seeded: a fixture)
from .test_hostile_parsers import refused

PROFKIT = [sys.executable, "-m", "profkit"]
TRAIN = DATA / "nsys" / "nsys_resnet18_train_amp.sqlite.gz"  # 823 kB unpacked
# kernels, ranges, operators' input types
TORCH_RUN = DATA / "torch" / "torch_run_resnet18_train_amp.json.gz"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


def _first_kernel(trace: dict) -> tuple[int, dict]:
    return next((i, e) for i, e in enumerate(trace["traceEvents"]) if e.get("cat") == "kernel")


def _at(tmp: Path, statements: str) -> Path:
    """The nsys export with ``statements`` (a script) run on it."""
    path = nsys_edit(tmp)
    con = sqlite3.connect(path)
    con.executescript(statements)
    con.commit()
    con.close()
    return path


# The kernel table replaced by a view of itself that never ends (a recursive CTE with no bound).
RECURSIVE_VIEW = f"""
    alter table {KERNEL} rename to K0;
    create view {KERNEL} as with recursive r(n) as (select 0 union all select n + 1 from r) select K0.* from K0, r;"""


# ------------------------------------------------------------------ item 6: tables that are no tables
def test_a_kernel_table_that_is_a_recursive_view_is_refused_at_once(tmp_path):
    """It grew a temporary file to 9.6 GB in 10 minutes. A real process, so that the code of
    before (which never ends) is killed when the test gives up on it."""
    path = _at(tmp_path, RECURSIVE_VIEW)
    db = tmp_path / "p.db"
    t0 = time.monotonic()
    p = subprocess.Popen(
        [*PROFKIT, "--db", str(db), "import", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert time.monotonic() - t0 < 20
    assert p.returncode == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(
        f"profkit: error: edited.sqlite: {KERNEL} is a view, not a plain table"
    ), err
    assert not db.exists()


# SQL names are the same in any case
@pytest.mark.parametrize(
    "statements, message",
    [
        (
            "alter table StringIds rename to S0; create view StringIds as select * from S0;",
            "StringIds is a view",
        ),
        (
            "alter table META_DATA_EXPORT rename to M0; create view META_DATA_EXPORT as select * from M0;",
            "META_DATA_EXPORT is a view",
        ),
        (
            "alter table NVTX_EVENTS rename to N0; create view NVTX_EVENTS as select * from N0;",
            "NVTX_EVENTS is a view",
        ),
        (
            "alter table TARGET_INFO_GPU rename to G0; create view TARGET_INFO_GPU as select * from G0;",
            "TARGET_INFO_GPU is a view",
        ),
        (
            "alter table CUPTI_ACTIVITY_KIND_MEMCPY rename to C0; create view CUPTI_ACTIVITY_KIND_MEMCPY as select * from C0;",
            "CUPTI_ACTIVITY_KIND_MEMCPY is a view",
        ),
        (
            "alter table CUPTI_ACTIVITY_KIND_RUNTIME rename to R0; create view cupti_activity_kind_runtime as select * from R0;",
            "cupti_activity_kind_runtime is a view",
        ),
        (
            "alter table StringIds rename to S0; create virtual table StringIds using fts5(id, value);"
            "insert into StringIds select id, value from S0;",
            "StringIds is a virtual table",
        ),
        (
            "alter table StringIds rename to S0; create table StringIds (id integer primary key, value text, "
            "big as (printf('%.*c', 100000000, 'x')));  insert into StringIds (id, value) select id, value from S0;",
            "StringIds is a table with generated columns",
        ),
        (
            "alter table CUPTI_ACTIVITY_KIND_RUNTIME rename to R0; create table CUPTI_ACTIVITY_KIND_RUNTIME "
            "(start integer not null, end integer not null, eventClass integer not null, globalTid integer, "
            "correlationId integer, nameId integer not null, returnValue integer not null, callchainId integer, "
            "primary key (start, end, eventClass, globalTid, correlationId, nameId)) Without  RowID ;"
            "insert into CUPTI_ACTIVITY_KIND_RUNTIME select * from R0;",
            "CUPTI_ACTIVITY_KIND_RUNTIME is a table without rowids",
        ),
        (
            "alter table StringIds rename to S0; create table StringIds (id integer primary key, value text) "
            "strict, /* the strings */ without rowid; insert into StringIds select id, value from S0;",
            "StringIds is a table without rowids",
        ),
    ],
    ids=[
        "stringids",
        "meta",
        "nvtx",
        "gpu",
        "memcpy",
        "runtime-lower-case",
        "virtual",
        "generated",
        "without-rowid",
        "strict-without-rowid",
    ],
)
def test_a_table_read_that_is_a_view_or_virtual_is_refused(seeded, tmp_path, statements, message):
    if "fts5" in statements:
        try:
            sqlite3.connect(":memory:").execute("create virtual table t using fts5(x)")
        except sqlite3.OperationalError:
            pytest.skip("this SQLite has no FTS5")
    refused(
        seeded,
        _at(tmp_path, statements),
        f"edited.sqlite: {message}, not a plain table as nsys writes it",
    )


def _big_export(tmp: Path, copies: int) -> Path:
    """The real export with its kernels (and their launch calls) repeated ``copies`` times more,
    later each time: a legal export whose import runs statements of seconds."""
    path = nsys_edit(tmp)
    con = sqlite3.connect(path)
    span = con.execute(
        f"select max(end) - min(start) + 1000 from (select start, end from {KERNEL} "
        "union all select start, end from CUPTI_ACTIVITY_KIND_RUNTIME)"
    ).fetchone()[0]
    step = con.execute("select max(correlationId) + 1 from CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[
        0
    ]
    n = con.execute(f"select max(rowid) from {KERNEL}").fetchone()[0]
    con.execute(
        f"create temp table c as with recursive r(k) as (select 1 union all select k + 1 from r "
        f"where k < {copies}) select k from r"
    )
    moved = {
        "start": f"x.start + c.k * {span}",
        "end": f"x.end + c.k * {span}",
        "correlationId": f"x.correlationId + c.k * {step}",
    }
    for table, which in (
        (KERNEL, f"x.rowid <= {n}"),
        (
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            f"x.correlationId in (select correlationId from {KERNEL} where rowid <= {n})",
        ),
    ):
        cols = [r[1] for r in con.execute(f"pragma table_info({table})")]
        con.execute(
            f"insert into {table} ({', '.join(cols)}) select {', '.join(moved.get(c, 'x.' + c) for c in cols)} "
            f"from temp.c c, {table} x where {which}"
        )
    con.commit()
    con.close()
    return path


def test_sigterm_cuts_a_long_import_statement_short(tmp_path):
    """SIGTERM while the import copies a million GPU operations in one statement (seconds of
    work): profkit ends within moments (the statement abandoned, its transaction rolled back),
    with its usual line and status, and the database holds nothing of the import."""
    path = _big_export(tmp_path, copies=1200)
    db = tmp_path / "p.db"
    p = subprocess.Popen(
        [*PROFKIT, "--db", str(db), "import", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PROFKIT_TIMINGS": "1"},
    )
    try:
        # The stage before the rows' long statements: the copy of every operation into the
        # import's working table (SQL), or the rows written from the columns read.
        for line in p.stderr:  # type: ignore[union-attr]
            if line.startswith(("profkit: launch calls:", "profkit: states:")):
                break
        else:
            raise AssertionError(f"the import never reached its copy: {p.communicate()}")
        time.sleep(0.5)  # into the statement (seconds long), past the Python lines before it
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 143, err
    assert (
        err.strip().splitlines()[-1] == "profkit: terminated (SIGTERM)" and "Traceback" not in err
    ), err
    assert took < 1.5, took
    con = sqlite3.connect(db)
    assert con.execute("pragma integrity_check").fetchone()[0] == "ok"
    assert con.execute("select count(*) from runs").fetchone()[0] == 0
    assert con.execute("select count(*) from kernel_rows").fetchone()[0] == 0
    con.close()
    assert cli("runs", db=db).exit_code == 0


def test_ctrl_c_cuts_a_long_statement_of_the_export_short(tmp_path, monkeypatch):
    """In a notebook (Python's own SIGINT handler), Ctrl-C during one of the export's own
    statements: a KeyboardInterrupt within moments. The kernel table takes seconds to read here
    (a view that counts to ten million first, let through by turning its refusal off), and the
    first statement that reads it returns nothing to Python until it is done."""
    from profkit.parse import nsys_export

    monkeypatch.setattr(
        nsys_export.NsysExport, "_check_plain", lambda self, found: None, raising=False
    )
    path = _at(
        tmp_path,
        f"""
        alter table {KERNEL} rename to K0;
        create view {KERNEL} as select * from K0 where (with recursive r(n) as (select 0 union all
            select n + 1 from r where n < 10000000) select count(*) from r) > 0;""",
    )
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            list(load(path).rows)
        took = time.monotonic() - t0
    finally:
        timer.cancel()
    assert took < 3.0, took
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # as it was


# ------------------------------------------------------------------ item 14: a name id StringIds lacks
@pytest.mark.parametrize("column", ["demangledName", "shortName"])
def test_a_kernel_name_id_missing_from_string_ids_is_refused(seeded, tmp_path, column):
    path = nsys_edit(
        tmp_path,
        f"delete from StringIds where id = (select {column} from {KERNEL} where rowid = 7)",
    )
    missing = (
        sqlite3.connect(path)
        .execute(f"select {column} from {KERNEL} where rowid = 7")
        .fetchone()[0]
    )
    message = f"edited.sqlite: {KERNEL} has {column} = {missing}, an id StringIds does not hold"
    refused(seeded, path, message)
    with pytest.raises(BadExport, match=message):  # the streamed reader too
        list(load(path).rows)


# ------------------------------------------------------------------ item 11: what the messages name
def test_duplicate_string_ids_are_named_as_such(seeded, tmp_path):
    """Was "the database is damaged or unreadable (UNIQUE constraint failed: nm.key, nm.sn)"."""
    path = _at(
        tmp_path,
        f"""
        create table S2 as select * from StringIds;
        insert into S2 select * from StringIds where id = (select demangledName from {KERNEL} limit 1);
        drop table StringIds; alter table S2 rename to StringIds;""",
    )
    refused(seeded, path, "edited.sqlite: the export's StringIds has duplicate ids")


def test_an_empty_capture_names_its_file(tmp_path):
    path = nsys_edit(
        tmp_path,
        f"delete from {KERNEL}",
        "delete from CUPTI_ACTIVITY_KIND_MEMCPY",
        "delete from CUPTI_ACTIVITY_KIND_MEMSET",
    )
    one_line_error(
        cli("import", path, db=tmp_path / "p.db"),
        "edited.sqlite: the capture holds no kernel launches and no CPU operator calls",
    )
    with pytest.raises(EmptyCapture, match="edited.sqlite: "):
        profkit.open_db(tmp_path / "q.db").import_file(path)


@pytest.fixture
def small_disk(tmp_path):
    """A 700 kB file system (tmpfs; needs root): room for a database, not for an unpacked export."""
    where = tmp_path / "small"
    where.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=700k", "tmpfs", str(where)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_gzip_import_on_a_full_disk_blames_the_disk(small_disk):
    """Was "nsys_resnet18_train_amp.sqlite.gz is not a readable gzip file: [Errno 28] ...": the
    gzip file is fine, the disk the database's runs folder is on is full."""
    db = small_disk / "p.db"
    r = cli("import", TRAIN, db=db)
    one_line_error(r, f"cannot decompress {TRAIN.name} into {small_disk / 'p-runs'}")
    assert (
        "No space left on device" in r.stderr
        and f"The disk holding {small_disk / 'p-runs'}" in r.stderr
    )
    assert "not a readable gzip" not in r.stderr
    # the run's folder, and its half-written copy, gone
    assert not list((small_disk / "p-runs").iterdir())
    assert cli_json("runs", db=db) == []


def test_a_gzip_unpacked_into_a_full_temporary_folder_says_so(tmp_path, monkeypatch):
    """The library's ``load`` of a gzipped export with no folder given unpacks into a temporary
    one: a full disk there (ENOSPC injected) is said so, with TMPDIR as the way out."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    real = os.fdopen

    def full(fd, *a, **k):
        f = real(fd, *a, **k)

        class Full:
            def __getattr__(self, name):
                return getattr(f, name)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                f.close()

            def write(self, data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        return Full()

    monkeypatch.setattr(os, "fdopen", full)
    with pytest.raises(
        StoreError,
        match=r"cannot decompress nsys_resnet18_fp16\.sqlite\.gz into the temporary "
        r"folder .*: No space left on device\. The disk holding .* is full .*TMPDIR",
    ):
        gunzip(NSYS)
    assert not list(tmp_path.glob("profkit-*/*"))  # no half-written copy left


# ------------------------------------------------------------------ item 10: Kineto held to the others' checks
def _kernel_edit(key: str, value):
    def edit(trace: dict) -> None:
        _first_kernel(trace)[1]["args"][key] = value

    return edit


@pytest.mark.parametrize(
    "key, value, shown, fault",
    [
        ("grid", [-1, 2, 1], "[-1, 2, 1]", "not three whole numbers from 0 to 2^31 - 1"),
        ("grid", "abc", "'abc'", "not three whole numbers from 0 to 2^31 - 1"),
        ("grid", [784, 2], "[784, 2]", "not three whole numbers from 0 to 2^31 - 1"),
        ("grid", [784.5, 2, 1], "[784.5, 2, 1]", "not three whole numbers from 0 to 2^31 - 1"),
        (
            "block",
            [8, 8, 2**40],
            "[8, 8, 1099511627776]",
            "not three whole numbers from 0 to 2^31 - 1",
        ),
        ("block", [True, 8, 1], "[True, 8, 1]", "not three whole numbers from 0 to 2^31 - 1"),
        ("stream", -7, "-7", "not a whole number from 0 to 2^63 - 1"),
        ("stream", "x", "'x'", "not a whole number from 0 to 2^63 - 1"),
        ("device", "gpu0", "'gpu0'", "not a whole number from 0 to 2^63 - 1"),
        ("device", -1, "-1", "not a whole number from 0 to 2^63 - 1"),
        ("device", 1.5, "1.5", "not a whole number from 0 to 2^63 - 1"),
    ],
    ids=[
        "grid-negative",
        "grid-text",
        "grid-two",
        "grid-fraction",
        "block-huge",
        "block-bool",
        "stream-negative",
        "stream-text",
        "device-text",
        "device-negative",
        "device-fraction",
    ],
)
def test_kineto_bad_grid_block_stream_device_is_refused(seeded, tmp_path, key, value, shown, fault):
    n = _first_kernel(
        json.loads(gzip.decompress((DATA / "torch" / "kineto_resnet18_fp16.json.gz").read_bytes()))
    )[0]
    refused(
        seeded,
        kineto_edit(tmp_path, _kernel_edit(key, value)),
        f"edited.json: traceEvents[{n}] (kernel 'void implicit_convolve_sgemm<__half, __half, 1024, 5, 5, 3, '): "
        f"args.{key} is {shown}, {fault}",
    )


KERNEL_0 = "kernel 'void implicit_convolve_sgemm<__half, __half, 1024, 5, 5, 3, '"


def _kernel_set(key: str, value):
    def edit(trace: dict) -> None:
        _first_kernel(trace)[1][key] = value

    return edit


@pytest.mark.parametrize(
    "edit, said",
    [
        (_kernel_set("ts", -5.0), f"({KERNEL_0}) has a negative start (ts -5.0 us)"),
        (_kernel_set("ts", -5), f"({KERNEL_0}) has a negative start (ts -5 us)"),
        (
            _kernel_edit("correlation", -3),
            f"({KERNEL_0}): args.correlation is -3, not a whole number from 0 to 2^63 - 1",
        ),
        (
            _kernel_edit("External id", 10**30),
            f"({KERNEL_0}): args['External id'] is {10**30}, not a whole number from 0 to 2^63 - 1",
        ),
        (
            _kernel_edit("External id", -1),
            f"({KERNEL_0}): args['External id'] is -1, not a whole number from 0 to 2^63 - 1",
        ),
        (_kernel_set("name", ""), "(kernel '') has an empty name"),
    ],
    ids=[
        "ts-negative",
        "ts-negative-int",
        "correlation-negative",
        "external-id-beyond-int64",
        "external-id-negative",
        "kernel-name-empty",
    ],
)
def test_kineto_negative_time_bad_id_or_empty_name_is_refused(seeded, tmp_path, edit, said):
    """Each was stored: a kernel at -5 us, correlation -3, an External id no int64 holds, a kernel
    with no name. Refused as the other importers refuse them, naming the file and the event."""
    n = _first_kernel(
        json.loads(gzip.decompress((DATA / "torch" / "kineto_resnet18_fp16.json.gz").read_bytes()))
    )[0]
    refused(seeded, kineto_edit(tmp_path, edit), f"edited.json: traceEvents[{n}] {said}")


@pytest.mark.parametrize("name, shown", [(5, "5"), (["H100"], "['H100']"), (True, "True")])
def test_kineto_gpu_name_that_is_no_string_is_refused(seeded, tmp_path, name, shown):
    """deviceProperties name 5 was stored as the GPU "5"."""

    def edit(trace: dict) -> None:
        trace["deviceProperties"][0]["name"] = name

    refused(
        seeded,
        kineto_edit(tmp_path, edit),
        f"edited.json: deviceProperties[0].name is {shown}, not a string",
    )


def test_kineto_kernel_without_grid_is_stored_with_its_grid_unknown(tmp_path):
    """As ncu's CSV without a Grid Size (and Kineto's own copies and sets, which have none): the
    grid is not known (NULL), the rest of the kernel kept; what a grid says is refused above."""

    def edit(trace: dict) -> None:
        del _first_kernel(trace)[1]["args"]["grid"]

    run = profkit.open_db(tmp_path / "k.db").import_file(kineto_edit(tmp_path, edit))
    assert run.kernel_count == 324
    rows = run.kernels()
    first = rows.sort_values("start_ns").iloc[0]
    assert first["name"].startswith("void implicit_convolve_sgemm")
    assert first[["grid_x", "grid_y", "grid_z"]].isna().all() and first["block_x"] == 8


def test_kineto_exact_duplicate_event_is_refused(seeded, tmp_path):
    """It was counted twice."""

    def edit(trace: dict) -> None:
        i, e = _first_kernel(trace)
        trace["traceEvents"].append(json.loads(json.dumps(e)))

    path = kineto_edit(tmp_path, edit)
    n = len(json.loads(path.read_text())["traceEvents"]) - 1
    refused(
        seeded,
        path,
        f"edited.json: traceEvents[{n}] (kernel 'void implicit_convolve_sgemm<__half, __half, 1024, "
        "5, 5, 3, ') repeats an earlier event: the same kernel at the same time on the same stream. "
        "Is it two traces merged?",
    )


def test_kineto_kernel_on_another_stream_at_the_same_time_is_no_duplicate(tmp_path):
    def edit(trace: dict) -> None:
        e = json.loads(json.dumps(_first_kernel(trace)[1]))
        e["args"]["stream"] += 1
        trace["traceEvents"].append(e)

    assert (
        profkit.open_db(tmp_path / "k.db").import_file(kineto_edit(tmp_path, edit)).kernel_count
        == 325
    )


def test_every_importer_is_held_to_the_same_launch_values():
    """The store's check of every row (the importers of rows: ncu, Kineto) holds them too."""
    check_row(kernel_row(0, "kernel", "k", "k", grid_x=2**31 - 1, stream=0, device=0))
    for column, value in [
        ("grid_x", -1),
        ("block_z", 2**31),
        ("stream", -7),
        ("device", "0"),
        ("grid_y", 1.0),
    ]:
        with pytest.raises(
            BadExport, match=f"launch 0 has {column} = {value!r}, not a whole number from 0 to "
        ):
            check_row(kernel_row(0, "kernel", "k", "k", **{column: value}))


# ------------------------------------------------------------------ item 12: long numbers, lone surrogates
def test_kineto_number_of_5001_digits_is_one_line(seeded, tmp_path):
    """Was a ValueError traceback (Python's limit on converting long integers)."""

    def edit(trace: dict) -> None:
        _first_kernel(trace)[1]["args"]["registers per thread"] = 10**5000

    path = tmp_path / "edited.json"
    trace = json.loads(
        gzip.decompress((DATA / "torch" / "kineto_resnet18_fp16.json.gz").read_bytes())
    )
    edit(trace)
    with sys_digits(6000):
        path.write_text(json.dumps(trace))
    refused(
        seeded,
        path,
        "edited.json is not a readable JSON trace: a number of more than 4,300 digits in the value "
        "at character",
    )


class sys_digits:
    """Python's limit on converting long integers, raised for a while (to write the trace)."""

    def __init__(self, n: int):
        self.n, self.was = n, sys.get_int_max_str_digits()

    def __enter__(self):
        sys.set_int_max_str_digits(self.n)

    def __exit__(self, *exc):
        sys.set_int_max_str_digits(self.was)


@pytest.mark.parametrize(
    "column, value, message",
    [
        ("gpu__time_duration.sum", "9" * 5001, "gpu__time_duration.sum is '99999999999"),
        ("Grid Size", "(" + "9" * 5001 + ", 1, 1)", "Grid Size is '(9999999999"),
        ("Stream", "9" * 5001, "Stream is '9999999999"),
    ],
)
def test_ncu_number_of_5001_digits_is_one_line(seeded, tmp_path, column, value, message):
    refused(seeded, ncu_edit(tmp_path, column, value), f"edited.csv row 3: {message}")


def test_kineto_lone_surrogates_are_stored_as_replacement_characters(tmp_path):
    """JSON can say "\\ud800" (half of a pair, no character): names, ranges, input types and the
    GPU's name hold U+FFFD there, as the nsys importer shows bytes that are not UTF-8; the import
    and every command that prints them work."""
    trace = json.loads(gzip.decompress(TORCH_RUN.read_bytes()))
    _first_kernel(trace)[1]["name"] = "k\ud800x"
    for e in trace["traceEvents"]:
        if e.get("cat") == "user_annotation":
            e["name"] = e["name"] + "\udfff"
        if e.get("cat") == "cpu_op" and e.get("args", {}).get("Input type"):
            e["args"]["Input type"] = [
                "c10::Half\udc00" if t else t for t in e["args"]["Input type"]
            ]
    trace["deviceProperties"][0]["name"] = "H100\ud83d"
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(trace))
    db = tmp_path / "p.db"
    r = cli("import", path, "--name", "s", db=db)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    rows = cli_json("kernels", "s", db=db)
    assert rows[0]["name"] == "k\ufffdx"
    assert any(row["nvtx_path"] and "\ufffd" in row["nvtx_path"] for row in rows)
    assert any(row["input_types"] and "c10::Half\ufffd" in row["input_types"] for row in rows)
    assert cli_json("runs", db=db)[0]["gpu_name"] == "H100\ufffd"
    for command in (["kernels", "s"], ["summary", "s"], ["ranges", "s"], ["runs"]):
        out = cli(*command, db=db)
        assert out.exit_code == 0 and "Traceback" not in out.output, (command, out.output)


def test_nsys_string_that_is_no_utf8_is_shown_with_replacement_characters(tmp_path):
    """An unpaired surrogate in StringIds (its CESU-8 bytes, no UTF-8): U+FFFD, no traceback."""
    path = nsys_edit(
        tmp_path,
        f"update StringIds set value = cast(x'6beda08078' as text) "
        f"where id = (select demangledName from {KERNEL} where rowid = 1)",
    )
    db = tmp_path / "p.db"
    assert cli("import", path, "--name", "s", db=db).exit_code == 0
    names = {row["name"] for row in cli_json("kernels", "s", db=db)}
    assert "k\ufffd\ufffd\ufffdx" in names
    assert "Traceback" not in cli("summary", "s", db=db).output


def test_ncu_csv_with_a_surrogate_is_one_line(seeded, tmp_path):
    path = ncu_edit(tmp_path, "Kernel Name", "k")
    path.write_bytes(path.read_bytes().replace(b'"k"', b'"k\xed\xa0\x80x"', 1))
    refused(seeded, path, "edited.csv is not a text CSV file")
