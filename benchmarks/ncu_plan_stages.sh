#!/bin/bash
# Where the default ncu plan's time goes (GPU machine): each workload bare (with the harness's
# stages) and under `profkit run --tool ncu` (the run's ncu_plan.wall_s: both harnesses'
# stages, the profiling wall and the export+join), VGG16, ResNet-50, MobileNetV2 fp16.
set -u
OUTDIR=${OUT:-/tmp/ncu-stages}; mkdir -p "$OUTDIR"; res="$OUTDIR/ncu_plan_stages.txt"
DB=/tmp/ncu-stages-db/profkit.db; rm -rf /tmp/ncu-stages-db; mkdir -p /tmp/ncu-stages-db
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
for spec in "vgg16 vgg16" "resnet50 resnet50" "tests/data/capture/mobilenet_v2.py mnv2"; do
  set -- $spec; w=$1; n=$2
  t=$(date +%s%N); python3 benchmarks/bare_run.py "$w" fp16 8 2>/dev/null | tail -1 | tee -a "$res"; echo "$n bare: $(ms $t) ms" | tee -a "$res"
  t=$(date +%s%N); python3 -m profkit --db $DB run "$w" --precision fp16 --tool ncu --no-report --name "new-$n" >/dev/null 2>&1
  echo "$n default plan: rc=$? $(ms $t) ms" | tee -a "$res"
  python3 -c "import json, profkit; r = profkit.open_db('$DB').run('new-$n'); print(json.dumps({'profiled_wall_s': r.profiled_wall_s, **r.info['ncu_plan']['wall_s']}))" | tee -a "$res"
done
