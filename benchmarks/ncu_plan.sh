#!/bin/bash
# Issue 12 on the GPU machine: profkit's default ncu plan (counters on each kernel function's
# first launch, every launch timed by a second process) against the bare workload and against
# every launch profiled with the 7-pass `full` preset, side by side, for VGG16, ResNet-50 and
# MobileNetV2 at fp16 (batch 8, one measured iteration); then the launch-by-launch verdict
# check. With FULLSET=1, also `ncu --set full` on VGG16's NVTX range. Writes $OUT/ncu_plan.txt
# and keeps the default runs' files (small) for tests/data/ncu_plan/.
set -u
OUTDIR=${OUT:-/tmp/ncu-plan}; mkdir -p "$OUTDIR"; res="$OUTDIR/ncu_plan.txt"
LOGS=/tmp/ncu-plan-logs; rm -rf $LOGS; mkdir -p $LOGS  # each run's output; packed into runs.tgz
DB=/tmp/ncu-plan-db/profkit.db; rm -rf /tmp/ncu-plan-db; mkdir -p /tmp/ncu-plan-db
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$res"; ncu --version | tail -1 | tee -a "$res"
for spec in "vgg16 vgg16" "resnet50 resnet50" "tests/data/capture/mobilenet_v2.py mnv2"; do
  set -- $spec; w=$1; n=$2
  t=$(date +%s%N); python3 benchmarks/bare_run.py "$w" fp16 8 >/dev/null 2>&1; echo "$n bare: $(ms $t) ms" | tee -a "$res"
  t=$(date +%s%N); python3 -m profkit --db $DB run "$w" --precision fp16 --tool ncu --no-report --name "new-$n" >"$LOGS/new-$n.txt" 2>&1
  echo "$n default plan: rc=$? $(ms $t) ms" | tee -a "$res"
  if [ "${SKIPREF:-0}" = 0 ]; then
    t=$(date +%s%N); python3 -m profkit --db $DB run "$w" --precision fp16 --tool ncu --metrics full --no-report --name "ref-$n" >"$LOGS/ref-$n.txt" 2>&1
    echo "$n every launch, full preset: rc=$? $(ms $t) ms" | tee -a "$res"
    python3 benchmarks/ncu_plan_check.py $DB "new-$n" "ref-$n" | tee -a "$res"
  fi
done
if [ "${FULLSET:-0}" = 1 ]; then
  python3 - <<'PY' > /tmp/fullset-job.json
import json, os
from profkit import nvtx_ranges, workloads
print(json.dumps({"spec": {"batch_size": 8, "precision": "fp16", "mode": "eager", "device": "cuda"},
  "workload_path": str(workloads.resolve("vgg16")[1]), "warmup": 3, "iters": 1, "tag": nvtx_ranges.tag("vgg16", "fp16", "eager"),
  "info_path": "/tmp/fullset-info.json", "error_path": "/tmp/fullset-err.txt"}))
PY
  t=$(date +%s%N); ncu --target-processes all --nvtx --nvtx-include "regex:profkit@vgg16\.fp16\.eager\.iter[0-9]+/" --set full \
     --import-sass 0 -f --export /tmp/fullset python3 -m profkit.harness /tmp/fullset-job.json > "$LOGS/fullset.txt" 2>&1
  echo "vgg16 ncu --set full: rc=$? $(ms $t) ms" | tee -a "$res"
fi
R=/tmp/ncu-plan-db/profkit-runs
cp -r $LOGS $R/logs
tar czf "$OUTDIR/runs.tgz" -C $R logs $(cd $R && ls -d new-*/raw.csv new-*/raw-mangled.csv new-*/kernel_times.json new-*/job*.json new-*/ncu.log new-*/harness-times.json ref-*/raw.csv 2>/dev/null)
python3 -m profkit --db $DB runs | tee -a "$res"
