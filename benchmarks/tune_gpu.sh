#!/usr/bin/env bash
# Issue 38 on the GPU machine: `profkit tune` on models nobody on the team wrote, and `profkit
# bench` of the best fix's setting alone, in the same command (each tuning's table and JSON, and
# each benchmark's rows, in OUT; benchmarks/RESULTS.md compares their savings).
# Run from the project root: [ROUNDS=N] [TOOL=T] bash benchmarks/tune_gpu.sh OUT STAGE... (ROUNDS:
# tune's and bench's --rounds, default 1: both then hold what changes between processes; TOOL: the
# tool a workload's stage tunes under, default nsys, "default" for profkit's own default tool).
# Stages: vit (timm ViT-B/16 fp32), mobilenet (torchvision MobileNetV3-Small, batch 1),
# resnet50 (torchvision ResNet-50 fp16, batch 32, NCHW), hf (a Hugging Face BERT training loop
# as a program), dcgan (pytorch/examples'
# DCGAN training script, its own fake data), imagenet (pytorch/examples' ImageNet training
# script, --dummy data), wlm (pytorch/examples' word_language_model, the README's medium LSTM,
# on a corpus of wikitext-2's sizes made here), hfxlmr (the HF loop on XLM-RoBERTa-base's
# config), deeplab (torchvision DeepLabV3-ResNet50 fp16 at 513x513, batch 4), bertfp32 (HF
# BERT-base fp32, 512 tokens, batch 16), r3d (torchvision R3D-18 video fp16, 16x112x112 clips,
# batch 8: 3-D convolutions), attention (a Hugging Face BERT MLM with its "eager" attention, amp,
# batch 8: the unfused attention finding).
# A workload's stage benches its baseline and its best fix's setting (read from the tuning's
# record) alternately, twice, after the tuning.
set -u
OUT=${1:?out dir}; shift; mkdir -p "$OUT"
ROOT=$(pwd)
T=$ROOT/benchmarks/tune
D=$(mktemp -d); export PROFKIT_DB=$D/tune.db COLUMNS=120
W=$(mktemp -d)
cd "$W"
tune() {  # tune NAME ARGS...: the table, then the tuning as JSON
  local n=$1; shift
  local t0=$(date +%s)
  profkit tune --rounds "${ROUNDS:-1}" "$@" >"$OUT/$n.tune.txt" 2>"$OUT/$n.tune.err"
  echo "$n: profkit tune --rounds ${ROUNDS:-1} $* -> rc=$? in $(( $(date +%s) - t0 )) s"
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
  profkit bench --rounds "${ROUNDS:-1}" "$@" -f json >"$OUT/$n.bench.json" 2>"$OUT/$n.bench.err"
  echo "$n: profkit bench --rounds ${ROUNDS:-1} $* -> rc=$?"
  python3 -c "import json,sys; b=json.load(open(sys.argv[1])); [print('  ', r['precision'], r['mode'], r['status'], r['median_ms'], r['spread_ms'], r.get('error')) for r in b['rows']]" "$OUT/$n.bench.json"
}
best_flags() {  # best_flags NAME: the bench flags of tuning NAME's best fix (its options)
  python3 - "$OUT/$1.tune.json" <<'PY'
import json, sys
from profkit.tuning import fix_rules
t = json.load(open(sys.argv[1]))
best, rules, flags = t and t["best"], fix_rules(), []
for fid in best["fixes"] if best else []:
    for k, v in rules[fid].applies.items():
        flags += {"tf32": ["--tf32"], "channels_last": ["--channels-last"],
                  "cudnn_benchmark": ["--cudnn-benchmark"], "fused_optimizer": ["--fused-optimizer"],
                  "precision": ["--precision", str(v)], "mode": ["--modes", str(v)],
                  "compile_mode": ["--compile-mode", str(v)], "sdpa_attention": ["--sdpa-attention"],
                  "cudnn_attention": ["--cudnn-attention"]}[k]
print(" ".join(flags))
PY
}
corpus() {  # corpus DIR: train/valid/test.txt of wikitext-2's sizes, Zipf-distributed words
  python3 - "$1" <<'PY'
import os, sys
import numpy as np
d = sys.argv[1]; os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(0)
vocab = np.array([f"w{i}" for i in range(33278)])
p = 1.0 / np.arange(1, len(vocab) + 1); p /= p.sum()
for part, n in (("train", 2088628), ("valid", 217646), ("test", 245569)):
    words = vocab[rng.choice(len(vocab), n, p=p)]
    lines = np.array_split(words, n // 90)
    open(f"{d}/{part}.txt", "w").write("\n".join(" ".join(l) for l in lines) + "\n")
PY
}
tunebench() {  # tunebench NAME WORKLOAD ARGS...: tune, then bench baseline and best alternately
  local n=$1; shift
  if [ "${TOOL:-nsys}" = default ]; then tune "$n" "$@"; else tune "$n" "$@" --tool "${TOOL:-nsys}"; fi
  read -r -a flags <<<"$(best_flags "$n")"
  echo "$n: best fix as bench flags: ${flags[*]:-none}"
  for i in 1 2; do
    bench "$n-base$i" "$@" --iters 20 --warmup 5
    [ ${#flags[@]} -gt 0 ] && bench "$n-best$i" "$@" --iters 20 --warmup 5 "${flags[@]}"
  done
}
for stage in "$@"; do
  echo "=== $stage $(date -u +%FT%TZ)"
  case $stage in
  vit) tunebench vit "$T/vit_b16.py" --batch-size 32 ;;
  mobilenet) tunebench mobilenet "$T/mobilenet_v3_small.py" --batch-size 1 ;;
  resnet50) tunebench resnet50 resnet50 --precision fp16 --batch-size 32 ;;
  deeplab) tunebench deeplab "$T/deeplabv3.py" --precision fp16 --batch-size 4 ;;
  bertfp32) tunebench bertfp32 "$T/bert_base_fp32.py" --batch-size 16 ;;
  r3d) tunebench r3d "$T/r3d_18.py" --precision fp16 --batch-size 8 ;;
  attention) tunebench attention "$ROOT/tests/data/capture/hf_bert_mlm_eager_attention.py" --precision amp --batch-size 8 ;;
  hf)
    cp "$T/hf_bert_train.py" .
    tune hf --tool nsys -- python hf_bert_train.py --steps 60 ;;
  dcgan)  # pytorch/examples' DCGAN, its own fake data
    cp -r "$ROOT/tests/data/programs/pytorch-examples/dcgan" .
    (cd dcgan && tune dcgan --tool nsys -- python main.py --dataset fake --accel --workers 4 --niter 100 --outf "$W/dcgan-out") ;;
  hfxlmr)
    cp "$T/hf_bert_train.py" .
    tune hfxlmr --tool nsys --iters 40 --warmup 10 -- python hf_bert_train.py --model xlm-roberta-base --steps 200 ;;
  wlm)  # the README's medium model (--emsize 650 --nhid 650 --dropout 0.5); 60 timed steps: its step syncs on loss.item()
    cp -r "$ROOT/tests/data/programs/pytorch-examples/word_language_model" wlm
    corpus "$W/wikitext-2"
    (cd wlm && tune wlm --tool nsys --iters 60 --warmup 10 -- python main.py --accel --data "$W/wikitext-2" --emsize 650 --nhid 650 --dropout 0.5 --epochs 1) ;;
  imagenet)
    cp "$ROOT/tests/data/programs/pytorch-examples/imagenet/main.py" imagenet_main.py
    tune imagenet --tool nsys -- python imagenet_main.py --dummy -a resnet50 -b 64 -j 14 --epochs 1 --print-freq 1000 ;;
  esac
done
cp "$PROFKIT_DB" "$OUT/tune.db"
