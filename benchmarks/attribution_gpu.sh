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
if [ "$PART" = all ] || [ "$PART" = fixtures ]; then
  # The committed captures (tests/data/where/): a CNN and two transformers, forward and backward,
  # under each tool; a compiled model; the unpadded and padded vocabulary.
  for t in ncu nsys torch; do
    run resnet18_train --precision amp --tool $t --batch-size 8 --iters 1
    run $C/hf_gpt2_train.py --precision amp --tool $t --batch-size 4 --iters 1
    run $C/hf_llama.py --precision bf16 --tool $t --batch-size 4 --iters 1
  done
  run $C/hf_llama.py --precision bf16 --mode compile --tool nsys --batch-size 4 --iters 1
  run $C/hf_llama.py --precision bf16 --mode compile --tool torch --batch-size 4 --iters 1
  run $C/hf_gpt2_train_padded.py --precision amp --tool nsys --batch-size 4 --iters 1
  run $C/timm_convnext.py --precision fp16 --tool nsys --batch-size 8 --iters 1
  run $C/timm_vit.py --precision fp32 --tool nsys --batch-size 8 --iters 1
  python3 benchmarks/attribution_coverage.py "$DB"
fi
if [ "$PART" = all ] || [ "$PART" = counters ]; then
  # CUDA-core arithmetic counters in the per-function plan: their cost and what they decide.
  run resnet18 --precision fp16 --tool ncu --batch-size 8 --iters 1
  run $C/timm_convnext.py --precision fp16 --tool ncu --batch-size 8 --iters 1
  run $C/hf_llama.py --precision bf16 --tool ncu --batch-size 4 --iters 1
  run $C/hf_llama.py --precision bf16 --tool ncu --batch-size 4 --iters 1 --no-attribution --name llama-ncu-noattr
  run $C/timm_vit.py --precision fp32 --tool ncu --batch-size 8 --iters 1
  python3 benchmarks/attribution_coverage.py "$DB"
  python3 - "$DB" <<'PY'
import sys, profkit
db = profkit.open_db(sys.argv[1], create=False)
for rec in db.list_runs():
    print(rec.name, "profiled wall", rec.profiled_wall_s, "s")
PY
fi
if [ "$PART" = all ] || [ "$PART" = overhead ]; then
  # The operator ranges' host cost with no profiler (bare), and each tool's profiled wall time
  # with and without them.
  for w in resnet50 $C/hf_llama.py; do
    for a in "" attribution; do python3 benchmarks/bare_run.py $w fp16 8 20 cuda $a 2>&1 | cut -c1-140; done
  done
  for a in "--attribution" "--no-attribution"; do
    for t in nsys ncu torch; do
      timeout 200 profkit run resnet50 --precision fp16 --tool $t --batch-size 8 --iters 3 $a --db "$OUT/overhead.db" \
        --name "r50-$t$a" --no-report >/dev/null 2>&1
    done
  done
  python3 - "$OUT/overhead.db" <<'PY'
import sys, profkit
db = profkit.open_db(sys.argv[1], create=False)
for r in db.list_runs().itertuples():
    run = db.run(r.name)
    it = (run.info.get("harness") or {}).get("iteration_wall_ns") or []
    print(f"{r.name}: profiled wall {run.profiled_wall_s:.1f} s, iterations (ms) {[round(x / 1e6, 2) for x in it]}, "
          f"GPU time {run.gpu_time_ns / 1e6:.3f} ms")
PY
fi
if [ "$PART" = all ] || [ "$PART" = fixes ]; then
  # Each finding on a capture with the problem and on one with the fix (tests/data/where/), the
  # compiled model under the Nsight tools with its own operator calls in ranges, a half-precision
  # run with GEMVs off the tensor cores (profkit check's tests), then each fix timed.
  run $C/hf_llama.py --precision bf16 --mode compile --tool nsys --batch-size 4 --iters 1 --attribution
  run $C/hf_llama.py --precision bf16 --mode compile --tool ncu --batch-size 4 --iters 1
  run $C/timm_vit_tf32.py --precision fp32 --tool nsys --batch-size 8 --iters 1 --attribution
  for t in nsys torch; do
    run $C/host_sync_train.py --precision fp32 --tool $t --batch-size 8 --iters 1 --attribution
    run $C/host_sync_train_fixed.py --precision fp32 --tool $t --batch-size 8 --iters 1 --attribution
  done
  run $C/hf_gpt2_fp32_head.py --precision amp --tool nsys --batch-size 4 --iters 1 --attribution
  run $C/hf_gpt2_fp32_head.py --precision amp --tool ncu --batch-size 4 --iters 1
  run $C/fp16_gemv.py --precision fp16 --tool ncu --batch-size 2 --iters 1
  run $C/fp16_gemv.py --precision fp16 --tool nsys --batch-size 2 --iters 1 --attribution
  python3 benchmarks/attribution_coverage.py "$DB"
  # The fixes timed (CUDA events, median of 20 after 5 warm-ups), problem then fix.
  bench() { echo "== profkit bench $*"; timeout 200 profkit bench "$@" --db "$OUT/bench.db" 2>&1 | tail -6; }
  bench $C/timm_vit.py --precisions fp32 --batch-size 32
  bench $C/timm_vit_tf32.py --precisions fp32 --batch-size 32
  bench $C/host_sync_train.py --precisions fp32 --batch-size 8
  bench $C/host_sync_train_fixed.py --precisions fp32 --batch-size 8
  bench $C/hf_gpt2_fp32_head.py --precisions amp --batch-size 4
  bench $C/hf_gpt2_train_padded.py --precisions amp --batch-size 4
fi
if [ "$PART" = nsysfix ] || [ "$PART" = catalog-compile ]; then
  # The nsys exports of the fixes' captures (profkit keeps them as report.profkit.sqlite).
  if [ "$PART" = nsysfix ]; then
    run $C/hf_llama.py --precision bf16 --mode compile --tool nsys --batch-size 4 --iters 1 --attribution
    run $C/timm_vit_tf32.py --precision fp32 --tool nsys --batch-size 8 --iters 1 --attribution
    run $C/host_sync_train.py --precision fp32 --tool nsys --batch-size 8 --iters 1 --attribution
    run $C/host_sync_train_fixed.py --precision fp32 --tool nsys --batch-size 8 --iters 1 --attribution
    run $C/hf_gpt2_fp32_head.py --precision amp --tool nsys --batch-size 4 --iters 1 --attribution
    run $C/fp16_gemv.py --precision fp16 --tool nsys --batch-size 2 --iters 1 --attribution
  else
    # Compiled catalog workloads under nsys, one half precision each, seven at once.
    printf '%s\n' "resnet50 fp16" "bert_encoder bf16" "gpt_decoder amp" "efficientnet_b0 fp16" "mobilenet_v2 bf16" \
      "vgg16 amp" "resnet18 bf16" | xargs -P 7 -L 1 sh -c 'timeout 280 profkit run "$0" --precision "$1" --mode compile \
      --tool nsys --attribution --batch-size 2 --iters 1 --db "'"$OUT"'/c-$0.db" --no-report 2>&1 | tail -1'
  fi
fi
# The raw files in one archive (what comes back from the GPU machine), reports left out.
# profkit's exports (the tables it reads: report.profkit.sqlite) kept as report.sqlite.gz, the fixtures' name
find "$OUT" -name report.profkit.sqlite -execdir mv {} report.sqlite \;
find "$OUT" -name report.sqlite -exec gzip -9 {} \;
(cd "$OUT" && tar -czf raw.tgz --exclude='*.ncu-rep' --exclude='*.nsys-rep' --exclude='*.qdstrm' --exclude='*.lock' *-runs 2>/dev/null)
