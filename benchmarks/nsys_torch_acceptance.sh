#!/bin/bash
# Issues 3 and 4 on the GPU machine (after `. .device-kit/setup.sh`): resnet50 fp16 under
# `profkit run --tool nsys` against the bare workload and `nsys stats` of the same export;
# --tool auto's choice; --tool torch on the GPU (inference, and an AMP training step whose
# backward runs on autograd's thread); and nsys leaving a .qdstrm when its importer cannot
# run (LD_LIBRARY_PATH without the kit's libdw), then `profkit import` of that .qdstrm.
set -u
OUTDIR=${OUT:-/tmp/acc}; mkdir -p "$OUTDIR"; DB=/tmp/acc-db/profkit.db; rm -rf /tmp/acc-db; mkdir -p /tmp/acc-db
RUNS=/tmp/acc-db/profkit-runs
res="$OUTDIR/acceptance.txt"
{ echo "uid $(id -u)"; grep -i RmProfilingAdminOnly /proc/driver/nvidia/params; command -v ncu nsys; nsys --version; } >>"$res" 2>&1
. "$(dirname "$0")/common.sh"
python3 benchmarks/bare_run.py resnet50 fp16 8 3 | tee -a "$res"
prof r50-nsys resnet50 --tool nsys --precision fp16 --iters 3
profkit ranges r50-nsys --db "$DB" >>"$res" 2>&1
ls -la "$RUNS/r50-nsys" >>"$res"
nsys stats --report cuda_gpu_kern_sum,nvtx_gpu_proj_sum --format csv -o "$OUTDIR/r50" "$RUNS/r50-nsys/report.nsys-rep" >/dev/null 2>&1
profkit run resnet18 --precision fp16 --iters 1 --batch-size 2 --name r18-auto --db "$DB" 2>&1 | grep -m1 "tool:" | tee -a "$res"
prof r18-torch resnet18 --tool torch --precision fp16 --iters 2 --batch-size 2
prof r18train-torch resnet18_train --tool torch --precision amp --iters 1 --batch-size 2
profkit ranges r18train-torch --db "$DB" >>"$res" 2>&1
prof r18train-nsys resnet18_train --tool nsys --precision amp --iters 1 --batch-size 2
profkit ranges r18train-nsys --db "$DB" >>"$res" 2>&1
KIT_LD=$LD_LIBRARY_PATH
LD_LIBRARY_PATH= profkit run resnet18 --tool nsys --precision fp16 --iters 1 --batch-size 2 --name r18-noimp --db "$DB" >"$OUTDIR/noimp.txt" 2>&1
echo "nsys without its importer's libdw -> rc=$?: $(tail -2 "$OUTDIR/noimp.txt")" | tee -a "$res"
ls "$RUNS/r18-noimp" >>"$res" 2>&1
q=$(ls "$RUNS"/r18-noimp/*.qdstrm 2>/dev/null | head -1)
if [ -n "$q" ]; then cp "$q" /tmp/left.qdstrm; rm -f /tmp/left.nsys-rep
  LD_LIBRARY_PATH=$KIT_LD profkit import /tmp/left.qdstrm --name from-qdstrm --db "$DB" >>"$res" 2>&1; echo "import .qdstrm rc=$?" | tee -a "$res"; fi
profkit runs --db "$DB" -f csv >>"$res"
cp "$RUNS/r18-torch/trace.json.gz" "$OUTDIR/torch_run_resnet18_fp16.json.gz"
cp "$RUNS/r18train-torch/trace.json.gz" "$OUTDIR/torch_run_resnet18_train_amp.json.gz"
gzip -c "$DB" >"$OUTDIR/acc-db.gz"
