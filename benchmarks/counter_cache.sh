#!/bin/bash
# ncu's counters kept across runs (issue 25), on the GPU machine: per workload (VGG16,
# ResNet-50, the GPT-style decoder; fp16, batch 8, 3 warm-up and 1 measured iteration), side by
# side: the bare run (benchmarks/bare_run.py: the harness alone), the first `profkit run --tool
# ncu` (nothing counted yet), the repeated run (counters from the database), the bare run
# again; then in a fresh database `run --mode eager` and `run --mode torchscript` (what
# `compare --modes eager,torchscript` runs, one after the other) against the bare TorchScript
# run. Verdicts of each later run are compared launch by launch with the first
# (benchmarks/counter_cache_check.py).
# PART alternate: per workload, the first run once, then the bare run and the repeated run
# alternately REPS times (default 3), then the bare TorchScript run and the TorchScript run
# (second variant, its eager run counted first) alternately 2 times: medians in the text.
#   bash benchmarks/counter_cache.sh [PART] with PART repeat (default), compare, both or alternate
set -u
PART=${1:-repeat}
OUTDIR=${OUT:-/tmp/counter-cache}; mkdir -p "$OUTDIR"; res="$OUTDIR/counter_cache.txt"
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
bare() {  # bare WORKLOAD MODE LABEL
  local t=$(date +%s%N); python3 benchmarks/bare_run.py "$1" fp16 8 1 cuda noattr "$2" >/dev/null 2>&1
  echo "$3 bare $2: rc=$? $(ms $t) ms" | tee -a "$res"
}
prun() {  # prun DB NAME ARGS...
  local db=$1 n=$2; shift 2
  local t=$(date +%s%N); python3 -m profkit --db "$db" run "$@" --precision fp16 --batch-size 8 --tool ncu --no-report \
    --name "$n" >"$OUTDIR/$n.txt" 2>&1
  echo "$n: rc=$? $(ms $t) ms" | tee -a "$res"
}
WORKLOADS="vgg16 resnet50 gpt_decoder"
if [ "$PART" = repeat ] || [ "$PART" = both ]; then
  for w in $WORKLOADS; do
    DB=/tmp/cc-$w/profkit.db; rm -rf /tmp/cc-$w; mkdir -p /tmp/cc-$w
    bare "$w" eager "$w"
    prun $DB "$w-first" "$w"
    prun $DB "$w-repeat" "$w"
    bare "$w" eager "$w"
    prun $DB "$w-repeat2" "$w"
    python3 benchmarks/counter_cache_check.py $DB "$w-repeat" "$w-first" | tee -a "$res"
    python3 benchmarks/counter_cache_check.py $DB "$w-repeat2" "$w-first" | tee -a "$res"
  done
fi
if [ "$PART" = compare ] || [ "$PART" = both ]; then
  for w in $WORKLOADS; do
    DB=/tmp/cm-$w/profkit.db; rm -rf /tmp/cm-$w; mkdir -p /tmp/cm-$w
    bare "$w" torchscript "$w"
    prun $DB "$w-eager" "$w" --mode eager
    prun $DB "$w-torchscript" "$w" --mode torchscript
    bare "$w" torchscript "$w"
    prun $DB "$w-torchscript-fresh" "$w" --mode torchscript --fresh-counters
    python3 benchmarks/counter_cache_check.py $DB "$w-torchscript" "$w-torchscript-fresh" | tee -a "$res"
  done
fi
if [ "$PART" = alternate ]; then
  REPS=${REPS:-3}
  for w in $WORKLOADS; do
    DB=/tmp/ca-$w/profkit.db; rm -rf /tmp/ca-$w; mkdir -p /tmp/ca-$w
    bare "$w" eager "$w"
    prun $DB "$w-first" "$w"
    for i in $(seq $REPS); do bare "$w" eager "$w"; prun $DB "$w-repeat$i" "$w"; done
    python3 benchmarks/counter_cache_check.py $DB "$w-repeat$REPS" "$w-first" | cut -c1-400 | tee -a "$res"
    for i in 1 2; do bare "$w" torchscript "$w"; prun $DB "$w-torchscript$i" "$w" --mode torchscript; done
    python3 benchmarks/counter_cache_check.py $DB "$w-torchscript1" "$w-first" | cut -c1-300 | tee -a "$res"
  done
fi
