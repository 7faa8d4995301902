"""The CPU recipe (configs/hotpotqa-cpu.yaml) end to end at smoke size with the real SmolLM2-135M-Instruct, the
shipped HotpotQA sample and its BM25 corpus: validation before SFT, the gold-title expert warm start, one GRPO
iteration, validation after SFT and after RL with EM/F1 per episode. Sizes are cut to a couple of minutes; the
recipe's own sizes are measured in docs/recipes.md, not here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

RECIPE = Path(__file__).resolve().parents[3] / "configs" / "hotpotqa-cpu.yaml"


@pytest.mark.slow
def test_hotpotqa_cpu_recipe_runs_end_to_end_at_smoke_size(tmp_path):
    from agentr1_core.cli import main

    run_dir = tmp_path / "run"
    overrides = [
        f"run_dir={run_dir}", "validation.max_rows=2", "sft.rows=2", "sft.epochs=1", "sft.batch_size=4",
        "rollout.batch_size=1", "rollout.n=2", "rollout.max_new_tokens=32",
        "trainer.total_steps=1", "trainer.micro_batch_size=4", "trainer.train_layers=2", "trainer.threads=1",
    ]
    assert main(["run", str(RECIPE), *overrides]) == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    validations = {r["label"]: r for r in records if r.get("event") == "validation"}
    assert set(validations) == {"before_sft", "after_sft", "after_rl"}
    for v in validations.values():
        assert v["cases"] == 2 and set(v["by_source"]) == {"hotpotqa"}
    sft = next(r for r in records if r.get("event") == "sft")
    # the expert searches both gold titles, then answers: 3 steps per episode, and it is right
    assert sft["expert_episodes"] == 2 and sft["expert_success_rate"] == 1.0 and sft["sft_steps"] == 6
    assert sft["weight_change"] > 0
    iters = [r for r in records if "iteration" in r and "event" not in r]
    assert [r["iteration"] for r in iters] == [1] and iters[0]["episodes"] == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iterations"] == 1 and summary["peak_rss_mb"] > 0
