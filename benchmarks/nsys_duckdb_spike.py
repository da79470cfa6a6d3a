"""Issue 39's lead for the 2-core target: the 2-million-kernel export's launch-call join, launch
numbering and grouping in DuckDB, reading the SQLite export through DuckDB's sqlite extension,
then the rows written into a SQLite file through it: what the import's SQLite statements take
9+ s for (benchmarks/RESULTS.md, "Issue 39, second session"). A spike, not profkit's code: the
rows here have 16 columns, not the kernel table's, and nothing is checked.

    pip install duckdb==1.4.4 duckdb-ext-sqlite   # beside profkit; not a dependency of it
    python benchmarks/nsys_scale.py --import-only  # makes /tmp/nsys-scale/synthetic.sqlite
    python benchmarks/nsys_duckdb_spike.py [THREADS] [EXPORT]
"""

import glob
import os
import sqlite3
import sys
import time

import duckdb
import duckdb_ext  # the wheel duckdb-ext-sqlite installs the extension under it

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
export = sys.argv[2] if len(sys.argv) > 2 else "/tmp/nsys-scale/synthetic.sqlite"

ext = glob.glob(
    os.path.join(
        list(duckdb_ext.__path__)[0], "extensions", "*", "*", "sqlite_scanner.duckdb_extension"
    )
)[0]
con = duckdb.connect(config={"threads": threads, "allow_unsigned_extensions": "true"})
con.execute(f"LOAD '{ext}'")
con.execute(f"ATTACH '{export}' AS src (TYPE sqlite, READ_ONLY)")
t0 = time.monotonic()
last = [t0]


def stage(name):
    now = time.monotonic()
    print(f"{name}: {now - last[0]:.2f} s", flush=True)
    last[0] = now


con.execute("""create temp table rt as select correlationId as corr, globalTid >> 24 as pid, start, globalTid as gtid
               from src.CUPTI_ACTIVITY_KIND_RUNTIME""")
stage("runtime read")
con.execute("""create temp table ops as
  select 'kernel' as kind, demangledName as key, shortName as sn, start, "end", deviceId as dev, streamId as stream,
         correlationId as corr, globalPid as gpid, gridX as gx, gridY as gy, gridZ as gz, blockX as bx, blockY as by, blockZ as bz
  from src.CUPTI_ACTIVITY_KIND_KERNEL
  union all select 'memcpy', -3, copyKind, start, "end", deviceId, streamId, correlationId, globalPid, null, null, null, null, null, null from src.CUPTI_ACTIVITY_KIND_MEMCPY
  union all select 'memset', -4, null, start, "end", deviceId, streamId, correlationId, globalPid, null, null, null, null, null, null from src.CUPTI_ACTIVITY_KIND_MEMSET""")
stage("operations read")
con.execute("""create temp table launched as
  select row_number() over (order by coalesce(r.start, o.start), o.corr) - 1 as seq, o.*, r.start as lstart, r.gtid as ltid
  from ops o left join rt r on r.corr = o.corr and r.pid = (o.gpid >> 24)""")
stage("joined and numbered")
# The placement: each launch in the latest range its thread began by then (an ASOF join), as
# the import's correlated look-ups place it in its thread's state.
con.execute("""create temp table seg as select globalTid as gtid, start, row_number() over () as ix
               from src.NVTX_EVENTS where eventType in (59, 70)""")
con.execute("""create temp table placed as select l.seq, s.ix as rix from launched l
               asof left join seg s on s.gtid = l.ltid and l.lstart >= s.start""")
stage("placed in ranges")
n = con.execute("select count(*) from launched").fetchone()[0]
g = con.execute("""create temp table grp as select kind, key, sn, (gpid >> 24) as pid, dev, count(*) as launches, sum("end" - start) as t,
    min(seq) as first from launched group by all""")
stage("grouped")
out = os.path.join(os.path.dirname(export), "duckdb_rows.sqlite")
for f in (out, out + "-journal"):
    if os.path.exists(f):
        os.remove(f)
con.execute(f"ATTACH '{out}' AS dst (TYPE sqlite)")
con.execute("""create table dst.kernel_rows (launch_id integer primary key, kind text, name_key integer, sn integer, start_ns integer, duration_ns integer,
  dev integer, stream integer, gx integer, gy integer, gz integer, bx integer, "by" integer, bz integer, lstart integer, thread integer)""")
con.execute("""insert into dst.kernel_rows select seq, kind, key, sn, start, "end" - start, dev, stream, gx, gy, gz, bx, "by", bz, lstart, ltid & 16777215
  from launched order by seq""")
stage("rows written to SQLite")
con.execute("DETACH dst")
print(f"{n} operations; total {time.monotonic() - t0:.2f} s with {threads} threads")
c = sqlite3.connect(out)
print(c.execute("select count(*), min(launch_id), max(launch_id) from kernel_rows").fetchone())
