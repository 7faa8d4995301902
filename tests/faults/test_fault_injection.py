"""Fault-injection suite: 1,024 training episodes (+ validation) of the real local trainer on a tiny model, where
almost every episode meets an injected fault: tools that raise, hang past their timeout, flood or return non-UTF-8
bytes; malformed calls (bad JSON, unknown tool, wrong argument types); an env whose step raises or whose helper
process dies; the engine returning an empty response or NaN log-probs.

The run must complete; every fault must be counted in the iteration metrics and show up as an error observation or a
truncated episode; no NaN may reach the optimizer (every parameter finite, no skipped step, weights changed).
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from omegaconf import OmegaConf

from agentr1_core.config import load_config
from agentr1_core.lifecycle.metrics import read_metrics
from agentr1_core.testing import faults
from agentr1_core.trainers.local import LocalTrainer


class RecordingTrainer(LocalTrainer):
    """The local trainer, keeping the training trajectories for the assertions."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.train_trajs: list = []
        self.val_trajs: list = []

    def rollout(self, rows, n, sampling, policy="model", desc="rollout", prefix=""):
        trajs, seconds = super().rollout(rows, n, sampling, policy=policy, desc=desc, prefix=prefix)
        (self.val_trajs if prefix.startswith("val-") else self.train_trajs).extend(trajs)
        return trajs, seconds


def fault_config(tmp_path, model_dir: str, steps: int, batch_size: int, n: int, repeats: int):
    path = tmp_path / "faults.yaml"
    path.write_text(OmegaConf.to_yaml({
        "seed": 1, "run_dir": str(tmp_path / "run"), "stages": ["rl"],
        "model": {"path": model_dir},
        "engine": {"name": "fault_injecting", "max_batch_size": 64},
        "env": {"name": "faulty_env", "tools": ["echo", "raise_tool", "hang_tool", "huge_tool", "binary_tool"],
                "tool_format": "hermes", "system_prompt": "Use the tools, then reply <answer>N</answer>.",
                "max_turns": 3},
        "reward": {"name": "answer_match"},
        "algorithm": {"name": "grpo"},
        "data": {"train": {"name": "fault_rows", "repeats": repeats, "seed": 0},
                 "val": {"name": "fault_rows", "repeats": 1, "seed": 1}},
        "rollout": {"batch_size": batch_size, "n": n, "temperature": 1.0, "max_new_tokens": 12, "max_turns": 3},
        "validation": {"every": 0, "max_rows": 0, "n": 1, "temperature": 0.0},
        "trainer": {"total_steps": steps, "lr": 1.0e-3, "micro_batch_size": 32, "checkpoint_every": -1,
                    "threads": 1, "min_free_gb": 0.01},
    }))
    return load_config(str(path))


def run_with_faults(registry, tmp_path, model_dir, **sizes) -> RecordingTrainer:
    registry.register_module(faults, name="faults")
    trainer = RecordingTrainer(fault_config(tmp_path, model_dir, **sizes), registry)
    trainer.fit()
    return trainer


def check_faults_counted(trainer: RecordingTrainer, expected_episodes: int) -> dict[str, int]:
    records = read_metrics(trainer.run_dir)
    iters = [r for r in records if "event" not in r]
    trajs = trainer.train_trajs
    assert len(trajs) == sum(r["episodes"] for r in iters) == expected_episodes
    kinds = Counter(t.data_source.removeprefix("fault_") for t in trajs)
    assert set(kinds) == set(faults.KINDS)  # every fault was injected

    tool_errors: Counter[str] = Counter()
    terminations: Counter[str] = Counter()
    for r in iters:
        tool_errors.update(r["tool_errors"])
        terminations.update(r["terminations"])
    # each tool fault: exactly one counted error of its kind per episode, and an error observation the model sees
    for kind, (_text, error) in faults.TOOL_FAULTS.items():
        assert tool_errors[error] == kinds[kind], kind
        for t in (t for t in trajs if t.data_source == f"fault_{kind}"):
            seen = t.steps[0].next_observation.messages[-1]["content"]
            assert {"output_truncated": "[truncated 996000 characters]", "invalid_utf8": "\ufffd"}.get(
                error, "Error: ") in seen, (kind, seen[:200])
            assert t.termination == "done" and len(t.steps) == 2  # the episode went on to its answer
    # env faults and empty responses: counted terminations, the episode cut short (truncated)
    env_faults = kinds["env_step_raises"] + kinds["env_process_dies"]
    assert terminations["env_error"] == env_faults
    assert terminations["engine_error"] == kinds["empty_response"]
    for t in trajs:
        kind = t.data_source.removeprefix("fault_")
        if kind in faults.ENV_FAULTS:
            assert t.termination == "env_error" and t.steps[-1].truncated
            assert ("injected env failure" if kind == "env_step_raises" else "env process exited with code 3") \
                in t.info["error"]
        if kind == "empty_response":
            assert t.termination == "engine_error" and not t.steps
    assert sum(r["nonfinite_logprob_steps"] for r in iters) == kinds["nan_logprobs"]
    # no NaN reached the optimizer
    assert all(r["skipped_steps"] == 0 and r["optimizer_steps"] >= 1 for r in iters)
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in iters)
    assert all(bool(torch.isfinite(p).all()) for p in trainer.backend.policy.model.parameters())
    assert sum(r["weight_change"] for r in iters) > 0
    injected = trainer.backend.engine.counts
    assert injected["empty_response"] >= kinds["empty_response"]
    return {**{k: v for k, v in kinds.items()}, **{f"tool_errors/{k}": v for k, v in tool_errors.items()},
            **{f"terminations/{k}": v for k, v in terminations.items()}}


def test_fault_injection_small_run(agentr1_registry, tmp_path, tiny_model_dir):
    trainer = run_with_faults(agentr1_registry, tmp_path, tiny_model_dir, steps=1, batch_size=24, n=2, repeats=2)
    check_faults_counted(trainer, expected_episodes=48)


@pytest.mark.slow
def test_fault_injection_1024_episodes(agentr1_registry, tmp_path, tiny_model_dir, capsys):
    trainer = run_with_faults(agentr1_registry, tmp_path, tiny_model_dir, steps=4, batch_size=64, n=4, repeats=22)
    counts = check_faults_counted(trainer, expected_episodes=1024)
    validation = trainer.history["validation"]["after_rl"]
    assert set(validation["by_source"]) == {f"fault_{k}" for k in faults.KINDS}
    out = capsys.readouterr().out
    assert "tool errors " in out and "ends " in out
    print("fault counts:", dict(sorted(counts.items())))
