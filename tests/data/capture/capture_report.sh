#!/bin/bash
# Captures for the report's findings (issue 10), made with profkit itself on the GPU machine
# after `. .device-kit/setup.sh` and `pip install -e .`:
#  - ncu (default metrics), fp16 eager, batch 8: MobileNetV2 and EfficientNet-B0, whose
#    depthwise convolutions run off the tensor cores (the depthwise finding triggers);
#  - nsys, resnet50 fp16 eager, batch 64: a timeline the GPU keeps busy (launch_bound quiet).
# What each kept is copied to $DEST (gzipped), with the runs' JSON and their summaries.
set -u
DEST=${DEST:-/tmp/capture-report}; mkdir -p "$DEST"; cd "$(dirname "$0")/../../.."
DB=/tmp/capture-report-db/profkit.db; rm -rf /tmp/capture-report-db; mkdir -p /tmp/capture-report-db
P="python3 -m profkit --db $DB"
run() { local n=$1; shift; $P run "$@" --no-report --name "$n" >"$DEST/$n.txt" 2>&1 || $P run "$@" --name "$n" >"$DEST/$n.txt" 2>&1; echo "$n rc=$?"; }
run mnv2_fp16_ncu tests/data/capture/mobilenet_v2.py --tool ncu --precision fp16 --batch-size 8
run effb0_fp16_ncu tests/data/capture/efficientnet_b0.py --tool ncu --precision fp16 --batch-size 8
run r50_fp16_b64_nsys resnet50 --tool nsys --precision fp16 --batch-size 64 --iters 2
R=/tmp/capture-report-db/profkit-runs
for n in mnv2_fp16_ncu effb0_fp16_ncu; do gzip -9 -c "$R/$n/raw.csv" >"$DEST/$n.raw.csv.gz"; done
gzip -9 -c "$R/r50_fp16_b64_nsys/report.sqlite" >"$DEST/r50_fp16_b64_nsys.sqlite.gz"
$P runs -f json >"$DEST/runs.json"
for n in mnv2_fp16_ncu effb0_fp16_ncu r50_fp16_b64_nsys; do $P summary "$n" -f json >"$DEST/$n.summary.json"; done
ls -la "$DEST"
