"""ALFWorld env benchmark: game-pool throughput and a random-admissible-command baseline.

Measures, with the env's process pool (``--workers``, default 2):
  * resets/s: cold (distinct games, each loaded and grounded) and warm (the same game again, reusing its load);
  * env steps/s: concurrent episodes taking random admissible commands, step phase only;
  * success rate of a seeded random-admissible-command policy over every game in the folder (cap 50 steps),
    overall and per task type.
Prints a table and writes bench/results/alfworld.json. It does not run a model.

    python bench/bench_alfworld.py --games $ALFWORLD_DATA --split valid_seen
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path

from tqdm import tqdm

import agentr1_env_alfworld
from agentr1_core.mdp import Action
from agentr1_env_alfworld.datasets import load_alfworld
from agentr1_env_alfworld.env import AlfworldEnv
from agentr1_env_alfworld.pool import GamePool
from common import parse_args, write_result

SAMPLE_GAMES = Path(agentr1_env_alfworld.__file__).parent / "data" / "alfworld_sample"  # six games, in the wheel


def act(text: str) -> Action:
    return Action(text, [0], [0.0])


async def time_resets(pool: GamePool, rows: list[dict], concurrency: int) -> dict:
    envs = [AlfworldEnv(pool=pool) for _ in rows]
    t0 = time.perf_counter()
    sem = asyncio.Semaphore(concurrency)

    async def one(env, row):
        async with sem:
            await env.reset(row)

    await asyncio.gather(*(one(e, r) for e, r in zip(envs, rows)))
    cold = time.perf_counter() - t0
    for e in envs:
        await e.close()
    t0 = time.perf_counter()
    await asyncio.gather(*(one(e, r) for e, r in zip(envs, rows)))  # same games again: cached loads
    warm = time.perf_counter() - t0
    for e in envs:
        await e.close()
    return {"games": len(rows), "cold_resets_per_s": len(rows) / cold, "warm_resets_per_s": len(rows) / warm}


async def time_steps(pool: GamePool, rows: list[dict], steps: int, seed: int) -> dict:
    envs = [AlfworldEnv(pool=pool, max_steps=10_000) for _ in rows]
    await asyncio.gather(*(e.reset(r) for e, r in zip(envs, rows)))
    rngs = [random.Random(seed + i) for i in range(len(envs))]

    async def walk(env, rng):
        n = 0
        for _ in range(steps):
            res = await env.step(act(rng.choice(env.admissible)))
            n += 1
            if res.done:  # won by chance: start the same game again, outside the timed count
                break
        return n

    t0 = time.perf_counter()
    counts = await asyncio.gather(*(walk(e, g) for e, g in zip(envs, rngs)))
    elapsed = time.perf_counter() - t0
    for e in envs:
        await e.close()
    return {"episodes": len(envs), "steps": sum(counts), "steps_per_s": sum(counts) / elapsed}


async def random_policy(pool: GamePool, rows: list[dict], max_steps: int, seed: int, concurrency: int) -> dict:
    sem = asyncio.Semaphore(concurrency)
    bar = tqdm(total=len(rows), desc="random policy", unit="game")
    results = []

    async def play(i, row):
        rng = random.Random(seed * 100_003 + i)
        env = AlfworldEnv(pool=pool, max_steps=max_steps)
        async with sem:
            await env.reset(row)
            steps, won, reason = 0, False, ""
            while True:
                res = await env.step(act(rng.choice(env.admissible)))
                steps += 1
                if res.done or res.truncated:
                    won, reason = bool(res.info.get("won")), res.info.get("reason", "won" if res.done else "")
                    break
            await env.close()
        results.append({"task_type": row["data_source"], "won": won, "steps": steps, "end": reason,
                        "game": row["extra_info"]["task_dir"]})
        bar.update(1)

    t0 = time.perf_counter()
    await asyncio.gather(*(play(i, r) for i, r in enumerate(rows)))
    elapsed = time.perf_counter() - t0
    bar.close()
    by_type: dict[str, list[bool]] = {}
    for r in results:
        by_type.setdefault(r["task_type"], []).append(r["won"])
    return {
        "games": len(results), "max_steps": max_steps, "seed": seed,
        "success_rate": statistics.fmean(r["won"] for r in results),
        "wins": sum(r["won"] for r in results),
        "by_task_type": {k: {"games": len(v), "success_rate": statistics.fmean(v)} for k, v in sorted(by_type.items())},
        "mean_steps": statistics.fmean(r["steps"] for r in results),
        "wall_s": elapsed, "steps_per_s_incl_resets": sum(r["steps"] for r in results) / elapsed,
        "ends": {e: sum(r["end"] == e for r in results) for e in sorted({r["end"] for r in results})},
        "worker_replacements": pool.replaced,
    }


async def main_async(args) -> dict:
    rows = load_alfworld(args.games, split=args.split)
    pool = GamePool(workers=args.workers, hang_timeout=300.0, cache_games=8)
    try:
        sample = rows[:: max(1, len(rows) // args.reset_games)][: args.reset_games]
        resets = await time_resets(pool, sample, concurrency=2 * args.workers)
        steps = await time_steps(pool, sample[: 2 * args.workers], args.step_count, args.seed)
        rand = await random_policy(pool, rows[: args.limit or None], args.max_steps, args.seed, 4 * args.workers)
    finally:
        pool.close()
    return {"workers": args.workers, "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
            "split": args.split, "resets": resets, "steps": steps, "random_policy": rand}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", default=os.environ.get("ALFWORLD_DATA", ""), help="ALFWorld data folder")
    parser.add_argument("--split", default="valid_seen")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reset-games", type=int, default=8)
    parser.add_argument("--step-count", type=int, default=40, help="random steps per episode in the step phase")
    parser.add_argument("--limit", type=int, default=0, help="play only the first N games (0: all)")
    parser.add_argument("--out", default=None, help="result file (default: bench/results/alfworld.json)")
    args = parse_args(parser, smoke={"games": str(SAMPLE_GAMES), "workers": 1, "reset_games": 2, "step_count": 2,
                                     "limit": 2, "max_steps": 3})
    if not args.games:
        parser.error("name the ALFWorld data folder: --games DIR or ALFWORLD_DATA")
    out = asyncio.run(main_async(args))
    r, s, p = out["resets"], out["steps"], out["random_policy"]
    print(f"\nALFWorld env, {out['workers']} game workers, {out['cpus']} CPUs, split {out['split']}")
    print(f"{'metric':<44}{'value':>12}")
    print(f"{'cold resets/s (distinct games)':<44}{r['cold_resets_per_s']:>12.2f}")
    print(f"{'warm resets/s (same game again)':<44}{r['warm_resets_per_s']:>12.2f}")
    print(f"{'env steps/s (' + str(s['episodes']) + ' concurrent episodes)':<44}{s['steps_per_s']:>12.2f}")
    print(f"{'random policy: games':<44}{p['games']:>12d}")
    print(f"{'random policy: success rate':<44}{p['success_rate']:>12.3f}")
    print(f"{'random policy: mean steps':<44}{p['mean_steps']:>12.1f}")
    print(f"{'random policy: wall s':<44}{p['wall_s']:>12.0f}")
    for k, v in p["by_task_type"].items():
        print(f"{'  ' + k:<44}{v['success_rate']:>8.3f} ({v['games']})")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out or write_result('alfworld', out)}")


if __name__ == "__main__":
    main()
