"""Benchmark of the Ray backend on one machine: rollout throughput with 1 vs 2 rollout workers (and the local backend
for reference), and the Ray overhead per iteration. Writes bench/results/distributed.json.

Each configuration runs the default task (calculator tool, SmolLM2-135M-Instruct, GRPO) for ``--iterations``
iterations without SFT or validation; the first iteration is warm-up and excluded. Numbers per iteration:

* ``rollout_tok_s``: generated tokens / rollout wall time (as the trainer reports it).
* Ray overhead = time of an iteration spent neither generating nor training: ``dispatch`` (rollout wall time minus the
  busiest worker's busy time: scheduling, argument/result serialisation, transport), ``weights_publish`` (snapshot +
  ``ray.put`` in the trainer) and ``weights_apply`` (the busiest worker's time to load the snapshot).

Usage: python bench/bench_distributed.py [--model smollm2-135m-instruct] [--iterations 3]
The machine may be shared: the JSON records the load average before and after each run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from agentr1_core.lifecycle.metrics import read_metrics

from common import parse_args, write_result


def run_config(name: str, extra: list[str], args: argparse.Namespace) -> dict:
    """One configuration's numbers; its run folder is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=f"bench-dist-{name}-") as folder:  # a run's checkpoints: 0.5 GB
        return _run_in(Path(folder), extra, args)


def _run_in(run_dir: Path, extra: list[str], args: argparse.Namespace) -> dict:
    from agentr1_core.config import load_config
    from agentr1_core.runner import run

    overrides = [f"model.path={args.model}", f"run_dir={run_dir}", "stages=[rl]", "data.val=null",
                 f"rollout.batch_size={args.batch_size}", f"rollout.n={args.n}",
                 f"rollout.max_new_tokens={args.max_new_tokens}", f"trainer.total_steps={args.iterations}",
                 "trainer.micro_batch_size=8", *extra]
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    run(load_config("default", overrides))
    wall = time.perf_counter() - t0
    records = read_metrics(run_dir)
    its = [r for r in records if "iteration" in r and "event" not in r][1:]  # drop the warm-up iteration
    out = {
        "overrides": extra, "wall_seconds_incl_startup": wall, "measured_iterations": len(its),
        "rollout_tok_s": statistics.fmean(r["rollout_tok_s"] for r in its),
        "rollout_seconds": statistics.fmean(r["rollout_seconds"] for r in its),
        "tokens_generated": statistics.fmean(r["tokens_generated"] for r in its),
        "iteration_seconds": statistics.fmean(r["iteration_seconds"] for r in its),
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }
    if its and "dist/rollout_wall_seconds" in its[0]:
        mean = lambda k: statistics.fmean(r.get(k, 0.0) for r in its)  # noqa: E731
        overhead = {
            "dispatch_seconds": mean("dist/dispatch_overhead_seconds"),
            "weights_publish_seconds": mean("dist/publish_seconds"),
            "weights_apply_seconds_sum_over_workers": mean("dist/weights_apply_seconds"),
            "busiest_worker_generate_seconds": mean("dist/rollout_busiest_generate_seconds"),
            "busiest_worker_busy_seconds": mean("dist/rollout_busiest_worker_seconds"),
            "weights_mb": mean("dist/weights_mb"),
        }
        apply_busiest = overhead["busiest_worker_busy_seconds"] - overhead["busiest_worker_generate_seconds"]
        overhead["ray_overhead_per_iteration_seconds"] = (overhead["dispatch_seconds"] +
                                                          overhead["weights_publish_seconds"] + apply_busiest)
        overhead["ray_overhead_fraction_of_iteration"] = (overhead["ray_overhead_per_iteration_seconds"] /
                                                          out["iteration_seconds"])
        out["overhead"] = overhead
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", default=None, help="result file (default: bench/results/distributed.json)")
    args = parse_args(parser, smoke={"iterations": 2, "batch_size": 1, "n": 2, "max_new_tokens": 4})
    ray = ["trainer.name=ray", "trainer.params.worker_threads=1", "trainer.params.object_store_mb=1024"]
    configs = {
        "local_2_threads": ["trainer.threads=2"],
        "ray_1_worker": ray + ["trainer.params.rollout_workers=1"],
        "ray_2_workers": ray + ["trainer.params.rollout_workers=2", "trainer.params.worker_cpus=1"],
    }
    results = {}
    for name, extra in configs.items():
        print(f"== {name}", flush=True)
        results[name] = run_config(name, extra, args)
        print(json.dumps(results[name], indent=1), flush=True)
    summary = {
        "rollout_throughput_ratio_2_vs_1_workers": results["ray_2_workers"]["rollout_tok_s"] /
        results["ray_1_worker"]["rollout_tok_s"],
        "rollout_throughput_ratio_2_workers_vs_local": results["ray_2_workers"]["rollout_tok_s"] /
        results["local_2_threads"]["rollout_tok_s"],
        "ray_overhead_per_iteration_seconds_2_workers":
            results["ray_2_workers"]["overhead"]["ray_overhead_per_iteration_seconds"],
    }
    doc = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                       "note": "shared machine: other jobs may run concurrently (see loadavg)"},
           "settings": vars(args), "results": results, "summary": summary}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=2))
    else:
        write_result("distributed", doc)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
