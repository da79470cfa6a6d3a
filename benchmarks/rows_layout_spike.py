"""Issue 39: the kernel rows of a stored run written as schema 15 stored them (``kernel_rows``,
a table: 31 columns a launch) against schema 16's layout, where what launches share (their
kernel, configuration, stream, thread, operator, module, verdict...) is stored once per run as
a group (``kernel_groups``) and each launch keeps only its own columns (``launches``: launch,
group, start, duration, innermost range, range path, counters: 8). The measurement that chose
schema 16, kept to measure it again: the group ids are assigned here before the timing starts
(an import numbers them with numpy, ``nsys_columns.launch_groups``), and nothing else of an
import is done.

Per layout, into a fresh database (16 KiB pages, WAL, as profkit makes them), timed apart: the
launches' insert of one statement from a scratch table in launch order, its commit, the file's
size once checkpointed, and reading every row back through profkit's own ``kernels`` view (and,
for schema 16, its ``kernel_rows`` view), as ``profkit kernels`` reads them.

    python benchmarks/rows_layout_spike.py DB [RUN]   # a profkit database, its first run by default
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
import time

from profkit.store.layout import (
    GROUP_COLUMNS,
    KERNEL_ROWS_VIEW,
    KERNELS_VIEW,
    LAUNCH_COLUMNS,
    STORED_COLUMNS,
)


def fresh(folder: str, name: str) -> sqlite3.Connection:
    path = os.path.join(folder, name)
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("pragma page_size = 16384")
    con.execute("pragma journal_mode = wal")
    con.execute("pragma synchronous = normal")
    return con


def timed(con: sqlite3.Connection, sql: str, args: list[int]) -> tuple[float, float]:
    t = time.perf_counter()
    con.execute("begin")
    con.execute(sql, args)
    t1 = time.perf_counter()
    con.execute("commit")
    return t1 - t, time.perf_counter() - t1


def layout_db(folder: str, name: str) -> sqlite3.Connection:
    """A fresh database of one layout, the scratch rows attached as ``s`` and their texts in."""
    con = fresh(folder, name)
    con.execute(f"attach database '{os.path.join(folder, 'scratch.db')}' as s")
    con.execute("create table strings (id integer primary key, text)")
    con.execute("insert into strings select * from s.strings")
    return con


def finish(con: sqlite3.Connection, folder: str, name: str) -> tuple[float, float]:
    """The database's size once checkpointed, and the time to read every row of ``kernels``;
    the database closed and removed."""
    con.execute("detach database s")
    con.execute("pragma wal_checkpoint(truncate)")
    size = os.path.getsize(os.path.join(folder, name))
    t = time.perf_counter()
    for _ in con.execute("select * from kernels where run_id = 1"):
        pass
    read = time.perf_counter() - t
    con.close()
    for suffix in ("", "-wal", "-shm"):
        path = os.path.join(folder, name + suffix)
        if os.path.exists(path):
            os.remove(path)
    return size, read


def main() -> None:
    db = sys.argv[1]
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    run = (
        int(sys.argv[2])
        if len(sys.argv) > 2
        else src.execute("select min(id) from runs").fetchone()[0]
    )
    cols = list(STORED_COLUMNS)
    with tempfile.TemporaryDirectory(prefix="rows-layout-") as folder:
        # the scratch rows: the run's rows in launch order, each with its group's number
        scratch = fresh(folder, "scratch.db")
        scratch.execute(f"attach database 'file:{db}?mode=ro' as src")
        scratch.execute(
            f"create table rows ({', '.join('launch_id integer primary key' if c == 'launch_id' else c for c in cols)}, grp)"
        )
        scratch.execute(
            f"insert into rows select {', '.join(cols)}, "
            f"dense_rank() over (order by {', '.join(f'{c} is null, {c}' for c in GROUP_COLUMNS)}) - 1 as grp "
            f"from src.kernel_rows where run_id = ? order by launch_id",
            [run],
        )
        scratch.execute("create table strings (id integer primary key, text)")
        scratch.execute("insert into strings select id, text from src.strings")
        n = scratch.execute("select count(*) from rows").fetchone()[0]
        groups = scratch.execute("select count(distinct grp) from rows").fetchone()[0]
        scratch.close()
        print(
            f"run {run}: {n:,} launches, {groups:,} groups ({n / max(groups, 1):.1f} launches a group)"
        )
        own = ", ".join(LAUNCH_COLUMNS[3:])
        for attempt in range(int(os.environ.get("ROUNDS", "3"))):
            # schema 15: one table
            a = layout_db(folder, f"now{attempt}.db")
            a.execute(
                f"create table kernel_rows ({', '.join(cols)}, primary key (run_id, launch_id)) without rowid"
            )
            a.execute(KERNELS_VIEW)
            ins, commit = timed(
                a,
                f"insert into kernel_rows select ?, {', '.join(cols[1:])} from s.rows order by launch_id",
                [1],
            )
            size, read = finish(a, folder, f"now{attempt}.db")
            # schema 16: the launches and their groups, the views profkit makes over them
            b = layout_db(folder, f"norm{attempt}.db")
            b.execute(
                f"create table kernel_groups (run_id, id, {', '.join(GROUP_COLUMNS)}, primary key (run_id, id)) without rowid"
            )
            b.execute(
                f"create table launches ({', '.join(LAUNCH_COLUMNS)}, primary key (run_id, launch_id)) without rowid"
            )
            b.execute(KERNEL_ROWS_VIEW)
            b.execute(KERNELS_VIEW)
            t = time.perf_counter()
            b.execute("begin")
            b.execute(
                f"insert into kernel_groups select ?, grp, {', '.join(GROUP_COLUMNS)} from s.rows "
                "where launch_id in (select min(launch_id) from s.rows group by grp) order by grp",
                [1],
            )
            b.execute("commit")
            g_ins = time.perf_counter() - t
            l_ins, l_commit = timed(
                b,
                f"insert into launches select ?, launch_id, grp, {own} from s.rows order by launch_id",
                [1],
            )
            nsize, nread = finish(b, folder, f"norm{attempt}.db")
            print(
                f"round {attempt + 1}: schema 15: insert {ins:.2f} s, commit {commit:.2f} s, {size / 1e6:.0f} MB, "
                f"read {read:.2f} s | schema 16: groups {g_ins:.2f} s (not what an import pays: "
                f"their rows picked here by a search), launches {l_ins:.2f} s, commit {l_commit:.2f} s, "
                f"{nsize / 1e6:.0f} MB, read {nread:.2f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
