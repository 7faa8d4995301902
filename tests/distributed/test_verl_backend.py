"""The verl backend for real, on CPU: ``agentr1-core run ... trainer.name=verl`` in verl's own environment.

verl 0.9 pins transformers < 5.11, so it lives in ``.venv-verl`` (``bash scripts/setup_verl.sh``); these tests run
it in subprocesses from the main suite. Without ``.venv-verl`` they skip, except in CI (``AGENTR1_CI=1``), where a
missing environment is a failure. The runs use a tiny random Llama with SmolLM2's tokenizer, transformers-engine
rollout workers, verl's FSDP2 engine workers over gloo (the CPU platform in ``verl_cpu_platform``).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERL_PYTHON = ROOT / ".venv-verl" / "bin" / "python"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def verl_python() -> Path:
    if not VERL_PYTHON.is_file():
        message = f"{VERL_PYTHON} is missing (create it with: bash scripts/setup_verl.sh)"
        if os.environ.get("AGENTR1_CI") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return VERL_PYTHON


def run_verl(python: Path, args: list[str], timeout: int = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_")}
    env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run([str(python), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def cli_run(python: Path, model: str, run_dir: Path, *overrides: str, resume: bool = False) -> str:
    args = ["-m", "agentr1_core.cli", "run", "tiny", "trainer.name=verl",
            f"model.path={model}", f"run_dir={run_dir}", "trainer.params.rollout_workers=1",
            "trainer.params.num_cpus=6", "trainer.params.object_store_mb=300", "trainer.checkpoint_every=1",
            "validation.max_rows=1", *overrides]
    if resume:
        args.append("--resume")
    proc = run_verl(python, args)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    return out


def tiny_param_count(folder: str) -> int:
    from safetensors.torch import load_file

    return sum(t.numel() for f in Path(folder).glob("*.safetensors") for t in load_file(str(f)).values())


def iteration_records(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if "iteration" in r and r.get("event") is None]


def local_trainer_keys() -> set[str]:
    """Keys the local trainer writes in every iteration record (rollout metrics, advantages, update basics),
    computed with the same functions it uses."""
    from agentr1_core.algorithms.components import GRPO
    from agentr1_core.mdp import Step, Trajectory
    from agentr1_core.trainers.batching import build_step_batch, trajectories_to_rows
    from agentr1_core.trainers.metrics import rollout_metrics

    trajs = [Trajectory(steps=[Step([1, 2], [3], [-0.5], reward=float(i), done=True)], uid=f"g/{i}", group_id="g")
             for i in range(2)]
    adv = GRPO().compute_advantages(build_step_batch(trajectories_to_rows(trajs).rows))
    return (set(rollout_metrics(trajs, 1.0)) | {f"adv/{k}" for k in adv.metrics} |
            {"iteration", "train_steps", "nonfinite_logprob_steps", "iteration_seconds", "peak_rss_mb", "loss",
             "grad_norm", "pg_loss", "clip_fraction", "approx_kl", "entropy", "update_tok_s"})


def test_verl_environment_imports_the_engine_workers(verl_python):
    proc = run_verl(verl_python, ["-c", "import verl.workers.engine_workers, fastapi, uvicorn, transformers; "
                                        "print(transformers.__version__)"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    major, minor = (int(x) for x in proc.stdout.strip().split(".")[:2])
    assert (major, minor) < (5, 11)


def test_algorithm_crosscheck_runs_against_verl(verl_python):
    proc = run_verl(verl_python, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                                  "tests/algorithms/test_verl_crosscheck.py"])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "skipped" not in out and " passed" in out
    assert int(out.split(" passed")[0].split()[-1]) >= 44


def test_grpo_with_sft_trains_three_iterations_then_resumes(verl_python, tiny_model_dir, tmp_path):
    run_dir = tmp_path / "grpo"
    out = cli_run(verl_python, tiny_model_dir, run_dir, "trainer.total_steps=3", "stages=[sft,rl]", "sft.rows=2",
                  "trainer.keep_checkpoints=2", "trainer.train_layers=1")
    assert "verl on cpu" in out
    trainable = float(re.search(r"([0-9.]+)M trainable params", out).group(1)) * 1e6
    assert 0 < trainable < 0.5 * tiny_param_count(tiny_model_dir)  # only the top block (and final norm) train
    records = iteration_records(run_dir)
    assert [r["iteration"] for r in records] == [1, 2, 3]
    missing = local_trainer_keys() - set(records[-1])
    assert not missing, f"keys the local trainer writes but the verl trainer does not: {sorted(missing)}"
    for r in records:
        assert r["train_steps"] > 0 and "engine_error" not in (r.get("terminations") or {})
        assert math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"])
        assert r["weight_change"] > 0  # the gathered actor weights moved since the previous publish
    events = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    sft = [e for e in events if e.get("event") == "sft"]
    assert sft and math.isfinite(sft[0]["sft_nll"]) and sft[0]["weight_change"] > 0
    labels = [e["label"] for e in events if e.get("event") == "validation"]
    assert labels == ["before_sft", "after_sft", "after_rl"]
    ckpts = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert ckpts == ["verl_iter_000002", "verl_iter_000003"]  # one per iteration, the newest two kept

    out = cli_run(verl_python, tiny_model_dir, run_dir, "trainer.total_steps=4", "stages=[sft,rl]", "sft.rows=2",
                  "trainer.keep_checkpoints=2", "trainer.train_layers=1", resume=True)
    assert "[resume]" in out and "iteration 3" in out
    records = iteration_records(run_dir)
    assert [r["iteration"] for r in records] == [1, 2, 3, 4]
    assert records[-1]["weight_change"] > 0
    events = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len([e for e in events if e.get("event") == "sft"]) == 1  # SFT is not repeated after a resume
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["verl_iter_000003", "verl_iter_000004"]


def test_steppo_with_kl_trains_its_critic_for_three_iterations(verl_python, tiny_model_dir, tmp_path):
    run_dir = tmp_path / "steppo"
    cli_run(verl_python, tiny_model_dir, run_dir, "trainer.total_steps=3", "stages=[rl]", "algorithm.name=steppo",
            "algorithm.kl_coef=0.01", "trainer.checkpoint_every=-1", "trainer.train_layers=0")
    records = iteration_records(run_dir)
    assert [r["iteration"] for r in records] == [1, 2, 3]
    for r in records:
        assert r["train_steps"] > 0
        assert math.isfinite(r["value_loss"]) and math.isfinite(r["verl/critic/grad_norm"])
        assert math.isfinite(r["adv/value_mean"])  # advantages from the critic's per-step values
        assert math.isfinite(r["kl"])  # reference log-probs reached verl's KL loss
    assert records[1]["weight_change"] > 0 and records[2]["weight_change"] > 0
    assert records[0]["adv/value_mean"] != records[2]["adv/value_mean"]  # the critic was updated
    assert not (run_dir / "checkpoints").exists() or not any((run_dir / "checkpoints").iterdir())

