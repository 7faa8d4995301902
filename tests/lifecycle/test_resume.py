"""A run SIGKILLed in the middle of an iteration, after a checkpoint, resumes with ``--resume`` and ends with exactly
the per-iteration metrics and weights of an uninterrupted run with the same seed (CPU, one thread, tiny model).
Two diagnostics of the engine's own state are compared loosely: the prefix-cache statistics (a resumed engine starts
with an empty cache) and the engine-vs-trainer log-prob gap (a cached prefix changes the prefill's float rounding,
at the 1e-8 level, never the sampled tokens). The resumed run's wall time counts both processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentr1_core.lifecycle.checkpoint import MARKER, list_checkpoints
from agentr1_core.lifecycle.metrics import read_metrics

TIMING_WORDS = ("seconds", "tok_s", "peak_rss", "latency", "memory")
# what depends on the engine's batching and prefix cache (summation order, ~1e-13 here): compared within a tolerance
ENGINE_STATE_WORDS = ("prefix_", "logprob_gap", "mismatch/")


def without_timings(value):
    """Drop every wall-clock / throughput / memory number and the engine-state diagnostics, recursively."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items()
            if not any(w in k for w in TIMING_WORDS + ENGINE_STATE_WORDS)}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def _cli(config: Path, run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "agentr1_core.cli", "run", str(config), f"run_dir={run_dir}", *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TQDM_DISABLE": "1"}


def _weights(checkpoint: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(checkpoint / "model" / "model.safetensors"))


@pytest.mark.slow
def test_sigkill_mid_iteration_then_resume_matches_uninterrupted_run(tmp_path, tiny_run_config):
    config = tiny_run_config()
    full, killed = tmp_path / "full", tmp_path / "killed"
    done = subprocess.run(_cli(config, full), env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [p.name for p in list_checkpoints(full)] == ["step_000002", "step_000004"]

    proc = subprocess.Popen(_cli(config, killed), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = killed / "checkpoints" / "step_000002" / MARKER
    deadline = time.monotonic() + 600
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert marker.exists(), "the run never wrote its first checkpoint"
    proc.send_signal(signal.SIGKILL)  # iteration 3 has just started
    assert proc.wait(timeout=60) == -signal.SIGKILL
    cut = read_metrics(killed)
    assert max(r.get("iteration", 0) for r in cut if "event" not in r) == 2  # killed inside iteration 3

    resumed = subprocess.run(_cli(config, killed, "--resume"), env=_env(), capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "[resume]" in resumed.stdout and "iteration 2" in resumed.stdout

    expected, got = read_metrics(full), read_metrics(killed)
    iterations = [r["iteration"] for r in got if "event" not in r]
    assert iterations == [1, 2, 3, 4]  # nothing lost, nothing logged twice
    assert [r.get("event") for r in got] == [r.get("event") for r in expected]
    for want, have in zip(expected, got):
        assert without_timings(have) == without_timings(want)
        for key in ("logprob_gap_mean", "logprob_gap_max", "mismatch/k3_kl", "mismatch/ess", "mismatch/chi2"):
            if key in want:
                assert abs(have[key] - want[key]) < 1e-5, key
    last = [r for r in got if "event" not in r][-1]
    assert last["optimizer_steps"] == 4 and last["tokens_generated"] > 0 and last["entropy"] > 0

    a, b = _weights(list_checkpoints(full)[-1]), _weights(list_checkpoints(killed)[-1])
    assert a.keys() == b.keys()
    changed = [k for k in a if not bool((a[k] == b[k]).all())]
    assert changed == []

    # the wall time of the run is that of both processes: the killed one up to its checkpoint, then the resumed one
    assert len(json.loads((full / "summary.json").read_text())["wall_seconds_by_process"]) == 1
    summary = json.loads((killed / "summary.json").read_text())
    first, second = summary["wall_seconds_by_process"]
    assert summary["wall_seconds"] == pytest.approx(first + second)
    seconds = {r["iteration"]: r["iteration_seconds"] for r in got if "event" not in r}
    assert first > seconds[1] + seconds[2] and second > seconds[3] + seconds[4]
