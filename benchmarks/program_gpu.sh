#!/usr/bin/env bash
# Issue 35 on the GPU machine: real scripts run unmodified under `profkit run -- ...` with each
# tool, and the wall time of the default tool against the script alone (program_wall.py).
# Run from the project root: bash benchmarks/program_gpu.sh OUT_DIR [STAGE...]
set -u
OUT=${1:?out dir}; shift
STAGES=${*:-"basics wall"}
ROOT=$(pwd)
W=$(mktemp -d)
EX=$ROOT/tests/data/programs/pytorch-examples
cp -r "$EX/mnist" "$EX/dcgan" "$EX/word_language_model" "$EX/ddp-tutorial-series" "$W/"
cp "$ROOT/tests/data/programs/own/amp_train.py" "$W/"
python3 - "$W" <<'PY'
import struct, sys, numpy as np
from pathlib import Path
w = Path(sys.argv[1]); raw = w / "data" / "MNIST" / "raw"; raw.mkdir(parents=True)
rng = np.random.default_rng(0)
for prefix, n in (("train", 6400), ("t10k", 640)):
    (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, 28, 28) + rng.integers(0, 255, (n, 28, 28), dtype=np.uint8).tobytes())
    (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + rng.integers(0, 10, n, dtype=np.uint8).tobytes())
PY
export PROFKIT_DB=$OUT/programs.db
cd "$W"
export COLUMNS=120
show() {  # a run's own files: how its processes ended
  local d=$OUT/programs-runs/$1
  for f in harness-counted.log harness-times.log torch.log nsys.log; do [ -s "$d/$f" ] && { echo "--- $1/$f"; grep -v "^Train Epoch\|^\[" "$d/$f" | tail -${2:-15}; }; done
  python3 - "$d" <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
for f in ("harness.json", "harness-times.json"):
    p = d / f
    if p.exists():
        i = json.loads(p.read_text())
        print(f, {k: i.get(k) for k in ("timed_launches", "kernel_counter_error", "kernel_timer_error", "steps", "stages_s", "attribution")})
PY
  rm -f "$d"/*.ncu-rep "$d"/*.nsys-rep "$d"/*.sqlite "$d"/raw*.csv
}
for stage in $STAGES; do
case $stage in
debug)
  echo "=== amp_train auto"; python3 -m profkit run --warmup 3 --iters 2 --no-report -- python amp_train.py --steps 10000 > "$OUT/amp.out" 2>&1; echo "rc $?"; grep "^profkit" "$OUT/amp.out" | tail; show amp_train-ncu
  (cd mnist && echo "=== mnist auto" && python3 -m profkit run --warmup 3 --iters 2 --no-report -- python main.py --epochs 100 > "$OUT/mnist.out" 2>&1; echo "rc $?"; grep "^profkit" "$OUT/mnist.out" | tail; show main-ncu)
  (cd mnist && echo "=== mnist again" && python3 -m profkit run --warmup 3 --iters 2 --no-report -- python main.py --epochs 100 > "$OUT/mnist2.out" 2>&1; echo "rc $?"; grep "^profkit" "$OUT/mnist2.out" | tail; show main-ncu-2)
  ;;
basics)
  for t in auto auto nsys torch; do
    echo "=== amp_train tool $t"; python3 -m profkit run --tool $t --warmup 3 --iters 2 --no-report -- python amp_train.py --steps 10000 > "$OUT/amp-$t.out" 2>&1; echo "rc $?"; grep "^profkit\|^profiled" "$OUT/amp-$t.out" | tail -6
  done
  show amp_train-ncu 8; show amp_train-ncu-2 8
  (cd mnist && echo "=== mnist auto" && python3 -m profkit run --warmup 3 --iters 2 --no-report -- python main.py --epochs 100 > "$OUT/mnist.out" 2>&1; echo "rc $?"; grep "^profkit\|^profiled" "$OUT/mnist.out" | tail -6; show main-ncu 8)
  (cd dcgan && echo "=== dcgan auto" && python3 -m profkit run --warmup 3 --iters 2 --no-report -- python main.py --dataset fake --accel --workers 2 --niter 100 --outf "$W/dcgan-out" > "$OUT/dcgan.out" 2>&1; echo "rc $?"; grep "^profkit\|^profiled" "$OUT/dcgan.out" | tail -6; show main-ncu-2 8)
  ;;
verdicts)
  # The same models as workload files, under the default tool, against the programs' windows.
  python3 -m profkit run "$ROOT/benchmarks/programs/mnist_workload.py" --warmup 3 --iters 2 --no-report > "$OUT/mnist-wl.out" 2>&1; echo "rc $?"; tail -2 "$OUT/mnist-wl.out"
  python3 -m profkit run "$ROOT/benchmarks/programs/amp_train_workload.py" --warmup 3 --iters 2 --no-report > "$OUT/amp-wl.out" 2>&1; echo "rc $?"; tail -2 "$OUT/amp-wl.out"
  python3 "$ROOT/benchmarks/program_verdicts.py" "$PROFKIT_DB" main-ncu mnist_workload-fp32-eager-ncu
  python3 "$ROOT/benchmarks/program_verdicts.py" "$PROFKIT_DB" amp_train-ncu amp_train_workload-fp32-eager-ncu
  for t in nsys torch; do
    (cd mnist && python3 -m profkit run --tool $t --warmup 3 --iters 2 --no-report -- python main.py --epochs 100 > "$OUT/mnist-$t.out" 2>&1; echo "mnist $t rc $?"; grep "^profkit: steps\|^profkit: the program\|^profiled" "$OUT/mnist-$t.out")
    (cd dcgan && python3 -m profkit run --tool $t --warmup 3 --iters 2 --no-report -- python main.py --dataset fake --accel --workers 2 --niter 100 --outf "$W/dcgan-$t" > "$OUT/dcgan-$t.out" 2>&1; echo "dcgan $t rc $?"; grep "^profkit: steps\|^profkit: the program\|^profiled\|error" "$OUT/dcgan-$t.out")
  done
  (cd dcgan && python3 -m profkit run --warmup 3 --iters 2 --no-report -- python main.py --dataset fake --accel --workers 2 --niter 100 --outf "$W/dcgan-ncu" > "$OUT/dcgan-ncu.out" 2>&1; echo "dcgan ncu rc $?"; grep "^profkit: steps\|^profkit: the program\|^profiled\|error" "$OUT/dcgan-ncu.out")
  for r in main-nsys main-torch main-ncu main-ncu-2 amp_train-ncu; do python3 - "$PROFKIT_DB" $r <<'PY'
import sys, profkit
run = profkit.open_db(sys.argv[1]).run(sys.argv[2])
k = run.kernels(); k = k[k.kind == "kernel"]
att = float(k[k.module.notna()].duration_ns.sum() / k.duration_ns.sum()) if len(k) else 0
print(run.name, run.tool, len(k), "kernels; attributed", f"{att:.2%}", "; findings:", [f.title if hasattr(f, "title") else str(f)[:80] for f in run.findings()][:4])
PY
  done
  ;;
kit)
  # Real third-party scripts (Hugging Face Trainer and Accelerate, a LightningCLI script, timm's
  # train.py), unmodified, from the kit a helper assembled (.gpu-kit: carried, not committed).
  printf '#!/bin/sh\nexec python3 -m profkit "$@"\n' > "$W/pk"; chmod +x "$W/pk"
  export PROFKIT="$W/pk" KIT_RUN_TAG=auto
  PROFKIT_OPTS="--warmup 3 --iters 2 --no-report" bash "$ROOT/.gpu-kit/run_profkit.sh" "$W/kit" > "$OUT/kit-auto.txt" 2>&1
  grep -A6 "=== summary" "$OUT/kit-auto.txt"; grep "profkit: error\|Error" "$OUT/kit-auto.txt" | head
  export KIT_RUN_TAG=nsys; PROFKIT_OPTS="--tool nsys --warmup 3 --iters 2 --no-report" bash "$ROOT/.gpu-kit/run_profkit.sh" "$W/kit" hf_trainer lightning > "$OUT/kit-nsys.txt" 2>&1
  grep -A4 "=== summary" "$OUT/kit-nsys.txt"
  export KIT_RUN_TAG=torch; PROFKIT_OPTS="--tool torch --warmup 3 --iters 2 --no-report" bash "$ROOT/.gpu-kit/run_profkit.sh" "$W/kit" accelerate timm > "$OUT/kit-torch.txt" 2>&1
  grep -A4 "=== summary" "$OUT/kit-torch.txt"
  cp "$W/kit/out/profkit.db" "$OUT/kit.db" 2>/dev/null
  python3 - "$OUT/kit.db" <<'PY'
import sys, profkit
db = profkit.open_db(sys.argv[1])
for run in db.list_runs():
    if run.status != "ok":
        print(run.name, run.status, (run.info.error or "")[:200]); continue
    k = run.kernels(); k = k[k.kind == "kernel"]
    att = float(k[k.module.notna()].duration_ns.sum() / k.duration_ns.sum()) if len(k) else 0.0
    p = run.info.program or {}; plan = run.info.ncu_plan or {}
    print(f"{run.name}: {run.tool}, {len(k)} kernels, attributed {att:.2%}, {p.get('steps', {}).get('said')}, "
          f"{p.get('ended')}, counted by {plan.get('counted_by')}, profiled {run.profiled_wall_s} s; "
          f"findings {[f.title for f in run.findings()][:4]}")
    w = [str(x) for f in run.findings() for x in (getattr(f, 'where', None) or [])][:2]
    print("   where:", w)
PY
  ;;
nsys_pytorch)
  # A user's own nsys capture of the unmodified AMP script, with nsys's PyTorch annotation.
  NSYS=$(python3 -c "from profkit.tools import nsys; print(nsys.find())")
  "$NSYS" profile --pytorch=autograd-shapes-nvtx -t cuda,nvtx -s none --cpuctxsw none --force-overwrite true \
    -o "$W/autograd_shapes" python3 amp_train.py --steps 20 > "$OUT/nsys-pytorch.log" 2>&1; echo "nsys rc $?"
  "$NSYS" export --type sqlite --force-overwrite true -o "$W/autograd_shapes.sqlite" "$W/autograd_shapes.nsys-rep" > /dev/null 2>&1
  ls -la "$W"/autograd_shapes*; gzip -9c "$W/autograd_shapes.sqlite" > "$OUT/autograd_shapes.sqlite.gz"; ls -la "$OUT/autograd_shapes.sqlite.gz"
  python3 -m profkit --db "$W/imp.db" import "$OUT/autograd_shapes.sqlite.gz" 2>&1 | tail -3
  python3 - "$W/imp.db" <<'PY'
import sys, profkit
run = profkit.open_db(sys.argv[1]).list_runs()[-1]
k = run.kernels(); k = k[k.kind == "kernel"]
print("ops", k.op.notna().mean(), k.op.value_counts().head(5).to_dict(), k.shapes.dropna().head(3).tolist())
for f in run.findings():
    print(f.title, [str(x)[:160] for x in (getattr(f, "where", None) or [])][:3])
PY
  ;;
ddp)
  # pytorch/examples' DDP tutorial script for torchrun, unmodified, on two GPUs.
  for t in auto torch; do
    (cd ddp-tutorial-series && python3 -m profkit run --tool $t --nproc-per-node 2 --warmup 3 --iters 2 --no-report -- python multigpu_torchrun.py 50 10 > "$OUT/ddp-$t.out" 2>&1; echo "ddp $t rc $?"; grep "^profkit\|^profiled\|rank" "$OUT/ddp-$t.out" | tail -8)
  done
  python3 - "$PROFKIT_DB" <<'PY'
import sys, profkit
for run in profkit.open_db(sys.argv[1]).list_runs():
    if not run.name.startswith("multigpu"):
        continue
    k = run.kernels(); k = k[k.kind == "kernel"]
    r = run.ranges()
    print(run.name, run.status, run.tool, "world", run.info.world_size, "ranks", sorted(k["rank"].dropna().unique().tolist()),
          "kernels", len(k), "step ranges", int(r.name.str.contains(r"\.iter", regex=True).sum()),
          "nccl kernels", int(k.name.str.contains("nccl", case=False).sum()), (run.info.program or {}).get("ended"))
    print("   findings", [f.title for f in run.findings()])
PY
  ;;
wall)
  python3 "$ROOT/benchmarks/program_wall.py" --warmup 3 --iters 2 --cwd "$W/mnist" -- \
    amp_train=python ../amp_train.py --steps 10000 ";;" mnist=python main.py --epochs 100 ";;" dcgan=python ../dcgan/main.py --dataset fake --accel --workers 2 --niter 100 --outf "$W/dcgan-out2" 2>&1 | tail -12
  ;;
esac
done
cp -r "$W"/*.log "$OUT"/ 2>/dev/null
true
