"""The registered ``Algorithm`` components: an advantage estimator paired with a policy loss, by name.

Each class's constructor keywords are its user-facing parameters (plain typed keywords with defaults; the config
system validates user params against these signatures). Loss parameters shared by all components:

* ``loss_type``: ``reinforce`` | ``ppo`` | ``gspo``; ``clip_ratio`` (both sides) or ``clip_ratio_low`` /
  ``clip_ratio_high`` (override one side); ``clip_ratio_c``: dual-clip constant (ppo loss only; None = off);
* ``loss_agg``: ``token-mean`` | ``seq-mean-token-sum`` | ``seq-mean-token-mean``;
* ``kl_coef`` / ``kl_estimator`` (``k1`` | ``k2`` | ``k3``): KL penalty to the reference policy (sets
  ``needs_reference``); ``entropy_coef``: entropy bonus (the trainer must then pass per-token entropy).

The formulas are in ``advantages.py``, ``gae.py``, ``gigpo.py``, ``remax.py`` and ``losses.py``;
``docs/algorithms.md`` says when to pick which.
"""

from __future__ import annotations

from typing import Any

import torch

from agentr1_core.algorithms import advantages as adv_fns
from agentr1_core.algorithms.base import AdvantageOutput, Algorithm, LossOutput, StepBatch
from agentr1_core.algorithms.gae import step_gae
from agentr1_core.algorithms.gigpo import gigpo_advantages
from agentr1_core.algorithms.losses import (LossDenominators, PolicyLossConfig, loss_denominators, policy_loss,
                                            value_loss)
from agentr1_core.algorithms.remax import GREEDY_RETURNS, greedy_returns, remax_advantages
from agentr1_core.algorithms.segments import check_choice


class PolicyGradientAlgorithm(Algorithm):
    """Shared plumbing: holds a ``PolicyLossConfig`` and forwards ``policy_loss`` to ``losses.policy_loss``."""

    def _set_loss(self, loss_type: str, clip_ratio: float, clip_ratio_low: float | None,
                  clip_ratio_high: float | None, clip_ratio_c: float | None, loss_agg: str, kl_coef: float,
                  kl_estimator: str, entropy_coef: float) -> None:
        self.loss_config = PolicyLossConfig(
            loss_type=loss_type,
            clip_ratio_low=clip_ratio if clip_ratio_low is None else clip_ratio_low,
            clip_ratio_high=clip_ratio if clip_ratio_high is None else clip_ratio_high,
            clip_ratio_c=clip_ratio_c,
            loss_agg=loss_agg,
            kl_coef=kl_coef,
            kl_estimator=kl_estimator,
            entropy_coef=entropy_coef,
        )
        self.needs_reference = kl_coef > 0

    def loss_denominators(self, batch: StepBatch, advantages: torch.Tensor) -> LossDenominators:
        """The mini-batch counts that every micro-batch's loss is divided by (see ``losses.py``): with an off-policy
        correction, tokens whose behaviour log-prob is non-finite are not counted, as they leave the loss."""
        correction = batch.extras.get("off_policy")
        behaviour = None
        if correction is not None and correction.active:
            behaviour = batch.extras.get("rollout_logprobs", batch.old_logprobs)
        return loss_denominators(batch.action_mask, batch.old_logprobs, advantages, batch.ref_logprobs,
                                 use_ref=self.loss_config.kl_coef > 0, behaviour=behaviour)

    def inert_rows(self, batch: StepBatch, advantages: torch.Tensor) -> torch.Tensor | None:
        """Rows whose every action token has advantage 0: with no KL or entropy term each token's policy loss is
        ``-0 * ratio`` (clipped or not), so the row adds nothing to the loss or the gradient. Its tokens still count
        in the loss denominators, which the trainer takes over the whole mini-batch. (A critic's loss is
        ``value_inert_rows``'s.)"""
        cfg = self.loss_config
        if cfg.kl_coef > 0 or cfg.entropy_coef > 0:
            return None
        zero = (advantages == 0) | (batch.action_mask <= 0)
        return zero.all(dim=1)

    def policy_loss(self, logprobs: torch.Tensor, batch: StepBatch, advantages: torch.Tensor,
                    entropy: torch.Tensor | None = None) -> LossOutput:
        return policy_loss(logprobs, batch.old_logprobs, advantages, batch.action_mask, self.loss_config,
                           ref_logprobs=batch.ref_logprobs, entropy=entropy,
                           denominators=batch.extras.get("loss_denominators"),
                           behaviour_logprobs=batch.extras.get("rollout_logprobs"),
                           correction=batch.extras.get("off_policy"))


class GRPO(PolicyGradientAlgorithm):
    """Group-normalised trajectory return, PPO-clip loss."""

    needs_groups = True

    def __init__(self, norm_by_std: bool = True, eps: float = 1e-6, loss_type: str = "ppo",
                 clip_ratio: float = 0.2, clip_ratio_low: float | None = None, clip_ratio_high: float | None = None,
                 clip_ratio_c: float | None = 3.0, loss_agg: str = "token-mean", kl_coef: float = 0.0,
                 kl_estimator: str = "k3", entropy_coef: float = 0.0) -> None:
        self.norm_by_std, self.eps = norm_by_std, eps
        self._set_loss(loss_type, clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c, loss_agg, kl_coef,
                       kl_estimator, entropy_coef)

    def compute_advantages(self, batch: StepBatch) -> AdvantageOutput:
        return adv_fns.grpo_advantages(batch, norm_by_std=self.norm_by_std, eps=self.eps)


class DrGRPO(GRPO):
    """Dr.GRPO: GRPO without std normalisation and with a length-unbiased ``seq-mean-token-sum`` aggregation."""

    def __init__(self, norm_by_std: bool = False, eps: float = 1e-6, loss_type: str = "ppo",
                 clip_ratio: float = 0.2, clip_ratio_low: float | None = None, clip_ratio_high: float | None = None,
                 clip_ratio_c: float | None = 3.0, loss_agg: str = "seq-mean-token-sum", kl_coef: float = 0.0,
                 kl_estimator: str = "k3", entropy_coef: float = 0.0) -> None:
        super().__init__(norm_by_std, eps, loss_type, clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c,
                         loss_agg, kl_coef, kl_estimator, entropy_coef)


class RLOO(PolicyGradientAlgorithm):
    """Leave-one-out group baseline on the trajectory return, PPO-clip loss."""

    needs_groups = True

    def __init__(self, loss_type: str = "ppo", clip_ratio: float = 0.2, clip_ratio_low: float | None = None,
                 clip_ratio_high: float | None = None, clip_ratio_c: float | None = 3.0,
                 loss_agg: str = "token-mean", kl_coef: float = 0.0, kl_estimator: str = "k3",
                 entropy_coef: float = 0.0) -> None:
        self._set_loss(loss_type, clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c, loss_agg, kl_coef,
                       kl_estimator, entropy_coef)

    def compute_advantages(self, batch: StepBatch) -> AdvantageOutput:
        return adv_fns.rloo_advantages(batch)


class Reinforce(PolicyGradientAlgorithm):
    """Discounted return-to-go per step with an optional constant baseline, ``-A log pi`` loss."""

    def __init__(self, gamma: float = 1.0, baseline: str = "none", loss_type: str = "reinforce",
                 clip_ratio: float = 0.2, clip_ratio_low: float | None = None, clip_ratio_high: float | None = None,
                 clip_ratio_c: float | None = 3.0, loss_agg: str = "token-mean", kl_coef: float = 0.0,
                 kl_estimator: str = "k3", entropy_coef: float = 0.0) -> None:
        self.gamma, self.baseline = gamma, check_choice("baseline", baseline, adv_fns.BASELINES)
        self.needs_groups = baseline == "group"
        self._set_loss(loss_type, clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c, loss_agg, kl_coef,
                       kl_estimator, entropy_coef)

    def compute_advantages(self, batch: StepBatch) -> AdvantageOutput:
        return adv_fns.reinforce_advantages(batch, gamma=self.gamma, baseline=self.baseline)


class ReinforcePP(PolicyGradientAlgorithm):
    """REINFORCE++: return-to-go whitened over the batch, PPO-clip loss."""

    def __init__(self, gamma: float = 1.0, baseline: str = "none", whiten_over: str = "token",
                 loss_type: str = "ppo", clip_ratio: float = 0.2, clip_ratio_low: float | None = None,
                 clip_ratio_high: float | None = None, clip_ratio_c: float | None = 3.0,
                 loss_agg: str = "token-mean", kl_coef: float = 0.0, kl_estimator: str = "k3",
                 entropy_coef: float = 0.0) -> None:
        self.gamma = gamma
        self.baseline = check_choice("baseline", baseline, adv_fns.BASELINES)
        self.whiten_over = check_choice("whiten_over", whiten_over, adv_fns.WHITEN_OVER)
        self.needs_groups = baseline == "group"
        self._set_loss(loss_type, clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c, loss_agg, kl_coef,
                       kl_estimator, entropy_coef)

    def compute_advantages(self, batch: StepBatch) -> AdvantageOutput:
        return adv_fns.reinforce_pp_advantages(batch, gamma=self.gamma, baseline=self.baseline,
                                               whiten_over=self.whiten_over)


class PPO(PolicyGradientAlgorithm):
    """Step-level GAE with a per-step critic, token-level PPO-clip loss, clipped value loss."""

    needs_critic = True

    def __init__(self, gamma: float = 1.0, lam: float = 1.0, whiten_advantages: bool = True,
                 value_clip: float | None = 0.5, loss_type: str = "ppo", clip_ratio: float = 0.2,
                 clip_ratio_low: float | None = None, clip_ratio_high: float | None = None,
                 clip_ratio_c: float | None = 3.0, loss_agg: str = "token-mean", kl_coef: float = 0.0,
                 kl_estimator: str = "k3", entropy_coef: float = 0.0) -> None:
        self.gamma, self.lam, self.whiten_advantages, self.value_clip = gamma, lam, whiten_advantages, value_clip
        self._set_loss(loss_type, clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c, loss_agg, kl_coef,
                       kl_estimator, entropy_coef)

    def compute_advantages(self, batch: StepBatch) -> AdvantageOutput:
        return step_gae(batch, gamma=self.gamma, lam=self.lam, whiten_advantages=self.whiten_advantages)

    def value_inert_rows(self, batch: StepBatch, returns: torch.Tensor) -> torch.Tensor | None:
        """Steps without an action token, and steps whose return is exactly the value the critic gave them (the
        value it gives again in the update: the same weights): the clipped squared error and its gradient are
        zero. In practice a fresh critic (the zero value head) on a batch without any reward, where every value and
        return is 0, so that a run does not spend a whole update on no gradient before its first reward."""
        if batch.values is None:
            return None
        acting = (batch.action_mask > 0).any(-1)
        return ~acting | (returns == batch.values.to(returns)).to(acting.device)

    def value_loss(self, values: torch.Tensor, batch: StepBatch, returns: torch.Tensor) -> LossOutput:
        """Over steps that have at least one action token (the value is read at the first one)."""
        acting = (batch.action_mask > 0).any(-1)
        return value_loss(values, batch.values, returns, acting, clip=self.value_clip,
                          denominators=batch.extras.get("loss_denominators"))


class StepPO(PPO):
    """Step-level GAE with a per-step critic and the sequence-level (per-step) GSPO loss."""

    def __init__(self, gamma: float = 1.0, lam: float = 1.0, whiten_advantages: bool = True,
                 value_clip: float | None = 0.5, loss_type: str = "gspo", clip_ratio: float = 3e-4,
                 clip_ratio_low: float | None = None, clip_ratio_high: float | None = 4e-4,
                 clip_ratio_c: float | None = 3.0, loss_agg: str = "seq-mean-token-mean", kl_coef: float = 0.0,
                 kl_estimator: str = "k3", entropy_coef: float = 0.0) -> None:
        super().__init__(gamma, lam, whiten_advantages, value_clip, loss_type, clip_ratio, clip_ratio_low,
                         clip_ratio_high, clip_ratio_c, loss_agg, kl_coef, kl_estimator, entropy_coef)


class GiGPO(PolicyGradientAlgorithm):
    """GRPO trajectory advantage plus an anchor-state step-group advantage, PPO-clip loss."""

    needs_groups = True

    def __init__(self, gamma: float = 0.95, step_weight: float = 1.0, norm_by_std: bool = True,
                 eps: float = 1e-6, loss_type: str = "ppo", clip_ratio: float = 0.2,
                 clip_ratio_low: float | None = None, clip_ratio_high: float | None = None,
                 clip_ratio_c: float | None = 3.0, loss_agg: str = "token-mean", kl_coef: float = 0.0,
                 kl_estimator: str = "k3", entropy_coef: float = 0.0) -> None:
        self.gamma, self.step_weight, self.norm_by_std, self.eps = gamma, step_weight, norm_by_std, eps
        self._set_loss(loss_type, clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c, loss_agg, kl_coef,
                       kl_estimator, entropy_coef)

    def compute_advantages(self, batch: StepBatch) -> AdvantageOutput:
        return gigpo_advantages(batch, gamma=self.gamma, step_weight=self.step_weight,
                                norm_by_std=self.norm_by_std, eps=self.eps)


class ReMax(PolicyGradientAlgorithm):
    """The return of one greedy episode on the same prompt as the baseline (ReMax, ``remax.py``), PPO-clip loss."""

    needs_greedy_baseline = True

    def __init__(self, loss_type: str = "ppo", clip_ratio: float = 0.2, clip_ratio_low: float | None = None,
                 clip_ratio_high: float | None = None, clip_ratio_c: float | None = 3.0,
                 loss_agg: str = "token-mean", kl_coef: float = 0.0, kl_estimator: str = "k3",
                 entropy_coef: float = 0.0) -> None:
        self._set_loss(loss_type, clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c, loss_agg, kl_coef,
                       kl_estimator, entropy_coef)

    def prepare_batch(self, batch: StepBatch, steps: Any, trajectories: list[Any]) -> dict[str, float]:
        """Each row's greedy return into ``batch.extras["greedy_returns"]``; returns the ``remax/*`` metrics."""
        batch.extras[GREEDY_RETURNS], metrics = greedy_returns(steps, trajectories)
        return metrics

    def compute_advantages(self, batch: StepBatch) -> AdvantageOutput:
        return remax_advantages(batch)


ALGORITHM_CLASSES: dict[str, type[Algorithm]] = {
    "grpo": GRPO,
    "drgrpo": DrGRPO,
    "rloo": RLOO,
    "reinforce": Reinforce,
    "reinforce_pp": ReinforcePP,
    "ppo": PPO,
    "steppo": StepPO,
    "gigpo": GiGPO,
    "remax": ReMax,
}
