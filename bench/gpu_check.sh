#!/usr/bin/env bash
# The GPU check (issue 47): one prepared script a person runs on a GPU machine, so the first GPU figures are taken
# the same way every time. It prints the device, runs the core throughput bench with small arguments (about 3
# minutes) and one 300 s synthesis job, writes everything under OUT and prints a summary of what it measured.
#
#   pip install -e '.[gpu,bench]'        # JAX's CUDA wheels; PyTorch is the throughput bench's peer (on the CPU)
#   bash bench/gpu_check.sh OUT DATA     # DATA: a dataset file or folder netsynth synthesize reads, or `digits`
#                                        # (scikit-learn's bundled digits, written to OUT/digits.npz)
# Options: --budget SECONDS (default 300), --busy (run the bench even above its load limit, bench/protocol.py),
# --dry-run (print the commands without running anything; tests/test_bench_gpu_check.py runs it so).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python}
NETSYNTH=${NETSYNTH:-netsynth}
FAMILIES=hand-cnn,residual,inverted,text-cnn,text-transformer
DRY=0
BUDGET=300
BUSY=()
ARGS=()

usage() {
  echo "usage: bash bench/gpu_check.sh [--dry-run] [--busy] [--budget SECONDS] OUT DATA|digits" >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --busy) BUSY=(--busy) ;;
    --budget) [ $# -ge 2 ] || usage; BUDGET=$2; shift ;;
    -h|--help) usage ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *) ARGS+=("$1") ;;
  esac
  shift
done
[ ${#ARGS[@]} -eq 2 ] || usage
OUT=${ARGS[0]}
DATA=${ARGS[1]}

# step NAME COMMAND...: print the command; unless --dry-run, run it with its output also in OUT/NAME.log
step() {
  local name=$1
  shift
  printf '+'
  printf ' %q' "$@"
  printf '  > %s\n' "$OUT/$name.log"
  if [ "$DRY" -eq 0 ]; then
    "$@" 2>&1 | tee "$OUT/$name.log"
  fi
}

if [ "$DRY" -eq 0 ]; then
  mkdir -p "$OUT"
fi

echo "== device"
step nvidia-smi nvidia-smi -L
step jax-devices "$PYTHON" -c 'import jax; print(jax.devices()); b = jax.default_backend(); print("backend", b)
raise SystemExit(0 if b == "gpu" else "JAX does not see the GPU: pip install -e .[gpu]")'
step imports "$PYTHON" -c 'import torch; print("torch", torch.__version__)'

if [ "$DATA" = digits ]; then
  DATA=$OUT/digits.npz
  step digits "$PYTHON" -c 'import sys, numpy as np; from sklearn.datasets import load_digits
d = load_digits(); np.savez(sys.argv[1], x=d.images.astype(np.uint8)[..., None], y=d.target.astype(np.int64))
print("wrote", sys.argv[1], d.images.shape)' "$DATA"
fi

echo "== core throughput (bench/core_families.py, batch 128, $FAMILIES)"
step core_families timeout 600 "$PYTHON" bench/core_families.py --steps 6 --repeats 3 --batches 128 \
  --families "$FAMILIES" --out "$OUT/core_families.json" "${BUSY[@]}"

echo "== synthesis ($BUDGET s on $DATA)"
step synthesize "$PYTHON" -c 'import subprocess, sys, time
start = time.monotonic(); done = subprocess.run(sys.argv[1:]); wall = time.monotonic() - start
print(f"wall_s {wall:.1f}"); sys.exit(done.returncode)' \
  "$NETSYNTH" synthesize "$DATA" --budget "$BUDGET" --seed 0 --out "$OUT/synthesis"

echo "== summary"
step summary "$PYTHON" - "$OUT" <<'EOF'
"""What the GPU check measured, from the files it wrote."""
import json
import pathlib
import sys

out = pathlib.Path(sys.argv[1])
bench = json.loads((out / "core_families.json").read_text())
print(f"busy {bench.get('busy')}, load {bench.get('load_average_before')} -> {bench.get('load_average_after')}, "
      f"CPU {bench.get('cpu_model')} x {bench.get('cpu_count')}")
print(f"{'family':<18}{'batch':>6}{'train/s':>12}{'infer/s':>12}   (PyTorch beside it runs on the CPU)")
for row in bench["rows"]:
    print(f"{row['family']:<18}{row['batch']:>6}{row['train_per_s']:>12,.0f}{row['infer_per_s']:>12,.0f}")
metrics = json.loads((out / "synthesis" / "metrics.json").read_text())
wall = (out / "synthesize.log").read_text().split("wall_s")[-1].split()[0]
print(f"synthesis: test accuracy {metrics.get('test_accuracy')}, engine {metrics.get('seconds')} s, "
      f"wall {wall} s, budget {metrics.get('budget')}")
EOF
