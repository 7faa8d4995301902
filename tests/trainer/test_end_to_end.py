"""``agentr1-core run tiny`` with the real SmolLM2-135M-Instruct: rows -> expert SFT -> rollout -> step rows ->
advantages -> loss -> changed weights, with validation before SFT, after SFT and after RL, and metrics.jsonl."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentr1_core.cli import main

ITERATION_KEYS = {
    "iteration", "reward_mean", "reward_std", "return_mean", "success_rate", "steps_per_episode", "terminations", "tool_errors",
    "tokens_generated", "rollout_tok_s", "update_tok_s", "loss", "entropy", "grad_norm", "clip_fraction",
    "train_steps", "optimizer_steps", "skipped_steps", "weight_change", "nonfinite_logprob_steps", "peak_rss_mb",
    "prefix_hit_rate",
}


@pytest.mark.slow
def test_tiny_run_trains_end_to_end(tmp_path, capsys):
    run_dir = tmp_path / "run"
    # a process beside the run, as a game process or tool server would be: the account shows it apart
    beside = subprocess.Popen([sys.executable, "-c", "b = bytearray(64 * 2 ** 20); b[::4096] = b'x' * len(b[::4096]); "
                               "import time; time.sleep(600)"])
    try:
        assert main(["run", "tiny", f"run_dir={run_dir}", "seed=3"]) == 0
    finally:
        beside.kill()
        beside.wait()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    validations = {r["label"]: r for r in records if r.get("event") == "validation"}
    assert set(validations) == {"before_sft", "after_sft", "after_rl"}
    for v in validations.values():
        assert v["cases"] == 2 and set(v["by_source"]) == {"arithmetic_expression", "arithmetic_word"}
        solved = v["success_rate"] * v["cases"]
        assert solved == round(solved)  # a count of solved cases, not an average of something else
        assert solved == sum(s["success_rate"] * s["cases"] for s in v["by_source"].values())
        assert sum(v["terminations"].values()) == v["cases"]

    sft = next(r for r in records if r.get("event") == "sft")
    assert sft["expert_success_rate"] == 1.0  # the scripted expert solves every row through the real env
    assert sft["sft_steps"] == 2 * sft["expert_episodes"]  # one calculator turn + one answer turn per episode
    assert sft["optimizer_steps"] >= 1 and sft["weight_change"] > 0

    iters = [r for r in records if "iteration" in r and "event" not in r]
    assert [r["iteration"] for r in iters] == [1]
    it = iters[0]
    assert ITERATION_KEYS <= set(it)
    assert it["episodes"] == 4 and it["train_steps"] >= 4 and it["tokens_generated"] > 0
    assert "adv/adv_mean" in it and it["valid_tokens"] > 0
    assert it["optimizer_steps"] == 1 and it["skipped_steps"] == 0
    assert it["weight_change"] > 0  # the policy loss reached the weights
    assert it["success_rate"] * it["episodes"] == round(it["success_rate"] * it["episodes"])
    # the engine samples with the trainer's own fp32 module: its log-probs are the trainer's (no recompute needed)
    assert it["logprob_gap_max"] < 1e-3 and it["logprob_gap_mean"] < 1e-4
    assert it["grad_norm"] > 0 and it["loss"] == it["loss"]  # entropy_coef gives a gradient; loss is not NaN
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iterations"] == 1 and summary["seed"] == 3
    # the memory account: each phase's peak by part; the policy's fp32 weights are measured on its tensors
    acc = summary["memory"]
    assert set(acc) == {"validation", "sft", "rollout", "update"}
    assert all(abs(a["peak"] - a["baseline"] - a["unexplained"] - sum(v for k, v in a.items() if k not in (
        "peak", "baseline", "unexplained", "child_processes"))) < 0.5 for a in acc.values())
    assert all(a["child_processes"] >= 64 for a in acc.values())  # beside the process's own peak, not in it
    assert 500 < acc["update"]["weights"] < 530 and acc["update"]["gradients"] > 0  # SmolLM2-135M, fp32
    assert acc["rollout"]["kv_peak"] > 0 and "kv_peak" not in acc["update"] and "gradients" not in acc["rollout"]
    # what autograd saved for the backward pass, measured in the training phases only
    assert acc["update"]["activations"] > 0 and acc["sft"]["activations"] > 0 and "activations" not in acc["rollout"]
    assert it["memory/activations_mb"] == pytest.approx(acc["update"]["activations"], abs=0.1)
    assert it["memory/rollout_peak_mb"] > acc["rollout"]["baseline"] + acc["rollout"]["weights"]
    assert summary["peak_rss_mb"] >= max(a["peak"] for a in acc.values()) - 0.1  # the account rounds to 0.1
    out = capsys.readouterr().out
    assert "it 1/1 | reward" in out and "[done]" in out and "[memory update] peak" in out
    assert "MiB besides" in out


@pytest.mark.slow
def test_validation_before_training_can_be_skipped_and_phases_record_peak_memory(tmp_path):
    run_dir = tmp_path / "run"
    assert main(["run", "tiny", f"run_dir={run_dir}", "stages=[sft]", "validation.before=false"]) == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["label"] for r in records if r.get("event") == "validation"] == ["after_sft"]
    phases = [r for r in records if r.get("event") in ("sft", "validation")]
    assert len(phases) == 2 and all(r["peak_rss_mb"] > 100 for r in phases)  # the model alone is > 500 MiB
