"""The named recipes ``terminal-cli`` (the example shell agent as a program per episode on the generated terminal
tasks) and ``terminal-mini-swe-agent`` (mini-swe-agent from .venv-mini) end to end at smoke size with the real
SmolLM2-135M-Instruct: the warm start on the tasks' solutions through the agent's own bash tool, one GRPO
iteration, validation before and after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def smoke_run(config: str, tmp_path: Path) -> None:
    pytest.importorskip("agentr1_env_terminal")
    from agentr1_core.cli import main

    run_dir = tmp_path / "run"
    overrides = [f"run_dir={run_dir}", "sft.rows=4", "sft.batch_size=4", "sft.epochs=1", "validation.max_rows=2",
                 "rollout.batch_size=1", "rollout.n=2", "trainer.total_steps=1", "trainer.micro_batch_size=4",
                 "trainer.train_layers=2", "trainer.threads=1"]
    assert main(["run", config, *overrides]) == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    validations = {r["label"]: r for r in records if r.get("event") == "validation"}
    assert set(validations) == {"before_sft", "after_sft", "after_rl"}
    sft = next(r for r in records if r.get("event") == "sft")
    # the shell agent's own loop, answered with each task's solution: every task passes its tests
    assert sft["expert_episodes"] == 4 and sft["expert_success_rate"] == 1.0
    assert sft["expert_terminations"] == {"done": 4} and sft["weight_change"] > 0
    iteration = next(r for r in records if r.get("iteration") == 1 and "event" not in r)
    assert iteration["episodes"] == 2
    episodes = [json.loads(x) for x in (run_dir / "episodes" / "after_rl.jsonl").read_text().splitlines()]
    assert len(episodes) == 2


@pytest.mark.slow
def test_terminal_cli_recipe_runs_end_to_end_at_smoke_size(tmp_path):
    smoke_run("terminal-cli", tmp_path)


@pytest.mark.slow
def test_terminal_mini_swe_agent_recipe_runs_end_to_end_at_smoke_size(tmp_path, monkeypatch, mini_program):
    monkeypatch.setenv("AGENTR1_MINI_SWE_AGENT", mini_program)
    smoke_run("terminal-mini-swe-agent", tmp_path)
