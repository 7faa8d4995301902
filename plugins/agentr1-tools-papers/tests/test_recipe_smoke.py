"""The named CPU recipe ``papersearch-cpu`` end to end at smoke size, through the installed CLI, with the real
SmolLM2-135M-Instruct, the shipped queries and the shipped paper index: validation before SFT, the scripted expert's
warm start, one GRPO iteration, validation after SFT and after RL with the paper metrics. Sizes are cut to a couple
of minutes; the recipe's own sizes are measured in docs/recipes.md, not here."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_papersearch_cpu_recipe_runs_end_to_end_at_smoke_size(cli, tmp_path):
    run_dir = tmp_path / "run"
    out = cli("run", "papersearch-cpu", f"run_dir={run_dir}", "validation.max_rows=2", "sft.rows=4",
              "sft.batch_size=4", "rollout.batch_size=1", "rollout.n=2", "rollout.max_new_tokens=32",
              "trainer.total_steps=1", "trainer.train_layers=2", "trainer.threads=1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    validations = {r["label"]: r for r in records if r.get("event") == "validation"}
    assert set(validations) == {"before_sft", "after_sft", "after_rl"}
    for v in validations.values():
        assert v["cases"] == 2 and {"crawl_recall", "f1", "precision", "recall", "searches"} <= set(v)
    sft = next(r for r in records if r.get("event") == "sft")
    # the expert searches, searches a missing gold title, then selects the gold it found: every episode finishes
    assert sft["expert_episodes"] == 4 and sft["expert_terminations"] == {"done": 4}
    assert sft["expert_reward_mean"] > 0 and sft["weight_change"] > 0
    iters = [r for r in records if "iteration" in r and "event" not in r]
    assert [r["iteration"] for r in iters] == [1] and iters[0]["episodes"] == 2
