#!/bin/bash
# Issue 2's acceptance runs on the GPU machine: each workload bare (the harness alone, same
# batch/warm-up/iterations) and under `profkit run --tool ncu`, plus what the metric presets
# cost on one workload. Writes summaries and timings under ${OUT:-/tmp/bench}.
set -u
OUTDIR=${OUT:-/tmp/bench}; mkdir -p "$OUTDIR"; DB=/tmp/bench-db/profkit.db; rm -rf /tmp/bench-db; mkdir -p /tmp/bench-db
res="$OUTDIR/acceptance.txt"
bare() { python3 benchmarks/bare_run.py "$@"; }  # workload precision batch [iters]
. "$(dirname "$0")/common.sh"
for args in "vgg16 fp16 8" "vgg16 fp32 8" "resnet50 bf16 8"; do bare $args | tee -a "$res"; done
prof vgg16-fp16 vgg16 --precision fp16 --tool ncu
prof vgg16-fp32 vgg16 --precision fp32 --tool ncu
prof resnet50-bf16 resnet50 --precision bf16
prof vgg16-fp16-time vgg16 --precision fp16 --metrics time
prof vgg16-fp16-full vgg16 --precision fp16 --metrics full
grep -h "passes" /tmp/bench-db/profkit-runs/vgg16-fp16*/ncu.log | grep -o '[0-9]* pass' | sort | uniq -c | tee -a "$res"
ls -la /tmp/bench-db/profkit-runs/*/report.ncu-rep | tee -a "$res"
cp "$DB" "$OUTDIR/acceptance.db"
