"""Step-level vs flattened context: prompt tokens per episode at 5, 10 and 20 turns (no timing).

One command: ``python bench/bench_peer_context.py``. Scripted calculator episodes of the default task (turns
1..T-1 call the calculator on a new expression, turn T answers) run through the real ``AgentEnvLoop`` and
``ToolEnv`` with the real SmolLM2 tokenizer and chat template, twice:

* ``window``: ``ToolEnv(context="window", window=2)`` — each step's prompt is the system prompt, the task and the
  last 2 turns (step-level MDP: the env decides what the model sees);
* ``append``: ``ToolEnv(context="append")`` — the same episode as one growing conversation (the flattened view).

Counted per episode: the sum of the prompt tokens of every step (what the engine prefills and what the trainer's
step rows hold; a flattened trajectory without prefix caching re-reads its whole history every turn), the longest
single prompt, and the length of the final flattened sequence (what a prefix-cached engine or a one-sequence
trainer reads once). Writes ``bench/results/peer_context.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from statistics import mean

from common import default_config, load_avg, machine_info, parse_args, print_table, write_result


def scripted_rows(base_rows: list[dict], turns: int, seed: int) -> list[dict]:
    """Rows whose expert makes ``turns - 1`` calculator calls (new expressions) and then answers."""
    rng = random.Random(seed)
    rows = []
    for row in base_rows:
        actions = []
        for _ in range(turns - 1):
            expr = f"{rng.randint(12, 999)} * {rng.randint(12, 99)} + {rng.randint(10, 999)}"
            actions.append("<tool_call>" + json.dumps({"name": "calculator", "arguments": {"expression": expr}})
                           + "</tool_call>")
        actions.append(f"<answer>{row['reward_model']['ground_truth']}</answer>")
        rows.append({**row, "expert_actions": actions})
    return rows


async def run_episodes(rows, tokenizer, env_config: dict, turns: int):
    from agentr1_core.flows import AgentEnvLoop, FlowContext
    from agentr1_core.rollout.base import SamplingParams

    ctx = FlowContext(engine=None, tokenizer=tokenizer, sampling=SamplingParams(), env_config=env_config,
                      max_turns=turns, max_prompt_tokens=10**6, policy="expert")
    return [await AgentEnvLoop(ctx).run(row) for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--windows", default="2,1", help="window sizes (turns kept) to compare with append")
    parser.add_argument("--turns", default="5,10,20", help="episode lengths (turns)")
    args = parse_args(parser, smoke={"episodes": 2, "windows": "1", "turns": "2,3"})

    from transformers import AutoTokenizer

    from agentr1_core.builtin.datasets import arithmetic_rows
    from agentr1_core.models import SMOLLM2_CACHE_NAME, cache_root, load_model_and_tokenizer
    from agentr1_core.plugins import configure_registry

    configure_registry()
    folder = cache_root() / SMOLLM2_CACHE_NAME  # the fp32 cache of the default model holds its tokenizer
    if (folder / "tokenizer_config.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(folder)
    else:
        tokenizer = load_model_and_tokenizer("smollm2-135m-instruct")[1]
    cfg = default_config()
    env_base = {"name": "tool_env", "tools": list(cfg.env.tools), "tool_format": str(cfg.env.tool_format),
                "system_prompt": str(cfg.env.system_prompt)}
    base_rows = arithmetic_rows("train", train_size=args.episodes, val_size=0, seed=0)
    result = {"benchmark": "peer_context", "machine": machine_info(), "load_avg_start": load_avg(),
              "episodes": args.episodes, "tokenizer": "SmolLM2-135M-Instruct", "rows": []}
    table = []
    for window, turns in [(int(w), int(t)) for w in args.windows.split(",") for t in args.turns.split(",")]:
        rows = scripted_rows(base_rows, turns, seed=turns)
        per = {}
        for context in ("window", "append"):
            env = {**env_base, "max_turns": turns + 1, "context": context, "window": window}
            trajs = asyncio.run(run_episodes(rows, tokenizer, env, turns))
            bad = [t.termination for t in trajs if t.termination != "done" or len(t.steps) != turns]
            if bad:
                raise RuntimeError(f"scripted episodes did not run {turns} turns: {bad[:3]}")
            per[context] = {
                "prompt_tokens_per_episode": mean(sum(len(s.prompt_ids) for s in t.steps) for t in trajs),
                "max_prompt_tokens": max(max(len(s.prompt_ids) for s in t.steps) for t in trajs),
                "final_sequence_tokens": mean(len(t.steps[-1].prompt_ids) + len(t.steps[-1].response_ids)
                                              for t in trajs),
            }
        w, a = per["window"], per["append"]
        row = {"turns": turns, "window_size": window, "window": w, "append": a,
               "ratio_append_over_window_prompt_tokens": round(a["prompt_tokens_per_episode"]
                                                               / w["prompt_tokens_per_episode"], 2),
               "ratio_flat_sequence_over_window_prompt_tokens": round(a["final_sequence_tokens"]
                                                                      / w["prompt_tokens_per_episode"], 2)}
        result["rows"].append(row)
        table.append([window, turns, round(w["prompt_tokens_per_episode"]), round(a["prompt_tokens_per_episode"]),
                      row["ratio_append_over_window_prompt_tokens"], w["max_prompt_tokens"], a["max_prompt_tokens"],
                      round(a["final_sequence_tokens"]), row["ratio_flat_sequence_over_window_prompt_tokens"]])
    result["load_avg_end"] = load_avg()
    print_table(["window", "turns", "window: prompt tok/ep", "append: prompt tok/ep", "append/window", "window: max prompt",
                 "append: max prompt", "flat sequence tok", "flat seq/window"], table)
    print(f"wrote {write_result('peer_context', result)}")


if __name__ == "__main__":
    main()
