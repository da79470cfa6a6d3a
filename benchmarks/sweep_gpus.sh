#!/bin/bash
# profkit sweep on every local GPU against one GPU (issue 14): the same 8 jobs, each sweep
# into a new database; wall time of the whole command, which includes starting the Dask
# cluster and storing every run. Run from the repository root on a machine with 2 GPUs, nsys
# and Dask (pip install 'profkit[cluster]'); results in ${OUT:-/tmp/sweep_gpus}.
set -u
OUT=${OUT:-/tmp/sweep_gpus}
mkdir -p "$OUT"
W=$(mktemp -d)
JOBS=(--workloads resnet18,resnet50 --precisions fp32,fp16 --modes eager --tools nsys,torch --iters 1 --batch-size 8)
nvidia-smi -L
for workers in 2 1; do
  /usr/bin/time -f "workers $workers: wall %e s" profkit sweep "${JOBS[@]}" --workers $workers --db "$W/w$workers.db" \
    -f json > "$OUT/sweep_w$workers.json" 2> "$OUT/sweep_w$workers.log"
  tail -1 "$OUT/sweep_w$workers.log"
  python3 - "$OUT/sweep_w$workers.json" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
for j in out["jobs"]:
    print(f"  {j['workload']} {j['precision']} {j['tool']}: {j['status']} on {j['worker']} in {j['wall_s']} s")
PY
done
