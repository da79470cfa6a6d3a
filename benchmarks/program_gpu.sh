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
cp -r "$EX/mnist" "$EX/dcgan" "$EX/word_language_model" "$W/"
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
    echo "=== amp_train tool $t"; /usr/bin/time -f "wall %e s" python3 -m profkit run --tool $t --warmup 3 --iters 2 --no-report -- python amp_train.py --steps 10000 2>&1 | tail -25
  done
  (cd mnist && echo "=== mnist auto" && /usr/bin/time -f "wall %e s" python3 -m profkit run --warmup 3 --iters 2 --no-report -- python main.py --epochs 100 2>&1 | grep -v "^Train Epoch" | tail -25)
  (cd dcgan && echo "=== dcgan auto" && /usr/bin/time -f "wall %e s" python3 -m profkit run --warmup 3 --iters 2 --no-report -- python main.py --dataset fake --workers 2 --niter 100 --outf "$W/dcgan-out" 2>&1 | tail -25)
  ;;
wall)
  python3 "$ROOT/benchmarks/program_wall.py" --warmup 3 --iters 2 -- \
    amp_train=python amp_train.py --steps 10000 ";;" dcgan=python dcgan/main.py --dataset fake --workers 2 --niter 100 --outf "$W/dcgan-out2" 2>&1 | tail -12
  ;;
esac
done
cp -r "$W"/*.log "$OUT"/ 2>/dev/null
true
