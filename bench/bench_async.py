"""Iteration throughput with rollouts in turn (``trainer.max_staleness=0``) against rollouts ahead of the update
(``max_staleness`` 1 and 2), on the same task, seed and starting weights, in one invocation.

Tasks (``--task``, repeatable):

* ``calculator``: the default run's task, from ``--calculator-model`` (default: the default model after its SFT warm
  start, ``common.warm_model_dir``); the calculator answers at once unless ``--latency`` is given (then
  ``slow_calculator`` from ``latency_tools``);
* ``search``: ``hotpotqa-cpu`` with ``slow_search`` (``latency_tools``: the search tool plus a sleep of
  ``--latency``..``--latency-max`` seconds per call, a web search API's latency); starting weights ``--search-model``
  (a checkpoint's ``model`` folder of ``agentr1-core run hotpotqa-cpu``; without it the base model, which rarely
  calls the tool);
* ``alfworld``: ``alfworld-cpu`` (game processes), games from ``$ALFWORLD_DATA``.

Each run is ``agentr1-core run <config> stages=[rl]`` for ``--iterations`` RL iterations without validation or
checkpoints, in a subprocess (``bench/`` on ``PYTHONPATH`` for the latency tools). Reported per task and setting:
the RL wall time (the sum of the iterations' seconds), seconds per iteration, the speed-up against in turn, the time
the trainer waited for rollouts and the engines for weights, rollout and update seconds, reward, staleness and the
importance weights. Writes ``bench/results/async_<tasks>.json``. Run it on an idle machine: the ratios are what it is for.

    python bench/bench_async.py --task calculator --task search --latency 0.5 --latency-max 2.0 \\
        --search-model runs/hotpotqa-cpu/checkpoints/step_000006/model
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from agentr1_core.lifecycle.metrics import read_metrics

from common import ROOT, load_avg, machine_info, parse_args, results_dir, warm_model_dir, write_result

BENCH = Path(__file__).resolve().parent


def task_overrides(task: str, args: argparse.Namespace) -> list[str]:
    lat = [f"latency_s: {args.latency}", f"latency_max_s: {args.latency_max}"]
    if task == "calculator":
        slow = f"env.tools=[{{name: slow_calculator, latency_s: {args.calculator_latency}}}]"
        tools = slow if args.calculator_latency > 0 else "env.tools=[calculator]"
        return ["default", f"model.path={args.calculator_model or warm_model_dir()}", tools]
    if task == "search":
        corpus = "${package_data:agentr1_tools_search,data/hotpotqa_sample_corpus.jsonl}"
        out = ["hotpotqa-cpu", f"env.tools=[{{name: slow_search, corpus: '{corpus}', top_k: 2, max_chars: 200, "
                               f"{', '.join(lat)}}}]"]
        return out + ([f"model.path={args.search_model}"] if args.search_model else [])
    if task == "alfworld":
        return ["alfworld-cpu"] + ([f"model.path={args.alfworld_model}"] if args.alfworld_model else [])
    raise SystemExit(f"unknown task {task!r}")


def run_once(task: str, staleness: int, args: argparse.Namespace, out_dir: Path) -> dict:
    run_dir = out_dir / f"{task}-k{staleness}"
    config, *overrides = task_overrides(task, args)
    cmd = [sys.executable, "-m", "agentr1_core.cli", "run", config, f"run_dir={run_dir}", "stages=[rl]",
           "validation.before=false", "data.val=null", f"trainer.total_steps={args.iterations}",
           "trainer.checkpoint_every=-1", f"trainer.max_staleness={staleness}", f"seed={args.seed}",
           "trainer.keep_train_episodes=0", *overrides, *args.extra]
    if staleness > 0:
        cmd.append(f"trainer.off_policy_correction={args.correction}")
    env = dict(os.environ, AGENTR1_PLUGIN_MODULES="latency_tools", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{task} k={staleness} failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
    records = read_metrics(run_dir)
    iters = [r for r in records if "iteration" in r and r.get("event") is None]

    def total(key: str) -> float:
        return round(sum(float(r.get(key, 0.0)) for r in iters), 2)

    return {
        "task": task, "max_staleness": staleness, "process_seconds": round(wall, 1),
        "rl_seconds": total("iteration_seconds"), "seconds_per_iteration": round(total("iteration_seconds") / len(iters), 2),
        "rollout_seconds": total("rollout_seconds"), "update_seconds": total("update_seconds"),
        "trainer_idle_seconds": total("async/trainer_idle_seconds"),
        "engine_idle_seconds": total("async/engine_idle_seconds"),
        "reward_mean": round(sum(r["reward_mean"] for r in iters) / len(iters), 3),
        "staleness_mean": round(sum(r.get("async/staleness_mean", 0.0) for r in iters) / len(iters), 2),
        "is_weight_mean": [round(r["offpolicy/is_weight_mean"], 4) for r in iters if "offpolicy/is_weight_mean" in r],
        "is_weight_max": max([r["offpolicy/is_weight_max"] for r in iters if "offpolicy/is_weight_max" in r] or [1.0]),
        "is_capped_fraction": max([r["offpolicy/is_capped_fraction"] for r in iters
                                   if "offpolicy/is_capped_fraction" in r] or [0.0]),
        "load_avg_before": None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", action="append", choices=["calculator", "search", "alfworld"])
    parser.add_argument("--staleness", type=int, action="append", help="settings to compare (default 0 1 2)")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per search call")
    parser.add_argument("--calculator-latency", type=float, default=0.0, help="seconds per calculator call")
    parser.add_argument("--latency-max", type=float, default=0.0, help="upper end of a uniform latency (0: fixed)")
    parser.add_argument("--correction", default="decoupled", choices=["decoupled", "tis", "none"])
    parser.add_argument("--calculator-model", default="", help="starting weights for the calculator task (default: "
                        "the default model after its SFT warm start)")
    parser.add_argument("--search-model", default="", help="starting weights for the search task")
    parser.add_argument("--alfworld-model", default="", help="starting weights for the alfworld task")
    parser.add_argument("--extra", action="append", default=[], help="a config override for every run (repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="where the run directories go (default: runs/bench-async)")
    tiny = ["rollout.batch_size=1", "rollout.n=2", "rollout.max_new_tokens=8", "trainer.threads=1"]
    args = parse_args(parser, smoke={"task": ["calculator"], "staleness": [0, 1], "iterations": 2, "extra": tiny})
    out_dir = Path(args.out) if args.out else results_dir() / "runs" if args.smoke else ROOT / "runs" / "bench-async"
    tasks = args.task or ["calculator"]
    settings = args.staleness or [0, 1, 2]
    rows = []
    for task in tasks:
        for k in settings:
            load = load_avg()
            row = run_once(task, k, args, out_dir)
            row["load_avg_before"] = load
            base = next((r for r in rows if r["task"] == task and r["max_staleness"] == 0), None)
            row["speedup"] = round(base["rl_seconds"] / row["rl_seconds"], 2) if base else None
            rows.append(row)
            print(f"{task:10s} K={k}: {row['seconds_per_iteration']:7.1f} s/iteration  speed-up {row['speedup']}  "
                  f"trainer idle {row['trainer_idle_seconds']:6.1f}s  engine idle {row['engine_idle_seconds']:6.1f}s  "
                  f"reward {row['reward_mean']:.3f}  load {load}", flush=True)
    out = {"machine": machine_info(), "iterations": args.iterations, "extra": args.extra,
           "search_latency_s": [args.latency, args.latency_max], "calculator_latency_s": args.calculator_latency,
           "correction": args.correction, "rows": rows}
    print(f"wrote {write_result('async_' + '_'.join(tasks), out)}")


if __name__ == "__main__":
    main()
