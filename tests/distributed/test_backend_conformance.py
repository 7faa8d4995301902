"""The same scenarios on every backend: ``local`` and ``ray`` in the main environment, ``verl`` in ``.venv-verl``.

Each backend runs the real CLI in a subprocess on the tiny task (a tiny random Llama with SmolLM2's tokenizer):

* **stages, stop, resume**: SFT then 3 RL iterations with periodic validation; SIGTERM after the first iteration
  stops the run with a checkpoint (exit 143), ``--resume`` finishes it. Every stage and validation label is there,
  every iteration is logged exactly once, every iteration record has the keys every backend must write, the data
  order is reshuffled at each epoch, and the first mini-batch of the first RL iteration is on-policy (its ratio, KL
  to the old policy and KL to the reference are 0 up to float noise, no token clipped). Every RL iteration, before
  and after the stop, samples the weights it trains (the engines' prefix caches on): the engine's log-probs are
  within 1e-3 of the trainer's (fp32).
* **rollouts ahead of the update** (``trainer.max_staleness=1`` with the decoupled correction): the same stop and
  resume in the middle of the pipeline: the rollout in flight is discarded and said so, the resumed run trains every
  iteration once, every trained row is at most one update old, the last iteration trains on a rollout one update
  old, and the importance weights are reported.
* **nothing works**: every episode ends in an env error, so the run stops at the first rollout with exit 2 and the
  first error, instead of "training" on nothing.
* **ReMax** scores one greedy episode per row and trains on the samples only; **StepPO** bootstraps every episode cut
  before ``done`` with its critic's value of the next observation.
* **overlong episodes masked** (``rollout.overlong.mode=mask``): the episodes whose replies hit the token budget are
  counted and kept out of the loss, the others train, and the update is finite.

The training loop is shared (``trainers.loop``), so these fail when a backend drops a stage, a metric key or a stop
rule, or breaks the on-policy invariants.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

BACKENDS = {  # local and ray update with AdamW's fused kernel, CUDA's default (verl has its own optimizer)
    "local": ["trainer.optimizer_kernel=fused"],
    "ray": ["trainer.name=ray", "trainer.optimizer_kernel=fused", "trainer.params.rollout_workers=2",
            "trainer.params.worker_cpus=0.5", "trainer.params.object_store_mb=200"],
    "verl": ["trainer.name=verl", "trainer.params.rollout_workers=1", "trainer.params.num_cpus=6",
             "trainer.params.object_store_mb=300"],
}
TRAIN_ROWS = 4  # SFT uses all of them: every RL iteration after it starts or continues a new epoch
SCENARIO = ["stages=[sft,rl]", "trainer.total_steps=3", "validation.every=2", "validation.max_rows=1",
            f"data.train.train_size={TRAIN_ROWS}", f"data.val.train_size={TRAIN_ROWS}", f"sft.rows={TRAIN_ROWS}",
            "rollout.batch_size=2", "rollout.n=2", "rollout.max_new_tokens=16", "trainer.checkpoint_every=1",
            "trainer.skip_inert_rows=false", "algorithm.kl_coef=0.001", "seed=3", "trainer.train_layers=1",
            "trainer.keep_checkpoints=2", "engine.prefix_cache_mb=128"]
# keys every backend writes in every RL iteration record (the rollout's, the update's, the on-policy checks)
ITERATION_KEYS = {
    "iteration", "data_epoch", "episodes", "reward_mean", "reward_std", "return_mean", "success_rate",
    "steps_per_episode", "terminations", "tool_errors", "tokens_generated", "prompt_tokens", "rollout_seconds",
    "rollout_tok_s", "train_steps", "nonfinite_logprob_steps", "adv/adv_mean", "loss", "pg_loss", "grad_norm",
    "clip_fraction", "approx_kl", "entropy", "kl", "update_tok_s", "publish_seconds", "iteration_seconds",
    "peak_rss_mb", "weight_change", "onpolicy/approx_kl", "onpolicy/clip_fraction", "onpolicy/ref_kl",
    "logprob_gap_max", "policy_loss", "policy_grad_norm", "grad_clip_fraction",
}
SFT_KEYS = {"event", "expert_episodes", "expert_success_rate", "expert_reward_mean", "expert_terminations",
            "expert_tool_errors", "sft_steps", "sft_nll", "publish_seconds", "peak_rss_mb"}
VALIDATION_KEYS = {"event", "label", "iteration", "reward_mean", "success_rate", "cases", "by_source",
                   "terminations", "tool_errors", "seconds", "peak_rss_mb"}


def command(python: Path, backend: str, model: str, run_dir: Path, *overrides: str) -> list[str]:
    return [str(python), "-m", "agentr1_core.cli", "run", "tiny", f"model.path={model}",
            f"run_dir={run_dir}", *BACKENDS[backend], *overrides]


def python_for(backend: str, request: pytest.FixtureRequest) -> Path:
    """verl runs in its own environment (the ``verl_python`` fixture); local and ray in this one."""
    return request.getfixturevalue("verl_python") if backend == "verl" else Path(sys.executable)


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_")}
    env.update(PYTHONUNBUFFERED="1", **extra)
    return env


def records(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def iterations(run_dir: Path) -> list[dict]:
    return [r for r in records(run_dir) if "iteration" in r and r.get("event") is None]


def run_until_first_iteration_then_sigterm(cmd: list[str], run_dir: Path, timeout: float = 900) -> tuple[int, str]:
    """Start the run, send SIGTERM once iteration 1 is logged; returns (exit code, output)."""
    log = run_dir.parent / f"{run_dir.name}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=environment(), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        try:
            while proc.poll() is None and time.time() < deadline and not iterations(run_dir):
                time.sleep(0.5)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=max(60.0, deadline - time.time()))
        finally:
            if proc.poll() is None:
                proc.kill()
    return proc.returncode, log.read_text()


def tiny_param_count(folder: str) -> int:
    from safetensors.torch import load_file

    return sum(t.numel() for f in Path(folder).glob("*.safetensors") for t in load_file(str(f)).values())


def loop_state(run_dir: Path) -> dict:
    """The training loop's state saved in the run's newest checkpoint (either backend's format)."""
    ckpts = sorted((run_dir / "checkpoints").iterdir(), key=lambda p: int(p.name.rsplit("_", 1)[-1]))
    newest = ckpts[-1]
    if (newest / "agentr1_state.json").is_file():
        return json.loads((newest / "agentr1_state.json").read_text())["loop"]
    from agentr1_core.lifecycle.checkpoint import load_state

    return load_state(newest)["loop"]


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_stages_stop_and_resume_agree_on_every_backend(backend, tiny_model_dir, tmp_path, request):
    run_dir = tmp_path / backend
    cmd = command(python_for(backend, request), backend, tiny_model_dir, run_dir, *SCENARIO)
    code, out = run_until_first_iteration_then_sigterm(cmd, run_dir)
    assert code == 128 + signal.SIGTERM, out[-6000:]
    assert "stopped by SIGTERM after iteration" in out and "continue with --resume" in out, out[-3000:]
    stopped_at = iterations(run_dir)[-1]["iteration"]
    assert any(p.name.endswith(f"{stopped_at:06d}") for p in (run_dir / "checkpoints").iterdir())

    proc = subprocess.run(cmd + ["--resume"], cwd=ROOT, env=environment(), capture_output=True, text=True,
                          timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "[resume]" in out
    trainable = float(re.search(r"([0-9.]+)M trainable params", out).group(1)) * 1e6
    assert 0 < trainable < 0.5 * tiny_param_count(tiny_model_dir)  # only the top block (and final norm) train

    iters = iterations(run_dir)
    assert [r["iteration"] for r in iters] == [1, 2, 3]  # each exactly once across the stop and the resume
    for rec in iters:
        missing = ITERATION_KEYS - set(rec)
        assert not missing, f"iteration {rec['iteration']} lacks {sorted(missing)}"
    sft = [r for r in records(run_dir) if r.get("event") == "sft"]
    assert len(sft) == 1 and not SFT_KEYS - set(sft[0]), sorted(SFT_KEYS - set(sft[0]))
    validations = [r for r in records(run_dir) if r.get("event") == "validation"]
    assert [v["label"] for v in validations] == ["before_sft", "after_sft", "iter2", "after_rl"]
    assert all(not VALIDATION_KEYS - set(v) for v in validations)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert list(summary["validation"]) == ["before_sft", "after_sft", "iter2", "after_rl"]
    assert summary["iterations"] == 3 and "sft" in summary

    assert all(r["weight_change"] > 0 for r in iters)  # every update moved the weights the rollouts use
    checkpoints = sorted(p.name.rsplit("_", 1)[-1] for p in (run_dir / "checkpoints").iterdir())
    assert checkpoints == ["000002", "000003"]  # one per iteration, the newest two kept

    first = iters[0]  # SFT's weights, just published: the rollout and the update see the same policy
    assert first["onpolicy/approx_kl"] < 1e-5 and first["onpolicy/clip_fraction"] == 0.0, first
    assert first["onpolicy/ref_kl"] < 1e-5, first  # the reference is the policy as RL starts
    # every rollout sampled the weights just published (after SFT, an update, or the restored checkpoint), with no
    # prefix computed under older weights: the engine's log-probs are the trainer's up to fp32 noise
    gaps = [r["logprob_gap_max"] for r in iters]
    assert all(0.0 <= gap <= 1e-3 for gap in gaps), gaps

    # every RL iteration starts an epoch or continues one; each new epoch has a new order
    assert [r["data_epoch"] for r in iters] == [1, 1, 2]
    state = loop_state(run_dir)
    initial = list(range(TRAIN_ROWS))
    random.Random(3).shuffle(initial)
    assert state["data"]["epoch"] == 2 and sorted(state["data"]["order"]) == list(range(TRAIN_ROWS))
    assert state["data"]["order"] != initial


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_rollouts_ahead_of_the_update_stop_and_resume_mid_pipeline_on_every_backend(backend, tiny_model_dir,
                                                                                     tmp_path, request):
    run_dir = tmp_path / backend
    cmd = command(python_for(backend, request), backend, tiny_model_dir, run_dir, *SCENARIO,
                  "trainer.max_staleness=1", "trainer.off_policy_correction=decoupled")
    code, out = run_until_first_iteration_then_sigterm(cmd, run_dir)
    assert code == 128 + signal.SIGTERM, out[-6000:]
    stopped_at = iterations(run_dir)[-1]["iteration"]
    if stopped_at < 3:  # the next rollout was running beside the last update: it is not in the checkpoint
        stops = [r for r in records(run_dir) if r.get("event") == "pipeline_stopped"]
        assert [(r["iteration"], r["discarded"]) for r in stops] == [(stopped_at, [stopped_at + 1])], out[-4000:]

    proc = subprocess.run(cmd + ["--resume"], cwd=ROOT, env=environment(), capture_output=True, text=True,
                          timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    iters = iterations(run_dir)
    assert [r["iteration"] for r in iters] == [1, 2, 3]
    for rec in iters:
        missing = (ITERATION_KEYS | {"offpolicy/is_weight_mean", "async/staleness_max"}) - set(rec)
        assert not missing, f"iteration {rec['iteration']} lacks {sorted(missing)}"
        assert rec["async/staleness_max"] <= 1 and rec["async/dropped_stale_rows"] == 0
        assert rec["async/staleness_0"] + rec["async/staleness_1"] == rec["train_steps"]
        # the decoupled weights and the mismatch diagnostics are over the same tokens, pi_prox / mu on every backend:
        # ESS = mean(w)^2 / mean(w^2)
        assert rec["update_skipped"] == 0 and rec["mismatch/k3_kl"] >= 0
        assert rec["mismatch/ess"] == pytest.approx(rec["offpolicy/is_weight_mean"] ** 2 / (rec["mismatch/chi2"] + 1),
                                                    rel=1e-6)
    # the first rollout of each process has the newest weights; the next one ran beside the update before it
    expected = {1: [0, 0, 1], 2: [0, 1, 0], 3: [0, 1, 1]}[stopped_at]
    assert [r["async/staleness_max"] for r in iters] == expected
    assert [r["iteration"] - 1 - r["async/policy_version"] for r in iters] == expected
    assert iters[0]["onpolicy/approx_kl"] < 1e-5  # the ratio is to the proximal policy: on-policy at the start
    assert [r["data_epoch"] for r in iters] == [1, 1, 2]
    validations = [r["label"] for r in records(run_dir) if r.get("event") == "validation"]
    assert validations == ["before_sft", "after_sft", "iter2", "after_rl"]


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_run_whose_every_episode_fails_stops_on_every_backend(backend, tiny_model_dir, tmp_path, request):
    run_dir = tmp_path / backend
    cmd = command(python_for(backend, request), backend, tiny_model_dir, run_dir, "stages=[rl]", "data.val=null", "trainer.total_steps=2",
                  "env.name=faulty_env", "env.tools=[echo]", "rollout.max_turns=2",
                  "data.train={name: fault_rows, repeats: 4, kinds: [env_step_raises]}")
    proc = subprocess.run(cmd, cwd=ROOT, env=environment(AGENTR1_PLUGIN_MODULES="agentr1_core.testing.faults"),
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-6000:]
    assert "every episode of iteration 1 ended in an env error" in out and "injected env failure" in out, out[-3000:]
    assert not iterations(run_dir)  # nothing was trained on
    assert [r["stage"] for r in records(run_dir) if r.get("event") == "stopped"] == ["iteration 1"]


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_remax_scores_one_greedy_episode_per_row_and_trains_on_the_samples_on_every_backend(backend, tiny_model_dir,
                                                                                           tmp_path, request):
    """ReMax: every row of the rollout gets one greedy episode beside its samples (through the backend's own rollout
    path: this process's engine, or the rollout workers); it is scored as the row's baseline, not trained on and not
    counted as a training episode."""
    run_dir = tmp_path / backend
    cmd = command(python_for(backend, request), backend, tiny_model_dir, run_dir, "algorithm.name=remax",
                  "stages=[rl]", "data.val=null", "trainer.total_steps=1", "trainer.checkpoint_every=-1",
                  "rollout.batch_size=2", "rollout.n=2", "rollout.max_new_tokens=16", "trainer.keep_train_episodes=6",
                  "seed=5")
    proc = subprocess.run(cmd, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    [rec] = iterations(run_dir)
    episodes = [json.loads(line) for line in (run_dir / "episodes" / "train" / "iter_000001.jsonl").read_text()
                .splitlines()]
    greedy = [e for e in episodes if e["uid"].endswith("/greedy")]
    sampled = [e for e in episodes if not e["uid"].endswith("/greedy")]
    assert sorted(e["uid"] for e in greedy) == ["it1-0/greedy", "it1-1/greedy"] and len(sampled) == 4
    assert all(e["task_id"] == s["task_id"] for e in greedy for s in sampled if s["uid"].split("/")[0]
               == e["uid"].split("/")[0])  # the greedy episode plays its samples' row
    assert rec["episodes"] == 4 and rec["remax/greedy_episodes"] == 2 and rec["remax/missing_baselines"] == 0
    assert rec["train_steps"] == sum(len(e["steps"]) for e in sampled)  # no row from a greedy episode
    returns = [sum(s["reward"] for s in e["steps"]) for e in greedy]
    assert rec["remax/greedy_return_mean"] == pytest.approx(sum(returns) / 2)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_steppo_bootstraps_the_episodes_cut_before_done_on_every_backend(backend, tiny_model_dir, tmp_path, request):
    """Every episode makes one tool call with wrong argument types (the fault engine's first turn), gets the tool's
    error as its next observation and is cut by ``rollout.max_turns=1``: not a terminal state, so each episode's
    last step is bootstrapped with the critic's value of that next observation, read after the row's critic prefix
    (the backend's own critic: the value head on the policy trunk, or verl's value model)."""
    run_dir = tmp_path / backend
    cmd = command(python_for(backend, request), backend, tiny_model_dir, run_dir, "algorithm.name=steppo",
                  "stages=[rl]", "data.val=null", "trainer.total_steps=1", "trainer.checkpoint_every=-1",
                  "env.name=faulty_env", "env.tools=[echo]", "engine.name=fault_injecting", "rollout.max_turns=1",
                  "rollout.batch_size=2", "rollout.n=2",
                  "data.train={name: fault_rows, repeats: 2, kinds: [wrong_argument_types]}",
                  "critic.prefix.template='The correct answer is {ground_truth}. '",
                  # no reward: with the zero value head nothing has a gradient, which would skip the update
                  "trainer.skip_inert_rows=false", "trainer.step_without_gradient=true")
    proc = subprocess.run(cmd, cwd=ROOT, env=environment(AGENTR1_PLUGIN_MODULES="agentr1_core.testing.faults"),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    [rec] = iterations(run_dir)
    assert rec["episodes"] == 4 and rec["terminations"] == {"max_turns": 4}
    assert rec["tool_errors"] == {"bad_arguments": 4}
    assert rec["bootstrapped_steps"] == 4  # every cut episode's last step, from its next observation
    assert math.isfinite(rec["adv/value_mean"]) and math.isfinite(rec["value_loss"])


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_dynamic_sampling_trains_the_informative_groups_only_on_every_backend(backend, tiny_model_dir, tmp_path,
                                                                             request):
    """DAPO's dynamic sampling through each backend's own rollouts: with a reward of even or odd reply token sums
    (a coin per episode) some groups of two differ and some do not; rounds of 2 rows run until 2 groups differ, and
    only their 4 episodes train, while every episode rolled out counts in the rollout's metrics. The pass-rate
    curriculum records each row's visit in the same rollouts."""
    run_dir = tmp_path / backend
    cmd = command(python_for(backend, request), backend, tiny_model_dir, run_dir, "stages=[rl]", "data.val=null",
                  "trainer.total_steps=1", "trainer.checkpoint_every=-1", "reward.name=response_parity",
                  "rollout.batch_size=2", "rollout.n=2", "rollout.max_new_tokens=8", "rollout.max_turns=1",
                  "rollout.temperature=1.0", "rollout.dynamic_sampling.enabled=true",
                  "rollout.dynamic_sampling.max_rounds=8", "data.curriculum.enabled=true",
                  "data.curriculum.window=1", "seed=4")
    proc = subprocess.run(cmd, cwd=ROOT, env=environment(AGENTR1_PLUGIN_MODULES="agentr1_core.testing.rewards"),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    [rec] = iterations(run_dir)
    assert rec["dynamic/kept_groups"] == 2 and rec["dynamic/cap_hit"] == 0
    rows = rec["dynamic/rows_sampled"]
    assert rows == 2 * (rec["dynamic/extra_rounds"] + 1) and rec["episodes"] == 2 * rows
    assert rec["dynamic/dropped_groups"] + rec["dynamic/kept_groups"] + rec["dynamic/surplus_groups"] == rows
    assert rec["train_steps"] == 4  # one step per episode of the two kept groups
    assert math.isfinite(rec["loss"]) and rec["grad_norm"] > 0
    # the curriculum saw one visit of every row rolled out: each dropped group's row is now skipped
    assert rec["curriculum/solved_rows"] + rec["curriculum/failed_rows"] >= min(1, rec["dynamic/dropped_groups"])


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_overlong_episodes_are_masked_and_the_others_train_on_every_backend(backend, tiny_model_dir, tmp_path,
                                                                           request):
    """Rows of two kinds: the fault engine answers ``wrong_argument_types`` rows itself (a tool call, then an answer
    that ends the episode, each reply short of the budget), while the random tiny model samples ``none`` rows and
    runs into ``rollout.max_new_tokens`` every time. With ``mask`` the cut episodes are counted and their steps kept
    out of the loss; the entropy bonus still gives the other rows a gradient, so the update runs, finite."""
    run_dir = tmp_path / backend
    cmd = command(python_for(backend, request), backend, tiny_model_dir, run_dir, "rollout.overlong.mode=mask",
                  "stages=[rl]", "data.val=null", "trainer.total_steps=1", "trainer.checkpoint_every=-1",
                  "env.name=faulty_env", "env.tools=[echo]", "engine.name=fault_injecting", "rollout.max_turns=2",
                  "rollout.max_new_tokens=6", "rollout.batch_size=4", "rollout.n=2", "trainer.keep_train_episodes=8",
                  "data.train={name: fault_rows, repeats: 2, kinds: [wrong_argument_types, none]}")
    proc = subprocess.run(cmd, cwd=ROOT, env=environment(AGENTR1_PLUGIN_MODULES="agentr1_core.testing.faults"),
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    [rec] = iterations(run_dir)
    episodes = [json.loads(line) for line in (run_dir / "episodes" / "train" / "iter_000001.jsonl").read_text()
                .splitlines()]
    cut = [e for e in episodes if any(s.get("finish_reason") == "length" for s in e["steps"])]
    assert rec["episodes"] == len(episodes) == 8 and len(cut) == 4  # the sampled rows' episodes, every one
    assert rec["overlong/episodes"] == 4 and rec["overlong/masked_steps"] == sum(len(e["steps"]) for e in cut)
    assert rec["train_steps"] > rec["overlong/masked_steps"]
    assert rec["update_skipped"] == 0 and math.isfinite(rec["loss"]) and math.isfinite(rec["grad_norm"])
    assert rec["weight_change"] > 0
    if backend != "verl":  # the local trainer runs only the rows with a gradient (verl runs them all, masked)
        assert rec["update_inert_rows"] == rec["overlong/masked_steps"]
