#!/usr/bin/env bash
# Issue 38 on the GPU machine: `profkit tune` on models nobody on the team wrote, and `profkit
# bench` of the best fix's setting alone, in the same command (each tuning's table and JSON, and
# each benchmark's rows, in OUT; benchmarks/RESULTS.md compares their savings).
# Run from the project root: bash benchmarks/tune_gpu.sh OUT STAGE...
# Stages: vit (timm ViT-B/16 fp32), mobilenet (torchvision MobileNetV3-Small, batch 1),
# resnet50 (torchvision ResNet-50 fp16, batch 32, NCHW), hf (a Hugging Face BERT training loop
# as a program), resnet50again (its tuning and bench alternately), dcgan (pytorch/examples'
# DCGAN training script, its own fake data), imagenet (pytorch/examples' ImageNet training
# script, --dummy data).
set -u
OUT=${1:?out dir}; shift
ROOT=$(pwd)
T=$ROOT/benchmarks/tune
D=$(mktemp -d); export PROFKIT_DB=$D/tune.db COLUMNS=120
W=$(mktemp -d)
cd "$W"
tune() {  # tune NAME ARGS...: the table, then the tuning as JSON
  local n=$1; shift
  local t0=$(date +%s)
  profkit tune "$@" >"$OUT/$n.tune.txt" 2>"$OUT/$n.tune.err"; echo "$n: profkit tune $* -> rc=$? in $(( $(date +%s) - t0 )) s"
  python3 - "$OUT/$n.tune.json" <<'PY'
import json, sys, profkit
db = profkit.open_db()
run = db.list_runs()[-1]
t = run.tunings()
json.dump(t[-1].to_dict() if t else None, open(sys.argv[1], "w"), indent=1)
PY
  cat "$OUT/$n.tune.txt"; tail -3 "$OUT/$n.tune.err"
}
bench() {  # bench NAME ARGS...: profkit bench of one setting, as JSON
  local n=$1; shift
  profkit bench "$@" -f json >"$OUT/$n.bench.json" 2>"$OUT/$n.bench.err"; echo "$n: profkit bench $* -> rc=$?"
  python3 -c "import json,sys; b=json.load(open(sys.argv[1])); [print('  ', r['precision'], r['mode'], r['status'], r['median_ms'], r['spread_ms'], r.get('error')) for r in b['rows']]" "$OUT/$n.bench.json"
}
for stage in "$@"; do
  echo "=== $stage $(date -u +%FT%TZ)"
  case $stage in
  vit)
    tune vit "$T/vit_b16.py" --batch-size 32 --tool nsys
    bench vit-base "$T/vit_b16.py" --batch-size 32 --iters 20 --warmup 5
    bench vit-tf32 "$T/vit_b16.py" --batch-size 32 --iters 20 --warmup 5 --tf32 ;;
  mobilenet)
    tune mobilenet "$T/mobilenet_v3_small.py" --batch-size 1 --tool nsys
    bench mobilenet-base "$T/mobilenet_v3_small.py" --batch-size 1 --iters 20 --warmup 5
    bench mobilenet-ro "$T/mobilenet_v3_small.py" --batch-size 1 --iters 20 --warmup 5 --modes compile --compile-mode reduce-overhead ;;
  resnet50)
    tune resnet50 resnet50 --precision fp16 --batch-size 32 --tool nsys
    bench resnet50-base resnet50 --precision fp16 --batch-size 32 --iters 20 --warmup 5
    bench resnet50-cl resnet50 --precision fp16 --batch-size 32 --iters 20 --warmup 5 --channels-last ;;
  hf)
    cp "$T/hf_bert_train.py" .
    tune hf --tool nsys -- python hf_bert_train.py --steps 60 ;;
  resnet50again)  # the tuning's baseline and channels-last trial, and bench of each, alternately
    tune resnet50b resnet50 --precision fp16 --batch-size 32 --tool nsys
    for i in 1 2; do
      bench resnet50-base$i resnet50 --precision fp16 --batch-size 32 --iters 20 --warmup 5
      bench resnet50-cl$i resnet50 --precision fp16 --batch-size 32 --iters 20 --warmup 5 --channels-last
    done ;;
  dcgan)  # pytorch/examples' DCGAN, its own fake data
    cp -r "$ROOT/tests/data/programs/pytorch-examples/dcgan" .
    (cd dcgan && tune dcgan --tool nsys -- python main.py --dataset fake --accel --workers 4 --niter 100 --outf "$W/dcgan-out") ;;
  imagenet)
    cp "$ROOT/tests/data/programs/pytorch-examples/imagenet/main.py" imagenet_main.py
    tune imagenet --tool nsys -- python imagenet_main.py --dummy -a resnet50 -b 64 -j 14 --epochs 1 --print-freq 1000 ;;
  esac
done
cp "$PROFKIT_DB" "$OUT/tune.db"
