"""WebShop env numbers: env steps/s, and score / success rate of scripted policies on a fixed goal set.

Policies: ``first_result`` (search the instruction, click the first result, buy it with no options: the scripted
baseline), ``expert`` (the env's scripted expert: finds the goal product, clicks the goal's options, buys).
Goal set: the synthetic goals' ``test`` split (the first 500 after WebShop's seed-233 shuffle). Score = 100 x mean
reward, success rate = share of episodes with reward 1.0. The untrained-model baseline needs the trainer's rollout
engine and is not measured here. Prints a table and writes ``bench/results/webshop.json``.

    python bench/bench_webshop.py --data ../shared/data/webshop [--goals 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from pathlib import Path

from tqdm import tqdm

import agentr1_env_webshop
from agentr1_core.mdp import Action
from agentr1_env_webshop.catalog import load_catalog
from agentr1_env_webshop.data import load_goals
from agentr1_env_webshop.env import WebShopEnv
from common import parse_args, write_result

ROOT = Path(__file__).resolve().parent
SAMPLE = Path(agentr1_env_webshop.__file__).parent / "data" / "sample"  # the catalogue sample in the wheel


def first_result_policy(env: WebShopEnv) -> str:
    shop = env.shop
    if shop.page == "search":
        return f"search[{env.goal['instruction_text']}]"
    if shop.page == "results":
        return f"click[{shop.page_results()[0].lower()}]" if shop.results else "click[back to search]"
    return "click[buy now]"


async def episode(env: WebShopEnv, row: dict, policy) -> tuple[float, int]:
    await env.reset(row)
    steps = 0
    while True:
        result = await env.step(Action(policy(env), [], []))
        steps += 1
        if result.done or result.truncated:
            return float(result.info.get("webshop_reward", result.reward)), steps


def run(env: WebShopEnv, rows: list[dict], name: str, policy) -> dict:
    rewards, steps = [], 0
    start = time.perf_counter()
    for row in tqdm(rows, desc=name, leave=False):
        reward, n = asyncio.run(episode(env, row, policy))
        rewards.append(reward)
        steps += n
    seconds = time.perf_counter() - start
    return {"episodes": len(rows), "score": 100 * sum(rewards) / len(rewards),
            "success_rate": sum(r == 1.0 for r in rewards) / len(rewards), "mean_steps": steps / len(rows),
            "env_steps_per_s": steps / seconds}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent.parent / "shared" / "data" / "webshop"))
    ap.add_argument("--goals", type=int, default=500)
    ap.add_argument("--out", default=None, help="result file (default: bench/results/webshop.json)")
    args = parse_args(ap, smoke={"data": str(SAMPLE), "goals": 3})
    data = Path(args.data)
    t0 = time.perf_counter()
    catalog = load_catalog(str(data / "products_1k_processed.jsonl"), str(data / "product_prices_seed0.json"))
    load_s = time.perf_counter() - t0
    rows = load_goals(str(data / "goals_synthetic_derived_seed0.json"), split="test", limit=args.goals)
    env = WebShopEnv(catalog=catalog, max_steps=15)
    asyncio.run(episode(env, rows[0], lambda e: e.expert_action()))  # warm the tagger and caches
    results = {"expert": run(env, rows, "expert", lambda e: e.expert_action()),
               "first_result": run(env, rows, "first_result", first_result_policy)}
    report = {"goal_set": f"synthetic goals, test split (seed-233 shuffle), first {len(rows)}",
              "catalog_products": len(catalog.products), "catalog_load_s": load_s,
              "machine": f"{platform.processor() or platform.machine()}, 1 process", "policies": results,
              "not_measured": "untrained default model (needs the trainer's rollout engine)"}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2), encoding="utf-8")
    else:
        write_result("webshop", report)
    print(f"WebShop, {report['goal_set']}; catalogue {len(catalog.products)} products loaded+indexed in {load_s:.1f}s")
    print(f"{'policy':<14}{'score':>8}{'SR':>8}{'steps/ep':>10}{'env steps/s':>13}")
    for name, r in results.items():
        print(f"{name:<14}{r['score']:>8.1f}{r['success_rate']:>8.3f}{r['mean_steps']:>10.2f}"
              f"{r['env_steps_per_s']:>13.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
