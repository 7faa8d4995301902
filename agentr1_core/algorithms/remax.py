"""ReMax: the return of one greedy episode on the same prompt as the baseline of its sampled episodes.

ReMax (Li et al., 2023) is REINFORCE whose baseline for a prompt is the reward of the policy's greedy response to
it. Here the unit is the trajectory of the step-level MDP:

    A_i = R_i − R_greedy(g)

``R_i`` is the undiscounted return of sampled trajectory ``i`` (the sum of its step rewards, as GRPO and RLOO
score a trajectory) and ``R_greedy(g)`` the return of the greedy episode of its group (its dataset row), sampled in
the same rollout by the current policy (``rollout.driver``: one more episode per row, uid ``<group>/greedy``). Every
step of a trajectory gets its trajectory's advantage; ``returns`` are the undiscounted return-to-go of each step.
No std scaling and no critic; groups of any size (``rollout.n: 1`` works). The greedy episode depends on the prompt
only, never on the sampled actions, so the baseline leaves the policy gradient unbiased.

The greedy episode is not trained on (it gives no step rows) and is not part of the rollout's reward metrics;
``greedy_returns`` (what the ``remax`` component's ``prepare_batch`` in ``components.py`` runs) reports
``remax/greedy_return_mean``, ``remax/greedy_episodes`` and ``remax/greedy_top_fraction``: the fraction of groups
whose greedy episode scored at least as well as every sample and better than one of them, so that every sampled
advantage is 0 or negative and the update only pushes failures down. When it is ``TOP_FRACTION_LIMIT`` or more,
``remax_warning`` gives the console a line: a policy whose greedy answer is usually right learns little from ReMax,
and a group baseline (``grpo``, ``rloo``) suits it better. A sampled trajectory whose group has no usable greedy
episode (one that crashed before its first step, or was lost with a rollout worker) gets advantage 0 and is counted
in ``remax/missing_baselines``: it is not trained against a made-up baseline.

The loss is the shared policy loss (PPO-clip, ``token-mean`` by default, as GRPO and RLOO: with one optimizer step
per rollout its gradient is the ReMax gradient ``A ∇log π``); ``loss_type: reinforce`` gives ``−A log π`` itself.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from agentr1_core.algorithms.advantages import finish, layout_of, trajectory_returns
from agentr1_core.algorithms.base import AdvantageOutput, StepBatch
from agentr1_core.algorithms.segments import STAT_DTYPE, discounted_return_to_go, finite_or_zero
from agentr1_core.rollout.driver import GREEDY_INFO_KEY

GREEDY_RETURNS = "greedy_returns"  # batch.extras key: [S] the greedy return of each row's group (NaN: none)
TOP_FRACTION_LIMIT = 0.5  # remax/greedy_top_fraction at or above this is reported on the console


def _episode_return(traj: Any) -> float:
    return float(sum(float(s.reward) for s in traj.steps))


def greedy_returns(rows: Sequence[Any], trajectories: Sequence[Any]) -> tuple[torch.Tensor, dict[str, float]]:
    """``[S]`` float64: for each step row (``row.traj`` indexes ``trajectories``), the return of the greedy episode
    of its trajectory's group, NaN when the group has none with at least one step; and the ``remax/*`` metrics."""
    greedy: dict[str, float] = {}
    sampled: dict[str, list[float]] = {}
    for traj in trajectories:
        if not traj.steps:
            continue
        value = _episode_return(traj)
        if not math.isfinite(value):
            continue
        if traj.info.get(GREEDY_INFO_KEY):
            greedy[traj.group_id] = value
        else:
            sampled.setdefault(traj.group_id, []).append(value)
    out = torch.full((len(rows),), float("nan"), dtype=STAT_DTYPE)
    missing: set[str] = set()
    for i, row in enumerate(rows):
        group = trajectories[row.traj].group_id
        if group in greedy:
            out[i] = greedy[group]
        else:
            missing.add(group)
    shown = list(greedy.values())
    paired = [g for g in greedy if g in sampled]
    on_top = sum(greedy[g] >= max(sampled[g]) and greedy[g] > min(sampled[g]) for g in paired)
    metrics = {"remax/greedy_episodes": float(len(shown)),
               "remax/greedy_return_mean": sum(shown) / len(shown) if shown else 0.0,
               "remax/greedy_top_fraction": on_top / len(paired) if paired else 0.0,
               "remax/missing_baselines": float(len(missing))}
    return out, metrics


def remax_warning(metrics: dict) -> str | None:
    """One line when ``remax/greedy_top_fraction`` reaches ``TOP_FRACTION_LIMIT``; None otherwise."""
    top = metrics.get("remax/greedy_top_fraction")
    if not isinstance(top, (int, float)) or top < TOP_FRACTION_LIMIT:
        return None
    return (f"[remax] in {top:.0%} of the groups the greedy episode scored at least as well as every sample and "
            f"better than some: their advantages are 0 or negative, so the update only pushes failures down and never "
            f"raises a success the greedy policy lacks; with a policy this often right, algorithm.name=grpo or rloo "
            f"learns more")


def remax_advantages(batch: StepBatch) -> AdvantageOutput:
    """``A = R - R_greedy`` per trajectory (module docstring), from ``batch.extras["greedy_returns"]`` (``[S]``, the
    greedy return of each row's group; NaN: none, advantage 0)."""
    baseline = batch.extras.get(GREEDY_RETURNS) if batch.extras else None
    if baseline is None:
        raise ValueError("ReMax needs batch.extras['greedy_returns']: the greedy episode's return per step row "
                         "(ReMax.prepare_batch fills it from the rollout's greedy episodes)")
    rewards, bad = finite_or_zero(batch.rewards)
    layout = layout_of(batch)
    ret = trajectory_returns(rewards, layout)
    base_rows = torch.as_tensor(baseline, dtype=STAT_DTYPE, device=rewards.device)
    base = torch.full_like(ret, float("nan"))
    first = layout.pos == 0
    base[layout.traj[first]] = base_rows[first]
    known = torch.isfinite(base)
    adv = torch.where(known, ret - torch.where(known, base, torch.zeros_like(base)), torch.zeros_like(ret))
    returns = discounted_return_to_go(rewards, batch.dones, layout, 1.0)
    metrics = {"nonfinite_rewards": float(bad), "missing_baseline_trajectories": float((~known).sum().item())}
    return finish(batch, adv[layout.traj], returns, metrics)
