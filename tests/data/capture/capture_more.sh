#!/bin/bash
# Captures for the Nsight Systems and torch.profiler importers (issues 3 and 4), on the GPU
# machine after `. .device-kit/setup.sh`: an AMP ResNet-18 training capture under nsys with
# its SQLite export and `nsys stats` oracles, and a Kineto trace of resnet18 fp16 inference.
set -u
DEST=${DEST:-/tmp/capture-more}; mkdir -p "$DEST"; cd "$(dirname "$0")/../../.."; ROOT=$PWD
cat >"$DEST/train.job.json" <<J
{"spec": {"batch_size": 8, "precision": "amp", "mode": "eager", "device": "cuda"}, "workload_path": "$ROOT/workloads/resnet18_train.py",
 "warmup": 3, "iters": 2, "tag": "resnet18_train.amp.eager", "info_path": "$DEST/train.info.json"}
J
nsys profile -t cuda,nvtx -s none --cpuctxsw=none --backtrace=none -f true -o "$DEST/nsys_resnet18_train_amp" \
  python3 -m profkit.harness "$DEST/train.job.json" >"$DEST/nsys-train.log" 2>&1; echo "nsys train rc=$?"
nsys export --type sqlite -f true -o "$DEST/nsys_resnet18_train_amp.sqlite" "$DEST/nsys_resnet18_train_amp.nsys-rep" >>"$DEST/nsys-train.log" 2>&1
nsys stats --report cuda_gpu_kern_sum,nvtx_kern_sum,nvtx_gpu_proj_sum --format csv -o "$DEST/nsys_resnet18_train_amp" \
  "$DEST/nsys_resnet18_train_amp.sqlite" >>"$DEST/nsys-train.log" 2>&1; echo "nsys stats rc=$?"
python3 - "$DEST" <<'PY'
import sys, torch, torchvision
from torch.profiler import profile, ProfilerActivity, record_function
dest = sys.argv[1]
m = torchvision.models.resnet18(weights=None).cuda().eval().half()
x = torch.randn(2, 3, 224, 224, device="cuda").half()
with torch.inference_mode():
    for _ in range(3): m(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(2):
            with record_function(f"resnet18.fp16.eager.iter{i}"):
                m(x); torch.cuda.synchronize()
prof.export_chrome_trace(f"{dest}/kineto_resnet18_fp16.json")
print("kineto kernels:", sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA))
PY
gzip -9 -f "$DEST"/*.sqlite "$DEST"/kineto_*.json
rm -f "$DEST"/*.nsys-rep
ls -la "$DEST"; tar -C "$DEST" -czf "${OUT:-/tmp}/capture-more.tar.gz" .
