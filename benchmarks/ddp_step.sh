#!/bin/bash
# A data-parallel ResNet-50 AMP training step on two GPUs under nsys and torch.profiler
# (issue 14), and the small captures kept in tests/data/ddp. Run from the repository root on a
# machine with 2 GPUs and nsys; results (databases, exports, traces) in ${OUT:-/tmp/ddp_step}.
set -u
OUT=${OUT:-/tmp/ddp_step}
W=$(mktemp -d)
mkdir -p "$OUT"
nvidia-smi -L
for tool in nsys torch; do
  profkit run resnet50_ddp_train --precision amp --nproc-per-node 2 --tool $tool --iters 3 --batch-size 32 \
    --db "$W/ddp.db" --no-report > "$OUT/${tool}_b32.txt" 2>&1
  tail -25 "$OUT/${tool}_b32.txt"
done
# The captures in tests/data/ddp: one iteration at batch 8 (auto picks nsys for several ranks).
profkit run resnet50_ddp_train --precision amp --nproc-per-node 2 --iters 1 --batch-size 8 --name fix-nsys --db "$W/fix.db" --no-report
profkit run resnet50_ddp_train --precision amp --nproc-per-node 2 --tool torch --iters 1 --batch-size 8 --name fix-torch --db "$W/fix.db" --no-report
nsys stats --report cuda_gpu_kern_sum --format csv --output "$W/fix_kern_sum" "$W/fix-runs/fix-nsys/report.nsys-rep" > /dev/null
# What is refused: more ranks than GPUs, and ncu.
profkit run resnet50_ddp_train --nproc-per-node 3 --tool nsys --db "$W/fix.db"; echo "rc=$?"
profkit run resnet50_ddp_train --nproc-per-node 2 --tool ncu --db "$W/fix.db"; echo "rc=$?"
(cd "$W" && tar czf "$OUT/ddp_step.tgz" --exclude='*.nsys-rep' --exclude='*.qdstrm' .)
