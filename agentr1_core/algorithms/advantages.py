"""Critic-free advantage estimators over a StepBatch: GRPO / Dr.GRPO, RLOO, REINFORCE and REINFORCE++.

Every function is pure: it reads the batch tensors and returns an ``AdvantageOutput`` whose ``advantages`` are
per token ``[S, T]`` (the step's advantage on its action tokens, 0 elsewhere) and whose ``returns`` are per step.
Non-finite rewards are treated as 0 and counted in the ``nonfinite_rewards`` metric.

Trajectory-level estimators (GRPO, RLOO) score a trajectory by the undiscounted sum of its step rewards and give
that score to every step of the trajectory. Step-level estimators (REINFORCE, REINFORCE++) use the discounted
return-to-go of each step. Critic-based GAE lives in ``gae.py``; GiGPO in ``gigpo.py``.
"""

from __future__ import annotations

import torch

from agentr1_core.algorithms.base import AdvantageOutput, StepBatch
from agentr1_core.algorithms.segments import (
    STAT_DTYPE,
    TrajLayout,
    broadcast_to_tokens,
    check_choice,
    discounted_return_to_go,
    finite_or_zero,
    group_normalize,
    output_dtype,
    segment_stats,
    tokens_per_step,
    traj_layout,
    whiten,
)

BASELINES = ("none", "group", "batch")
WHITEN_OVER = ("token", "step")


def layout_of(batch: StepBatch) -> TrajLayout:
    return traj_layout(batch.traj_ids, batch.group_ids, batch.step_index)


def finish(batch: StepBatch, step_adv: torch.Tensor, returns: torch.Tensor,
           metrics: dict[str, float]) -> AdvantageOutput:
    """Broadcast per-step advantages to tokens and add summary metrics over steps that have action tokens."""
    dtype = output_dtype(batch.old_logprobs)
    acting = tokens_per_step(batch.action_mask) > 0
    shown = step_adv[acting] if bool(acting.any()) else step_adv.new_zeros(1)
    metrics = {
        **metrics,
        "adv_mean": float(shown.mean().item()),
        "adv_std": float(shown.std(unbiased=False).item()),
        "adv_max": float(shown.max().item()),
        "adv_min": float(shown.min().item()),
        "return_mean": float(returns.mean().item()) if returns.numel() else 0.0,
    }
    return AdvantageOutput(
        advantages=broadcast_to_tokens(step_adv, batch.action_mask, dtype),
        returns=returns.to(dtype),
        metrics=metrics,
    )


def trajectory_returns(rewards: torch.Tensor, layout: TrajLayout) -> torch.Tensor:
    """Undiscounted sum of step rewards per trajectory, ``[num_traj]`` float64."""
    out = torch.zeros(layout.num_traj, dtype=STAT_DTYPE, device=rewards.device)
    return out.index_add_(0, layout.traj, rewards.to(STAT_DTYPE))


def grpo_step_advantages(rewards: torch.Tensor, layout: TrajLayout, norm_by_std: bool,
                         eps: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-step GRPO advantage: the group-normalised trajectory return of the step's trajectory."""
    ret = trajectory_returns(rewards, layout)
    adv, _ = group_normalize(ret, layout.traj_group, layout.num_groups, norm_by_std, eps)
    _, std, count = segment_stats(ret, layout.traj_group, layout.num_groups)
    flat = ((std == 0) & (count > 1)).sum().item()
    metrics = {
        "num_groups": float(layout.num_groups),
        "singleton_groups": float((count == 1).sum().item()),
        "zero_std_groups": float(flat),
    }
    return adv[layout.traj], metrics


def grpo_advantages(batch: StepBatch, norm_by_std: bool = True, eps: float = 1e-6) -> AdvantageOutput:
    """GRPO: ``A = (R - mean_group(R)) / (std_group(R) + eps)`` for the trajectory return ``R``.

    ``norm_by_std=False`` gives Dr.GRPO (``A = R - mean_group(R)``). std is the unbiased (n-1) sample std over the
    group's trajectories; a trajectory alone in its group gets 0. ``returns`` is the undiscounted
    return-to-go of each step (the trajectory return when the reward is on the last step)."""
    rewards, bad = finite_or_zero(batch.rewards)
    layout = layout_of(batch)
    step_adv, metrics = grpo_step_advantages(rewards, layout, norm_by_std, eps)
    returns = discounted_return_to_go(rewards, batch.dones, layout, 1.0)
    return finish(batch, step_adv, returns, {**metrics, "nonfinite_rewards": float(bad)})


def rloo_advantages(batch: StepBatch) -> AdvantageOutput:
    """RLOO: ``A_i = R_i - mean_{j != i} R_j`` over the trajectories of the group; 0 for a lone trajectory."""
    rewards, bad = finite_or_zero(batch.rewards)
    layout = layout_of(batch)
    ret = trajectory_returns(rewards, layout)
    mean, _, count = segment_stats(ret, layout.traj_group, layout.num_groups)
    n = count[layout.traj_group]
    others = (mean[layout.traj_group] * n - ret) / (n - 1).clamp(min=1.0)
    adv = torch.where(n > 1, ret - others, torch.zeros_like(ret))
    returns = discounted_return_to_go(rewards, batch.dones, layout, 1.0)
    metrics = {"nonfinite_rewards": float(bad), "num_groups": float(layout.num_groups),
               "singleton_groups": float((count == 1).sum().item())}
    return finish(batch, adv[layout.traj], returns, metrics)


def baseline_values(returns: torch.Tensor, layout: TrajLayout, baseline: str) -> torch.Tensor:
    """Per-step constant baseline: the mean episode return (``G_0``) of the step's group or of the batch."""
    check_choice("baseline", baseline, BASELINES)
    if baseline == "none" or returns.numel() == 0:
        return torch.zeros_like(returns)
    episode = torch.zeros(layout.num_traj, dtype=STAT_DTYPE, device=returns.device)
    first = layout.pos == 0
    episode[layout.traj[first]] = returns[first]
    if baseline == "batch":
        return episode.mean().expand_as(returns)
    mean, _, _ = segment_stats(episode, layout.traj_group, layout.num_groups)
    return mean[layout.group]


def reinforce_advantages(batch: StepBatch, gamma: float = 1.0, baseline: str = "none") -> AdvantageOutput:
    """REINFORCE: ``A_t = G_t - b`` with ``G_t`` the discounted return-to-go of step t.

    ``baseline``: ``none`` (b = 0), ``group`` (mean episode return G_0 of the group's trajectories) or ``batch``
    (the same over the whole batch). A constant baseline does not bias the gradient (up to the sample's own share
    of the mean, as in GRPO). ``returns`` is ``G_t``."""
    check_choice("baseline", baseline, BASELINES)
    rewards, bad = finite_or_zero(batch.rewards)
    layout = layout_of(batch)
    returns = discounted_return_to_go(rewards, batch.dones, layout, gamma)
    adv = returns - baseline_values(returns, layout, baseline)
    return finish(batch, adv, returns, {"nonfinite_rewards": float(bad)})


def reinforce_pp_advantages(batch: StepBatch, gamma: float = 1.0, baseline: str = "none",
                            whiten_over: str = "token") -> AdvantageOutput:
    """REINFORCE++: REINFORCE advantages (optionally minus a group baseline), then whitened over the batch.

    ``whiten_over="token"`` weights each step by its number of action tokens (so a one-step trajectory matches
    token-level REINFORCE++ with an outcome reward); ``"step"`` counts each step once. Variance is unbiased."""
    check_choice("baseline", baseline, BASELINES)
    check_choice("whiten_over", whiten_over, WHITEN_OVER)
    rewards, bad = finite_or_zero(batch.rewards)
    layout = layout_of(batch)
    returns = discounted_return_to_go(rewards, batch.dones, layout, gamma)
    raw = returns - baseline_values(returns, layout, baseline)
    ntok = tokens_per_step(batch.action_mask)
    weight = ntok if whiten_over == "token" else (ntok > 0).to(STAT_DTYPE)
    adv = whiten(raw, weight) if raw.numel() else raw
    return finish(batch, adv, returns, {"nonfinite_rewards": float(bad)})
