"""The named recipes ``calculator-openai`` (the plain OpenAI-client calculator agent) and ``calculator-agents-sdk``
(the same agent on the OpenAI Agents SDK, through the Responses endpoint) end to end at smoke size with the real
SmolLM2-135M-Instruct: the warm start on the rows' demonstrations through the gateway, one GRPO iteration,
validation before and after. Sizes are cut to a couple of minutes each; the recipes' own numbers are in the README."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["calculator-openai", "calculator-agents-sdk"])
def test_calculator_agent_recipe_runs_end_to_end_at_smoke_size(tmp_path, recipe):
    if recipe == "calculator-agents-sdk":
        pytest.importorskip("agents")
    from agentr1_core.cli import main

    run_dir = tmp_path / "run"
    overrides = [f"run_dir={run_dir}", "sft.rows=4", "sft.batch_size=4", "validation.max_rows=2",
                 "rollout.batch_size=1", "rollout.n=2", "trainer.total_steps=1", "trainer.micro_batch_size=4",
                 "trainer.train_layers=2", "trainer.threads=1"]
    assert main(["run", recipe, *overrides]) == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    validations = {r["label"]: r for r in records if r.get("event") == "validation"}
    assert set(validations) == {"before_sft", "after_sft", "after_rl"}
    sft = next(r for r in records if r.get("event") == "sft")
    # the agent's own loop, answered with each row's demonstration: a tool call, then the answer, every time
    assert sft["expert_episodes"] == 4 and sft["expert_success_rate"] == 1.0 and sft["sft_steps"] == 8
    assert sft["expert_terminations"] == {"done": 4} and sft["weight_change"] > 0
    iteration = next(r for r in records if r.get("iteration") == 1 and "event" not in r)
    assert iteration["episodes"] == 2 and iteration["train_steps"] >= 2
    episodes = [json.loads(x) for x in (run_dir / "episodes" / "after_rl.jsonl").read_text().splitlines()]
    assert len(episodes) == 2 and all(e["metrics"]["model_calls"] >= 1 for e in episodes)
