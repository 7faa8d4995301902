#!/usr/bin/env bash
# The embedded local backend on one CUDA GPU: the CUDA unit tests of the update, the default run (SmolLM2-135M-Instruct,
# calculator task, SFT warm start then GRPO) in fp32, then a bf16 smoke run of the tiny recipe; each timed, with the
# GPU memory peak sampled by nvidia-smi. Prints one summary block at the end and writes it to OUTDIR/summary.txt.
#
# Needs: a Python whose torch sees CUDA (PYTHON, default python3) that imports agentr1-core and its model package,
# run from the repository root (the CUDA unit tests come from tests/). Without a package index, next to the machine's
# own torch: `bash scripts/gpu_bundle.sh --ours-only` on a connected machine, then here
# `bash scripts/gpu_install.sh BUNDLE --target /tmp/agentr1-site && PYTHONPATH=/tmp/agentr1-site bash bench/gpu_local.sh`
# (bench/gpu_check.sh runs the same default config for three seeds).
# Usage: bash bench/gpu_local.sh [OUTDIR]        (default OUTDIR: runs/gpu_local)
set -euo pipefail
OUTDIR=${1:-runs/gpu_local}
PY=${PYTHON:-python3}
mkdir -p "$OUTDIR"

"$PY" - <<'EOF'
import sys
import torch
if not torch.cuda.is_available():
    sys.exit("gpu_local.sh: torch does not see a CUDA GPU (torch %s)" % torch.__version__)
print("torch", torch.__version__, "on", torch.cuda.get_device_name(0))
EOF
"$PY" -c "import agentr1_core" 2>/dev/null || { echo "gpu_local.sh: $PY cannot import agentr1_core" >&2; exit 2; }

nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$OUTDIR/gpu_mem.log" &
SMI=$!
trap 'kill $SMI 2>/dev/null || true' EXIT

run() {  # run NAME ARGS...: one timed agentr1-core run into OUTDIR/NAME
  local name=$1; shift
  local start=$SECONDS
  local rc=0
  "$PY" -c "from agentr1_core.cli import entry; entry()" run "$@" "run_dir=$OUTDIR/$name" 2>&1 \
    | tee "$OUTDIR/$name.log" || rc=$?
  echo "$name exit=$rc wall_s=$((SECONDS - start))" >> "$OUTDIR/walls.txt"
}

: > "$OUTDIR/walls.txt"
start=$SECONDS
rc=0
"$PY" -m pytest -q -p no:cacheprovider tests/trainer/test_update_cuda.py 2>&1 | tee "$OUTDIR/cuda_tests.log" || rc=$?
echo "cuda-tests exit=$rc wall_s=$((SECONDS - start))" >> "$OUTDIR/walls.txt"
run default model.device=cuda
run tiny-bf16 tiny model.device=cuda model.dtype=bfloat16
kill $SMI 2>/dev/null || true

"$PY" - "$OUTDIR" <<'EOF' | tee "$OUTDIR/summary.txt"
import re, sys
from pathlib import Path
out = Path(sys.argv[1])
mem = [int(x) for x in (out / "gpu_mem.log").read_text().split() if x.strip().isdigit()]
print("== gpu_local summary ==")
print((out / "walls.txt").read_text().strip())
print(f"gpu memory peak (nvidia-smi, all processes): {max(mem) if mem else 'n/a'} MiB")
for name in ("default", "tiny-bf16"):
    for line in re.split(r"[\r\n]", (out / f"{name}.log").read_text()):
        if line.startswith(("[setup]", "[validation", "[sft]", "it ", "[done]")):
            print(name, "|", line.strip())
EOF
