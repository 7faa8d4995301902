"""One full RL iteration (rollout + update) of the local trainer vs TRL's ``GRPOTrainer`` (CPU, no vLLM).

One command: ``python bench/bench_peer_iteration.py``. Both sides get the same model (SmolLM2-135M-Instruct, fp32,
only the top ``trainer.train_layers`` blocks trained, as in the default config), the same prompts in the same order,
the same group size, completions per iteration, max new tokens, sampling temperature, learning rate, gradient
clipping, no reference model (GRPO with ``kl_coef = 0`` / ``beta = 0``) and one optimizer step per iteration.

TRL's GRPO is single-turn, so the comparison is on single-turn prompts of the default calculator task: the system
prompt with the calculator's tool instructions and the question, as ``ToolEnv`` renders it; our side runs with
``max_turns = 1``; TRL's reward function applies the same ``<answer>`` matching as ``answer_match``.

Each side runs in its own subprocess, after the 1-minute load average has settled below ``--settle-load`` (waiting at
most ``--settle-timeout`` seconds; the load before each side is recorded), under ``/usr/bin/time -v``: wall time per
iteration (the median of the iterations after the first, which pays one-off warm-up costs), the process's CPU seconds
per iteration (all its threads: on a shared machine less disturbed by other jobs than wall time) and its peak RSS
(``ru_maxrss``).
Our side runs twice: as configured by default, and with ``trainer.skip_inert_rows=false`` and
``trainer.step_without_gradient=true``. When every sample of a group gets the same reward (with the untrained model
here, usually all 0) its rows have no gradient and the default skips them (and, when no row has one, the optimizer
step); TRL runs them. The second run does the full forward and backward, which is what an update with a
gradient costs; both ratios are reported.
Writes ``bench/results/peer_iteration.json`` (``--out`` names another file).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import (
    default_config, load_avg, machine_info, make_trainer, make_trl_grpo, parse_args, peak_rss_mib, print_table, quiet,
    run_json_subprocess, task_rows, write_result,
)

MODEL = "smollm2-135m-instruct"
# ours: extra settings; the full update runs every row and steps even when no row has a gradient, as TRL does
SIDES = {"ours": [], "ours_full_update": ["trainer.skip_inert_rows=false", "trainer.step_without_gradient=true"],
         "trl": None}


def cpu_seconds() -> float:
    """CPU seconds of this process so far, every thread (user + system)."""
    times = os.times()
    return times.user + times.system


def settle(load: float, timeout: float) -> float:
    """Wait until the 1-minute load average is below ``load`` (at most ``timeout`` s); the seconds waited."""
    t0 = time.monotonic()
    while load_avg()[0] >= load and time.monotonic() - t0 < timeout:
        time.sleep(5)
    return time.monotonic() - t0


def settings(args) -> list[str]:
    return [f"model.path={MODEL}", "stages=[rl]", "validation.max_rows=0", "rollout.max_turns=1", "env.max_turns=1",
            f"rollout.batch_size={args.prompts}", f"rollout.n={args.group}",
            f"rollout.max_new_tokens={args.max_new_tokens}", f"trainer.total_steps={args.iterations}",
            f"trainer.threads={args.threads}"]


def prompt_rows(args) -> list[dict]:
    return task_rows(args.prompts * args.iterations, split="train")


def child_ours(args, extra: list[str] = ()) -> dict:
    cfg = default_config(settings(args) + list(extra))
    trainer = make_trainer(cfg)
    rows = prompt_rows(args)
    trainer.data.rows, trainer.data.order, trainer.data.cursor = rows, list(range(len(rows))), 0
    times, cpu, details = [], [], []
    try:
        for _ in range(args.iterations):
            t0, c0 = time.perf_counter(), cpu_seconds()
            with quiet():
                m = trainer.train_iteration()
            times.append(time.perf_counter() - t0)
            cpu.append(cpu_seconds() - c0)
            details.append({k: m.get(k) for k in ("rollout_seconds", "tokens_generated", "update_tok_s",
                                                  "update_tokens", "update_computed_tokens", "update_inert_rows",
                                                  "optimizer_steps", "reward_mean", "reward_std")})
    finally:
        trainer.close()
    return {"iteration_seconds": times, "iteration_cpu_seconds": cpu, "details": details,
            "peak_rss_mib": peak_rss_mib(), "trainable_params": trainer.backend.trainable_params}


def child_trl(args) -> dict:
    import torch
    from transformers import TrainerCallback

    from agentr1_core.builtin.rewards import final_answer
    from agentr1_core.envs import ToolEnv
    from agentr1_core.models import load_model_and_tokenizer
    from agentr1_core.plugins import configure_registry
    from agentr1_core.trainers.local import freeze_below_top

    torch.set_num_threads(args.threads)
    cfg = default_config(settings(args))
    configure_registry()
    system = ToolEnv(tools=list(cfg.env.tools), tool_format=str(cfg.env.tool_format),
                     system_prompt=str(cfg.env.system_prompt)).system_message()
    data = [{"prompt": [{"role": "system", "content": system}, {"role": "user", "content": r["prompt"]}],
             "ground_truth": r["reward_model"]["ground_truth"]} for r in prompt_rows(args)]

    def answer_match(completions, ground_truth, **_):
        out = []
        for comp, truth in zip(completions, ground_truth):
            text = comp[-1]["content"] if isinstance(comp, list) else str(comp)
            answer = final_answer(text, tag_required=True)
            try:
                ok = answer is not None and abs(float(answer.replace(",", "")) - float(truth)) < 1e-6
            except ValueError:
                ok = False
            out.append(1.0 if ok else 0.0)
        return out

    class Clock(TrainerCallback):
        def __init__(self):
            self.marks = []

        def on_step_begin(self, *a, **k):
            if not self.marks:
                self.marks.append((time.perf_counter(), cpu_seconds()))

        def on_step_end(self, *a, **k):
            self.marks.append((time.perf_counter(), cpu_seconds()))

    model, tokenizer = load_model_and_tokenizer(MODEL)
    if int(cfg.trainer.train_layers) > 0:
        freeze_below_top(model, int(cfg.trainer.train_layers))
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_trl_grpo(model, tokenizer, data, answer_match, num_generations=args.group,
                                max_tokens=args.max_new_tokens, batch_completions=args.prompts * args.group,
                                steps=args.iterations, lr=float(cfg.trainer.lr),
                                temperature=float(cfg.rollout.temperature), out_dir=tmp, callbacks=[clock],
                                shuffle=False)
        with quiet():
            trainer.train()
    times = [b[0] - a[0] for a, b in zip(clock.marks, clock.marks[1:])]
    cpu = [b[1] - a[1] for a, b in zip(clock.marks, clock.marks[1:])]
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"iteration_seconds": times, "iteration_cpu_seconds": cpu, "peak_rss_mib": peak_rss_mib(),
            "trainable_params": trainable,
            "log": [{k: v for k, v in h.items() if k in ("reward", "completions/mean_length", "loss")}
                    for h in trainer.state.log_history]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4, help="prompts per iteration (rollout.batch_size)")
    parser.add_argument("--group", type=int, default=4, help="completions per prompt (rollout.n / num_generations)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--settle-load", type=float, default=1.0, help="wait for this 1-minute load before a side")
    parser.add_argument("--settle-timeout", type=float, default=300.0)
    parser.add_argument("--out", default="peer_iteration", help="result name (bench/results/<out>.json)")
    parser.add_argument("--child", choices=list(SIDES), default=None, help=argparse.SUPPRESS)
    args = parse_args(parser, smoke={"prompts": 2, "group": 2, "max_new_tokens": 8, "iterations": 2,
                                     "settle_timeout": 0.0})
    if args.child:
        out = child_trl(args) if args.child == "trl" else child_ours(args, SIDES[args.child])
        print(json.dumps(out, default=str), flush=True)
        return

    common = ["--prompts", str(args.prompts), "--group", str(args.group), "--max-new-tokens",
              str(args.max_new_tokens), "--iterations", str(args.iterations), "--threads", str(args.threads)]
    result = {"benchmark": "peer_iteration", "machine": machine_info(), "load_avg_start": load_avg(),
              "model": MODEL, "prompts_per_iteration": args.prompts, "group_size": args.group,
              "completions_per_iteration": args.prompts * args.group, "max_new_tokens": args.max_new_tokens,
              "iterations": args.iterations, "optimizer_steps_per_iteration": 1, "single_turn": True, "sides": {}}
    for side in SIDES:
        waited = settle(args.settle_load, args.settle_timeout)
        print(f"[{side}] running in its own process (waited {waited:.0f} s for the load) ...", flush=True)
        load_before = load_avg()[0]
        out = run_json_subprocess([str(Path(__file__).resolve()), "--child", side, *common])
        times, cpu = out["iteration_seconds"], out["iteration_cpu_seconds"]
        out["median_iteration_s"] = round(statistics.median(times[1:] if len(times) > 1 else times), 2)
        out["median_iteration_cpu_s"] = round(statistics.median(cpu[1:] if len(cpu) > 1 else cpu), 2)
        out["load_avg_1m_before"] = load_before
        result["sides"][side] = out
        print(f"[{side}] iterations {[round(t, 1) for t in times]} s (CPU {[round(t, 1) for t in cpu]} s), "
              f"peak RSS {out.get('max_rss_mib_time_v', out['peak_rss_mib'])} MiB", flush=True)
        write_result(args.out, result)
    sides = result["sides"]
    rss = {k: v.get("max_rss_mib_time_v", v["peak_rss_mib"]) for k, v in sides.items()}
    for side in ("ours", "ours_full_update"):
        suffix = side.removeprefix("ours")
        result[f"speedup_vs_trl{suffix}"] = round(sides["trl"]["median_iteration_s"] /
                                                  sides[side]["median_iteration_s"], 2)
        result[f"cpu_speedup_vs_trl{suffix}"] = round(sides["trl"]["median_iteration_cpu_s"] /
                                                      sides[side]["median_iteration_cpu_s"], 2)
        result[f"peak_rss_ratio_ours_over_trl{suffix}"] = round(rss[side] / rss["trl"], 2)
    result["load_avg_end"] = load_avg()
    print_table(["side", "median s/iteration", "all iterations (s)", "median CPU s", "peak RSS MiB",
                 "trainable params", "load"],
                [[k, v["median_iteration_s"], " ".join(f"{t:.1f}" for t in v["iteration_seconds"]),
                  v["median_iteration_cpu_s"], rss[k], v["trainable_params"], v["load_avg_1m_before"]]
                 for k, v in result["sides"].items()])
    print(f"speed-up vs TRL: {result['speedup_vs_trl']}x (full update: {result['speedup_vs_trl_full_update']}x); "
          f"by CPU seconds {result['cpu_speedup_vs_trl']}x ({result['cpu_speedup_vs_trl_full_update']}x); "
          f"peak RSS ours/TRL: {result['peak_rss_ratio_ours_over_trl']}")
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
