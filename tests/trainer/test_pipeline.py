"""Rollouts ahead of the update (``trainers.pipeline``): the version rule, back-pressure, errors and stops on a
scripted backend; then the real local backend on the tiny model: a pipeline held to staleness 0 trains exactly as
the loop in turn, and with ``max_staleness: 1`` the engine samples its own copy of the weights, one update old."""

from __future__ import annotations

import textwrap
import threading
import time
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from agentr1_core.config import load_config
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.plugins import configure_registry
from agentr1_core.trainers.data_order import DataOrder
from agentr1_core.trainers.local import LocalTrainer
from agentr1_core.trainers.pipeline import PipelinedRollouts, staleness_metrics


class ScriptedBackend:
    """Rollouts that take ``seconds`` and record the weight version the engine held when each started."""

    def __init__(self, seconds: float = 0.02, fail_at: int | None = None) -> None:
        self.seconds, self.fail_at = seconds, fail_at
        self.engine_version: int | None = None
        self.trained = 0
        self.started: list[tuple[int, int]] = []  # (rollout number, engine version)
        self.active = 0
        self.overlapped = False

    def snapshot_weights(self) -> int:
        return self.trained

    def publish_weights(self, snapshot: int = None) -> dict:
        assert self.active == 0, "weights published while a rollout runs"
        self.engine_version = snapshot
        return {"publish_seconds": 0.0}

    def take_stats(self) -> dict:
        return {}

    def take_snapshot_metrics(self) -> dict:
        return {}

    def rollout(self, rows, n, sampling, **kw):
        number = len(self.started) + 1
        if number == self.fail_at:
            raise RuntimeError("engine lost")
        self.active += 1
        self.started.append((number, self.engine_version))
        time.sleep(self.seconds)
        self.active -= 1
        return [Trajectory(steps=[Step(prompt_ids=[1], response_ids=[2], response_logprobs=[-1.0])],
                           uid=f"{kw['prefix']}{i}", group_id=f"{kw['prefix']}g{i}") for i in range(len(rows) * n)]


def scripted_loop(backend: ScriptedBackend, total: int) -> SimpleNamespace:
    cfg = OmegaConf.create({"trainer": {"total_steps": total}, "rollout": {"batch_size": 2, "n": 2}})
    settings = SimpleNamespace(total_steps=total, batch_size=2, n=2,  # what the pipeline reads of LoopSettings
                               dynamic_sampling=False, dynamic_sampling_rounds=0)
    loop = SimpleNamespace(cfg=cfg, settings=settings, backend=backend, iteration=0, sampling=None,
                           consumed_data_state=None, data=DataOrder([{"i": i} for i in range(5)], seed=0))
    loop.rollout = lambda rows, n, sampling, desc, prefix, **_: (backend.rollout(rows, n, sampling, prefix=prefix), 0.0)
    return loop


def drive(loop: SimpleNamespace, pipeline: PipelinedRollouts, update_seconds: float) -> list:
    """The loop's side of a started pipeline: take each rollout, "update" for ``update_seconds``, hand back weights."""
    batches = []
    while loop.iteration < int(loop.cfg.trainer.total_steps):
        loop.iteration += 1
        batch = pipeline.next(loop.iteration)
        time.sleep(update_seconds)
        loop.backend.trained = loop.iteration
        pipeline.after_update(loop.iteration)
        pipeline.iteration_end(loop.iteration)
        batches.append(batch)
    return batches


def train(loop: SimpleNamespace, pipeline: PipelinedRollouts, update_seconds: float) -> list:
    with pipeline:
        return drive(loop, pipeline, update_seconds)


@pytest.mark.parametrize("staleness", [0, 1, 2])
def test_every_rollout_is_within_the_staleness_bound_and_one_version(staleness):
    backend = ScriptedBackend(seconds=0.02)
    loop = scripted_loop(backend, total=8)
    batches = train(loop, PipelinedRollouts(loop, staleness), update_seconds=0.05)
    assert [b.iteration for b in batches] == list(range(1, 9))
    for batch in batches:
        age = (batch.iteration - 1) - batch.version
        assert 0 <= age <= staleness
        assert all(s.policy_version == batch.version for t in batch.trajectories for s in t.steps)
    # the updates are slower than the rollouts: the pipeline uses all the staleness it is given
    assert max((b.iteration - 1) - b.version for b in batches) == staleness
    assert [v for _, v in backend.started] == [b.version for b in batches]  # one version per rollout


def test_finished_rollouts_wait_in_a_bounded_queue():
    backend = ScriptedBackend(seconds=0.0)
    loop = scripted_loop(backend, total=6)
    pipeline = PipelinedRollouts(loop, 2)
    with pipeline:
        deadline = time.time() + 10
        while len(pipeline.ready) < 2 and time.time() < deadline:  # the trainer is busy: the producer fills the queue
            time.sleep(0.01)
        time.sleep(0.2)  # ... and then waits
        assert len(pipeline.ready) == 2 and len(backend.started) == 2
        drive(loop, pipeline, update_seconds=0.0)


def test_a_rollout_error_reaches_the_trainer_and_the_pipeline_stops():
    backend = ScriptedBackend(seconds=0.01, fail_at=3)
    loop = scripted_loop(backend, total=6)
    with pytest.raises(RuntimeError, match="engine lost"):
        train(loop, PipelinedRollouts(loop, 1), update_seconds=0.02)
    assert loop.iteration == 3  # iterations 1 and 2 trained; the error surfaced when 3 was asked for
    assert not [t for t in threading.enumerate() if t.name == "rollout-pipeline"]


def test_a_stop_discards_the_rollouts_in_flight_and_the_checkpoint_keeps_the_trained_data_order(capsys):
    backend = ScriptedBackend(seconds=0.05)
    loop = scripted_loop(backend, total=10)
    pipeline = PipelinedRollouts(loop, 1)
    with pytest.raises(RuntimeError, match="stop"):
        with pipeline:
            loop.iteration = 1
            first = pipeline.next(1)
            time.sleep(0.2)  # the producer is on rollout 2 and 3 waits for an update
            raise RuntimeError("stop")
    assert "discarded the rollouts of iterations [2]" in capsys.readouterr().out
    # the loop's checkpoint state is the data order after rollout 1's rows, not after the discarded ones
    replay = DataOrder([{"i": i} for i in range(5)], seed=0)
    replay.take(2)
    assert loop.consumed_data_state == first.data_state == replay.state_dict()


def test_a_group_with_a_row_older_than_the_bound_is_dropped_whole_and_counted():
    def traj(uid: str, group: str, versions: list[int]) -> Trajectory:
        return Trajectory(steps=[Step(prompt_ids=[1], response_ids=[2], response_logprobs=[0.0], policy_version=v)
                                 for v in versions], uid=uid, group_id=group)

    trajs = [traj("a0", "a", [3, 3]), traj("a1", "a", [3]), traj("b0", "b", [1, 3]), traj("b1", "b", [3])]
    kept, metrics = staleness_metrics(trajs, trained_version=4, max_staleness=2)
    assert [t.uid for t in kept] == ["a0", "a1"]
    assert metrics["async/dropped_stale_rows"] == 3
    assert metrics["async/staleness_1"] == 3 and metrics["async/staleness_max"] == 1


# -- the real local backend ------------------------------------------------------------------------------------------
def _config(tmp_path, model_dir: str, name: str, *overrides: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(f"""\
        base: tiny
        seed: 2
        run_dir: "{tmp_path / name}"
        model: {{path: "{model_dir}"}}
        rollout: {{temperature: 1.0, max_new_tokens: 12}}
        validation: {{every: 2, max_rows: 1}}
        trainer: {{total_steps: 3, lr: 5.0e-3, min_free_gb: 0.01, checkpoint_every: -1}}
        """))
    return load_config(str(path), list(overrides))


def _trainable(trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.backend.policy.model.named_parameters() if p.requires_grad}


def _iterations(trainer) -> list[dict]:
    import json

    lines = (trainer.run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "iteration" in r and r.get("event") is None]


# what differs between two runs in turn as well: times, memory, and what depends on when the engine's continuous
# batching admitted each request (prefix-cache reuse, hence the last bits of the engine's log-probs and of the
# engine-vs-trainer mismatch measured on them)
VARYING = ("seconds", "tok_s", "rss", "memory/", "peak", "prefix_", "logprob_gap", "ratio_mean", "mismatch/")


def _comparable(record: dict) -> dict:
    out = {k: v for k, v in record.items() if not any(s in k for s in VARYING)}
    if isinstance(out.get("validation"), dict):
        out["validation"] = _comparable(out["validation"])
    return out


@pytest.mark.slow
def test_a_pipeline_held_to_staleness_zero_trains_exactly_as_the_loop_in_turn_on_policy_with_the_fused_kernel(
        tmp_path, tiny_model_dir, monkeypatch):
    # AdamW's fused kernel (CUDA's default) and an engine whose idle worker never wakes during an update: only the
    # weight versions the trainer announces keep the engine's prefix store from serving the old weights' keys
    from agentr1_core.rollout import transformers_engine

    monkeypatch.setattr(transformers_engine, "IDLE_RELEASE_SECONDS", 3600.0)
    fused = "trainer.optimizer_kernel=fused"
    in_turn = LocalTrainer(_config(tmp_path, tiny_model_dir, "in_turn", fused), configure_registry())
    in_turn.fit()
    piped = LocalTrainer(_config(tmp_path, tiny_model_dir, "piped", fused), configure_registry())
    piped.rollout_source = lambda: PipelinedRollouts(piped, 0)
    piped.fit()
    a, b = _iterations(in_turn), _iterations(piped)
    assert len(a) == len(b) == 3
    assert [_comparable(x) for x in a] == [_comparable(y) for y in b]
    assert in_turn.backend.optimizer.defaults["fused"] and piped.backend.optimizer.defaults["fused"]
    # the engine samples the trainer's own fp32 module at every iteration, prefixes reused or not
    assert all(r["logprob_gap_max"] <= 1e-3 for r in a + b), [r["logprob_gap_max"] for r in a + b]
    assert all(r["prefix_reused_tokens"] > 0 for r in a + b)  # the store was on and used
    assert a[1]["validation"]["label"] == "iter2"
    wa, wb = _trainable(in_turn), _trainable(piped)
    assert all(torch.equal(wa[n], wb[n]) for n in wa)


@pytest.mark.slow
def test_with_staleness_one_the_engine_samples_its_own_copy_one_update_old(tmp_path, tiny_model_dir):
    trainer = LocalTrainer(_config(tmp_path, tiny_model_dir, "ahead", "trainer.max_staleness=1",
                                   "trainer.off_policy_correction=decoupled"), configure_registry())
    trainer.fit()
    backend = trainer.backend
    assert backend.engine_model is not backend.policy_engine_module  # the update never changes what samples
    engine_params = {id(p) for p in backend.engine_model.parameters()}
    shared = [p for p in backend.policy_engine_module.parameters() if id(p) in engine_params]
    assert shared and not any(p.requires_grad for p in shared)  # frozen blocks are shared, trained ones copied
    iters = _iterations(trainer)
    assert [r["iteration"] for r in iters] == [1, 2, 3]
    assert all(r["async/staleness_max"] <= 1 and r["async/dropped_stale_rows"] == 0 for r in iters)
    assert iters[0]["async/staleness_max"] == 0 and iters[1]["async/staleness_max"] == 1
    # rollout 2 was sampled before update 1 landed: the proximal (recomputed) log-probs differ from the engine's,
    # the importance weights show it, and the ratio to the proximal policy starts at 1
    assert iters[0]["logprob_gap_max"] < 1e-3 < iters[1]["logprob_gap_max"]
    assert iters[1]["offpolicy/is_weight_max"] != pytest.approx(1.0, abs=1e-4)
    assert all(r["onpolicy/ratio_dev_max"] < 1e-3 for r in iters)
    assert trainer.history["validation"]["iter2"]["cases"] == 1  # validation paused the pipeline and ran
    summary = trainer.history["memory"]["update"]
    assert 0 < summary["engine_weights"] < summary["weights"]


@pytest.mark.slow
def test_truncated_importance_sampling_weighs_against_the_engine_without_recomputing(tmp_path, tiny_model_dir):
    trainer = LocalTrainer(_config(tmp_path, tiny_model_dir, "tis", "trainer.max_staleness=1",
                                   "trainer.off_policy_correction=tis"), configure_registry())
    trainer.fit()
    assert not trainer.backend.recompute_old
    iters = _iterations(trainer)
    # no proximal policy: the old log-probs are the engine's, one update behind at iteration 2, and the weights
    # are the current policy's ratio to them
    assert iters[1]["async/staleness_max"] == 1 and iters[1]["onpolicy/ratio_dev_max"] > 1e-3
    assert iters[1]["offpolicy/is_weight_max"] != pytest.approx(1.0, abs=1e-4)
    assert all(r["weight_change"] > 0 for r in iters)
