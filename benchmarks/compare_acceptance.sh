#!/bin/bash
# Issue 9 acceptance on the GPU machine (after `. .device-kit/setup.sh` and `pip install -e .`):
#   profkit compare resnet50 --modes eager,torchscript,compile --precision fp16
#   profkit compare vgg16 --precisions fp32,fp16
# each as a user types it (tool auto, batch 8, default metrics), timed; the table, the JSON of
# the same comparison (rebuilt from the stored runs with `profkit diff`), and the runs.
set -u
OUTDIR=${OUT:-/tmp/bench}; mkdir -p "$OUTDIR"
DB=/tmp/compare-db/profkit.db; rm -rf /tmp/compare-db; mkdir -p /tmp/compare-db
P="python3 -m profkit --db $DB"
t0=$(date +%s); $P compare resnet50 --modes eager,torchscript,compile --precision fp16 >"$OUTDIR/resnet50.txt" 2>"$OUTDIR/resnet50.err"
echo "resnet50 compare rc=$? wall $(( $(date +%s) - t0 )) s" | tee "$OUTDIR/acceptance.txt"
t0=$(date +%s); $P compare vgg16 --precisions fp32,fp16 >"$OUTDIR/vgg16.txt" 2>"$OUTDIR/vgg16.err"
echo "vgg16 compare rc=$? wall $(( $(date +%s) - t0 )) s" | tee -a "$OUTDIR/acceptance.txt"
$P runs -f json >"$OUTDIR/runs.json"
$P diff resnet50-fp16-eager-ncu resnet50-fp16-compile-ncu --match family -f json >"$OUTDIR/resnet50_eager_compile.json"
$P diff resnet50-fp16-eager-ncu resnet50-fp16-torchscript-ncu -f json >"$OUTDIR/resnet50_eager_torchscript.json"
$P diff vgg16-fp32-eager-ncu vgg16-fp16-eager-ncu --match family -f json >"$OUTDIR/vgg16_fp32_fp16.json"
$P diff resnet50-fp16-eager-ncu resnet50-fp16-compile-ncu --match family >"$OUTDIR/resnet50_eager_compile.txt"
cat "$OUTDIR/acceptance.txt"
