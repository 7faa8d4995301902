"""The named CPU recipe ``alfworld-cpu`` end to end at smoke size with the real SmolLM2-135M-Instruct on the six
shipped games (4 training, 2 held out by the recipe's game split): validation before SFT, the walkthrough warm
start, one GRPO iteration, validation after SFT and after RL, per task type. Also the game split the recipe relies
on: training and held-out games never overlap. Sizes are cut to a few minutes; the recipe's own sizes are measured
in docs/recipes.md, not here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import agentr1_env_alfworld
from agentr1_env_alfworld.datasets import load_alfworld
from agentr1_env_alfworld.game_split import load_alfworld_split, split_games

DATA = Path(agentr1_env_alfworld.__file__).parent / "data" / "alfworld_sample"  # shipped in the wheel
RECIPE = "alfworld-cpu"  # the named config this distribution ships (configs/alfworld-cpu.yaml in the package)


def test_game_split_is_disjoint_and_covers_every_game():
    rows = load_alfworld(str(DATA))  # six games, one per task type
    train, heldout = split_games(rows, heldout_every=3)
    assert len(heldout) == 2 and len(train) == 4  # games 0 and 3 of the path-sorted list are held out
    assert {r["gamefile"] for r in train}.isdisjoint({r["gamefile"] for r in heldout})
    assert {r["gamefile"] for r in train + heldout} == {r["gamefile"] for r in rows}
    loaded = load_alfworld_split(str(DATA), part="heldout", heldout_every=3)
    assert [r["gamefile"] for r in loaded] == [r["gamefile"] for r in heldout]
    assert len(load_alfworld_split(str(DATA), part="train", heldout_every=2, limit=1)) == 1
    with pytest.raises(Exception, match="part"):
        load_alfworld_split(str(DATA), part="test")


@pytest.mark.slow
def test_alfworld_cpu_recipe_runs_end_to_end_at_smoke_size(tmp_path, monkeypatch, capsys):
    from agentr1_core.cli import main

    monkeypatch.setenv("ALFWORLD_DATA", str(DATA))
    run_dir = tmp_path / "run"
    overrides = [
        f"run_dir={run_dir}",
        "env.max_steps=4", "env.workers=1", "rollout.max_turns=4", "validation.max_rows=2",
        "sft.rows=2", "sft.epochs=1", "sft.batch_size=4", "rollout.batch_size=1", "rollout.n=2",
        "trainer.total_steps=1", "trainer.micro_batch_size=4", "trainer.train_layers=2", "trainer.threads=1",
    ]
    assert main(["run", RECIPE, *overrides]) == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    validations = {r["label"]: r for r in records if r.get("event") == "validation"}
    assert set(validations) == {"before_sft", "after_sft", "after_rl"}
    for v in validations.values():
        assert v["cases"] == 2 and sum(s["cases"] for s in v["by_source"].values()) == 2
        assert 0.0 <= v["progress"] <= 1.0 and v["won"] == v["success_rate"]  # the recipe's alfworld_progress reward
    # the validation line shows the episodes' subgoal progress next to the success rate
    out = capsys.readouterr().out
    assert f"progress {validations['after_rl']['progress']:.3f}" in out
    sft = next(r for r in records if r.get("event") == "sft")
    assert sft["expert_episodes"] == 2 and sft["sft_steps"] >= 2 and sft["weight_change"] > 0
    iters = [r for r in records if "iteration" in r and "event" not in r]
    assert [r["iteration"] for r in iters] == [1] and iters[0]["episodes"] == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iterations"] == 1 and summary["peak_rss_mb"] > 0
