"""``bench_algorithms``'s report: held-out cells per seed and the mean value-loss curve over seeds, including seeds
whose critic never trained (every update skipped, so their runs have no value loss)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_algorithms_under_test", BENCH / "bench_algorithms.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def run(after_sft: float, after_rl: float, vf_loss: list | None, episodes: int = 16) -> dict:
    curves = {"success_rate": [0.0, 0.25], "reward_mean": [0.0, 0.25], "episodes": [16, episodes]}
    if vf_loss is not None:
        curves["vf_loss"] = vf_loss
    return {"validation": {"after_sft": {"success_rate": after_sft, "cases": 4},
                           "after_rl": {"success_rate": after_rl, "cases": 4}},
            "curves": curves, "wall_seconds": 60.0}


def test_the_mean_curve_skips_iterations_and_runs_without_a_value():
    bench = load_bench()
    assert bench.mean_curve([[None, 0.5, 0.25], []]) == [None, 0.5, 0.25]
    assert bench.mean_curve([[1.0, None], [3.0, 2.0]]) == [2.0, 2.0]
    assert bench.mean_curve([[], []]) == []


def test_the_report_keeps_the_value_loss_of_the_seeds_that_have_one():
    bench = load_bench()
    results = {"episodes_per_prompt": {"gsm8k": 4}, "runs": {"gsm8k": {
        "steppo": {"0": run(0.0, 0.25, [None, 0.0260]), "1": run(0.5, 0.5, None, episodes=48)}}}}
    text = bench.table(results)
    # rows rolled out: the episodes of every iteration over the episodes per prompt (dynamic sampling's extra rounds)
    assert "| gsm8k | steppo | 4 | 0: 0 -> 1/4; 1: 2 -> 2/4 | 1.5 | 0.125 | 8, 16 | 1.0 min |" in text
    assert "| gsm8k | steppo | - | 0.0260 |" in text
    assert "vf_loss it1 | vf_loss it2 |" in text
