#!/usr/bin/env bash
# Issue 36 on the GPU machine: models written outside the project (tests/data/capture/: a Hugging
# Face BERT MLM training step, torchvision's Faster R-CNN, an LSTM language model, timm's ResNet-50
# in NCHW and channels-last) under the default tool (ncu's per-function plan), nsys and
# torch.profiler, each as `profkit run` keeps it; the finding fixes beside their problems.
#   bash benchmarks/findings_gpu.sh OUT [PART...]   (ncu nsys torch extra fixes more attention; all but attention by default)
set -u
OUT=${1:?OUT}
C=tests/data/capture
mkdir -p "$OUT"
# One database per run, one run at a time (profiled runs share no GPU): NAME WORKLOAD TOOL ARGS...
run() {
  local name=$1 w=$2 t=$3; shift 3
  rm -rf "$OUT/$name.db" "$OUT/$name-runs"  # a run made again
  timeout 420 profkit run "$C/$w" --tool "$t" --name "$name" --iters 2 --db "$OUT/$name.db" --no-report "$@" \
    >"$OUT/$name.log" 2>&1
  echo "== $name ($t $*): rc $? $(tail -1 "$OUT/$name.log" | cut -c1-150)"
}
export -f run; export OUT C
python3 -c "import torch, torchvision, transformers, timm; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'transformers', transformers.__version__, 'timm', timm.__version__)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# PART: one of these job lists, or all.
jobs_for() {
  case $1 in
  ncu|nsys|torch)
    echo "bert-amp-$1 hf_bert_mlm.py $1 --precision amp --batch-size 8"
    echo "frcnn-fp32-$1 tv_fasterrcnn.py $1 --precision fp32 --batch-size 2"
    echo "frcnn-amp-$1 tv_fasterrcnn.py $1 --precision amp --batch-size 2"
    echo "lstm-fp16-$1 lstm_lm.py $1 --precision fp16 --batch-size 20"
    echo "lstm-amp-$1 lstm_lm.py $1 --precision amp --batch-size 20"
    echo "r50-fp16-$1 timm_resnet50.py $1 --precision fp16 --batch-size 8"
    echo "r50cl-fp16-$1 timm_resnet50.py $1 --precision fp16 --batch-size 8 --channels-last" ;;
  extra)
    echo "bert-amp-compile-nsys hf_bert_mlm.py nsys --precision amp --batch-size 8 --mode compile"
    echo "bert-amp-compile-torch hf_bert_mlm.py torch --precision amp --batch-size 8 --mode compile"
    echo "r50-fp16-ncufull timm_resnet50.py ncu --precision fp16 --batch-size 8 --metrics full"
    echo "lstm-fp16-ncufull lstm_lm.py ncu --precision fp16 --batch-size 20 --metrics full" ;;
  fixes)
    for t in ncu nsys; do
      echo "lstm1024-fp16-$t lstm_lm_aligned.py $t --precision fp16 --batch-size 20"
      echo "r50b1-fp16-$t timm_resnet50.py $t --precision fp16 --batch-size 1"
    done
    echo "sync-ncu host_sync_train.py ncu --precision fp32 --batch-size 8"
    echo "syncfixed-ncu host_sync_train_fixed.py ncu --precision fp32 --batch-size 8" ;;
  attention)
    # HF BERT with its "eager" attention (issue 38's unfused-attention finding), beside bert-amp's SDPA.
    for t in ncu nsys torch; do
      echo "bertattn-amp-$t hf_bert_mlm_eager_attention.py $t --precision amp --batch-size 8"
    done ;;
  more)
    # After the first captures: the compiled step with Inductor's kernel list kept without attribution,
    # and a batch that keeps the GPU busy (launch-bound's fix: quiet on the bare iteration).
    echo "bert-amp-compile-nsys hf_bert_mlm.py nsys --precision amp --batch-size 8 --mode compile"
    for t in ncu nsys torch; do
      echo "r50b64-fp16-$t timm_resnet50.py $t --precision fp16 --batch-size 64"
    done ;;
  esac
}
shift
for p in ${@:-ncu nsys torch extra fixes more}; do
  jobs_for $p
done | xargs -P 1 -L 1 bash -c 'run "$@"' _
# What comes back: each run's kept folder (reports left out) and its database, compressed.
# profkit's exports (the tables it reads: report.profkit.sqlite) kept as report.sqlite.gz, the fixtures' name
find "$OUT" -name report.profkit.sqlite -execdir mv {} report.sqlite \;
find "$OUT" -name report.sqlite -exec gzip -9 {} \;
(cd "$OUT" && tar -czf "raw-$(date +%s).tgz" --exclude='*.nsys-rep' --exclude='*.qdstrm' --exclude='*.lock' \
  --exclude='*.db-wal' --exclude='*.db-shm' *-runs *.db *.log 2>/dev/null)
ls -la "$OUT"/raw-*.tgz
