#!/bin/bash
# How the real captures under tests/data/ were made, on the GPU machine (see NSIGHT_NOTES).
# Run from the project root after `. .device-kit/setup.sh` and `pip install -e .`.
# Writes everything under $DEST (default /tmp/capture) and packs it into $OUT/capture.tar.gz.
set -u
DEST=${DEST:-/tmp/capture}; mkdir -p "$DEST"; cd "$(dirname "$0")/../../.."
ROOT=$PWD
log() { echo "## $*" | tee -a "$DEST/capture.log"; }
{ nvidia-smi; ncu --version; command -v nsys && nsys --version; python3 -c 'import torch;print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'; } >"$DEST/env.txt" 2>&1
ncu --query-metrics --chip gh100 >"$DEST/query-metrics-gh100.txt" 2>&1
job() { # name workload precision mode batch iters
  cat >"$DEST/$1.job.json" <<J
{"spec": {"batch_size": $5, "precision": "$3", "mode": "$4", "device": "cuda"}, "workload_path": "$ROOT/workloads/$2.py",
 "warmup": 2, "iters": $6, "tag": "$2.$3.$4", "info_path": "$DEST/$1.info.json"}
J
}
have() { grep -qE "^ *$1 " "$DEST/query-metrics-gh100.txt"; }
have gpu__time_duration || have() { true; }  # unknown listing format: try them all
FULL=gpu__time_duration.sum
for m in sm__ops_path_tensor_src_fp16 sm__ops_path_tensor_src_bf16_dst_fp32 sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32 \
         sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32 sm__ops_path_tensor_src_fp8 sm__ops_path_tensor_src_int8 \
         sm__inst_executed_pipe_tensor_op_gmma sm__inst_executed_pipe_tensor_op_hmma sm__pipe_tensor_cycles_active \
         sm__ops_path_tensor_src_fp64 sm__inst_executed_pipe_tensor_op_dmma; do
  if have $m; then FULL="$FULL,$m.sum"; else log "metric $m not on gh100"; fi
done
FULL="$FULL,device__attribute_display_name,device__attribute_compute_capability_major,device__attribute_compute_capability_minor"
echo "$FULL" >"$DEST/full-metrics.txt"
capture() { # name workload precision mode batch iters metrics
  job "$1" "$2" "$3" "$4" "$5" "$6"
  local t0=$(date +%s%N)
  ncu --target-processes all --nvtx --nvtx-include "regex:profkit@$2\\.$3\\.$4\\.iter[0-9]+/" --metrics "$7" \
      --import-sass 0 -f -o "$DEST/$1" python3 -m profkit.harness "$DEST/$1.job.json" >"$DEST/$1.ncu.log" 2>&1
  local rc=$?; local t1=$(date +%s%N)
  log "$1 rc=$rc wall_ms=$(( (t1 - t0) / 1000000 )) kernels=$(grep -c '==PROF== Profiling' "$DEST/$1.ncu.log") passes=$(grep -o '[0-9]* passes' "$DEST/$1.ncu.log" | sort | uniq -c | tr '\n' ' ')"
  tail -3 "$DEST/$1.ncu.log" >>"$DEST/capture.log"
  if [ -f "$DEST/$1.ncu-rep" ]; then
    ncu --import "$DEST/$1.ncu-rep" --csv --page raw --print-units base >"$DEST/$1.raw.csv" 2>>"$DEST/capture.log"
    ncu --import "$DEST/$1.ncu-rep" --csv --page raw >"$DEST/$1.raw-autounits.csv" 2>>"$DEST/capture.log"
  fi
}
capture resnet18_fp16_eager resnet18 fp16 eager 2 1 "$FULL"
capture resnet18_fp32_eager resnet18 fp32 eager 2 1 "$FULL"
capture resnet18_bf16_torchscript resnet18 bf16 torchscript 2 1 "$FULL"
capture precision_zoo precision_zoo fp32 eager 8 1 "$FULL"
# What a metric set costs: passes and wall time for the same workload.
capture cost_duration resnet18 fp16 eager 2 1 gpu__time_duration.sum
capture cost_gmma resnet18 fp16 eager 2 1 gpu__time_duration.sum,sm__inst_executed_pipe_tensor_op_gmma.sum,sm__pipe_tensor_cycles_active.sum
capture cost_types4 resnet18 fp16 eager 2 1 gpu__time_duration.sum,sm__ops_path_tensor_src_fp16.sum,sm__ops_path_tensor_src_bf16_dst_fp32.sum,sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32.sum,sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32.sum
rm -f "$DEST"/cost_*.ncu-rep "$DEST"/cost_*.csv
# Nsight Systems: the same inference workload, small capture, SQLite export and nsys stats oracles.
if command -v nsys >/dev/null; then
  job nsys_resnet18_fp16 resnet18 fp16 eager 2 3
  nsys profile -t cuda,nvtx -s none --cpuctxsw=none --backtrace=none -f true -o "$DEST/nsys_resnet18_fp16" \
      python3 -m profkit.harness "$DEST/nsys_resnet18_fp16.job.json" >"$DEST/nsys.log" 2>&1; log "nsys rc=$?"
  nsys export --type sqlite -f true -o "$DEST/nsys_resnet18_fp16.sqlite" "$DEST/nsys_resnet18_fp16.nsys-rep" >>"$DEST/nsys.log" 2>&1
  nsys stats --report cuda_gpu_kern_sum,nvtx_kern_sum,nvtx_gpu_proj_sum --format csv -o "$DEST/nsys_resnet18_fp16" \
      "$DEST/nsys_resnet18_fp16.sqlite" >>"$DEST/nsys.log" 2>&1; log "nsys stats rc=$?"
fi
python3 -c "import ncu_report as n; c=n.load_report('$DEST/resnet18_fp16_eager.ncu-rep'); r=c.range_by_idx(0); print('ncu_report ranges', c.num_ranges(), 'actions', r.num_actions())" >>"$DEST/capture.log" 2>&1
ls -la "$DEST" >>"$DEST/capture.log"
tar -C "$DEST" -czf "${OUT:-/tmp}/capture.tar.gz" . && ls -la "${OUT:-/tmp}/capture.tar.gz"
cat "$DEST/capture.log"
