"""The vLLM engine exercised for real, inside the vLLM environment (``.venv-vllm``, see ``scripts/setup_vllm.sh``).

``test_vllm_engine.py`` runs this file with ``.venv-vllm/bin/python`` (vLLM needs other package versions than the
main suite) and checks the JSON it writes against the main suite's own transformers engine. One process loads vLLM
once for all checks (a vLLM start costs tens of seconds on two cores):

* a rollout worker (``RolloutWorker``, the class Ray actors run) with ``engine: vllm`` on the given model: greedy
  ids + log-probs, real episodes of the default task, sleep/wake, in-memory weights through ``load_weights``;
* a request the engine refuses (a prompt longer than ``max_model_len``) ends only that episode;
* the engine's core process killed: the worker's next call raises ``RolloutEngineError``;
* the OPD teacher of the installed ``agentr1-opd`` distribution scoring through ``teacher_engine: vllm``.

Usage: python vllm_checks.py MODEL_DIR OUT_JSON
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

PROMPT = [1, 17, 250, 3001, 99]
SCORE_PROMPT, SCORE_CONT = [1, 17, 250, 3001], [42, 4242, 7]


def changed_weights(model_dir: str) -> dict:
    """The weights of block 1 scaled by 1.5 plus 0.01 (the main suite applies the same change to its own copy)."""
    from safetensors.torch import load_file

    state = {}
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".safetensors"):
            state.update(load_file(os.path.join(model_dir, name)))
    return {n: (t.float() * 1.5 + 0.01).numpy() for n, t in state.items() if ".layers.1." in n}


def worker_checks(model_dir: str, out: dict) -> None:
    from omegaconf import OmegaConf

    from agentr1_core.config import component, load_config
    from agentr1_core.distributed.pool import RolloutEngineError
    from agentr1_core.distributed.worker import RolloutWorker
    from agentr1_core.rollout.base import SamplingParams

    cfg = load_config("default", [f"model.path={model_dir}", "engine.name=vllm", "engine.dtype=float32",
                                  "engine.max_model_len=512", "engine.max_batch_size=8",
                                  "rollout.max_new_tokens=16", "rollout.max_prompt_tokens=480",
                                  "data.train.train_size=4"])
    t0 = time.perf_counter()
    worker = RolloutWorker(OmegaConf.to_container(cfg, resolve=True), 0, threads=1)
    out["load_seconds"] = time.perf_counter() - t0
    engine = worker.engine
    out["engine_class"] = type(engine).__name__
    out["sleep_enabled"] = engine.sleep_enabled

    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    gen = asyncio.run(engine.generate(PROMPT, greedy))
    out["greedy"] = {"ids": gen.token_ids, "logprobs": gen.logprobs, "finish_reason": gen.finish_reason}

    # real episodes of the default task through the worker's flow (what a Ray rollout worker runs)
    registry = worker.registry
    name, params = component(cfg, "data.train")
    rows = list(registry.build("dataset", name, params, where="data.train"))[:2]
    episodes = [(row, f"g{r}", f"g{r}/{k}") for r, row in enumerate(rows) for k in range(2)]
    t0 = time.perf_counter()
    result = asyncio.run(worker.run_episodes(episodes, SamplingParams(temperature=1.0, max_new_tokens=16), "model"))
    out["episodes_seconds"] = time.perf_counter() - t0
    trajs = result["trajectories"]
    out["episodes"] = {"count": len(trajs), "steps": [len(t.steps) for t in trajs],
                       "terminations": [t.termination for t in trajs],
                       "engine_error_episodes": result["engine_error_episodes"],
                       "first_step": {"prompt_ids": trajs[0].steps[0].prompt_ids,
                                      "response_ids": trajs[0].steps[0].response_ids,
                                      "logprobs": trajs[0].steps[0].response_logprobs} if trajs[0].steps else None}

    # sleep mode: vLLM's CPU worker has none, so the engine reports it off and both calls are no-ops
    out["sleep"] = {"slept": worker.sleep(1), "woke": worker.wake_up()}
    out["greedy_after_sleep"] = asyncio.run(engine.generate(PROMPT, greedy)).token_ids

    # weights in memory, as a Ray worker receives them (a dict of numpy arrays instead of an object ref)
    out["score_before"] = asyncio.run(engine.score(SCORE_PROMPT, SCORE_CONT))
    state = changed_weights(model_dir)
    seconds = asyncio.run(worker.load_weights(1, [state]))
    out["weights"] = {"tensors": len(state), "seconds": seconds, "version": worker.weights_version,
                      "engine_weight_updates": engine.stats["weight_updates"]}
    out["score_after"] = asyncio.run(engine.score(SCORE_PROMPT, SCORE_CONT))

    # one request the engine refuses ends only its own episode
    bad = asyncio.run(engine.generate(list(range(5, 605)), greedy))
    ok = asyncio.run(engine.generate(PROMPT, greedy))
    out["refused_request"] = {"finish_reason": bad.finish_reason, "error": bad.info.get("error"),
                              "failure": engine.failure, "next_ids": len(ok.token_ids)}

    # the engine core dies: the worker's next call stops with a clear error instead of empty episodes
    import psutil

    for child in psutil.Process().children(recursive=True):
        child.kill()
    try:
        asyncio.run(asyncio.wait_for(worker.run_episodes(episodes[:2], SamplingParams(max_new_tokens=8)), 120))
        out["dead_engine"] = {"raised": None}
    except RolloutEngineError as exc:
        out["dead_engine"] = {"raised": type(exc).__name__, "message": str(exc)}
    worker.close()


def opd_checks(model_dir: str, out: dict) -> None:
    from agentr1_core.flows import render_prompt
    from agentr1_core.mdp import Observation, Step, Trajectory
    from agentr1_core.plugins import get_registry
    from agentr1_core.trainers.batching import build_step_batch, trajectories_to_rows

    registry = get_registry()
    origin = registry.components["algorithm"]["opd"].distribution  # the installed agentr1-opd distribution
    algo = registry.build("algorithm", "opd", {"teacher": model_dir, "teacher_engine": "vllm",
                                               "teacher_engine_params": {"dtype": "float32", "max_model_len": 512},
                                               "teacher_device": "cpu"}, where="algorithm")
    tok = algo.teacher.load_tokenizer()
    algo.bind_policy(model_dir, tok, "cpu")
    trajs, steps = [], []
    for question, answer in (("What is 12 * 34?", "<answer>408</answer>"), ("What is 7 + 5?", "It is 12")):
        obs = Observation(messages=[{"role": "user", "content": question}])
        ids = render_prompt(tok, obs)
        response = tok.encode(answer, add_special_tokens=False) + [tok.eos_token_id]
        step = Step(ids, response, [-1.0] * len(response), observation=obs, done=True)
        trajs.append(Trajectory(steps=[step], uid=question, group_id=question))
        steps.append({"prompt_ids": ids, "response_ids": response})
    rows = trajectories_to_rows(trajs).rows
    batch = build_step_batch(rows)
    t0 = time.perf_counter()
    metrics = algo.prepare_batch(batch, rows, trajs)
    out["opd"] = {"distribution": origin,
                  "engine_class": type(algo.teacher.engine).__name__, "seconds": time.perf_counter() - t0,
                  "metrics": {k: float(v) for k, v in metrics.items()}, "steps": steps,
                  "teacher_logprobs": [batch.teacher_logprobs[i, :len(s["response_ids"])].tolist()
                                       for i, s in enumerate(steps)]}
    algo.close()


def main() -> int:
    model_dir, out_path = sys.argv[1], sys.argv[2]
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache per engine: plenty for these checks
    import torch
    import vllm

    out: dict = {"vllm": vllm.__version__, "torch": torch.__version__, "torch_cuda": torch.version.cuda}
    try:
        worker_checks(model_dir, out)
        opd_checks(model_dir, out)
    finally:
        with open(out_path, "w", encoding="utf-8") as fh:
            json.dump(out, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
