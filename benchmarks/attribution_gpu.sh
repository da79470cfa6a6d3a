#!/usr/bin/env bash
# Issue 23 on the GPU machine: attribution and precision evidence under each tool on models
# written as users write them (tests/data/capture/: Hugging Face and timm models built from
# configs), the bare and profiled cost of the operator ranges, and the captures kept as fixtures.
#   bash benchmarks/attribution_gpu.sh OUT [PART]
set -u
OUT=${1:?OUT}; PART=${2:-all}
C=tests/data/capture
DB=$OUT/a.db
mkdir -p "$OUT"
run() { echo "== profkit run $*"; timeout 280 profkit run "$@" --db "$DB" --no-report 2>&1 | tail -2; }
python3 -c "import torch, transformers, timm; print('torch', torch.__version__, 'transformers', transformers.__version__, 'timm', timm.__version__)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ "$PART" = all ] || [ "$PART" = 1 ]; then
  run resnet18_train --precision amp --tool nsys --batch-size 8 --iters 1
  run resnet18_train --precision amp --tool torch --batch-size 8 --iters 1
  run resnet18_train --precision amp --tool ncu --batch-size 8 --iters 1
  run $C/hf_llama.py --precision bf16 --tool nsys --batch-size 4 --iters 1
  run $C/hf_llama.py --precision bf16 --tool torch --batch-size 4 --iters 1
  run $C/hf_llama.py --precision bf16 --tool ncu --batch-size 4 --iters 1
  run $C/hf_llama.py --precision bf16 --mode compile --tool nsys --batch-size 4 --iters 1
  run $C/hf_llama.py --precision bf16 --mode compile --tool torch --batch-size 4 --iters 1
  run $C/hf_gpt2_train.py --precision amp --tool nsys --batch-size 4 --iters 1
  run $C/hf_gpt2_train.py --precision amp --tool torch --batch-size 4 --iters 1
  python3 benchmarks/attribution_coverage.py "$DB"
fi
if [ "$PART" = all ] || [ "$PART" = 2 ]; then
  run $C/hf_llama.py --precision bf16 --tool torch --batch-size 4 --iters 1
  run $C/hf_llama.py --precision bf16 --mode compile --tool nsys --batch-size 4 --iters 1
  run $C/hf_llama.py --precision bf16 --mode compile --tool torch --batch-size 4 --iters 1
  run resnet18_train --precision amp --tool ncu --batch-size 8 --iters 1
  run $C/hf_gpt2_train.py --precision amp --tool nsys --batch-size 4 --iters 1
  python3 benchmarks/attribution_coverage.py "$DB"
fi
if [ "$PART" = all ] || [ "$PART" = overhead ]; then
  for w in resnet50 $C/hf_llama.py; do
    for a in "" attribution; do python3 benchmarks/bare_run.py $w fp16 8 20 cuda $a 2>&1 | cut -c1-120; done
  done
fi
# The raw files, one level under OUT (what comes back from the GPU machine).
mkdir -p "$OUT/raw"
for d in "$OUT"/a-runs/*/; do
  n=$(basename "$d")
  for f in "$d"*; do case "$f" in *.ncu-rep|*.nsys-rep|*.qdstrm) continue;; esac; cp "$f" "$OUT/raw/$n.$(basename "$f")"; done
done
