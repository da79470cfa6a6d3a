#!/bin/bash
# Captures for `profkit diff` (issue 9), made with profkit itself on the GPU machine after
# `. .device-kit/setup.sh` and `pip install -e .`: batch 2, one measured iteration unless said.
#  - ncu (default metrics): resnet18 fp16 eager and torchscript (eager against TorchScript);
#  - nsys: resnet18 fp16 eager with cuDNN's heuristics and with its autotuner
#    (capture/resnet18_cudnn_benchmark.py): the same convolutions in other tile variants;
#  - torch.profiler: resnet18 fp16 eager and compile (Triton kernels, launching operators);
#  - nsys: resnet18 fp16 compile with reduce-overhead (CUDA graphs, traced per node).
# What each kept is copied to $DEST (gzipped), with the runs' JSON and the diffs profkit made.
set -u
DEST=${DEST:-/tmp/capture-diff}; mkdir -p "$DEST"; cd "$(dirname "$0")/../../.."
DB=/tmp/capture-diff-db/profkit.db; rm -rf /tmp/capture-diff-db; mkdir -p /tmp/capture-diff-db
P="python3 -m profkit --db $DB"
run() { local n=$1; shift; $P run "$@" --batch-size 2 --name "$n" >"$DEST/$n.txt" 2>&1; echo "$n rc=$?"; }
run r18_fp16_eager_ncu resnet18 --tool ncu --precision fp16
run r18_fp16_torchscript_ncu resnet18 --tool ncu --precision fp16 --mode torchscript
run r18_fp16_heuristic_nsys resnet18 --tool nsys --precision fp16
run r18_fp16_autotuned_nsys tests/data/capture/resnet18_cudnn_benchmark.py --tool nsys --precision fp16
run r18_fp16_eager_torch resnet18 --tool torch --precision fp16
run r18_fp16_compile_torch resnet18 --tool torch --precision fp16 --mode compile
run r18_fp16_graphs_nsys resnet18 --tool nsys --precision fp16 --mode compile --compile-mode reduce-overhead --iters 2
R=/tmp/capture-diff-db/profkit-runs
for n in r18_fp16_eager_ncu r18_fp16_torchscript_ncu; do gzip -9 -c "$R/$n/raw.csv" >"$DEST/$n.raw.csv.gz"; done
for n in r18_fp16_heuristic_nsys r18_fp16_autotuned_nsys r18_fp16_graphs_nsys; do gzip -9 -c "$R/$n/report.sqlite" >"$DEST/$n.sqlite.gz"; done
for n in r18_fp16_eager_torch r18_fp16_compile_torch; do cp "$R/$n/trace.json.gz" "$DEST/$n.json.gz"; done
$P runs -f json >"$DEST/runs.json"
for pair in "r18_fp16_eager_ncu r18_fp16_torchscript_ncu exact" "r18_fp16_heuristic_nsys r18_fp16_autotuned_nsys exact" \
            "r18_fp16_heuristic_nsys r18_fp16_autotuned_nsys family" "r18_fp16_eager_torch r18_fp16_compile_torch family" \
            "r18_fp16_eager_torch r18_fp16_compile_torch op" "r18_fp16_heuristic_nsys r18_fp16_graphs_nsys family"; do
  set -- $pair; $P diff "$1" "$2" --match "$3" >"$DEST/diff_$1_$2_$3.txt" 2>&1; echo "diff $pair rc=$?"
done
ls -la "$DEST"
