"""The registered ``Algorithm`` components: an advantage estimator paired with a policy loss, by name.

Each class's constructor keywords are its user-facing parameters (plain typed keywords with defaults; the config
system validates user params against these signatures). Loss parameters shared by all components, defined once as
the fields of ``losses.PolicyLossConfig``:

* ``loss_type``: ``reinforce`` | ``ppo`` | ``gspo``; ``clip_ratio`` (both sides) or ``clip_ratio_low`` /
  ``clip_ratio_high`` (override one side); ``clip_ratio_c``: dual-clip constant (ppo loss only; None = off);
* ``loss_agg``: ``token-mean`` | ``seq-mean-token-sum`` | ``seq-mean-token-mean``;
* ``kl_coef`` / ``kl_estimator`` (``k1`` | ``k2`` | ``k3``): KL penalty to the reference policy (sets
  ``needs_reference``); ``entropy_coef``: entropy bonus (the trainer must then pass per-token entropy).

A component writes only its estimator's parameters and takes the loss parameters as ``**loss_options``; its
``loss_defaults`` says where its defaults differ from ``PolicyLossConfig``'s. ``PolicyGradientAlgorithm`` then gives
its ``__init__`` the full signature (its own parameters, then the loss parameters with its defaults), which is what
params validation reads (``specs.ComponentSpec.parameters``): a misspelled parameter stays a one-line error, and a
Python call is bound to the same signature.

The formulas are in ``advantages.py``, ``gae.py``, ``gigpo.py``, ``remax.py`` and ``losses.py``;
``docs/algorithms.md`` says when to pick which.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from typing import Any, Callable

import torch

from agentr1_core.algorithms import advantages as adv_fns
from agentr1_core.algorithms.base import AdvantageOutput, Algorithm, LossOutput, StepBatch
from agentr1_core.algorithms.gae import step_gae
from agentr1_core.algorithms.gigpo import gigpo_advantages
from agentr1_core.algorithms.losses import (LossDenominators, PolicyLossConfig, loss_denominators, policy_loss,
                                            value_loss)
from agentr1_core.algorithms.remax import GREEDY_RETURNS, greedy_returns, remax_advantages
from agentr1_core.algorithms.segments import check_choice

LOSS_PARAMETERS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(PolicyLossConfig))
OWN_INIT = "__init_before_loss_parameters__"  # the wrapped ``__init__`` of a component (``with_loss_parameters``)


def with_loss_parameters(cls: type, init: Callable, defaults: dict[str, Any]) -> Callable:
    """``init(self, <own parameters>, **loss_options)`` as a function whose signature lists the loss parameters
    after the own ones (with ``defaults`` over ``PolicyLossConfig``'s) and whose annotations are resolved types. A
    call is bound to that signature (an unknown keyword is a ``TypeError``) and ``init`` gets every loss parameter
    by name."""
    hints = typing.get_type_hints(init)
    loss_hints = typing.get_type_hints(PolicyLossConfig)
    own = [p for p in inspect.signature(init).parameters.values() if p.kind is not p.VAR_KEYWORD]
    kind = (inspect.Parameter.KEYWORD_ONLY if any(p.kind is p.KEYWORD_ONLY for p in own)
            else inspect.Parameter.POSITIONAL_OR_KEYWORD)
    fields = {f.name: f.default for f in dataclasses.fields(PolicyLossConfig)}
    unknown = set(defaults) - set(fields)
    if unknown:
        raise TypeError(f"{cls.__name__}.loss_defaults names no loss parameter: {', '.join(sorted(unknown))}")
    loss = [inspect.Parameter(name, kind, default=defaults.get(name, default), annotation=loss_hints[name])
            for name, default in fields.items()]
    signature = inspect.Signature(own + loss, return_annotation=None)
    instance = own[0].name  # ``self``

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        loss_options = {name: arguments.pop(name) for name in LOSS_PARAMETERS}
        init(arguments.pop(instance), **arguments, **loss_options)

    __init__.__signature__ = signature  # type: ignore[attr-defined]
    __init__.__annotations__ = {**{p.name: hints[p.name] for p in own if p.name in hints}, **loss_hints,
                                "return": None}
    setattr(__init__, OWN_INIT, init)
    return __init__


class PolicyGradientAlgorithm(Algorithm):
    """Shared plumbing: holds a ``PolicyLossConfig`` and forwards ``policy_loss`` to ``losses.policy_loss``.

    A subclass whose ``__init__`` (its own or inherited) ends in ``**loss_options`` gets the loss parameters in its
    signature (module docstring), with ``loss_defaults`` over ``PolicyLossConfig``'s defaults; it passes them on to
    ``set_loss``. A subclass that writes the loss parameters out itself is left as it is."""

    loss_defaults: dict[str, Any] = {}  # where this algorithm's loss defaults differ from PolicyLossConfig's

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__init__
        init = getattr(init, OWN_INIT, init)
        if any(p.kind is p.VAR_KEYWORD for p in inspect.signature(init).parameters.values()):
            cls.__init__ = with_loss_parameters(cls, init, cls.loss_defaults)  # type: ignore[method-assign]

    def set_loss(self, **loss_options: Any) -> None:
        """The policy loss of this algorithm, from the loss parameters (``PolicyLossConfig``'s fields)."""
        self.loss_config = PolicyLossConfig(**loss_options)
        self.needs_reference = self.loss_config.kl_coef > 0

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

    def __init__(self, norm_by_std: bool = True, eps: float = 1e-6, **loss_options: Any) -> None:
        self.norm_by_std, self.eps = norm_by_std, eps
        self.set_loss(**loss_options)

    def compute_advantages(self, batch: StepBatch) -> AdvantageOutput:
        return adv_fns.grpo_advantages(batch, norm_by_std=self.norm_by_std, eps=self.eps)


class DrGRPO(GRPO):
    """Dr.GRPO: GRPO without std normalisation and with a length-unbiased ``seq-mean-token-sum`` aggregation."""

    loss_defaults = {"loss_agg": "seq-mean-token-sum"}

    def __init__(self, norm_by_std: bool = False, eps: float = 1e-6, **loss_options: Any) -> None:
        super().__init__(norm_by_std, eps, **loss_options)


class RLOO(PolicyGradientAlgorithm):
    """Leave-one-out group baseline on the trajectory return, PPO-clip loss."""

    needs_groups = True

    def __init__(self, **loss_options: Any) -> None:
        self.set_loss(**loss_options)

    def compute_advantages(self, batch: StepBatch) -> AdvantageOutput:
        return adv_fns.rloo_advantages(batch)


class Reinforce(PolicyGradientAlgorithm):
    """Discounted return-to-go per step with an optional constant baseline, ``-A log pi`` loss."""

    loss_defaults = {"loss_type": "reinforce"}

    def __init__(self, gamma: float = 1.0, baseline: str = "none", **loss_options: Any) -> None:
        self.gamma, self.baseline = gamma, check_choice("baseline", baseline, adv_fns.BASELINES)
        self.needs_groups = baseline == "group"
        self.set_loss(**loss_options)

    def compute_advantages(self, batch: StepBatch) -> AdvantageOutput:
        return adv_fns.reinforce_advantages(batch, gamma=self.gamma, baseline=self.baseline)


class ReinforcePP(PolicyGradientAlgorithm):
    """REINFORCE++: return-to-go whitened over the batch, PPO-clip loss."""

    def __init__(self, gamma: float = 1.0, baseline: str = "none", whiten_over: str = "token",
                 **loss_options: Any) -> None:
        self.gamma = gamma
        self.baseline = check_choice("baseline", baseline, adv_fns.BASELINES)
        self.whiten_over = check_choice("whiten_over", whiten_over, adv_fns.WHITEN_OVER)
        self.needs_groups = baseline == "group"
        self.set_loss(**loss_options)

    def compute_advantages(self, batch: StepBatch) -> AdvantageOutput:
        return adv_fns.reinforce_pp_advantages(batch, gamma=self.gamma, baseline=self.baseline,
                                               whiten_over=self.whiten_over)


class PPO(PolicyGradientAlgorithm):
    """Step-level GAE with a per-step critic, token-level PPO-clip loss, clipped value loss."""

    needs_critic = True

    def __init__(self, gamma: float = 1.0, lam: float = 1.0, whiten_advantages: bool = True,
                 value_clip: float | None = 0.5, **loss_options: Any) -> None:
        self.gamma, self.lam, self.whiten_advantages, self.value_clip = gamma, lam, whiten_advantages, value_clip
        self.set_loss(**loss_options)

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

    loss_defaults = {"loss_type": "gspo", "clip_ratio": 3e-4, "clip_ratio_high": 4e-4,
                     "loss_agg": "seq-mean-token-mean"}


class GiGPO(PolicyGradientAlgorithm):
    """GRPO trajectory advantage plus an anchor-state step-group advantage, PPO-clip loss."""

    needs_groups = True

    def __init__(self, gamma: float = 0.95, step_weight: float = 1.0, norm_by_std: bool = True,
                 eps: float = 1e-6, **loss_options: Any) -> None:
        self.gamma, self.step_weight, self.norm_by_std, self.eps = gamma, step_weight, norm_by_std, eps
        self.set_loss(**loss_options)

    def compute_advantages(self, batch: StepBatch) -> AdvantageOutput:
        return gigpo_advantages(batch, gamma=self.gamma, step_weight=self.step_weight,
                                norm_by_std=self.norm_by_std, eps=self.eps)


class ReMax(PolicyGradientAlgorithm):
    """The return of one greedy episode on the same prompt as the baseline (ReMax, ``remax.py``), PPO-clip loss."""

    needs_greedy_baseline = True

    def __init__(self, **loss_options: Any) -> None:
        self.set_loss(**loss_options)

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
