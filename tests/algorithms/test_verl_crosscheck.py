"""Numbers agree with verl's reference implementations where the definitions coincide (single-step trajectories).

Skipped unless ``verl`` is importable. Each trajectory here is one step with an outcome reward, which is the case
where step-level and verl's token-level definitions are the same (see docs/algorithms.md for where they differ).
"""

from __future__ import annotations

import pytest
import torch

core = pytest.importorskip("verl.trainer.ppo.core_algos")
np = pytest.importorskip("numpy")

from agentr1_core.algorithms.advantages import (  # noqa: E402
    grpo_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
)
from agentr1_core.algorithms.base import StepBatch  # noqa: E402
from agentr1_core.algorithms.losses import PolicyLossConfig, kl_penalty, policy_loss, value_loss  # noqa: E402

TOL = 1e-6


def single_step_case(seed: int, n_groups: int = 3, group_size: int = 4, T: int = 6):
    """One-step trajectories in groups of ``group_size`` with right-padded masks and outcome rewards."""
    g = torch.Generator().manual_seed(seed)
    n = n_groups * group_size
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).double()
    reward = torch.randint(0, 3, (n,), generator=g).double() + torch.rand(n, generator=g, dtype=torch.float64)
    token_rewards = torch.zeros(n, T, dtype=torch.float64)
    token_rewards[torch.arange(n), lengths - 1] = reward
    group = torch.arange(n) // group_size
    batch = StepBatch(
        traj_ids=torch.arange(n), group_ids=group, step_index=torch.zeros(n, dtype=torch.long), rewards=reward,
        dones=torch.ones(n, dtype=torch.bool), truncated=torch.zeros(n, dtype=torch.bool), action_mask=mask,
        old_logprobs=torch.zeros(n, T, dtype=torch.float64),
    )
    return batch, token_rewards, mask, group.numpy()


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_matches(seed, norm_by_std):
    batch, token_rewards, mask, index = single_step_case(seed)
    ours = grpo_advantages(batch, norm_by_std=norm_by_std).advantages
    ref, _ = core.compute_grpo_outcome_advantage(token_rewards, mask, index, norm_adv_by_std_in_grpo=norm_by_std)
    assert torch.allclose(ours, ref, atol=TOL)


@pytest.mark.parametrize("seed", range(5))
def test_rloo_matches(seed):
    batch, token_rewards, mask, index = single_step_case(seed)
    ref, _ = core.compute_rloo_outcome_advantage(token_rewards, mask, index)
    assert torch.allclose(rloo_advantages(batch).advantages, ref, atol=TOL)


@pytest.mark.parametrize("seed", range(5))
def test_reinforce_pp_matches(seed):
    from verl.trainer.config import AlgoConfig

    batch, token_rewards, mask, _ = single_step_case(seed)
    ref, _ = core.compute_reinforce_plus_plus_outcome_advantage(token_rewards, mask, config=AlgoConfig(gamma=1.0))
    assert torch.allclose(reinforce_pp_advantages(batch, gamma=1.0).advantages, ref, atol=TOL)


def actor_config(low: float, high: float, c: float = 3.0):
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_mini_batch_size=1, ppo_micro_batch_size_per_gpu=1,
                       clip_ratio=low, clip_ratio_low=low, clip_ratio_high=high, clip_ratio_c=c)


def loss_case(seed: int, S: int = 8, T: int = 7, spread: float = 0.6):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(S, T, generator=g, dtype=torch.float64) * 3
    lp = old + (torch.rand(S, T, generator=g, dtype=torch.float64) - 0.5) * spread
    adv = torch.randn(S, 1, generator=g, dtype=torch.float64).expand(S, T).clone()
    lengths = torch.randint(1, T + 1, (S,), generator=g)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).double()
    return lp, old, adv * mask, mask


def compare_loss(ours_fn, ref_fn, lp):
    a = lp.clone().requires_grad_()
    b = lp.clone().requires_grad_()
    ours = ours_fn(a)
    ref = ref_fn(b)
    ours.backward()
    ref.backward()
    assert ours.item() == pytest.approx(ref.item(), abs=TOL)
    assert torch.allclose(a.grad, b.grad, atol=TOL)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_ppo_clip_loss_matches(seed, agg):
    lp, old, adv, mask = loss_case(seed, spread=3.0)  # wide spread: clip and dual clip both active
    cfg = PolicyLossConfig(loss_type="ppo", clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, loss_agg=agg)
    compare_loss(
        lambda x: policy_loss(x, old, adv, mask, cfg).loss,
        lambda x: core.compute_policy_loss_vanilla(old, x, adv, mask, agg, actor_config(0.2, 0.28))[0],
        lp,
    )


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_gspo_loss_matches(seed, agg):
    lp, old, adv, mask = loss_case(seed, spread=0.02)
    cfg = PolicyLossConfig(loss_type="gspo", clip_ratio_low=3e-3, clip_ratio_high=4e-3, loss_agg=agg)
    compare_loss(
        lambda x: policy_loss(x, old, adv, mask, cfg).loss,
        lambda x: core.compute_policy_loss_gspo(old, x, adv, mask, agg, actor_config(3e-3, 4e-3))[0],
        lp,
    )


@pytest.mark.parametrize("ours,theirs", [("k1", "kl"), ("k2", "mse"), ("k3", "low_var_kl")])
def test_kl_estimators_match(ours, theirs):
    lp, ref_lp, _, _ = loss_case(0, spread=2.0)
    assert torch.allclose(kl_penalty(lp, ref_lp, ours), core.kl_penalty(lp, ref_lp, theirs), atol=TOL)


def test_value_loss_matches_single_token_steps():
    g = torch.Generator().manual_seed(0)
    v, old, ret = (torch.randn(10, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(10, 1, dtype=torch.float64)
    ours = value_loss(v, old, ret, mask[:, 0] > 0, clip=0.2).loss
    ref = core.compute_value_loss(v[:, None], ret[:, None], old[:, None], mask, cliprange_value=0.2)
    ref = ref[0] if isinstance(ref, tuple) else ref
    assert ours.item() == pytest.approx(ref.item(), abs=TOL)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum"])
def test_reinforce_loss_matches_verl_gpg(seed, agg):
    """The ``reinforce`` loss (``-A log pi``) is what the verl trainer maps to verl's ``gpg`` policy loss."""
    lp, old, adv, mask = loss_case(seed, spread=1.0)
    cfg = PolicyLossConfig(loss_type="reinforce", loss_agg=agg)
    compare_loss(
        lambda x: policy_loss(x, old, adv, mask, cfg).loss,
        lambda x: core.compute_policy_loss_gpg(old, x, adv, mask, agg, actor_config(0.2, 0.2))[0],
        lp,
    )


@pytest.mark.parametrize("seed", range(3))
def test_dual_clip_off_matches_verl_with_the_off_constant(seed):
    """``clip_ratio_c: None`` (no dual clip) is mapped to a constant no ratio reaches; the losses then agree."""
    from agentr1_core.verl.data import DUAL_CLIP_OFF

    lp, old, adv, mask = loss_case(seed, spread=3.0)
    cfg = PolicyLossConfig(loss_type="ppo", clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=None)
    compare_loss(
        lambda x: policy_loss(x, old, adv, mask, cfg).loss,
        lambda x: core.compute_policy_loss_vanilla(old, x, adv, mask, "token-mean",
                                                   actor_config(0.2, 0.2, c=DUAL_CLIP_OFF))[0],
        lp,
    )
