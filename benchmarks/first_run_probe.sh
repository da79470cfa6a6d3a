#!/bin/bash
# A first run's cost (issue 25), on the GPU machine: per workload (fp16, batch 8, 3 warm-up and
# 1 measured iteration), the bare run (benchmarks/bare_run.py) and the first `profkit run --tool
# ncu --no-report` (a fresh database: every function counted), alternately REPS times; each
# first run's plan timings (info.ncu_plan.wall_s: both harnesses' stages, ncu's exports and the
# join) and a digest of its verdicts launch by launch. With PROFILE=1 the first run of each
# workload also runs under cProfile ($OUT/W.prof).
#   REPS=2 bash benchmarks/first_run_probe.sh [WORKLOAD ...]
set -u
O=${OUT:-/tmp/first-run}; mkdir -p "$O"
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
for w in ${@:-gpt_decoder resnet50 vgg16}; do
  for i in $(seq ${REPS:-2}); do
    t=$(date +%s%N); python3 benchmarks/bare_run.py $w fp16 8 1 cuda noattr eager >/dev/null 2>&1; echo "$w bare: $(ms $t) ms"
    db=/tmp/fr-$w-$i-$$/p.db; rm -rf $(dirname $db); mkdir -p $(dirname $db)
    prof=(); [ "${PROFILE:-0}" = 1 ] && [ $i = 1 ] && prof=(-m cProfile -o "$O/$w.prof")
    t=$(date +%s%N); python3 "${prof[@]}" -m profkit --db $db run $w --precision fp16 --batch-size 8 --tool ncu --no-report \
      --name first >"$O/$w-$i.txt" 2>&1; rc=$?
    echo "$w first: rc=$rc $(ms $t) ms${prof:+ (under cProfile)}"
    python3 - $db <<'PY'
import hashlib, json, sqlite3, sys
con = sqlite3.connect(sys.argv[1])
rid, info = con.execute("select id, info from runs order by id desc limit 1").fetchone()
plan = json.loads(info).get("ncu_plan", {})
rows = con.execute("select name, precision, tensor_core, evidence from kernels where run_id = ? order by launch_id", [rid]).fetchall()
print("  ", json.dumps(plan.get("wall_s")), "profiled", plan.get("profiled_launches"), "launches", len(rows),
      "verdicts", hashlib.sha1(repr([r[1:] for r in rows]).encode()).hexdigest()[:10])
PY
  done
done
