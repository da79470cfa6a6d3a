"""The Nsight Systems importer (profkit.parse.nsys_sqlite over profkit.parse.nsys_export) on
real H100 captures (an inference and an AMP training run), checked against ``nsys stats``
outputs made from the same files; schema checks; bad input; a live ``--tool nsys`` run."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
import sqlite3
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from profkit.errors import BadExport
from profkit.parse import load

from .conftest import (
    NSYS_DATA,
    cli,
    cli_json,
    fake_nsys,
    has_nsys,
    needs_gpu_nsys,
    one_line_error,
)

CAPTURES = ["nsys_resnet18_fp16", "nsys_resnet18_train_amp", "nsys_run_resnet18_train_amp"]


def oracle(name: str, report: str) -> list[dict]:
    with open(NSYS_DATA / f"{name}_{report}.csv", newline="") as f:
        return list(csv.DictReader(f))


def read(path):
    c = load(path)
    rows = list(c.rows)
    return c, rows


@pytest.mark.parametrize("name", CAPTURES)
def test_kernels_match_cuda_gpu_kern_sum(name, nsys_dir):
    c = load(nsys_dir / f"{name}.sqlite")
    assert c.ranges == [] and c.range_paths  # counted as the rows stream past, known before
    rows = list(c.rows)
    assert c.ranges
    mine = defaultdict(lambda: [0, 0])
    for r in rows:
        if r["kind"] == "kernel":
            mine[r["name"]][0] += 1
            mine[r["name"]][1] += r["duration_ns"]
    expected = {
        o["Name"]: [int(o["Instances"]), int(o["Total Time (ns)"])]
        for o in oracle(name, "cuda_gpu_kern_sum")
    }
    assert dict(mine) == expected


@pytest.mark.parametrize("name", CAPTURES)
def test_kinds_and_launch_order(name, nsys_dir):
    path = nsys_dir / f"{name}.sqlite"
    c, rows = read(path)
    con = sqlite3.connect(path)
    counts = {
        kind: con.execute(f"select count(*) from CUPTI_ACTIVITY_KIND_{kind.upper()}").fetchone()[0]
        for kind in ("kernel", "memcpy", "memset")
    }
    assert Counter(r["kind"] for r in rows) == counts
    assert [r["launch_id"] for r in rows] == list(range(len(rows)))
    assert all(r["thread_id"] is not None for r in rows)
    k = next(r for r in rows if r["kind"] == "kernel")
    assert k["short_name"] and k["grid_x"] and k["block_x"] and k["stream"] is not None
    assert (c.gpu_name, c.compute_capability, c.tool) == ("NVIDIA H100 80GB HBM3", "9.0", "nsys")


@pytest.mark.parametrize("name", CAPTURES)
def test_ranges_match_nvtx_gpu_proj_sum(name, nsys_dir):
    c, rows = read(nsys_dir / f"{name}.sqlite")
    mine = {f"{r['domain']}:{r['name']}": r for r in c.ranges}
    proj = oracle(name, "nvtx_gpu_proj_sum")
    assert len(proj) == len(mine)
    for o in proj:
        r = mine[o["Range"]]
        assert r["gpu_ops"] == int(o["Total GPU Ops"])
        assert r["wall_ns"] == int(o["Total Range Time (ns)"])


@pytest.mark.parametrize("name", CAPTURES[:2])
def test_kernels_per_range_match_nvtx_kern_sum(name, nsys_dir):
    c, rows = read(nsys_dir / f"{name}.sqlite")
    mine = defaultdict(lambda: [0, 0])
    for r in rows:
        if r["kind"] == "kernel" and r["nvtx_path"]:
            key = (r["nvtx_path"].replace("@", ":"), r["name"])
            mine[key][0] += 1
            mine[key][1] += r["duration_ns"]
    expected = {
        (o["NVTX Range"], o["Kernel Name"]): [int(o["Kern Inst"]), int(o["Total Time (ns)"])]
        for o in oracle(name, "nvtx_kern_sum")
        if o["NVTX Range"]
    }
    assert dict(mine) == expected
    for r in c.ranges:
        assert r["kernels"] == sum(
            v[0] for (rng, _), v in mine.items() if rng == f"{r['domain']}:{r['name']}"
        )


def test_training_step_backward_runs_on_another_thread(nsys_dir):
    c, rows = read(nsys_dir / "nsys_resnet18_train_amp.sqlite")
    main = {r["thread_id"] for r in rows if r["nvtx_range"]}
    assert len(main) == 1
    for r in c.ranges:
        assert (r["kernels"], r["gpu_ops"]) == (182, 187)
        # what other threads (autograd's) launched while the range was open
        inside = [x for x in rows if x["kind"] == "kernel" and x["thread_id"] not in main]
        assert r["other_thread_kernels"] == 238 and len(inside) >= 2 * 238


def test_capture_range_holds_only_the_measured_step(nsys_dir):
    """Made by `profkit run resnet18_train --tool nsys --precision amp` (cudaProfilerApi capture
    range): every kernel is the measured step's, launched in the range or by autograd's thread."""
    c, rows = read(nsys_dir / "nsys_run_resnet18_train_amp.sqlite")
    (r,) = c.ranges
    kernels = [x for x in rows if x["kind"] == "kernel"]
    assert (r["kernels"], r["gpu_ops"], r["other_thread_kernels"]) == (179, 182, 234)
    assert len(kernels) == r["kernels"] + r["other_thread_kernels"] == 413


def test_import_ranges_and_kernels_cli(nsys_dir, db):
    r = cli("import", str(nsys_dir / "nsys_resnet18_train_amp.sqlite"), "--name", "t", db=db)
    assert r.exit_code == 0, r.output
    run = json.loads(cli("runs", "-f", "json", db=db).stdout)[0]
    assert (run["tool"], run["workload"], run["precision"], run["kernel_count"]) == (
        "nsys",
        "resnet18_train",
        "amp",
        2102,
    )
    ks = json.loads(cli("kernels", "t", "-f", "json", db=db).stdout)
    assert Counter(k["kind"] for k in ks) == {"kernel": 2102, "memcpy": 199, "memset": 39}
    assert {k["evidence"] for k in ks if k["kind"] == "kernel"} <= {"name", "none"}
    assert all(
        k["tensor_core"] is False and k["family"] == "memory" for k in ks if k["kind"] != "kernel"
    )
    rs = json.loads(cli("ranges", "t", "-f", "json", db=db).stdout)
    assert [(x["name"], x["kernels"], x["gpu_ops"], x["other_thread_kernels"]) for x in rs] == [
        ("resnet18_train.amp.eager.iter0", 182, 187, 238),
        ("resnet18_train.amp.eager.iter1", 182, 187, 238),
    ]
    assert all(x["gpu_time_ns"] > 0 and x["wall_ns"] > x["gpu_time_ns"] for x in rs)
    table = " ".join(cli("ranges", "t", db=db).stdout.split())
    assert "476 kernels were launched by other threads" in table and "autograd" in table
    s = json.loads(cli("summary", "t", "-f", "json", db=db).stdout)
    assert s["kernels"] == 2102 and s["evidence"].keys() <= {"name", "none"}
    assert {k: v["count"] for k, v in s["memory_ops"].items()} == {"memcpy": 199, "memset": 39}
    assert s["memory_ops"]["memcpy"]["time_ns"] == sum(
        k["duration_ns"] for k in ks if k["kind"] == "memcpy"
    )
    assert "besides the kernels: 199 memcpy" in " ".join(cli("summary", "t", db=db).stdout.split())


def test_ranges_for_ncu_and_torch_runs(db):
    from .conftest import DATA

    assert (
        cli(
            "import", str(DATA / "ncu" / "resnet18_fp16_eager.raw.csv.gz"), "--name", "n", db=db
        ).exit_code
        == 0
    )
    rs = json.loads(cli("ranges", "n", "-f", "json", db=db).stdout)
    assert [(x["name"], x["kernels"], x["wall_ns"]) for x in rs] == [
        ("resnet18.fp16.eager.iter0", 162, None)
    ]
    assert (
        cli(
            "import", str(DATA / "torch" / "kineto_resnet18_fp16.json.gz"), "--name", "k", db=db
        ).exit_code
        == 0
    )
    rs = json.loads(cli("ranges", "k", "-f", "json", db=db).stdout)
    assert [x["kernels"] for x in rs] == [162, 162] and all(x["wall_ns"] for x in rs)
    assert cli("ranges", "k", "-f", "csv", db=db).exit_code == 0


def _copy(nsys_dir, tmp_path, sql: str):
    p = tmp_path / "x.sqlite"
    shutil.copy(nsys_dir / "nsys_resnet18_fp16.sqlite", p)
    con = sqlite3.connect(p)
    con.executescript(sql)
    con.commit()
    con.close()
    return p


def test_unknown_schema_refused(nsys_dir, tmp_path):
    p = _copy(
        nsys_dir,
        tmp_path,
        "update META_DATA_EXPORT set value = '2' where name = 'EXPORT_SCHEMA_VERSION_MAJOR';"
        "update META_DATA_EXPORT set value = '2.7.0' where name = 'EXPORT_SCHEMA_VERSION';",
    )
    with pytest.raises(BadExport, match="schema 2.7.0 is not a layout profkit knows"):
        load(p)
    p = _copy(
        nsys_dir, tmp_path, "alter table CUPTI_ACTIVITY_KIND_RUNTIME drop column correlationId;"
    )
    with pytest.raises(BadExport, match="CUPTI_ACTIVITY_KIND_RUNTIME lacks correlationId"):
        load(p)


def test_bad_nsys_inputs_one_line_each(nsys_dir, tmp_path, db):
    assert (
        cli(
            "import", str(nsys_dir / "nsys_resnet18_fp16.sqlite"), "--name", "keep", db=db
        ).exit_code
        == 0
    )
    plain = tmp_path / "plain.sqlite"
    sqlite3.connect(plain).execute("create table t (x)")
    (tmp_path / "junk.sqlite").write_bytes(b"not a database" * 300)
    no_kernels = _copy(nsys_dir, tmp_path, "drop table CUPTI_ACTIVITY_KIND_KERNEL;")
    no_kernels.rename(tmp_path / "nokern.sqlite")
    cases = {
        plain: "not an Nsight Systems export",
        tmp_path / "junk.sqlite": "not a readable SQLite file",
        tmp_path / "nokern.sqlite": "holds no CUDA kernels",
        db: "not an Nsight Systems export",
    }
    if not has_nsys():
        (tmp_path / "r.nsys-rep").write_bytes(b"x")
        (tmp_path / "r.qdstrm").write_bytes(b"x")
        cases[tmp_path / "r.nsys-rep"] = "needs Nsight Systems"
        cases[tmp_path / "r.qdstrm"] = "needs Nsight Systems"
    for path, message in cases.items():
        one_line_error(cli("import", str(path), db=db), message)
    assert [x["name"] for x in cli_json("runs", db=db)] == ["keep"]


@needs_gpu_nsys
def test_run_under_nsys(db, tmp_path):
    """A training step under nsys: profkit's iteration ranges are start/end ranges, the
    process's, so each holds the whole step, the backward kernels autograd's thread launched
    included; the capture (cudaProfilerStart/Stop) holds nothing else."""
    r = cli(
        "run",
        "resnet18_train",
        "--tool",
        "nsys",
        "--precision",
        "amp",
        "--batch-size",
        "2",
        "--iters",
        "2",
        "--name",
        "tr",
        db=db,
    )
    assert r.exit_code == 0, r.output
    rs = json.loads(cli("ranges", "tr", "-f", "json", db=db).stdout)
    assert [x["name"] for x in rs] == [
        "resnet18_train.amp.eager.iter0",
        "resnet18_train.amp.eager.iter1",
    ]
    assert all(x["kernels"] > 0 and x["other_thread_kernels"] == 0 for x in rs)
    ks = json.loads(cli("kernels", "tr", "-f", "json", db=db).stdout)
    kernels = [k for k in ks if k["kind"] == "kernel"]
    assert all(k["nvtx_range"] for k in kernels) and len(kernels) == sum(x["kernels"] for x in rs)
    assert len({k["thread_id"] for k in kernels}) == 2  # the main thread and autograd's
    # The run's export holds the tables profkit reads alone (nsys export --tables), named apart
    # from the whole export nsys stats makes beside the report; it imports as the whole does.
    import profkit

    raw = profkit.open_db(db).run("tr").raw_files
    report, export = Path(raw["nsys-rep"]), Path(raw["nsys-sqlite"])
    assert export.name == "report.profkit.sqlite" and not (report.parent / "report.sqlite").exists()
    whole = tmp_path / "whole.sqlite"
    subprocess.run(
        ["nsys", "export", "--type", "sqlite", "--output", str(whole), str(report)],
        check=True,
        capture_output=True,
    )
    with sqlite3.connect(export) as a, sqlite3.connect(whole) as b:
        tables = "select name from sqlite_master where type = 'table'"
        assert {r[0] for r in a.execute(tables)} < {r[0] for r in b.execute(tables)}
        # the runtime calls (exported by a second nsys at once) name the same strings
        for q in (
            "select r.rowid, r.start, r.end, r.correlationId, s.value from CUPTI_ACTIVITY_KIND_RUNTIME r "
            "join StringIds s on s.id = r.nameId order by r.rowid",
            "select k.rowid, k.start, k.correlationId, s.value from CUPTI_ACTIVITY_KIND_KERNEL k "
            "join StringIds s on s.id = k.demangledName order by k.rowid",
        ):
            assert a.execute(q).fetchall() == b.execute(q).fetchall()
    imported = []
    for i, path in enumerate((export, whole)):
        assert cli("import", str(path), "--name", "x", db=tmp_path / f"{i}.db").exit_code == 0
        imported.append(
            [
                cli(what, "x", "-f", "json", db=tmp_path / f"{i}.db").stdout
                for what in ("kernels", "ranges")
            ]
        )
    assert imported[0] == imported[1]


def test_names_that_are_not_utf8_text_import_as_text(nsys_dir, tmp_path):
    """A kernel name stored as a BLOB with bytes that are not UTF-8 (and an NVTX text that is not
    UTF-8) imports as text with U+FFFD, and every output of the run works."""
    import shutil
    import sqlite3

    import profkit

    from .conftest import cli_json

    path = tmp_path / "odd.sqlite"
    shutil.copy(nsys_dir / "nsys_resnet18_fp16.sqlite", path)
    con = sqlite3.connect(path)
    kernel_name = con.execute(
        "select demangledName from CUPTI_ACTIVITY_KIND_KERNEL limit 1"
    ).fetchone()[0]
    con.execute(
        "update StringIds set value = ? where id = ?", (b"odd<\xff\xfe>_kernel", kernel_name)
    )
    text_id = con.execute(
        "select textId from NVTX_EVENTS where textId is not null limit 1"
    ).fetchone()[0]
    con.execute(
        "update StringIds set value = cast(? as text) where id = ?", (b"range\xff", text_id)
    )
    con.commit()
    con.close()
    db = profkit.open_db(tmp_path / "d.db")
    run = db.import_file(path, name="odd")
    assert "odd<\ufffd\ufffd>_kernel" in set(run.kernels()["name"])
    assert any("\ufffd" in r["name"] for r in run.range_rows())
    assert cli_json("kernels", "odd", db=db.path) and cli_json("ranges", "odd", db=db.path)
    assert run.report(tmp_path / "odd.html").exists()


@pytest.mark.parametrize(
    "name", ["nsys_resnet18_fp16", "nsys_resnet18_train_amp", "nsys_run_resnet18_train_amp"]
)
@pytest.mark.parametrize("edit", [None, "crossing", "zero-length", "two short names", "copy kinds"])
def test_bulk_import_equals_the_streamed_rows(tmp_path, name, edit):
    """The store writes an nsys export in SQL (Capture.bulk); the streamed rows are the same
    table, range rows included. Also with a range of another domain that crosses the
    iteration ranges on the same thread (push/pop stacks are per domain), and with a range
    that ends when it starts (it holds nothing)."""
    from profkit.classify import classified
    from profkit.parse import load
    from profkit.store import Store

    path = NSYS_DATA / f"{name}.sqlite.gz"
    plain = tmp_path / "export.sqlite"
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    if edit in ("two short names", "copy kinds"):
        con = sqlite3.connect(plain)
        if edit == "two short names":  # one kernel's short name id swapped for another's
            other = con.execute("select max(shortName) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[
                0
            ]
            con.execute(
                "update CUPTI_ACTIVITY_KIND_KERNEL set shortName = ? where rowid = "
                "(select min(rowid) from CUPTI_ACTIVITY_KIND_KERNEL where shortName != ?)",
                [other, other],
            )
        else:  # a copy of a kind the export's enum does not name
            con.execute(
                "update CUPTI_ACTIVITY_KIND_MEMCPY set copyKind = 999 where rowid = "
                "(select max(rowid) from CUPTI_ACTIVITY_KIND_MEMCPY)"
            )
        con.commit()
        con.close()
    elif edit:
        con = sqlite3.connect(plain)
        start, end, tid = con.execute(
            "select start, end, globalTid from NVTX_EVENTS where eventType = 59 "
            "order by start desc limit 1"
        ).fetchone()
        first = start - (end - start) // 3 if edit == "crossing" else start + (end - start) // 2
        last = start + (end - start) // 3 if edit == "crossing" else first
        con.execute(
            "insert into NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) values (?, ?, 59, ?, ?, 0)",
            [first, last, f"user {edit}", tid],
        )
        con.commit()
        con.close()
    rows = list(load(plain).rows)
    streamed = classified(load(plain))
    streamed.bulk = None
    store = Store(tmp_path / "a.db")
    via_rows = store.add_run({"name": "rows", "source": "import"}, streamed)
    via_sql = store.add_run({"name": "sql", "source": "import"}, classified(load(plain)))
    assert list(store.iter_kernels(via_sql.id)) == list(store.iter_kernels(via_rows.id))
    assert [r["launch_id"] for r in rows] == list(range(len(rows)))
    assert store.ranges(via_sql.id) == store.ranges(via_rows.id)
    assert (via_sql.kernel_count, via_sql.gpu_time_ns, via_sql.info["notes"]) == (
        via_rows.kernel_count,
        via_rows.gpu_time_ns,
        via_rows.info["notes"],
    )


def test_paths_with_uri_characters(tmp_path):
    """The export is opened, and attached to the database, by a `file:` URI: a folder or file
    named with ?, #, % or spaces is still that file."""
    folder = tmp_path / "a ?#%b"
    folder.mkdir()
    export = folder / "ex port#1?.sqlite"
    export.write_bytes(gzip.decompress((NSYS_DATA / "nsys_resnet18_fp16.sqlite.gz").read_bytes()))
    db = folder / "p#?.db"
    r = cli("import", export, "--name", "odd", db=db)
    assert r.exit_code == 0, r.output
    assert cli_json("summary", "odd", db=db)["kernels"] == 913
    # no stray files
    assert not any("file:" in p.name or "mode=ro" in p.name for p in folder.iterdir())


def test_the_readers_modules_are_imported_while_nsys_exports(tmp_path, monkeypatch):
    """While nsys exports a report (its own process), the export's readers' modules are
    imported on a thread beside it; that thread has ended when the export is read (two
    threads importing pyarrow and numpy at once can each see the other's half made). The tool
    stands in here for nsys, writing one of the committed exports where nsys would (FAKE_NSYS)."""
    import sys
    import threading

    from profkit import parse
    from profkit.tools import runner

    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "profkit_slow_reader.py").write_text("import time\ntime.sleep(0.3)\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    monkeypatch.setattr(parse, "EXPORT_READERS", ("profkit_slow_reader", "no_such_module_x"))
    monkeypatch.delitem(sys.modules, "profkit_slow_reader", raising=False)
    during: list[bool] = []

    capture = runner.capture

    def exporting(argv, timeout=60):
        during.append(
            any(t.name == "profkit-imports" and t.is_alive() for t in threading.enumerate())
        )
        return capture(argv, timeout)

    fake_nsys(tmp_path, monkeypatch, NSYS_DATA / "nsys_resnet18_train_amp.sqlite.gz")
    monkeypatch.setattr(runner, "capture", exporting)
    report = tmp_path / "r.nsys-rep"
    report.write_bytes(b"a report")
    export = parse.export_nsys(report, tmp_path / "run")
    assert during == [True]
    assert not any(t.name == "profkit-imports" and t.is_alive() for t in threading.enumerate())
    assert "profkit_slow_reader" in sys.modules  # and a module that is missing is its reader's
    assert load(export).rows is not None
