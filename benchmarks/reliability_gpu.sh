#!/bin/bash
# Issue 11 on the GPU machine: `profkit doctor`, then SIGTERM and --timeout on ncu runs, and what
# they leave: processes on the GPU (nvidia-smi), profkit/ncu/harness processes, the database.
# Run from the repository root after `. .device-kit/setup.sh` and `pip install -e .`.
set -u
W=${W:-/tmp/rel}; rm -rf "$W"; mkdir -p "$W"
P="python3 -m profkit --db $W/p.db"
left() {
  echo "  GPU compute apps: [$(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader | tr '\n' ';')]"
  echo "  processes: [$(pgrep -af 'profkit.harness|ncu ' | grep -v pgrep | tr '\n' ';')]"
}
integrity() { python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print('  integrity', c.execute('pragma integrity_check').fetchone()[0], c.execute('select name, status, kernel_count from runs').fetchall(), 'orphan kernels', c.execute('select count(*) from kernels where run_id not in (select id from runs where status = \"ok\")').fetchone()[0])" "$W/p.db"; }
echo "== profkit doctor"; $P doctor; echo "rc=$?"
echo "== SIGTERM 25 s into an ncu run of resnet50 fp16"
$P run resnet50 --tool ncu --precision fp16 --name term --no-report >"$W/term.out" 2>&1 &
PID=$!; sleep 25; kill -TERM $PID; wait $PID; echo "rc=$?"; tail -2 "$W/term.out"; sleep 1; left; integrity
ls "$W/p-runs/term"
echo "== --timeout 20 on an ncu run of resnet50 fp16"
$P run resnet50 --tool ncu --precision fp16 --name tmo --timeout 20 --no-report >"$W/tmo.out" 2>&1; echo "rc=$?"
tail -2 "$W/tmo.out"; sleep 1; left; integrity
echo "== SIGINT while an nsys run profiles, then import of what it kept"
# A background job of a non-interactive bash ignores SIGINT; this launcher restores the default.
DFL='import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])'
python3 -c "$DFL" $P run resnet50 --tool nsys --precision fp16 --batch-size 64 --iters 400 --name int --no-report >"$W/int.out" 2>&1 &
PID=$!
for i in $(seq 100); do pgrep -f "profkit.harness" >/dev/null && break; sleep 0.2; done
sleep 8; echo "  SIGINT while: [$(pgrep -af 'nsys profile|profkit.harness' | grep -v pgrep | cut -c1-80 | tr '\n' ';')]"
kill -INT $PID; wait $PID; echo "rc=$?"; tail -2 "$W/int.out"; sleep 1; left; integrity
ls "$W/p-runs/int"
for f in "$W"/p-runs/int/report.nsys-rep "$W"/p-runs/term/report.ncu-rep; do
  [ -f "$f" ] && { $P import "$f" --name "re-$(basename $(dirname $f))" 2>&1 | tail -1; echo "re-import rc=$?"; }
done
$P runs
