"""Step-level GAE (StepPO / PPO): a critic value per step, generalised advantage estimation across steps.

One agent turn is one transition, so the TD error is taken between consecutive steps of a trajectory, not
between tokens of one response:

    delta_t = r_t + gamma * V_{t+1} - V_t
    A_t     = delta_t + gamma * lam * A_{t+1}
    returns = A + V                     (critic targets, before whitening)

``V_t`` is ``batch.values`` (the critic at the step's first action token). ``V_{t+1}`` is:

* the value of the next step of the same trajectory, when there is one and step t is not ``dones``;
* 0 after a ``dones`` step (terminal state);
* on the last step present for a trajectory that is not ``dones`` (``truncated`` or cut off): the value of the
  state after it, ``batch.extras["bootstrap_values"][t]``, when that tensor is given and finite; otherwise 0.

This module does not do token-level GAE inside a response. Non-finite rewards or values are treated as 0 and
counted in metrics.

How well the critic fits (``critic_fit``, over steps with an action token, with the values the critic gave before
this batch's update): ``value_abs_error`` = mean |V - R| and ``value_r2`` = 1 - sum (R - V)^2 / sum (R - mean R)^2,
the coefficient of determination of the values for the returns (1: exact; 0: no better than giving every step the
batch's mean return; below 0: worse, e.g. a critic whose values lag far behind the returns). Unlike the explained
variance ``1 - Var(R - V) / Var(R)`` it counts a constant offset as an error. Without variation in the returns it is
not given.
"""

from __future__ import annotations

import torch

from agentr1_core.algorithms.advantages import finish, layout_of
from agentr1_core.algorithms.base import AdvantageOutput, StepBatch
from agentr1_core.algorithms.segments import STAT_DTYPE, TrajLayout, finite_or_zero, tokens_per_step, whiten


def next_values(batch: StepBatch, values: torch.Tensor, layout: TrajLayout) -> torch.Tensor:
    """``V_{t+1}`` per step as defined in the module docstring (float64 ``[S]``)."""
    grid = layout.to_grid(values)
    present = layout.to_grid(torch.ones_like(values))
    nxt = torch.zeros_like(grid)
    nxt[:, :-1] = grid[:, 1:]
    has_next = torch.zeros_like(grid)
    has_next[:, :-1] = present[:, 1:]
    out = layout.from_grid(nxt)
    is_last = layout.from_grid(has_next) == 0
    boot = batch.extras.get("bootstrap_values") if batch.extras else None
    if boot is not None:
        boot, _ = finite_or_zero(torch.as_tensor(boot, device=values.device))
        out = torch.where(is_last, boot, out)
    else:
        out = torch.where(is_last, torch.zeros_like(out), out)
    return torch.where(batch.dones.bool(), torch.zeros_like(out), out)


def critic_fit(values: torch.Tensor, returns: torch.Tensor, acting: torch.Tensor) -> dict[str, float]:
    """``value_abs_error`` and ``value_r2`` (module docstring) over the ``acting`` steps."""
    v, r = values[acting].to(STAT_DTYPE), returns[acting].to(STAT_DTYPE)
    if not v.numel():
        return {}
    out = {"value_abs_error": float((v - r).abs().mean().item())}
    spread = float(((r - r.mean()) ** 2).sum().item())
    if spread > 1e-12:
        out["value_r2"] = 1.0 - float(((r - v) ** 2).sum().item()) / spread
    return out


def step_gae(batch: StepBatch, gamma: float = 1.0, lam: float = 1.0,
             whiten_advantages: bool = True) -> AdvantageOutput:
    """Step-level GAE as described in the module docstring; advantages whitened over acting steps."""
    if batch.values is None:
        raise ValueError("step-level GAE needs batch.values (a critic value per step)")
    rewards, bad_r = finite_or_zero(batch.rewards)
    values, bad_v = finite_or_zero(batch.values)
    layout = layout_of(batch)
    delta = rewards + gamma * next_values(batch, values, layout) - values
    # A_t = delta_t + gamma*lam*A_{t+1}; the recursion stops at a dones step (its next value is already 0).
    d = layout.to_grid(delta)
    cont = layout.to_grid((~batch.dones.bool()).to(STAT_DTYPE))
    adv_grid = torch.zeros_like(d)
    running = torch.zeros(layout.num_traj, dtype=STAT_DTYPE, device=d.device)
    for t in range(layout.max_len - 1, -1, -1):
        running = d[:, t] + gamma * lam * cont[:, t] * running
        adv_grid[:, t] = running
    adv = layout.from_grid(adv_grid)
    returns = adv + values
    acting = tokens_per_step(batch.action_mask) > 0
    if whiten_advantages and adv.numel():
        adv = whiten(adv, acting.to(STAT_DTYPE))
    metrics = {"nonfinite_rewards": float(bad_r), "nonfinite_values": float(bad_v),
               "value_mean": float(values.mean().item()) if values.numel() else 0.0,
               **critic_fit(values, returns, acting)}
    return finish(batch, adv, returns, metrics)
