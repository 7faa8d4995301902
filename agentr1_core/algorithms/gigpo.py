"""GiGPO advantages: GRPO's trajectory-group advantage plus a step-group advantage from shared anchor states.

    A_t = A_traj + step_weight * A_step

``A_traj`` is the GRPO advantage of the step's trajectory (group-normalised undiscounted trajectory return).
``A_step`` compares steps that started from the same anchor observation (``batch.anchors[t]``) inside the same
group: their discounted return-to-go ``G_t`` is normalised among the steps of that (group, anchor) set. A step whose
anchor is ``None``, or whose (group, anchor) set has a single step, gets ``A_step = 0``. Without ``batch.anchors``
every step gets ``A_step = 0`` and GiGPO reduces to GRPO. ``returns`` is ``G_t``.
"""

from __future__ import annotations

import torch

from agentr1_core.algorithms.advantages import finish, grpo_step_advantages, layout_of
from agentr1_core.algorithms.base import AdvantageOutput, StepBatch
from agentr1_core.algorithms.segments import discounted_return_to_go, finite_or_zero, group_normalize


def anchor_sets(anchors: list | None, group: torch.Tensor) -> tuple[torch.Tensor, int, torch.Tensor]:
    """Index of each step's (group, anchor) set, the number of sets, and a bool mask of steps with an anchor."""
    n = int(group.shape[0])
    if anchors is None:
        anchors = [None] * n
    if len(anchors) != n:
        raise ValueError(f"batch.anchors has {len(anchors)} entries for {n} steps")
    ids: dict[tuple[object, object], int] = {}
    out = []
    for i, (g, a) in enumerate(zip(group.tolist(), anchors)):
        key = (g, a) if a is not None else (None, i)  # a step without anchor is a set of its own
        out.append(ids.setdefault(key, len(ids)))
    has = torch.tensor([a is not None for a in anchors], dtype=torch.bool, device=group.device)
    return torch.tensor(out, dtype=torch.long, device=group.device), max(len(ids), 1), has


def gigpo_advantages(batch: StepBatch, gamma: float = 0.95, step_weight: float = 1.0,
                     norm_by_std: bool = True, eps: float = 1e-6) -> AdvantageOutput:
    """GiGPO as described in the module docstring; ``norm_by_std`` applies to both levels."""
    rewards, bad = finite_or_zero(batch.rewards)
    layout = layout_of(batch)
    traj_adv, metrics = grpo_step_advantages(rewards, layout, norm_by_std, eps)
    returns = discounted_return_to_go(rewards, batch.dones, layout, gamma)
    sets, num_sets, has_anchor = anchor_sets(batch.anchors, layout.group)
    step_adv, alone = group_normalize(returns, sets, num_sets, norm_by_std, eps)
    shared = has_anchor & ~alone
    step_adv = torch.where(shared, step_adv, torch.zeros_like(step_adv))
    adv = traj_adv + step_weight * step_adv
    n = max(int(shared.numel()), 1)
    metrics = {**metrics, "nonfinite_rewards": float(bad), "step_group_coverage": float(shared.sum().item()) / n,
               "step_adv_mean_abs": float(step_adv.abs().mean().item()) if step_adv.numel() else 0.0}
    return finish(batch, adv, returns, metrics)
