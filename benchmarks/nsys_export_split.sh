#!/usr/bin/env bash
# Issue 39 on the GPU machine: does `nsys export` of a large report go faster split by tables
# over several nsys processes at once? Captures benchmarks/programs/many_kernels.py (about
# 500,000 kernels) with `nsys profile`'s defaults, then 3 rounds alternately: the whole export;
# only the tables profkit reads (--tables); one tiny table alone (the report's loading, with
# next to nothing written); the runtime calls alone; the kernels alone; and profkit's tables
# split over 2 and over 3 processes run at once (wall time of the slowest).
# Run from the project root: bash benchmarks/nsys_export_split.sh OUT
set -u
OUT=${1:?out dir}; mkdir -p "$OUT"
ROOT=$(pwd)
NSYS=$(command -v nsys || echo nsys)
W=$(mktemp -d)
secs() { python3 -c "import sys; print(f'{(int(sys.argv[2]) - int(sys.argv[1])) / 1e9:.2f}')" "$1" "$(date +%s%N)"; }
ex() { "$NSYS" export --type sqlite --force-overwrite true -o "$@" >/dev/null 2>&1; }
R='^CUPTI_ACTIVITY_KIND_RUNTIME$'
K='^CUPTI_ACTIVITY_KIND_KERNEL$'
REST='^META_DATA_EXPORT$,^StringIds$,^CUPTI_ACTIVITY_KIND_MEMCPY$,^CUPTI_ACTIVITY_KIND_MEMSET$,^NVTX_EVENTS$,^TARGET_INFO_GPU$,^ENUM_CUDA_MEMCPY_OPER$'
ALL="$R,$K,$REST"
"$NSYS" profile --force-overwrite true -o "$W/many" python3 "$ROOT/benchmarks/programs/many_kernels.py" --kernels 500000 >"$OUT/capture.log" 2>&1
rep=$W/many.nsys-rep
ls -la "$rep" | tee -a "$OUT/times.txt"
for i in 1 2 3; do
  t=$(date +%s%N); ex "$W/whole.sqlite" "$rep"; echo "round $i whole: $(secs $t) s" | tee -a "$OUT/times.txt"
  t=$(date +%s%N); ex "$W/t.sqlite" --tables "$ALL" "$rep"; echo "round $i profkit's tables: $(secs $t) s" | tee -a "$OUT/times.txt"
  t=$(date +%s%N); ex "$W/s.sqlite" --tables '^TARGET_INFO_GPU$' "$rep"; echo "round $i one tiny table: $(secs $t) s" | tee -a "$OUT/times.txt"
  t=$(date +%s%N); ex "$W/r.sqlite" --tables "$R" "$rep"; echo "round $i runtime calls alone: $(secs $t) s" | tee -a "$OUT/times.txt"
  t=$(date +%s%N); ex "$W/k.sqlite" --tables "$K" "$rep"; echo "round $i kernels alone: $(secs $t) s" | tee -a "$OUT/times.txt"
  t=$(date +%s%N); ex "$W/a.sqlite" --tables "$R" "$rep" & ex "$W/b.sqlite" --tables "$K,$REST" "$rep" & wait
  echo "round $i split over 2 at once: $(secs $t) s" | tee -a "$OUT/times.txt"
  t=$(date +%s%N); ex "$W/a.sqlite" --tables "$R" "$rep" & ex "$W/b.sqlite" --tables "$K" "$rep" & ex "$W/c.sqlite" --tables "$REST" "$rep" & wait
  echo "round $i split over 3 at once: $(secs $t) s" | tee -a "$OUT/times.txt"
done
du -sh "$W"/*.sqlite | tee -a "$OUT/times.txt"
python3 - "$W" <<'PY' | tee -a "$OUT/times.txt"
import sqlite3, sys
for f in ("whole", "t", "s", "r", "k", "a", "b", "c"):
    con = sqlite3.connect(f"{sys.argv[1]}/{f}.sqlite")
    print(f, sorted(r[0] for r in con.execute("select name from sqlite_master where type = 'table'"))[:12])
PY
rm -rf "$W"
