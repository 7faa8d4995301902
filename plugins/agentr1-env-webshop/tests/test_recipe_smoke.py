"""The named CPU recipe ``webshop-cpu`` end to end at smoke size with the real SmolLM2-135M-Instruct on the shipped
catalogue slice: validation before SFT, the expert warm start, one GRPO iteration, validation after SFT and after
RL, metrics.jsonl and summary.json. Sizes are cut to a couple of minutes; the recipe's own sizes are measured in
docs/recipes.md, not here."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
RECIPE = "webshop-cpu"  # the named config this distribution ships (configs/webshop-cpu.yaml in the package)


def test_purchase_reward_is_the_episode_reward_without_a_reward_function(make_env, smollm2_tokenizer):
    """``reward: null``: the env pays the purchase reward on the buy step, and that is the episode's reward and
    success in training, metrics and episode logs (through the real agent loop, the scripted expert acting)."""
    from agentr1_core.flows import AgentEnvLoop, FlowContext
    from agentr1_core.lifecycle.metrics import episode_record
    from agentr1_core.rollout.base import SamplingParams
    from agentr1_core.trainers.metrics import validation_metrics
    from agentr1_env_webshop.data import load_goals

    rows = load_goals(str(DATA / "goals_synthetic_slice.json"), split="all")[:4]

    class Loop(AgentEnvLoop):
        def make_env(self, row):
            return make_env(max_steps=10)

    ctx = FlowContext(engine=None, tokenizer=smollm2_tokenizer, sampling=SamplingParams(), reward_fn=None,
                      max_turns=10, max_prompt_tokens=100_000, policy="expert")
    trajs = [asyncio.run(Loop(ctx).run(row)) for row in rows]
    paid = [t.steps[-1].info.get("webshop_reward", 0.0) for t in trajs]
    assert any(p > 0 for p in paid)  # the expert buys something
    for traj, reward in zip(trajs, paid):
        assert traj.final_reward == reward == sum(s.reward for s in traj.steps)
        assert episode_record(traj)["reward"] == reward
        assert episode_record(traj)["success"] == (reward == 1.0)
    metrics = validation_metrics(trajs)
    assert metrics["reward_mean"] == sum(paid) / len(paid)
    assert metrics["success_rate"] == sum(p == 1.0 for p in paid) / len(paid)


@pytest.mark.slow
def test_webshop_cpu_recipe_runs_end_to_end_at_smoke_size(tmp_path):
    from agentr1_core.cli import main

    run_dir = tmp_path / "run"
    goals = str(DATA / "goals_synthetic_slice.json")
    overrides = [
        f"run_dir={run_dir}",
        f"env.products={DATA / 'products_slice.jsonl'}", f"env.prices={DATA / 'prices_slice.json'}",
        # the slice has 26 goals: the first 2 (in WebShop's shuffled order) are held out, the rest train
        f"data.train.goals={goals}", "data.train.split=all", "data.train.start=2",
        f"data.val.goals={goals}", "data.val.split=all", "data.val.end=2",
        "validation.max_rows=2", "sft.rows=2", "sft.epochs=1", "sft.batch_size=4",
        "rollout.batch_size=1", "rollout.n=2",
        "trainer.total_steps=1", "trainer.micro_batch_size=4", "trainer.train_layers=2", "trainer.threads=1",
    ]
    assert main(["run", RECIPE, *overrides]) == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    validations = {r["label"]: r for r in records if r.get("event") == "validation"}
    assert set(validations) == {"before_sft", "after_sft", "after_rl"}
    for v in validations.values():
        assert v["cases"] == 2 and 0.0 <= v["reward_mean"] <= 1.0
    sft = next(r for r in records if r.get("event") == "sft")
    # the expert buys through the real pages, and its purchase reward reaches the metrics as the final reward
    assert sft["expert_episodes"] == 2 and sft["expert_success_rate"] > 0
    assert sft["weight_change"] > 0
    iters = [r for r in records if "iteration" in r and "event" not in r]
    assert [r["iteration"] for r in iters] == [1] and iters[0]["episodes"] == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iterations"] == 1 and summary["peak_rss_mb"] > 0
