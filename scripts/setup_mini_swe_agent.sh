#!/usr/bin/env bash
# Create .venv-mini: mini-swe-agent 2.4.6 from the package index, unchanged, the harness of the gateway's
# terminal-mini-swe-agent config (agentr1-core run terminal-mini-swe-agent runs its `mini` once per episode). It
# needs LiteLLM, whose pins clash with .venv's, so it lives in a venv of its own. Versions:
# constraints-mini-swe-agent.txt. After installing, the venv is checked for .pth files (code Python runs at every
# start, the way LiteLLM's compromised 1.82.7/1.82.8 stole credentials): any but setuptools' own fails the setup.
# Usage: bash scripts/setup_mini_swe_agent.sh     (idempotent)
#        export AGENTR1_MINI_SWE_AGENT=$PWD/.venv-mini/bin/mini     (or put .venv-mini/bin on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv-mini/bin/python ] || "$PY" -m venv .venv-mini
.venv-mini/bin/python -m pip install -q --upgrade "pip>=24"
.venv-mini/bin/python -m pip install -q -c constraints-mini-swe-agent.txt "mini-swe-agent==2.4.6" "litellm==1.110.2"
unexpected=$(find .venv-mini/lib -path '*/site-packages/*.pth' ! -name distutils-precedence.pth)
if [ -n "$unexpected" ]; then
  echo "setup_mini_swe_agent.sh: unexpected .pth files in .venv-mini (code run at every Python start):" >&2
  echo "$unexpected" >&2
  exit 1
fi
echo "mini-swe-agent ready: export AGENTR1_MINI_SWE_AGENT=$PWD/.venv-mini/bin/mini"
