"""Dynamic sampling (``trainers.dynamic_sampling``): groups whose episodes all got the same return are dropped and
more rows are rolled out until the batch holds ``rollout.batch_size`` informative groups or the extra rounds run out.

The rounds, the cap, the surplus, ReMax's greedy episodes and the ids of each round on a scripted backend whose
rewards are set per row (the real ``sample_rollout`` and ``DataOrder``, through the real pipelines); then real runs
of the tiny model through the CLI, where every reward is 0: the cap is hit, said, and no update runs on nothing.
The same run on the ray and verl backends is in tests/distributed/test_backend_conformance.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from agentr1_core.cli import main
from agentr1_core.config import ConfigError, load_config
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.rollout.driver import GREEDY_INFO_KEY
from agentr1_core.trainers.console import console_notes
from agentr1_core.trainers.dynamic_sampling import group_returns, is_informative, sample_rollout
from agentr1_core.trainers.data_order import DataOrder
from agentr1_core.trainers.pipeline import InlineRollouts, PipelinedRollouts
from agentr1_core.validation import check_values


def episode(uid: str, group: str, reward: float, greedy: bool = False) -> Trajectory:
    traj = Trajectory(steps=[Step(prompt_ids=[1], response_ids=[2], response_logprobs=[-1.0], reward=reward)],
                      uid=uid, group_id=group, final_reward=reward)
    if greedy:
        traj.info[GREEDY_INFO_KEY] = True
    return traj


class RowRewards:
    """A backend whose episodes of row ``{"r": [a, b, ...]}`` get rewards a, b, ... (one per sample)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []  # (prefix, rows)

    def rollout(self, rows, n, sampling, prefix, greedy_baseline=False):
        self.calls.append((prefix, len(rows)))
        out = []
        for i, row in enumerate(rows):
            out += [episode(f"{prefix}{i}/{k}", f"{prefix}{i}", row["r"][k]) for k in range(n)]
            if greedy_baseline:
                out.append(episode(f"{prefix}{i}/greedy", f"{prefix}{i}", 5.0, greedy=True))
        return out

    # what the pipelines call around a rollout
    def take_stats(self) -> dict:
        return {}

    def snapshot_weights(self) -> int:
        return 0

    def publish_weights(self, snapshot=None) -> dict:
        return {}

    def take_snapshot_metrics(self) -> dict:
        return {}


def scripted_loop(rows: list[list[float]], batch_size: int, rounds: int, enabled: bool = True,
                  overlong: str = "none") -> SimpleNamespace:
    backend = RowRewards()
    settings = SimpleNamespace(batch_size=batch_size, n=len(rows[0]), dynamic_sampling=enabled,
                               dynamic_sampling_rounds=rounds, total_steps=2, overlong_mode=overlong,
                               overlong_buffer_tokens=2, overlong_penalty_factor=1.0,
                               train_sampling=SimpleNamespace(max_new_tokens=4))
    data = DataOrder([{"r": r} for r in rows], seed=0)
    data.order = list(range(len(rows)))  # in file order, so that each round's rows are known
    data.rng.shuffle = lambda order: None  # and the same order in the next epoch
    loop = SimpleNamespace(settings=settings, backend=backend, data=data, sampling=None, iteration=0,
                           consumed_data_state=None, peaks=SimpleNamespace(phase=lambda name: _Null()))
    loop.rollout = lambda rows, n, sampling, desc, prefix, **kw: (backend.rollout(rows, n, sampling, prefix, **kw), 1.0)
    return loop


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def test_a_group_is_informative_only_when_its_sampled_returns_differ():
    trajs = [episode("a/0", "a", 1.0), episode("a/1", "a", 1.0), episode("a/greedy", "a", 0.0, greedy=True),
             episode("b/0", "b", 0.0), episode("b/1", "b", 1.0)]
    returns = group_returns(trajs)
    assert returns == {"a": [1.0, 1.0], "b": [0.0, 1.0]}  # the greedy baseline is not one of the group's samples
    assert not is_informative(returns["a"]) and is_informative(returns["b"])
    assert not is_informative([1.0]) and not is_informative([float("nan"), 0.0])  # NaN is scored as 0
    assert is_informative([float("nan"), 1.0]) and is_informative([0.0, 1e-6])


def test_rounds_run_until_the_batch_holds_enough_informative_groups():
    # rows in order: 0 flat, 1 informative, 2 flat, 3 flat, 4 informative, 5 informative
    rows = [[0, 0], [0, 1], [1, 1], [0, 0], [1, 0], [0, 1]]
    loop = scripted_loop(rows, batch_size=2, rounds=4)
    out = sample_rollout(loop, 7, {})
    assert loop.backend.calls == [("it7-", 2), ("it7-r1-", 2), ("it7-r2-", 2)]  # stops once 2 groups are there
    assert len(out.rows) == 6 and len(out.trajectories) == 12 and out.seconds == 3.0
    # row 1 (round 0) and row 4 (round 2, first of its call); row 5 is surplus
    assert sorted({t.group_id for t in out.train_trajectories}) == ["it7-1", "it7-r2-0"]
    m = out.metrics
    assert (m["dynamic/kept_groups"], m["dynamic/dropped_groups"], m["dynamic/surplus_groups"],
            m["dynamic/extra_rounds"], m["dynamic/rows_sampled"], m["dynamic/cap_hit"]) == (2, 3, 1, 2, 6, 0)
    assert m["dynamic/dropped_by_return"] == {"0": 2, "1": 1}
    assert console_notes(m) == []


def test_the_cap_trains_what_was_found_and_says_why():
    rows = [[0, 0], [1, 0], [0, 0], [1, 1]]
    loop = scripted_loop(rows, batch_size=2, rounds=1)
    out = sample_rollout(loop, 1, {})
    assert len(loop.backend.calls) == 2  # the first rollout and one extra round: the cap
    assert [t.group_id for t in out.train_trajectories] == ["it1-1", "it1-1"]
    assert out.metrics["dynamic/cap_hit"] == 1 and out.metrics["dynamic/kept_groups"] == 1
    note = " ".join(console_notes(out.metrics))
    assert "1 of 2 informative groups after 1 extra rounds" in note and "all 0: 2, all 1: 1" in note
    assert "training on the 1 found" in note


def test_nothing_to_learn_from_leaves_no_episode_to_train():
    loop = scripted_loop([[0, 0, 0]] * 3, batch_size=1, rounds=2)
    out = sample_rollout(loop, 1, {})
    assert out.train_trajectories == [] and len(out.trajectories) == 9
    assert "the update is skipped" in console_notes(out.metrics)[0]


def test_the_greedy_baseline_stays_with_its_group_and_is_not_one_of_its_samples():
    loop = scripted_loop([[1, 1], [1, 0]], batch_size=1, rounds=1)
    out = sample_rollout(loop, 1, {"greedy_baseline": True})
    # row 0: samples 1, 1 and a greedy 5: flat among its samples, dropped; row 1 kept with its greedy episode
    assert [t.uid for t in out.train_trajectories] == ["it1-r1-0/0", "it1-r1-0/1", "it1-r1-0/greedy"]


def test_groups_are_compared_on_the_return_with_dapos_length_penalty():
    """With ``rollout.overlong.mode: penalty`` (budget 4, buffer 2) two episodes of reward 1 whose replies are 1 and 4
    tokens long score 1 and 0: the group is informative, as DAPO filters on the penalised reward."""
    loop = scripted_loop([[1, 1]], batch_size=1, rounds=0, overlong="penalty")
    loop.rollout = lambda rows, n, sampling, desc, prefix, **kw: ([
        Trajectory(steps=[Step([1], [2] * length, [-1.0] * length, reward=1.0)], uid=f"{prefix}0/{k}",
                   group_id=f"{prefix}0", final_reward=1.0) for k, length in enumerate((1, 4))], 0.0)
    assert len(sample_rollout(loop, 1, {}).train_trajectories) == 2
    plain = scripted_loop([[1, 1]], batch_size=1, rounds=0)
    plain.rollout = loop.rollout
    assert sample_rollout(plain, 1, {}).train_trajectories == []


def test_without_dynamic_sampling_every_episode_trains_and_no_metric_is_added():
    loop = scripted_loop([[0, 0], [0, 0]], batch_size=2, rounds=4, enabled=False)
    out = sample_rollout(loop, 1, {})
    assert out.train_trajectories == out.trajectories and out.metrics == {} and len(loop.backend.calls) == 1


def test_both_rollout_sources_hand_the_loop_the_filtered_batch_and_the_data_order_after_every_round():
    rows = [[0, 0], [0, 1], [1, 1], [0, 1]]
    inline = scripted_loop(rows, batch_size=1, rounds=3)
    batch = InlineRollouts(inline).next(1)
    assert [t.group_id for t in batch.train_trajectories] == ["it1-r1-0", "it1-r1-0"]
    assert len(batch.trajectories) == 4 and batch.metrics["dynamic/extra_rounds"] == 1
    piped = scripted_loop(rows, batch_size=1, rounds=3)
    with PipelinedRollouts(piped, 1) as pipeline:
        batch = pipeline.next(1)
        state = dict(piped.consumed_data_state)
    assert [t.group_id for t in batch.train_trajectories] == ["it1-r1-0", "it1-r1-0"]
    assert state["cursor"] == 2  # both rows of iteration 1 are consumed in the checkpointed data order


def test_dynamic_sampling_needs_groups_of_two():
    with pytest.raises(ConfigError, match=r"rollout.dynamic_sampling.enabled: needs groups of at least 2"):
        check_values(load_config("tiny", ["rollout.dynamic_sampling.enabled=true", "rollout.n=1"]))
    check_values(load_config("tiny", ["rollout.dynamic_sampling.enabled=true"]))


def test_a_real_run_where_every_reward_is_zero_hits_the_cap_and_trains_nothing(tmp_path, tiny_model_dir, capsys):
    run_dir = tmp_path / "run"
    assert main(["run", "tiny", f"model.path={tiny_model_dir}", f"run_dir={run_dir}", "stages=[rl]",
                 "trainer.total_steps=2", "validation.before=false", "rollout.max_new_tokens=8",
                 "rollout.dynamic_sampling.enabled=true", "rollout.dynamic_sampling.max_rounds=2"]) == 0
    out = capsys.readouterr().out
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    iterations = [r for r in records if "iteration" in r and "event" not in r]
    assert len(iterations) == 2
    for rec in iterations:  # a random tiny model never answers: every group flat, three rounds of 2 rows
        assert rec["dynamic/rows_sampled"] == 6 and rec["dynamic/extra_rounds"] == 2
        assert rec["dynamic/cap_hit"] == 1 and rec["dynamic/dropped_by_return"] == {"0": 6}
        assert rec["episodes"] == 12  # every episode rolled out counts in the rollout's metrics
        assert rec["train_steps"] == 0 and "loss" not in rec  # nothing trained, though entropy_coef > 0
    assert out.count("[dynamic sampling] 0 of 2 informative groups after 2 extra rounds") == 2
    kept = [json.loads(line)
            for line in (run_dir / "episodes" / "train" / "iter_000001.jsonl").read_text().splitlines()]
    assert kept and all(e["uid"].startswith("it1-") for e in kept)
    saved = OmegaConf.load(run_dir / "config.yaml")
    assert saved.rollout.dynamic_sampling.enabled is True
