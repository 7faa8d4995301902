"""ReMax against GRPO and RLOO, and StepPO with and without the asymmetric critic's prefix, on the default task and
``gsm8k-cpu``: held-out success before and after RL, and the critic's value-loss curves; GRPO with dynamic sampling
(``grpo_dynamic``) or overlong masking (``grpo_overlong``), also on ``terminal-cpu`` (``--tasks terminal``).

Every run is the real CLI (``agentr1-core run TASK seed=S ...``) on the shipped config, one after the other (the CPU
is shared: a run gets the machine's threads to itself). The arms of one task and seed share everything up to RL (the
same SFT warm start, the same data order), and differ only in the algorithm:

* ``grpo`` and ``rloo`` with the config's ``rollout.n`` (4) sampled episodes per prompt;
* ``remax`` with ``rollout.n - 1`` (3) sampled episodes plus its greedy one: the same number of episodes per prompt;
* ``steppo`` (the value head on the policy trunk, the config's ``rollout.n``) and ``steppo_prefix``, the same with
  ``critic.prefix``: the row's ground truth (and on GSM8K its worked solution) in front of every state the critic
  reads. The value-loss curve (``vf_loss`` per iteration) says whether the critic fits faster with it;
* ``grpo_dynamic`` (``rollout.dynamic_sampling.enabled=true``: flat groups dropped and more rows rolled out, the
  config's cap on extra rounds) and ``grpo_overlong`` (``rollout.overlong.mode=mask``: episodes cut by a limit kept
  out of the loss), not in the default sweep. The table's "rows rolled out" says what each run's rollout cost.

Held-out success is read from each run's ``summary.json`` (``after_sft`` is the policy RL starts from, ``after_rl``
the one it ends with; ``validation.before`` is off, since the untrained model is the same for every arm). Results:
``bench/results/algorithms.json`` (every run's numbers and curves) and a Markdown table on stdout. A run whose
``summary.json`` exists is not run again (``--rerun`` runs it anyway), so an interrupted sweep continues where it
stopped; ``--report-only`` runs nothing and reports the runs that have finished (several sweeps side by side, each
on a part, are gathered into one result this way). Run directories: ``runs/bench_algorithms/<task>/<arm>/seed<S>``.

    python bench/bench_algorithms.py                                  # both tasks, 5 arms, seeds 0 1 2
    python bench/bench_algorithms.py --tasks default --seeds 0        # a part of it
    python bench/bench_algorithms.py --tasks terminal --arms grpo grpo_dynamic grpo_overlong --out algorithms_terminal
    python bench/bench_algorithms.py --smoke                          # every arm once on ``tiny``, 1 iteration
    python bench/bench_algorithms.py --tasks default --arms steppo steppo_prefix --seeds 0 \
        --override trainer.critic_lr=1e-3 --runs-dir runs/bench_algorithms_critic_lr --out algorithms_critic_lr

``--smoke`` runs each arm once on the ``tiny`` config (the default task at tiny sizes, one RL iteration, no SFT) with
a tiny random Llama that has SmolLM2's tokenizer, and writes its result to ``$AGENTR1_BENCH_RESULTS`` or a temporary
folder, marked ``"smoke": true``, never to ``bench/results``. This script times nothing but each run's wall time and
asserts nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentr1_core.lifecycle.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
SMOKE_ENV, RESULTS_ENV = "AGENTR1_BENCH_SMOKE", "AGENTR1_BENCH_RESULTS"
TASKS = {"default": "default", "gsm8k": "gsm8k-cpu", "terminal": "terminal-cpu"}
# the privileged text the critic reads first: what the row knows before any action
PREFIXES = {
    "default": {"template": "Reference answer: {ground_truth}\nReference expression: {extra_info.expression}\n",
                "max_tokens": 64},
    "gsm8k": {"template": "Reference answer: {ground_truth}\nReference solution: {reference_solution}\n",
              "max_tokens": 512},
}
ARMS = ("grpo", "rloo", "remax", "steppo", "steppo_prefix", "grpo_dynamic", "grpo_overlong")
DEFAULT_ARMS = ARMS[:5]
SMOKE = ["trainer.total_steps=1", "stages=[rl]", "validation.max_rows=1"]  # on ``tiny`` with a tiny random model


def arm_overrides(arm: str, task: str, n: int) -> list[str]:
    """The overrides of one arm; ``n`` is the config's episodes per prompt (ReMax samples one fewer: its greedy
    episode is the n-th)."""
    if arm in ("grpo", "rloo"):
        return [f"algorithm.name={arm}", f"rollout.n={n}"]
    if arm == "grpo_dynamic":
        return ["algorithm.name=grpo", f"rollout.n={n}", "rollout.dynamic_sampling.enabled=true"]
    if arm == "grpo_overlong":
        return ["algorithm.name=grpo", f"rollout.n={n}", "rollout.overlong.mode=mask"]
    if arm == "remax":
        return ["algorithm.name=remax", f"rollout.n={n - 1}"]
    out = ["algorithm.name=steppo", f"rollout.n={n}"]
    if arm == "steppo_prefix":
        prefix = PREFIXES[task]
        template = prefix["template"].replace("\n", "\\n")
        out += [f"critic.prefix.template=\"{template}\"", f"critic.prefix.max_tokens={prefix['max_tokens']}"]
    return out


def config_n(config: str) -> int:
    from agentr1_core.config import load_config

    return int(load_config(config).rollout.n)


def tiny_model(folder: Path) -> str:
    """A tiny random Llama with SmolLM2's tokenizer, for the smoke runs (written once)."""
    from agentr1_core.algorithms.critic_prefix import load_tokenizer
    from agentr1_core.testing.models import save_tiny_llama

    if not (folder / "config.json").is_file():
        save_tiny_llama(folder, load_tokenizer("smollm2-135m-instruct"), hidden_size=64, num_heads=2, num_kv_heads=1)
    return str(folder)


def read_run(run_dir: Path) -> dict[str, Any]:
    """Held-out success per validation stage, the per-iteration curves and the run's wall time."""
    summary = json.loads((run_dir / "summary.json").read_text())
    records = read_metrics(run_dir)
    iters = [r for r in records if "iteration" in r and r.get("event") is None]
    validation = {k: {"success_rate": v["success_rate"], "cases": v["cases"]}
                  for k, v in (summary.get("validation") or {}).items()}
    curve_keys = ("vf_loss", "adv/value_mean", "value_error", "reward_mean", "success_rate", "episodes",
                  "remax/greedy_return_mean", "remax/greedy_top_fraction", "critic_prefix_tokens_mean",
                  "iteration_seconds", "dynamic/rows_sampled", "dynamic/kept_groups", "dynamic/dropped_groups",
                  "dynamic/cap_hit", "overlong/episodes", "overlong/masked_steps", "adv/zero_std_groups")
    curves = {k: [r.get(k) for r in iters] for k in curve_keys if any(k in r for r in iters)}
    return {"validation": validation, "curves": curves, "wall_seconds": summary.get("wall_seconds"),
            "peak_rss_mb": summary.get("peak_rss_mb")}


def run_one(config: str, task: str, arm: str, seed: int, n: int, run_dir: Path, extra: list[str],
            rerun: bool) -> dict[str, Any]:
    if (run_dir / "summary.json").is_file() and not rerun:
        print(f"[bench] {task}/{arm}/seed{seed}: done before, read from {run_dir}", flush=True)
        return read_run(run_dir)
    cmd = [sys.executable, "-m", "agentr1_core.cli", "run", config, f"seed={seed}", f"run_dir={run_dir}",
           "validation.before=false", *arm_overrides(arm, task, n), *extra]
    env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONUNBUFFERED": "1"}
    env.pop(SMOKE_ENV, None)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = run_dir.parent / f"{run_dir.name}.log"
    print(f"[bench] {task}/{arm}/seed{seed}: {' '.join(cmd[3:])} (log {log})", flush=True)
    t0 = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise SystemExit(f"[bench] {task}/{arm}/seed{seed} exited {proc.returncode}:\n{tail}")
    result = read_run(run_dir)
    print(f"[bench] {task}/{arm}/seed{seed}: {time.perf_counter() - t0:.0f} s, held-out "
          + ", ".join(f"{k} {v['success_rate']:.3f}" for k, v in result["validation"].items()), flush=True)
    return result


def mean_curve(curves: list[list[Any]]) -> list[float | None]:
    """Per iteration, the mean over the runs that have a value there (a run whose every update was skipped has no
    value loss at all, and counts at no iteration)."""
    out = []
    for values in itertools.zip_longest(*curves):
        finite = [float(v) for v in values if v is not None]
        out.append(statistics.fmean(finite) if finite else None)
    return out


def table(results: dict[str, Any]) -> str:
    """Markdown: per task and arm, held-out success after SFT -> after RL per seed and the mean, and the success
    rate of the training episodes over all iterations and seeds; per StepPO arm, the mean value loss per
    iteration."""
    lines = ["| task | arm | episodes/prompt | after SFT -> after RL per seed | mean after RL | training success | "
             "rows rolled out per seed | wall per run |", "|---|---|---|---|---|---|---|---|"]
    curves = []
    for task, arms in results["runs"].items():
        for arm, seeds in arms.items():
            cells, after, walls, train, rows = [], [], [], [], []
            for seed, run in sorted(seeds.items()):
                val = run["validation"]
                sft, rl = val.get("after_sft", {}), val.get("after_rl", {})
                cases = rl.get("cases") or sft.get("cases") or 0
                cells.append(f"{seed}: {round(sft.get('success_rate', 0) * cases)} -> "
                             f"{round(rl.get('success_rate', 0) * cases)}/{cases}")
                after.append(rl.get("success_rate", 0.0) * cases)
                walls.append(run.get("wall_seconds") or 0.0)
                train += [float(v) for v in run["curves"].get("success_rate", []) if v is not None]
                rows.append(sum(v or 0 for v in run["curves"].get("episodes", [])))
            n = results["episodes_per_prompt"][task]
            rows = [round(r / n) for r in rows]
            trained = f"{statistics.fmean(train):.3f}" if train else "-"
            lines.append(f"| {task} | {arm} | {n} | {'; '.join(cells)} | {statistics.fmean(after):.1f} | {trained} | "
                         f"{', '.join(map(str, rows))} | {statistics.fmean(walls) / 60:.1f} min |")
            if arm.startswith("steppo"):
                vf = mean_curve([run["curves"].get("vf_loss", []) for run in seeds.values()])
                curves.append(f"| {task} | {arm} | " + " | ".join("-" if v is None else f"{v:.4f}" for v in vf) + " |")
    if curves:
        width = max(c.count("|") for c in curves) - 3
        lines += ["", "| task | arm | " + " | ".join(f"vf_loss it{i + 1}" for i in range(width)) + " |",
                  "|---|---|" + "---|" * width] + curves
    return "\n".join(lines)


def results_path(smoke: bool, name: str = "algorithms") -> Path:
    if not smoke:
        return RESULTS / f"{name}.json"
    folder = Path(os.environ.get(RESULTS_ENV) or tempfile.mkdtemp(prefix="agentr1-bench-smoke-")).resolve()
    if folder == RESULTS.resolve():
        raise SystemExit(f"a smoke run does not write to {RESULTS}: set {RESULTS_ENV} to another folder")
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["default", "gsm8k"], choices=list(TASKS))
    parser.add_argument("--arms", nargs="+", default=list(DEFAULT_ARMS), choices=list(ARMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--runs-dir", default=str(ROOT / "runs" / "bench_algorithms"))
    parser.add_argument("--rerun", action="store_true", help="run again the runs that finished before")
    parser.add_argument("--report-only", action="store_true", help="run nothing: report the runs that finished")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for every run (repeatable), e.g. trainer.critic_lr=1e-3")
    parser.add_argument("--out", default="algorithms", help="the results file's name in bench/results (no .json)")
    parser.add_argument("--smoke", action="store_true", help="every arm once on the tiny config, one iteration")
    args = parser.parse_args(argv)
    if args.report_only and args.rerun:
        parser.error("--report-only runs nothing; --rerun runs everything again: give one of them")
    smoke = args.smoke or os.environ.get(SMOKE_ENV) == "1"
    extra: list[str] = list(args.override)
    if smoke:
        args.tasks, args.seeds = ["default"], [0]
        if args.arms == list(DEFAULT_ARMS):
            args.arms = list(ARMS)
        args.runs_dir = str(results_path(True).parent / "runs")
        extra += [*SMOKE, f"model.path={tiny_model(Path(args.runs_dir).parent / 'tiny-model')}"]
    results: dict[str, Any] = {"smoke": smoke, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                               "load_avg_start": [round(x, 2) for x in os.getloadavg()], "overrides": extra,
                               "runs": {}, "episodes_per_prompt": {}}
    for task in args.tasks:
        config = "tiny" if smoke else TASKS[task]
        n = config_n(config)
        results["episodes_per_prompt"][task] = n
        for arm in args.arms:
            for seed in args.seeds:
                run_dir = Path(args.runs_dir) / task / arm / f"seed{seed}"
                if args.report_only and not (run_dir / "summary.json").is_file():
                    print(f"[bench] {task}/{arm}/seed{seed}: not run (no {run_dir / 'summary.json'})", flush=True)
                    continue
                run = run_one(config, task, arm, seed, n, run_dir, extra, args.rerun or smoke)
                results["runs"].setdefault(task, {}).setdefault(arm, {})[str(seed)] = run
    results["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    path = results_path(smoke, args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2), encoding="utf-8")
    print(table(results))
    print(f"[bench] results in {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
