"""Rollout scaling: generated tokens/s of the engine at 8, 32 and 128 concurrent multi-turn episodes.

One command: ``python bench/bench_peer_scaling.py``. The default task's held-out calculator episodes (the warm-started
model of ``common.warm_model_dir``, greedy, ``rollout.max_new_tokens`` per turn) run through the rollout driver with
``TransformersEngine(max_batch_size=128)`` (prefix sharing on; its hit rate and KV repacks are recorded), all
episodes of a level in flight at once. ``--methods engine,trl`` adds
TRL's generation path (``bench_peer_rollout``'s turn-synchronous batch) at the same levels for comparison.
Levels run back to back in one process; the load average before each is recorded.
Writes ``bench/results/peer_scaling.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from common import (
    TurnBatchEngine, default_config, episode_stats, load_avg, machine_info, make_trl_grpo, parse_args, print_table,
    quiet, rollout_with, task_rows, warm_model_dir, write_result,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="8,32,128")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", choices=["warm", "base"], default="warm",
                        help="warm: after the default SFT warm start (multi-turn episodes); base: the offline model "
                             "as shipped (no warm start to build; it rarely calls the tool)")
    parser.add_argument("--n", type=int, default=1, help="samples per row (a GRPO group shares its prompt)")
    parser.add_argument("--out", default=None, help="result name (default: this benchmark's)")
    parser.add_argument("--methods", default="engine")
    args = parse_args(parser, smoke={"levels": "2,4", "max_new_tokens": 8, "methods": "engine,trl"})

    import torch

    from agentr1_core.models import load_model_and_tokenizer
    from agentr1_core.rollout.base import SamplingParams
    from agentr1_core.rollout.transformers_engine import TransformersEngine

    torch.set_num_threads(args.threads)
    levels = [int(x) for x in args.levels.split(",")]
    model, tokenizer = load_model_and_tokenizer(str(warm_model_dir(args.threads)) if args.model == "warm"
                                                else "smollm2-135m-instruct")
    model.eval()
    cfg = default_config()
    sampling = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    all_rows = task_rows(max(levels))
    result = {"benchmark": "peer_scaling", "machine": machine_info(), "load_avg_start": load_avg(),
              "model": ("SmolLM2-135M-Instruct after the default SFT warm start" if args.model == "warm"
                        else "SmolLM2-135M-Instruct as shipped (no warm start)"), "decoding": "greedy", "n": args.n,
              "max_new_tokens": args.max_new_tokens, "threads": args.threads, "results": {}}
    rollout_with(TransformersEngine(model, tokenizer), tokenizer, all_rows[:2], sampling, cfg)  # warm-up
    trl_batch = None
    if "trl" in args.methods:
        with quiet(), tempfile.TemporaryDirectory() as tmp:
            trl = make_trl_grpo(model, tokenizer, [{"prompt": r["prompt"]} for r in all_rows[:4]],
                                lambda **kw: [0.0], num_generations=2, max_tokens=args.max_new_tokens,
                                batch_completions=4, steps=1, lr=1e-6, temperature=1.0, out_dir=tmp, greedy=True)
        model.eval()
        trl_batch = lambda ids: trl._generate_single_turn(ids, None, {}, 1)[0]  # noqa: E731
    table = []
    for method in args.methods.split(","):
        for level in levels:
            engine = (TransformersEngine(model, tokenizer, max_batch_size=max(levels)) if method == "engine"
                      else TurnBatchEngine(trl_batch, tokenizer))
            load_before = load_avg()[0]
            trajs, seconds = rollout_with(engine, tokenizer, all_rows[:level // args.n], sampling, cfg, n=args.n)
            extra = {}
            if method == "engine":
                extra = {"prefix_hit_rate": round(engine.take_prefix_stats()["prefix_hit_rate"], 4),
                         "kv_repacks": engine.stats["repacks"], "decode_steps": engine.stats["decode_steps"]}
            engine.close()
            stats = episode_stats(trajs)
            row = {"concurrent_episodes": level, "seconds": round(seconds, 2),
                   "tokens_per_s": round(stats["generated_tokens"] / seconds, 2), "load_avg_1m_before": load_before,
                   **extra, **stats}
            result["results"][f"{method}@{level}"] = row
            print(f"[{method} @ {level}] {json.dumps(row)}", flush=True)
            table.append([method, level, stats["generated_tokens"], stats["mean_turns"], row["seconds"],
                          row["tokens_per_s"], load_before])
            write_result(args.out or "peer_scaling", result)
    result["load_avg_end"] = load_avg()
    print_table(["method", "episodes", "gen tokens", "turns/ep", "seconds", "tok/s", "load"], table)
    print(f"wrote {write_result(args.out or 'peer_scaling', result)}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
