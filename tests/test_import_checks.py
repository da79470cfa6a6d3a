"""The nsys bulk import's checks where it reads (issue 25): a row the import copies that is not
what an export holds fails a cheap test made in a pass the import makes anyway (the launch
calls' unique key, the operations' kind NOT NULL, the host syncs' values), and only then do the
export's own checks run, to name the row. Each bad export here, made by editing a committed
capture, is refused in one line with the database unchanged, by ``profkit import`` and by the
streamed reader as it reads. And the aggregates the bulk import groups from its working table
are the ones grouped from the run's rows."""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

import pytest

import profkit
from profkit.errors import BadExport
from profkit.parse import load
from profkit.store import Store, writes
from profkit.store.writes import write_aggregates

from .conftest import DATA
from .test_bad_inputs import NSYS, nsys_edit, seeded  # noqa: F401 (seeded: a fixture)
from .test_hostile_parsers import refused

RT = "CUPTI_ACTIVITY_KIND_RUNTIME"
K = "CUPTI_ACTIVITY_KIND_KERNEL"
# A runtime call that launched nothing (no GPU operation has its correlationId), and one that
# blocked the host (read by the host syncs before the import copies the table).
NOT_A_LAUNCH = (
    f"(select rowid from {RT} where correlationId not in (select correlationId from "
    "CUPTI_ACTIVITY_KIND_KERNEL union select correlationId from CUPTI_ACTIVITY_KIND_MEMCPY "
    "union select correlationId from CUPTI_ACTIVITY_KIND_MEMSET) "
    "and nameId not in (select id from StringIds where value like 'cuda%Synchronize%') limit 1)"
)
A_SYNC = (
    f"(select rowid from {RT} where nameId = (select id from StringIds "
    "where value like 'cudaStreamSynchronize%') limit 1)"
)

CASES = {
    # the launch calls' unique key: a call listed twice, launch or not
    "runtime call not a launch twice": (
        f"insert into {RT} select * from {RT} where rowid = {NOT_A_LAUNCH}",
        f"{RT} lists the launch call with correlationId",
    ),
    "runtime sync call twice": (
        f"insert into {RT} select * from {RT} where rowid = {A_SYNC}",
        f"{RT} lists the launch call with correlationId",
    ),
    # the launch calls' key NULL: a value that is not an integer
    "runtime correlationId text": (
        f"update {RT} set correlationId = 'x' where rowid = {NOT_A_LAUNCH}",
        f"{RT} has correlationId = 'x', not an integer",
    ),
    "runtime end real": (
        f"update {RT} set end = end + 0.5 where rowid = {NOT_A_LAUNCH}",
        f"{RT} has end = ",
    ),
    "runtime start text on a launch": (
        f"update {RT} set start = 'early' where correlationId = "
        "(select correlationId from CUPTI_ACTIVITY_KIND_KERNEL limit 1)",
        f"{RT} has start = 'early', not an integer",
    ),
    # the host syncs' values
    "sync call start text": (
        f"update {RT} set start = 'soon' where rowid = {A_SYNC}",
        f"{RT} has start = 'soon', not an integer",
    ),
    "sync call globalTid real": (
        f"update {RT} set globalTid = globalTid + 0.5 where rowid = {A_SYNC}",
        f"{RT} has globalTid = ",
    ),
    # the host syncs' sort of the operations (before the import copies them)
    "kernel start real": (
        "update CUPTI_ACTIVITY_KIND_KERNEL set start = start + 0.5 where rowid = 4",
        "CUPTI_ACTIVITY_KIND_KERNEL has start = ",
    ),
    "memset end text": (
        "update CUPTI_ACTIVITY_KIND_MEMSET set end = 'x' where rowid = 2",
        "CUPTI_ACTIVITY_KIND_MEMSET has end = 'x', not an integer (row 2)",
    ),
    # the operations' kind NOT NULL
    "kernel streamId text": (
        "update CUPTI_ACTIVITY_KIND_KERNEL set streamId = 'seven' where rowid = 4",
        "CUPTI_ACTIVITY_KIND_KERNEL has streamId = 'seven', not an integer (row 4)",
    ),
    "kernel globalPid real": (
        "update CUPTI_ACTIVITY_KIND_KERNEL set globalPid = 1.5 where rowid = 4",
        "CUPTI_ACTIVITY_KIND_KERNEL has globalPid = 1.5, not an integer (row 4)",
    ),
    "kernel demangledName text": (
        "update CUPTI_ACTIVITY_KIND_KERNEL set demangledName = 'gemm' where rowid = 4",
        "CUPTI_ACTIVITY_KIND_KERNEL has demangledName = 'gemm', not an integer (row 4)",
    ),
    "kernel gridY too large": (
        f"update CUPTI_ACTIVITY_KIND_KERNEL set gridY = {2**31} where rowid = 4",
        f"gridY = {2**31}, not a whole number from 0 to 2^31 - 1 (row 4)",
    ),
    "memcpy copyKind text": (
        "update CUPTI_ACTIVITY_KIND_MEMCPY set copyKind = 'h2d' where rowid = 2",
        "CUPTI_ACTIVITY_KIND_MEMCPY has copyKind = 'h2d', not an integer (row 2)",
    ),
    "memcpy end text": (
        "update CUPTI_ACTIVITY_KIND_MEMCPY set end = 'later' where rowid = 2",
        "CUPTI_ACTIVITY_KIND_MEMCPY has end = 'later', not an integer (row 2)",
    ),
    "memset deviceId real": (
        "update CUPTI_ACTIVITY_KIND_MEMSET set deviceId = 0.5 where rowid = 1",
        "CUPTI_ACTIVITY_KIND_MEMSET has deviceId = 0.5, not an integer (row 1)",
    ),
    # neighbours in launch order with one launch: grouped, a repeat found
    "memcpy listed twice": (
        "insert into CUPTI_ACTIVITY_KIND_MEMCPY select * from CUPTI_ACTIVITY_KIND_MEMCPY "
        "where rowid = 3",
        "CUPTI_ACTIVITY_KIND_MEMCPY lists the same operation twice (rows 3 and",
    ),
    "memset listed twice": (
        "insert into CUPTI_ACTIVITY_KIND_MEMSET select * from CUPTI_ACTIVITY_KIND_MEMSET "
        "where rowid = 1",
        "CUPTI_ACTIVITY_KIND_MEMSET lists the same operation twice (rows 1 and",
    ),
    # a copy whose neighbour in launch order is another process's operation with the same key
    # (correlation ids start again in each process): the whole run of rows with that key is grouped
    "kernel twice, another process's between": (
        (
            f"insert into {K} select * from {K} where rowid = 101",
            f"update {K} set globalPid = globalPid + {1 << 24}, "
            f"end = (select r.start from {RT} r where r.correlationId = {K}.correlationId "
            f"and (r.globalTid >> 24) = ({K}.globalPid >> 24)) + (end - start), "
            f"start = (select r.start from {RT} r where r.correlationId = {K}.correlationId "
            f"and (r.globalTid >> 24) = ({K}.globalPid >> 24)) where rowid = (select max(rowid) from {K})",
            f"insert into {K} select * from {K} where rowid = 101",
        ),
        f"{K} lists the same operation twice (rows 101 and",
    ),
    # ids are never negative: the import's working tables key with negative values of their own
    "kernel shortName negative": (
        f"update {K} set shortName = {-(2**63)} where rowid = 50",
        f"{K} has shortName = {-(2**63)}, a negative id (row 50)",
    ),
    "memcpy deviceId negative": (
        "update CUPTI_ACTIVITY_KIND_MEMCPY set deviceId = -3 where rowid = 2",
        "CUPTI_ACTIVITY_KIND_MEMCPY has deviceId = -3, a negative id (row 2)",
    ),
    "kernel with no launch call twice": (
        (
            f"delete from {RT} where correlationId = (select correlationId from CUPTI_ACTIVITY_KIND_KERNEL where rowid = 6)",
            "insert into CUPTI_ACTIVITY_KIND_KERNEL select * from CUPTI_ACTIVITY_KIND_KERNEL where rowid = 6",
        ),
        "CUPTI_ACTIVITY_KIND_KERNEL lists the same operation twice (rows 6 and",
    ),
}


def edited(tmp_path: Path, case: str) -> Path:
    edit = CASES[case][0]
    path = nsys_edit(tmp_path, *((edit,) if isinstance(edit, str) else edit))
    return path


def test_the_edits_hit_what_they_mean(tmp_path):
    """The rows the cases edit exist in the capture (else a case would test nothing)."""
    path = nsys_edit(tmp_path)
    con = sqlite3.connect(path)
    assert con.execute(
        f"select {NOT_A_LAUNCH} is not null and {A_SYNC} is not null"
    ).fetchone() == (1,)
    assert con.execute(
        "select count(*) from CUPTI_ACTIVITY_KIND_MEMSET where rowid = 1"
    ).fetchone() == (1,)
    con.close()


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_export_is_refused_in_one_line_and_stores_nothing(seeded, tmp_path, case):
    refused(seeded, edited(tmp_path, case), CASES[case][1])


@pytest.mark.parametrize("case", list(CASES))
def test_the_streamed_reader_refuses_it_as_it_reads(tmp_path, case):
    path, message = edited(tmp_path, case), CASES[case][1]
    with pytest.raises(
        BadExport, match=message.split(" (row")[0].replace("(", r"\(").replace("^", r"\^")
    ):
        list(load(path).rows)


def test_a_cuda_graph_kernel_listed_twice_is_refused(seeded, tmp_path):
    """A CUDA graph's kernels share their launch: neighbours with one launch are the rule there,
    and the grouping of those rows still finds the one repeated."""
    path = tmp_path / "graphs.sqlite"
    path.write_bytes(
        gzip.decompress((DATA / "diff" / "r18_fp16_graphs_nsys.sqlite.gz").read_bytes())
    )
    con = sqlite3.connect(path)
    row = con.execute(
        "select rowid from CUPTI_ACTIVITY_KIND_KERNEL where correlationId in (select correlationId "
        "from CUPTI_ACTIVITY_KIND_KERNEL group by correlationId having count(*) > 3) "
        "order by rowid limit 1 offset 2"
    ).fetchone()[0]
    con.execute(
        f"insert into CUPTI_ACTIVITY_KIND_KERNEL select * from CUPTI_ACTIVITY_KIND_KERNEL where rowid = {row}"
    )
    con.commit()
    con.close()
    refused(
        seeded, path, f"CUPTI_ACTIVITY_KIND_KERNEL lists the same operation twice (rows {row} and"
    )


def test_a_good_export_imports_as_before(tmp_path):
    """No cheap test fires on a good capture: its kernels are all there."""
    assert profkit.open_db(tmp_path / "n.db").import_file(NSYS).kernel_count == 913


@pytest.mark.parametrize(
    "export",
    [
        "nsys/nsys_resnet18_fp16.sqlite.gz",
        "diff/r18_fp16_graphs_nsys.sqlite.gz",
        "ddp/nsys_resnet50_ddp_train_amp.sqlite.gz",
    ],
)
def test_the_bulk_imports_aggregates_are_those_of_its_rows(tmp_path, monkeypatch, export):
    """The aggregates written from the bulk import's groups (not from its rows: the grouping of
    rows is not called) are the ones grouped again from the run's rows, row for row."""
    path = tmp_path / "e.sqlite"
    path.write_bytes(gzip.decompress((DATA / export).read_bytes()))
    from_rows = []
    fill = writes.fill_fine_aggregates
    monkeypatch.setattr(
        writes, "fill_fine_aggregates", lambda *a: (from_rows.append(a[1]), fill(*a))
    )
    run = profkit.open_db(tmp_path / "p.db").import_file(path, name="g")
    assert from_rows == []
    store = Store(tmp_path / "p.db")

    def tables() -> tuple[list[tuple], ...]:
        return tuple(
            sorted(map(repr, store.conn.execute(f"select * from {t} where run_id = ?", [run.id])))
            for t in ("kernel_aggs", "path_aggs")
        )

    bulk = tables()
    assert bulk[0] and store.prepared_aggregates is None
    with store.write():
        write_aggregates(store, run.id)
    assert tables() == bulk
