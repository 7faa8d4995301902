"""Hand-worked examples for every advantage estimator (expected numbers computed in the comments)."""

from __future__ import annotations

import math

import pytest
import torch

from agentr1_core.algorithms.advantages import (
    grpo_advantages,
    reinforce_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
)
from agentr1_core.algorithms.base import StepBatch
from agentr1_core.algorithms.gae import step_gae
from agentr1_core.algorithms.gigpo import gigpo_advantages

EPS = 1e-6


def make_batch(traj, group, step, rewards, dones=None, truncated=None, mask=None, T=2, values=None, anchors=None,
               extras=None) -> StepBatch:
    S = len(traj)
    if dones is None:  # default: the last step (highest step_index) of each trajectory is terminal
        last = {}
        for i, (t, k) in enumerate(zip(traj, step)):
            if t not in last or k > step[last[t]]:
                last[t] = i
        dones = [i in last.values() for i in range(S)]
    return StepBatch(
        traj_ids=torch.tensor(traj, dtype=torch.long),
        group_ids=torch.tensor(group, dtype=torch.long),
        step_index=torch.tensor(step, dtype=torch.long),
        rewards=torch.tensor(rewards, dtype=torch.float32),
        dones=torch.tensor(dones, dtype=torch.bool),
        truncated=torch.tensor(truncated if truncated is not None else [False] * S, dtype=torch.bool),
        action_mask=torch.tensor(mask, dtype=torch.float32) if mask is not None else torch.ones(S, T),
        old_logprobs=torch.zeros(S, T if mask is None else len(mask[0])),
        values=None if values is None else torch.tensor(values, dtype=torch.float32),
        anchors=anchors,
        extras=extras or {},
    )


def first_token(out) -> list[float]:
    return out.advantages[:, 0].tolist()


# Rows deliberately out of order. Group 0: trajectory 10 = two steps (rewards 0 then 1, R = 1), trajectory 11
# (R = 3), trajectory 12 (R = 2). Group 1: trajectory 13 alone (R = 5).
GRPO_ROWS = dict(traj=[10, 11, 10, 13, 12], group=[0, 0, 0, 1, 0], step=[1, 0, 0, 0, 0],
                 rewards=[1.0, 3.0, 0.0, 5.0, 2.0], mask=[[1, 1], [1, 0], [1, 1], [1, 1], [0, 0]])


def test_grpo_exact_values():
    out = grpo_advantages(make_batch(**GRPO_ROWS))
    # group 0 returns [1, 3, 2]: mean 2, unbiased var ((-1)^2 + 1^2 + 0^2) / 2 = 1, std 1
    # traj 10: (1 - 2) / (1 + 1e-6); traj 11: +1 / (1 + 1e-6); traj 12: 0; traj 13 alone in its group: 0
    expected = torch.tensor([-1.0, 1.0, -1.0, 0.0, 0.0], dtype=torch.float64) / (1 + EPS)
    assert torch.allclose(out.advantages[:, 0].double(), expected, atol=1e-7)
    # tokens outside action_mask are exactly 0 (row 1's second token, row 4 entirely)
    assert out.advantages[1, 1].item() == 0.0 and out.advantages[4].abs().sum().item() == 0.0
    assert out.advantages[0, 1].item() == out.advantages[0, 0].item()
    # returns: undiscounted return-to-go: traj 10 step 1 -> 1, step 0 -> 0 + 1 = 1; others their reward
    assert out.returns.tolist() == [1.0, 3.0, 1.0, 5.0, 2.0]
    assert out.metrics["singleton_groups"] == 1.0 and out.metrics["num_groups"] == 2.0


def test_drgrpo_skips_std():
    out = grpo_advantages(make_batch(**GRPO_ROWS), norm_by_std=False)
    # R - mean: traj 10: 1 - 2 = -1, traj 11: 3 - 2 = 1, traj 12 masked (0 on tokens), traj 13 alone: 0
    assert first_token(out) == [-1.0, 1.0, -1.0, 0.0, 0.0]


def test_grpo_std_is_unbiased_with_scale():
    # returns [0, 4]: mean 2, unbiased std sqrt((4 + 4) / 1) = 2.828427; A = -+2 / 2.828427 = -+0.7071065
    b = make_batch(traj=[0, 1], group=[0, 0], step=[0, 0], rewards=[0.0, 4.0])
    want = 2.0 / (math.sqrt(8.0) + EPS)
    assert first_token(grpo_advantages(b)) == pytest.approx([-want, want], abs=1e-7)


def test_grpo_identical_rewards_give_zero():
    b = make_batch(traj=[0, 1, 2], group=[0, 0, 0], step=[0, 0, 0], rewards=[0.7, 0.7, 0.7])
    out = grpo_advantages(b)
    assert out.advantages.abs().max().item() == 0.0
    assert out.metrics["zero_std_groups"] == 1.0


def test_rloo_exact_values():
    out = rloo_advantages(make_batch(**GRPO_ROWS))
    # group 0 returns [1, 3, 2]: traj 10: 1 - (3 + 2)/2 = -1.5; traj 11: 3 - (1 + 2)/2 = 1.5; traj 12: 2 - 2 = 0
    # (masked anyway); traj 13 alone: 0
    assert first_token(out) == pytest.approx([-1.5, 1.5, -1.5, 0.0, 0.0], abs=1e-7)


# Trajectory 0 (group 0): rewards 1, 0, 2 over steps 0..2. Trajectory 1 (group 0): one step, reward 4.
# Trajectory 2 (group 1): one step, reward 0.
RF_ROWS = dict(traj=[0, 0, 0, 1, 2], group=[0, 0, 0, 0, 1], step=[0, 1, 2, 0, 0], rewards=[1.0, 0.0, 2.0, 4.0, 0.0])


def test_reinforce_return_to_go():
    out = reinforce_advantages(make_batch(**RF_ROWS), gamma=0.5)
    # G_2 = 2; G_1 = 0 + 0.5 * 2 = 1; G_0 = 1 + 0.5 * 1 = 1.5; single steps: 4, 0
    assert first_token(out) == pytest.approx([1.5, 1.0, 2.0, 4.0, 0.0])
    assert out.returns.tolist() == pytest.approx([1.5, 1.0, 2.0, 4.0, 0.0])


def test_reinforce_group_and_batch_baselines():
    b = make_batch(**RF_ROWS)
    # group 0 baseline: mean episode return (G_0) of trajectories 0 and 1 = (1.5 + 4) / 2 = 2.75; group 1: 0
    out = reinforce_advantages(b, gamma=0.5, baseline="group")
    assert first_token(out) == pytest.approx([1.5 - 2.75, 1.0 - 2.75, 2.0 - 2.75, 4.0 - 2.75, 0.0])
    # batch baseline: (1.5 + 4 + 0) / 3 = 11/6
    out = reinforce_advantages(b, gamma=0.5, baseline="batch")
    assert first_token(out) == pytest.approx([x - 11 / 6 for x in [1.5, 1.0, 2.0, 4.0, 0.0]])


def test_reinforce_done_step_stops_the_return():
    # a dones flag on step 0 means later rows of the same id do not flow back into it: G_0 = 1 (not 1 + 2)
    b = make_batch(traj=[0, 0], group=[0, 0], step=[0, 1], rewards=[1.0, 2.0], dones=[True, True])
    assert first_token(reinforce_advantages(b)) == [1.0, 2.0]


def test_reinforce_pp_token_whitening():
    # two one-step trajectories: rewards 1 (1 action token) and 3 (3 action tokens)
    b = make_batch(traj=[0, 1], group=[0, 1], step=[0, 0], rewards=[1.0, 3.0], mask=[[1, 0, 0], [1, 1, 1]])
    out = reinforce_pp_advantages(b)
    # token values [1, 3, 3, 3]: mean 2.5; unbiased var (1.5^2 + 3 * 0.5^2) / 3 = 1.0
    # A = (1 - 2.5) / sqrt(1 + 1e-8) = -1.5, (3 - 2.5) / sqrt(1 + 1e-8) = 0.5
    s = math.sqrt(1 + 1e-8)
    want = torch.tensor([[-1.5 / s, 0, 0], [0.5 / s] * 3])
    assert torch.allclose(out.advantages, want, atol=1e-7)
    # step whitening: values [1, 3], mean 2, unbiased var 2 -> -+1/sqrt(2)
    out = reinforce_pp_advantages(b, whiten_over="step")
    assert first_token(out) == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)], abs=1e-6)


def test_step_gae_terminal_trajectory():
    b = make_batch(traj=[0, 0, 0], group=[0, 0, 0], step=[2, 0, 1], rewards=[1.0, 0.0, 0.0],
                   values=[0.8, 0.5, 0.6])
    out = step_gae(b, gamma=0.9, lam=0.8, whiten_advantages=False)
    # steps in order: r = [0, 0, 1], V = [0.5, 0.6, 0.8], last step done -> V_3 = 0
    # delta_2 = 1 + 0 - 0.8 = 0.2; delta_1 = 0 + 0.9 * 0.8 - 0.6 = 0.12; delta_0 = 0.9 * 0.6 - 0.5 = 0.04
    # A_2 = 0.2; A_1 = 0.12 + 0.72 * 0.2 = 0.264; A_0 = 0.04 + 0.72 * 0.264 = 0.23008
    assert first_token(out) == pytest.approx([0.2, 0.23008, 0.264], abs=1e-6)
    # returns = A + V
    assert out.returns.tolist() == pytest.approx([1.0, 0.73008, 0.864], abs=1e-6)


def test_step_gae_truncated_without_and_with_bootstrap():
    kw = dict(traj=[0, 0], group=[0, 0], step=[0, 1], rewards=[0.0, 0.5], dones=[False, False],
              truncated=[False, True], values=[1.0, 2.0])
    out = step_gae(make_batch(**kw), gamma=0.9, lam=0.8, whiten_advantages=False)
    # no next value after the truncated step -> 0: delta_1 = 0.5 - 2 = -1.5; delta_0 = 0.9 * 2 - 1 = 0.8
    # A_1 = -1.5; A_0 = 0.8 + 0.72 * (-1.5) = -0.28
    assert first_token(out) == pytest.approx([-0.28, -1.5], abs=1e-6)
    boot = {"bootstrap_values": torch.tensor([0.0, 3.0])}
    out = step_gae(make_batch(**kw, extras=boot), gamma=0.9, lam=0.8, whiten_advantages=False)
    # bootstrap V = 3 after step 1: delta_1 = 0.5 + 0.9 * 3 - 2 = 1.2; A_0 = 0.8 + 0.72 * 1.2 = 1.664
    assert first_token(out) == pytest.approx([1.664, 1.2], abs=1e-6)


def test_step_gae_done_ignores_bootstrap_and_whitens():
    b = make_batch(traj=[0, 1], group=[0, 0], step=[0, 0], rewards=[1.0, 0.0], values=[0.0, 0.0],
                   extras={"bootstrap_values": torch.tensor([9.0, 9.0])})
    out = step_gae(b, gamma=1.0, lam=1.0)
    # both steps terminal (bootstrap ignored): A = [1, 0]; mean 0.5, unbiased var 0.5 -> +-0.5 / sqrt(0.5 + 1e-8)
    w = 0.5 / math.sqrt(0.5 + 1e-8)
    assert first_token(out) == pytest.approx([w, -w], abs=1e-6)
    assert out.returns.tolist() == [1.0, 0.0]  # returns use the un-whitened advantages


def test_step_gae_reports_how_far_the_critic_is_from_the_returns():
    """Four one-step episodes with rewards 1, 1, 0, 1 (returns = rewards) and a fifth step without action tokens:
    a critic that lags (0.1 everywhere) is worse than the batch's mean return for every step (R^2 below 0), one
    that gives the returns exactly has R^2 1; the step without an action token is left out of both."""
    kw = dict(traj=[0, 1, 2, 3, 4], group=[0, 0, 0, 0, 0], step=[0] * 5, rewards=[1.0, 1.0, 0.0, 1.0, 7.0],
              mask=[[1, 1], [1, 0], [1, 1], [1, 1], [0, 0]])
    lagging = step_gae(make_batch(**kw, values=[0.1] * 5)).metrics
    # |V - R| = 0.9, 0.9, 0.1, 0.9 -> mean 0.7; sum (R - V)^2 = 3 * 0.81 + 0.01 = 2.44; mean R 0.75, spread
    # sum (R - 0.75)^2 = 3 * 0.0625 + 0.5625 = 0.75 -> R^2 = 1 - 2.44 / 0.75
    assert lagging["value_abs_error"] == pytest.approx(0.7, abs=1e-6)
    assert lagging["value_r2"] == pytest.approx(1 - 2.44 / 0.75, abs=1e-6)
    exact = step_gae(make_batch(**kw, values=[1.0, 1.0, 0.0, 1.0, 0.0])).metrics
    assert exact["value_abs_error"] == 0.0 and exact["value_r2"] == 1.0
    same = step_gae(make_batch(**{**kw, "rewards": [1.0] * 5}, values=[0.5] * 5)).metrics
    assert same["value_abs_error"] == pytest.approx(0.5) and "value_r2" not in same  # returns do not vary


def test_step_gae_requires_values():
    with pytest.raises(ValueError, match="values"):
        step_gae(make_batch(traj=[0], group=[0], step=[0], rewards=[1.0]))


GIGPO_ROWS = dict(
    # group 0: traj 0 = step 0 (anchor "b", reward 0), step 1 (anchor "a", reward 1); traj 1 = one step at "b",
    # reward 0. group 1: traj 2 = one step at "b" (a different group: not compared with group 0's "b").
    traj=[0, 0, 1, 2], group=[0, 0, 0, 1], step=[0, 1, 0, 0], rewards=[0.0, 1.0, 0.0, 7.0],
    anchors=["b", "a", "b", "b"],
)


def test_gigpo_exact_values():
    out = gigpo_advantages(make_batch(**GIGPO_ROWS), gamma=0.95, step_weight=0.5)
    # trajectory level: group 0 returns [1, 0] -> mean 0.5, std sqrt(0.5) = 0.7071068 -> +-0.5 / (0.7071068 + 1e-6)
    a_traj = 0.5 / (math.sqrt(0.5) + EPS)
    # step level at anchor "b" in group 0: G(traj 0, step 0) = 0 + 0.95 * 1 = 0.95, G(traj 1) = 0
    # mean 0.475, std 0.95 / sqrt(2) -> +-0.475 / (0.6717514 + 1e-6); anchor "a" is alone -> 0; group 1 alone -> 0
    a_step = 0.475 / (0.95 / math.sqrt(2) + EPS)
    expected = [a_traj + 0.5 * a_step, a_traj, -a_traj - 0.5 * a_step, 0.0]
    assert first_token(out) == pytest.approx(expected, abs=1e-6)
    assert out.returns.tolist() == pytest.approx([0.95, 1.0, 0.0, 7.0])
    assert out.metrics["step_group_coverage"] == 0.5


def test_gigpo_without_anchors_is_grpo():
    rows = {**GIGPO_ROWS, "anchors": None}
    g = gigpo_advantages(make_batch(**rows))
    assert torch.equal(g.advantages, grpo_advantages(make_batch(**rows)).advantages)
    rows["anchors"] = [None, "a", None, "b"]  # None anchors never form a step group
    assert torch.equal(gigpo_advantages(make_batch(**rows)).advantages, g.advantages)


def test_nonfinite_rewards_are_zeroed_and_counted():
    b = make_batch(traj=[0, 1], group=[0, 0], step=[0, 0], rewards=[float("nan"), 2.0])
    out = rloo_advantages(b)
    # NaN reward -> 0: returns [0, 2] -> A = [0 - 2, 2 - 0]
    assert first_token(out) == [-2.0, 2.0]
    assert out.metrics["nonfinite_rewards"] == 1.0


@pytest.mark.parametrize("fn", [grpo_advantages, rloo_advantages, reinforce_advantages, reinforce_pp_advantages,
                                gigpo_advantages])
def test_empty_batch_and_zero_tokens(fn):
    empty = make_batch(traj=[], group=[], step=[], rewards=[], T=3)
    out = fn(empty)
    assert out.advantages.shape == (0, 3) and out.returns.shape == (0,)
    no_tokens = make_batch(traj=[0, 1], group=[0, 0], step=[0, 0], rewards=[1.0, 0.0], T=0)
    out = fn(no_tokens)
    assert out.advantages.shape == (2, 0) and torch.isfinite(out.returns).all()
