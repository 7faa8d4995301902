"""ReMax: each prompt's baseline is the return of one greedy episode of the current policy on it, sampled in the same
rollout; that episode is scored, never trained on.

Hand-worked advantages over multi-step trajectories; the pairing of step rows with their group's greedy episode from
real ``Trajectory`` objects; and the driver running the greedy episode beside the sampled ones on a real engine
(the transformers engine on a tiny random Llama with the SmolLM2 tokenizer, ToolEnv with the calculator).
"""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from agentr1_core.algorithms.base import StepBatch
from agentr1_core.algorithms.components import ReMax
from agentr1_core.algorithms.remax import greedy_returns, remax_advantages, remax_warning
from agentr1_core.flows import AgentEnvLoop, FlowContext
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.rollout.driver import current_episode_uid, rollout_async, split_greedy
from agentr1_core.testing.models import tiny_llama
from agentr1_core.trainers.batching import build_step_batch, trajectories_to_rows
from agentr1_core.trainers.console import console_notes
from agentr1_core.trainers.metrics import rollout_metrics

NAN = float("nan")


def batch_of(traj, group, step, rewards, greedy, mask=None) -> StepBatch:
    s = len(traj)
    last = {}
    for i, (t, k) in enumerate(zip(traj, step)):
        if t not in last or k > step[last[t]]:
            last[t] = i
    return StepBatch(
        traj_ids=torch.tensor(traj), group_ids=torch.tensor(group), step_index=torch.tensor(step),
        rewards=torch.tensor(rewards), dones=torch.tensor([i in last.values() for i in range(s)]),
        truncated=torch.zeros(s, dtype=torch.bool),
        action_mask=torch.tensor(mask, dtype=torch.float32) if mask is not None else torch.ones(s, 2),
        old_logprobs=torch.zeros(s, 2), extras={"greedy_returns": torch.tensor(greedy, dtype=torch.float64)})


def test_hand_worked_multi_step_advantages():
    """Rows out of order. Group 0 (greedy return 0.25): trajectory 0 = two steps, rewards 0 then 1, R = 1 -> A = 0.75
    on both steps; trajectory 1, R = 0 -> A = -0.25. Group 1 (greedy 2): trajectory 2 = three steps 0.5, 0, 1, R = 1.5
    -> A = -0.5; trajectory 3, R = 2 -> A = 0. Group 2 has no greedy return (NaN): trajectory 4 gets 0."""
    b = batch_of(traj=[2, 0, 1, 2, 0, 3, 4, 2], group=[1, 0, 0, 1, 0, 1, 2, 1], step=[1, 1, 0, 0, 0, 0, 0, 2],
                 rewards=[0.0, 1.0, 0.0, 0.5, 0.0, 2.0, 1.0, 1.0],
                 greedy=[2.0, 0.25, 0.25, 2.0, 0.25, 2.0, NAN, 2.0],
                 mask=[[1, 1], [1, 0], [1, 1], [1, 1], [1, 1], [1, 1], [1, 1], [0, 0]])
    out = remax_advantages(b)
    assert out.advantages[:, 0].tolist() == [-0.5, 0.75, -0.25, -0.5, 0.75, 0.0, 0.0, 0.0]
    assert out.advantages[:, 1].tolist() == [-0.5, 0.0, -0.25, -0.5, 0.75, 0.0, 0.0, 0.0]  # 0 off the mask
    # undiscounted return-to-go: trajectory 2 = [0.5 + 0 + 1, 0 + 1, 1], trajectory 0 = [0 + 1, 1]
    assert out.returns.tolist() == [1.0, 1.0, 0.0, 1.5, 1.0, 2.0, 1.0, 1.0]
    assert out.metrics["missing_baseline_trajectories"] == 1.0


def test_a_batch_without_greedy_returns_is_refused():
    b = batch_of(traj=[0], group=[0], step=[0], rewards=[1.0], greedy=[0.0])
    b.extras = {}
    with pytest.raises(ValueError, match="greedy_returns"):
        remax_advantages(b)


def episode(uid: str, group: str, rewards: list[float], greedy: bool = False) -> Trajectory:
    steps = [Step([1, 2, k + 3], [7, 8], [-0.5, -0.5], reward=r, done=k == len(rewards) - 1)
             for k, r in enumerate(rewards)]
    traj = Trajectory(steps=steps, uid=uid, group_id=group, termination="done" if steps else "env_error")
    traj.final_reward = rewards[-1] if rewards else 0.0
    if greedy:
        traj.info["greedy_baseline"] = True
    return traj


def test_rows_are_paired_with_their_groups_greedy_episode_which_is_never_trained_on():
    """As the driver orders them: each row's samples, then its greedy episode. Group ``b``'s greedy episode crashed
    before its first step: its samples get no baseline (advantage 0), counted."""
    trajs = [episode("a/0", "a", [0.0, 1.0]), episode("a/1", "a", [0.0]), episode("a/greedy", "a", [0.0, 0.5], True),
             episode("b/0", "b", [1.0]), episode("b/greedy", "b", [], True),
             episode("c/0", "c", [1.0]), episode("c/1", "c", [0.0, 0.0, 1.0]), episode("c/greedy", "c", [1.0], True)]
    steps = trajectories_to_rows(trajs)
    assert [(r.traj, r.step_index) for r in steps.rows] == [(0, 0), (0, 1), (1, 0), (3, 0), (5, 0), (6, 0), (6, 1),
                                                           (6, 2)]
    batch = build_step_batch(steps.rows)
    algo = ReMax()
    metrics = algo.prepare_batch(batch, steps.rows, trajs)
    assert batch.extras["greedy_returns"][[0, 1, 2, 4, 5, 6, 7]].tolist() == [0.5, 0.5, 0.5, 1.0, 1.0, 1.0, 1.0]
    assert math.isnan(float(batch.extras["greedy_returns"][3]))
    assert metrics == {"remax/greedy_episodes": 2.0, "remax/greedy_return_mean": 0.75,
                       "remax/greedy_top_fraction": 0.0, "remax/missing_baselines": 1.0}
    adv = algo.compute_advantages(batch).advantages[:, 0]
    # a: R = 1 and 0 against 0.5; b: no baseline; c: R = 1 and 1 against 1
    assert adv.tolist() == [0.5, 0.5, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0]
    sampled, greedy = split_greedy(trajs)
    assert [t.uid for t in greedy] == ["a/greedy", "b/greedy", "c/greedy"]
    assert rollout_metrics(sampled, 1.0)["episodes"] == 5  # the greedy episodes are no training episodes


def test_remax_is_a_registered_critic_free_algorithm_that_asks_for_the_greedy_episode():
    from agentr1_core.plugins import get_registry

    registry = get_registry()
    algo = registry.build("algorithm", "remax", {"loss_type": "reinforce"}, where="algorithm")
    assert isinstance(algo, ReMax) and algo.needs_greedy_baseline and not algo.needs_critic
    assert algo.loss_config.loss_type == "reinforce"
    assert not registry.build("algorithm", "grpo", {}, where="algorithm").needs_greedy_baseline


def test_greedy_returns_take_the_sum_of_the_greedy_episodes_step_rewards():
    trajs = [episode("g/0", "g", [0.0]), episode("g/greedy", "g", [0.25, 0.0, 1.0], True)]
    rows = trajectories_to_rows(trajs).rows
    out, metrics = greedy_returns(rows, trajs)
    assert out.tolist() == [1.25] and metrics["remax/greedy_return_mean"] == 1.25


def test_groups_where_the_greedy_episode_leaves_only_negative_advantages_are_counted_and_warned_of():
    """Group ``a``: greedy 1 against samples 1 and 0 (advantages 0 and -1: pushed down only). ``b``: greedy 1
    against 1 and 1 (all 0: no signal, not counted). ``c``: greedy 0 against 1 and 0 (a success to raise).
    ``d``: greedy 1 against 0 (pushed down only). Two of four groups."""
    trajs = [episode("a/0", "a", [1.0]), episode("a/1", "a", [0.0]), episode("a/greedy", "a", [1.0], True),
             episode("b/0", "b", [1.0]), episode("b/1", "b", [0.0, 1.0]), episode("b/greedy", "b", [1.0], True),
             episode("c/0", "c", [1.0]), episode("c/1", "c", [0.0]), episode("c/greedy", "c", [0.0], True),
             episode("d/0", "d", [0.0]), episode("d/greedy", "d", [0.0, 1.0], True)]
    _, metrics = greedy_returns(trajectories_to_rows(trajs).rows, trajs)
    assert metrics["remax/greedy_top_fraction"] == 0.5
    notes = console_notes(metrics)
    assert len(notes) == 1 and notes[0].startswith("[remax] in 50% of the groups") and "grpo or rloo" in notes[0]
    assert remax_warning({**metrics, "remax/greedy_top_fraction": 0.25}) is None
    assert remax_warning({"reward_mean": 1.0}) is None  # other algorithms: no remax/* metrics, no line


# -- the greedy episode in the rollout ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_engine(smol_tokenizer):
    from agentr1_core.rollout.transformers_engine import TransformersEngine

    engine = TransformersEngine(tiny_llama(smol_tokenizer), smol_tokenizer, max_batch_size=1, seed=0)
    yield engine
    engine.close()


class RecordingEngine:
    """Passes every call through and records the episode uid and the sampling settings it came with."""

    def __init__(self, inner, calls):
        self.inner, self.calls = inner, calls

    async def generate(self, prompt_ids, sampling):
        self.calls.append((current_episode_uid(), sampling))
        return await self.inner.generate(prompt_ids, sampling)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_the_rollout_runs_one_greedy_episode_per_row_beside_its_samples(tiny_engine, smol_tokenizer):
    from agentr1_core.builtin.datasets import arithmetic_rows
    from agentr1_core.builtin.rewards import AnswerMatch

    rows = arithmetic_rows("train", train_size=2, val_size=0, seed=4)
    calls: list = []

    def flow(temperature: float):
        sampling = SamplingParams(temperature=temperature, top_p=0.9, top_k=20, max_new_tokens=6)
        ctx = FlowContext(engine=RecordingEngine(tiny_engine, calls), tokenizer=smol_tokenizer, sampling=sampling,
                          env_config={"name": "tool_env", "tools": ["calculator"], "max_turns": 2},
                          reward_fn=AnswerMatch(), max_turns=2)
        return lambda: AgentEnvLoop(ctx)

    trajs = asyncio.run(rollout_async(rows, 2, flow(0.7), group_prefix="it1-", progress=False, greedy_baseline=True))
    assert [t.uid for t in trajs] == ["it1-0/0", "it1-0/1", "it1-0/greedy", "it1-1/0", "it1-1/1", "it1-1/greedy"]
    assert [t.info.get("greedy_baseline", False) for t in trajs] == [False, False, True] * 2
    assert all(t.group_id == f"it1-{i // 3}" and t.steps for i, t in enumerate(trajs))
    greedy_calls = [s for uid, s in calls if uid.endswith("/greedy")]
    sampled_calls = [s for uid, s in calls if not uid.endswith("/greedy")]
    assert len(greedy_calls) == sum(t.num_steps for t in trajs if t.uid.endswith("/greedy"))
    assert all((s.temperature, s.top_p, s.top_k, s.max_new_tokens) == (0.0, 1.0, 0, 6) for s in greedy_calls)
    assert all((s.temperature, s.top_p, s.top_k) == (0.7, 0.9, 20) for s in sampled_calls)
    # the greedy episode is the policy's greedy episode: what a temperature-0 rollout of the same row gives
    alone = asyncio.run(rollout_async(rows[:1], 1, flow(0.0), group_prefix="val-", progress=False))
    assert [s.response_ids for s in trajs[2].steps] == [s.response_ids for s in alone[0].steps]
