#!/usr/bin/env bash
# Issue 39 on the GPU machine: from a finished .nsys-rep to its kernel summary, profkit against
# nsys's own tools, side by side in one command, 3 times alternately, on two captures:
#   many: a plain PyTorch loop of small kernels (benchmarks/programs/many_kernels.py, about
#         500,000 kernels), captured by `nsys profile` with its defaults, as a user brings one;
#   real: pytorch/examples' ImageNet training script as it is (--dummy data, ResNet-50),
#         45 s of it captured by `nsys profile --duration 45`.
# Per round: nsys's path (`nsys export --type sqlite` then `nsys stats --report
# cuda_gpu_kern_sum` on that export), then profkit's (`profkit import X.nsys-rep`, its export
# included, into a fresh database; profkit exports only the tables it reads), then `nsys export
# --tables` of those tables alone, to see what that part of profkit's export takes.
# Run from the project root: bash benchmarks/nsys_import_gpu.sh OUT [many|real]...
set -u
OUT=${1:?out dir}; shift
mkdir -p "$OUT"
ROOT=$(pwd)
NSYS=$(command -v nsys || echo nsys)
W=$(mktemp -d)
TABLES=$(python3 -c "from pathlib import Path; from profkit.parse.nsys_export import READ_TABLES; from profkit.tools.nsys import export_sqlite_argv as a; x = a('', Path(), Path(), READ_TABLES); print(x[x.index('--tables') + 1])")  # what profkit exports
secs() { python3 -c "import sys; print(f'{(int(sys.argv[2]) - int(sys.argv[1])) / 1e9:.2f}')" "$1" "$(date +%s%N)"; }
timed() {  # timed LABEL CMD...: one line "LABEL: S s rc=N", the command's output in OUT/LABEL.log
  local label=$1; shift
  local t=$(date +%s%N) rc
  "$@" >"$OUT/$label.log" 2>&1
  rc=$?
  echo "$label: $(secs "$t") s rc=$rc" | tee -a "$OUT/times.txt"
}
capture() {  # capture NAME: W/NAME.nsys-rep
  case $1 in
  many) timed "$1-capture" "$NSYS" profile --force-overwrite true -o "$W/many" \
          python3 "$ROOT/benchmarks/programs/many_kernels.py" --kernels 500000 ;;
  real) cp "$ROOT/tests/data/programs/pytorch-examples/imagenet/main.py" "$W/imagenet_main.py"
        (cd "$W" && timed "$1-capture" "$NSYS" profile --force-overwrite true --duration 45 -o "$W/real" \
          python3 imagenet_main.py --dummy -a resnet50 -b 64 -j 14 --epochs 1 --print-freq 1000) ;;
  esac
}
for name in "$@"; do
  echo "=== $name $(date -u +%FT%TZ)" | tee -a "$OUT/times.txt"
  capture "$name"
  rep=$W/$name.nsys-rep
  ls -la "$rep" | tee -a "$OUT/times.txt"
  for i in 1 2 3; do
    rm -rf "$W/$name.sqlite" "$W/db$i.db"
    timed "$name-nsys-export-$i" "$NSYS" export --type sqlite --force-overwrite true -o "$W/$name.sqlite" "$rep"
    timed "$name-nsys-stats-$i" "$NSYS" stats --report cuda_gpu_kern_sum --format csv -o - "$W/$name.sqlite"
    timed "$name-profkit-import-$i" profkit import "$rep" --name "$name$i" --db "$W/db$i.db"
    timed "$name-export-tables-$i" "$NSYS" export --type sqlite --tables "$TABLES" --force-overwrite true \
      -o "$W/$name-tables.sqlite" "$rep"
  done
  python3 - "$W/$name.sqlite" <<'PY' | tee -a "$OUT/times.txt"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
print("kernels", con.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0],
      "runtime calls", con.execute("select count(*) from CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0],
      "tables", con.execute("select count(*) from sqlite_master where type = 'table'").fetchone()[0])
PY
  du -sh "$W/$name.sqlite" "$W/$name-tables.sqlite" 2>/dev/null | tee -a "$OUT/times.txt"
  PROFKIT_TIMINGS=1 profkit import "$W/$name.sqlite" --name "$name-stages" --db "$W/stages.db" \
    >"$OUT/$name-stages.log" 2>&1
  rm -rf "$W"/db*.db "$W/stages.db"
done
