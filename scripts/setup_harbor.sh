#!/usr/bin/env bash
# Create .venv-harbor: Harbor 0.25.0, whose task model (Task, TaskConfig, TaskPaths) the terminal plugin's tests
# read the generated task folders with, to check that agentr1's reader agrees with Harbor's own. Harbor needs
# Python >= 3.12 and the core's environment runs 3.11: it lives in a venv of its own. Versions:
# constraints-harbor.txt. Python: $HARBOR_PYTHON, else the first python3.12 that runs.
# Usage: bash scripts/setup_harbor.sh     (idempotent; re-running only installs what changed)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${HARBOR_PYTHON:-}" ]; then PY=$HARBOR_PYTHON; else
  PY=""  # the first Python 3.12 that runs (a pyenv shim may be on PATH without the version selected)
  for candidate in python3.12 /root/.pyenv/versions/3.12.*/bin/python3.12; do
    if "$candidate" -c "" 2>/dev/null; then PY=$candidate; break; fi
  done
  [ -n "$PY" ] || { echo "setup_harbor.sh: Harbor needs Python 3.12; set HARBOR_PYTHON=/path/to/python3.12" >&2; exit 1; }
fi
[ -x .venv-harbor/bin/python ] || "$PY" -m venv .venv-harbor
PIP=(.venv-harbor/bin/python -m pip install -q -c constraints-harbor.txt)
.venv-harbor/bin/python -m pip install -q --upgrade "pip>=24"
"${PIP[@]}" "harbor==0.25.0"
echo "Harbor environment ready: .venv-harbor/bin/python -c 'from harbor.models.task.task import Task'"
