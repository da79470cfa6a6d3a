#!/bin/bash
# Issue 39, repeat runs: a repeated `profkit run FILE` (every kernel function's counters kept
# from the first run, the default tool) against the bare run (benchmarks/bare_run.py: the same
# harness with no profiler, no CUPTI, no attribution), on the GPU machine. Per model: the first
# run into a fresh database once, then the bare run, the repeated run with its report (the
# command as a user types it) and the repeated run with --no-report, alternately REPS times
# (default 3); each timed from outside, as a user waits for it. Medians and ratios at the end.
# Each repeated run's stages (PROFKIT_TIMINGS: the parent's, in the order they end) and the
# harness's own (info.harness.stages_s), its plan (profiled launches must be 0: ncu not started).
#   REPS=3 bash benchmarks/repeat_run_probe.sh OUT [MODEL ...]
# MODEL: bert lstm r50 frcnn (tests/data/capture/'s workload files, third-party models).
set -u
O=${1:?out dir}; shift; mkdir -p "$O"
res="$O/repeat_runs.txt"
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
args() {  # args MODEL: workload file, precision, batch size
  case $1 in
  bert) echo tests/data/capture/hf_bert_mlm.py amp 8 ;;
  lstm) echo tests/data/capture/lstm_lm.py fp16 20 ;;
  r50) echo tests/data/capture/timm_resnet50.py fp16 32 ;;
  frcnn) echo tests/data/capture/tv_fasterrcnn.py amp 2 ;;
  *) echo "unknown model $1" >&2; exit 2 ;;
  esac
}
for m in ${@:-bert lstm r50 frcnn}; do
  read -r file precision batch <<<"$(args "$m")"
  db=/tmp/rr-$m-$$/p.db; rm -rf "$(dirname "$db")"; mkdir -p "$(dirname "$db")"
  echo "=== $m: $file $precision batch $batch $(date -u +%FT%TZ)" | tee -a "$res"
  t=$(date +%s%N)
  python3 -m profkit --db "$db" run "$file" --precision "$precision" --batch-size "$batch" \
    --no-report --name first >"$O/$m-first.txt" 2>&1
  echo "$m first: rc=$? $(ms "$t") ms" | tee -a "$res"
  for i in $(seq "${REPS:-3}"); do
    t=$(date +%s%N)
    python3 benchmarks/bare_run.py "$file" "$precision" "$batch" 1 cuda noattr eager >"$O/$m-bare$i.txt" 2>&1
    echo "$m bare: rc=$? $(ms "$t") ms" | tee -a "$res"
    for kind in report noreport; do
      flag=(); [ $kind = noreport ] && flag=(--no-report)
      t=$(date +%s%N)
      PROFKIT_TIMINGS=1 python3 -m profkit --db "$db" run "$file" --precision "$precision" \
        --batch-size "$batch" "${flag[@]}" --name "repeat-$kind$i" >"$O/$m-$kind$i.txt" 2>&1
      echo "$m repeat-$kind: rc=$? $(ms "$t") ms" | tee -a "$res"
      grep -E '^profkit: .*s CPU\)$' "$O/$m-$kind$i.txt" | sed 's/^/    /' | tee -a "$res"
      python3 - "$db" "repeat-$kind$i" <<'PY' | tee -a "$res"
import json, sqlite3, sys
con = sqlite3.connect(sys.argv[1])
info = json.loads(con.execute("select info from runs where name = ?", [sys.argv[2]]).fetchone()[0])
plan, harness = info.get("ncu_plan") or {}, info.get("harness") or {}
print("    plan:", json.dumps(plan.get("wall_s")), "profiled", plan.get("profiled_launches"),
      "counters", json.dumps({k: v for k, v in (plan.get("counters") or {}).items() if k in ("strategy", "cached", "counted")}),
      "timed launches", harness.get("timed_launches"))
PY
    done
    grep -o "stages (s): .*" "$O/$m-bare$i.txt" | sed 's/^/    bare /' | tee -a "$res"
  done
done
python3 - "$res" <<'PY' | tee -a "$res"
import re, statistics, sys
walls = {}
for line in open(sys.argv[1]):
    if m := re.match(r"(\w+) (bare|repeat-report|repeat-noreport): rc=0 (\d+) ms", line):
        walls.setdefault(m[1], {}).setdefault(m[2], []).append(int(m[3]) / 1000)
for model, w in walls.items():
    bare = statistics.median(w["bare"]) if w.get("bare") else None
    parts = [f"bare {bare:.2f} s" if bare else "bare -"]
    for k in ("repeat-report", "repeat-noreport"):
        if w.get(k) and bare:
            med = statistics.median(w[k])
            parts.append(f"{k} {med:.2f} s ({med / bare:.2f}x)")
    print(f"median {model}: " + ", ".join(parts))
PY
