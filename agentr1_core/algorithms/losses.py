"""Policy and value losses on per-token ``[S, T]`` tensors: REINFORCE, PPO clip (+ dual clip), GSPO, KL, entropy.

All inputs are rows of a StepBatch: ``logprobs`` (current policy, carries the gradient), ``old_logprobs``
(behaviour policy), per-token ``advantages`` and ``action_mask``. A token enters the loss only if it is an action
token and every input it needs (log-probs, old/ref log-probs, advantage, and the entropy when ``entropy_coef > 0``)
is finite; action tokens dropped because a log-prob (or a needed entropy) is NaN/inf are counted in the
``nonfinite_logprob_tokens`` metric; with ``entropy_coef == 0`` a non-finite entropy only leaves the entropy metric.
Dropped values are replaced by 0 *before* any arithmetic, so neither the loss nor its gradient can become NaN/inf.
Log-ratios are clamped to [-20, 20] before ``exp`` (the GSPO sequence log-ratio to [-20, 10]); the k3 KL term is
capped at 10.

Aggregation modes (rows = steps):

* ``token-mean``: sum over valid tokens / number of valid tokens;
* ``seq-mean-token-sum``: per-row token sum, averaged over rows that have a valid token;
* ``seq-mean-token-mean``: per-row token mean, averaged over rows that have a valid token.

Micro-batches: the trainer splits one optimizer step's rows (the mini-batch) into micro-batches whose gradients are
summed. So that this split never changes the objective, ``LossDenominators`` carries the mini-batch's counts (valid
tokens, rows with a valid token, acting steps for the value loss): each micro-batch's loss is then its sum divided by
the mini-batch count, and the micro-batch losses add up to the mini-batch loss. Without denominators the counts of
the rows given are used (one micro-batch = the whole mini-batch).

An empty batch (no valid token) gives loss 0 that is still connected to ``logprobs`` (zero gradient).

Off-policy correction (``OffPolicyCorrection``, the trainer's ``trainer.off_policy_correction``) for tokens sampled
by other weights than the ones the update starts from (rollouts up to ``trainer.max_staleness`` updates old, or an
engine whose numerics differ from the trainer's). ``behaviour`` is the engine's sampling log-prob ``mu``:

* ``decoupled`` (decoupled PPO): ``old_logprobs`` are the proximal policy's, recomputed by the trainer at the start
  of the update; the algorithm's surrogate takes its ratio to them (the trust region is around the proximal policy)
  and each token's term is multiplied by the importance weight ``w`` of ``rho = exp(old - mu)`` (no gradient);
* ``tis`` (truncated importance sampling, no recomputation): each token's policy-gradient term is replaced by
  ``-A * w * exp(lp - sg(lp))`` with ``w`` the weight of ``rho = exp(sg(lp) - mu)``: its value is ``-A w``, its
  gradient ``-A w grad(lp)``, so an update follows the importance-weighted policy gradient, whatever the
  algorithm's ``loss_type``.

The weight ``w`` of a ratio (``importance_weights``): ``level`` ``token`` takes each token's ``rho_t``; ``sequence``
the product of the step's ``rho_t`` (every token of the step gets it); ``geometric`` their geometric mean. The log
of the ratio is clamped to [-20, 20]. ``cap_mode`` ``truncate``: ``w = min(rho, cap)``; ``mask``: ``w = rho`` when
``rho <= cap``, else 0, and the token still counts in the loss denominator. A token whose behaviour log-prob is
non-finite leaves the loss, numerator and denominator alike (``loss_denominators`` with ``behaviour``).

Both report ``offpolicy/is_weight_mean``, ``offpolicy/is_weight_max`` (of ``rho``, before the cap) and
``offpolicy/is_capped_fraction`` (tokens whose ``rho`` is above the cap) over the valid tokens; ``WeightTally``
carries their sums, so that any split of the batch adds up to the same token means.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentr1_core.algorithms.base import LossOutput
from agentr1_core.algorithms.segments import check_choice
from agentr1_core.validation import IMPORTANCE_CAP_MODES, IMPORTANCE_LEVELS, OFF_POLICY_MODES

LOSS_TYPES = ("reinforce", "ppo", "gspo")
LOSS_AGGS = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
KL_ESTIMATORS = ("k1", "k2", "k3")
LOG_RATIO_LIMIT = 20.0
GSPO_LOG_RATIO_MAX = 10.0
K3_MAX = 10.0


@dataclass(frozen=True)
class PolicyLossConfig:
    """Options of ``policy_loss``; validated on construction (ValueError lists the valid values).

    These fields are also the loss parameters every algorithm component accepts, in this order (``components.py``
    adds them to each component's signature). ``clip_ratio`` sets both sides of the clip range;
    ``clip_ratio_low`` / ``clip_ratio_high`` override one side (None: ``clip_ratio``) and always hold a number
    once constructed."""

    loss_type: str = "ppo"
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_c: float | None = 3.0  # dual clip for negative advantages (ppo only); None disables it
    loss_agg: str = "token-mean"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0

    def __post_init__(self) -> None:
        for side in ("clip_ratio_low", "clip_ratio_high"):
            if getattr(self, side) is None:
                object.__setattr__(self, side, self.clip_ratio)
        check_choice("loss_type", self.loss_type, LOSS_TYPES)
        check_choice("loss_agg", self.loss_agg, LOSS_AGGS)
        check_choice("kl_estimator", self.kl_estimator, KL_ESTIMATORS)
        if self.clip_ratio_low < 0 or self.clip_ratio_high < 0:
            raise ValueError("clip ratios must be >= 0")
        if self.clip_ratio_c is not None and self.clip_ratio_c <= 1.0:
            raise ValueError(f"clip_ratio_c must be > 1 (or None to disable), got {self.clip_ratio_c}")
        if self.kl_coef < 0 or self.entropy_coef < 0:
            raise ValueError("kl_coef and entropy_coef must be >= 0")


@dataclass(frozen=True)
class OffPolicyCorrection:
    """How the policy loss corrects for stale or mismatched sampling (see the module docstring)."""

    mode: str = "none"  # none | tis | decoupled
    cap: float = 2.0  # importance weights above this value are truncated to it (or masked)
    cap_mode: str = "truncate"  # truncate | mask
    level: str = "token"  # token | sequence | geometric

    def __post_init__(self) -> None:
        check_choice("off_policy_correction", self.mode, OFF_POLICY_MODES)
        check_choice("importance_cap_mode", self.cap_mode, IMPORTANCE_CAP_MODES)
        check_choice("importance_level", self.level, IMPORTANCE_LEVELS)
        if not self.cap >= 1.0:
            raise ValueError(f"the importance weight cap must be >= 1, got {self.cap}")

    @property
    def active(self) -> bool:
        return self.mode != "none"


@dataclass
class WeightTally:
    """Token sums of the importance weights' metrics: added across micro-batches (or passes), divided once."""

    tokens: float = 0.0  # valid tokens
    weight_sum: float = 0.0  # sum of rho (before the cap)
    capped: float = 0.0  # tokens whose rho is above the cap
    weight_max: float | None = None  # largest rho

    def add(self, other: "WeightTally") -> None:
        self.tokens += other.tokens
        self.weight_sum += other.weight_sum
        self.capped += other.capped
        if other.weight_max is not None:
            self.weight_max = other.weight_max if self.weight_max is None else max(self.weight_max, other.weight_max)

    def metrics(self) -> dict[str, float]:
        """``offpolicy/*``: token means over every token added (weight 1 and nothing capped when there is none)."""
        n = self.tokens
        return {"offpolicy/is_weight_mean": self.weight_sum / n if n else 1.0,
                "offpolicy/is_weight_max": self.weight_max if self.weight_max is not None else 1.0,
                "offpolicy/is_capped_fraction": self.capped / n if n else 0.0}


@dataclass(frozen=True)
class LossDenominators:
    """Counts over the whole mini-batch (one optimizer step) that divide each micro-batch's loss sum."""

    tokens: float  # valid action tokens (token-mean)
    rows: float  # rows with at least one valid token (seq-mean-* modes)
    steps: float = 0.0  # acting steps (value loss)


def loss_denominators(action_mask: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                      ref_logprobs: torch.Tensor | None = None, use_ref: bool = False,
                      behaviour: torch.Tensor | None = None) -> LossDenominators:
    """The counts of ``LossDenominators`` for a mini-batch, from the inputs known before the forward pass: action
    tokens whose old log-prob, advantage (with ``use_ref``, reference log-prob; with an off-policy correction, the
    ``behaviour`` log-prob) are finite. Tokens dropped later because the current log-prob or entropy is non-finite
    leave the numerator only."""
    valid = (action_mask > 0) & torch.isfinite(old_logprobs) & torch.isfinite(advantages)
    if use_ref and ref_logprobs is not None:
        valid &= torch.isfinite(ref_logprobs)
    if behaviour is not None:
        valid &= torch.isfinite(behaviour)
    return LossDenominators(tokens=float(valid.sum()), rows=float(valid.any(-1).sum()),
                            steps=float((action_mask > 0).any(-1).sum()))


def aggregate(loss_mat: torch.Tensor, valid: torch.Tensor, mode: str,
              denominators: LossDenominators | None = None) -> torch.Tensor:
    """Reduce a per-token loss ``[S, T]`` over the ``valid`` tokens with one of ``LOSS_AGGS``; with
    ``denominators``, divide by the mini-batch's counts instead of these rows' own (see the module docstring)."""
    check_choice("loss_agg", mode, LOSS_AGGS)
    masked = torch.where(valid, loss_mat, torch.zeros_like(loss_mat))
    counts = valid.sum(-1).to(loss_mat.dtype)
    if mode == "token-mean":
        total = counts.sum() if denominators is None else loss_mat.new_tensor(denominators.tokens)
        return masked.sum() / total.clamp(min=1.0)
    rows = (counts > 0).sum().to(loss_mat.dtype) if denominators is None \
        else loss_mat.new_tensor(denominators.rows)
    per_row = masked.sum(-1)
    if mode == "seq-mean-token-mean":
        per_row = per_row / counts.clamp(min=1.0)
    return per_row.sum() / rows.clamp(min=1.0)


def masked_mean(x: torch.Tensor, valid: torch.Tensor) -> float:
    """Plain float mean of ``x`` over ``valid`` (0 when nothing is valid); for metrics only."""
    x = x.detach()
    n = int(valid.sum().item())
    return float(torch.where(valid, x, torch.zeros_like(x)).sum().item()) / n if n else 0.0


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi; ``d = logprobs - ref_logprobs``.

    k1 = d;  k2 = d^2 / 2;  k3 = exp(-d) - 1 + d  (non-negative, low variance; capped at 10)."""
    check_choice("kl_estimator", estimator, KL_ESTIMATORS)
    d = (logprobs - ref_logprobs).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    if estimator == "k1":
        return d
    if estimator == "k2":
        return 0.5 * d * d
    return (torch.exp(-d) - 1.0 + d).clamp(max=K3_MAX)


def clipped_surrogate(adv: torch.Tensor, ratio: torch.Tensor, cfg: PolicyLossConfig,
                      dual: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``max(-A r, -A clip(r, 1-lo, 1+hi))``; with ``dual`` and A < 0 also capped at ``-A c``.

    Returns the per-token loss and bool masks of where the clip and the dual clip were active."""
    plain = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - cfg.clip_ratio_low, 1.0 + cfg.clip_ratio_high)
    loss = torch.maximum(plain, clipped)
    clip_on = clipped > plain
    dual_on = torch.zeros_like(clip_on)
    if dual and cfg.clip_ratio_c is not None:
        cap = -adv * cfg.clip_ratio_c
        dual_on = (adv < 0) & (loss > cap)
        loss = torch.where(dual_on, cap, loss)
    return loss, clip_on, dual_on


def gspo_ratio(lp: torch.Tensor, old: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Per-token GSPO ratio: value ``exp(mean_t(lp - old))`` of the step, gradient ``ratio * d lp_t``."""
    diff = torch.where(valid, lp.detach().double() - old.double(), torch.zeros((), dtype=torch.float64,
                                                                               device=lp.device))
    seq = diff.sum(-1) / valid.sum(-1).clamp(min=1).double()
    log_ratio = lp - lp.detach() + seq.to(lp.dtype).unsqueeze(-1)
    return torch.exp(log_ratio.clamp(-LOG_RATIO_LIMIT, GSPO_LOG_RATIO_MAX))


def importance_ratios(target: torch.Tensor, behaviour: torch.Tensor, valid: torch.Tensor,
                      level: str = "token") -> torch.Tensor:
    """``rho = exp(target - behaviour)`` per token (float64, no gradient; 1 outside ``valid``) at ``level``:
    ``token``; ``sequence``: the product over the row's valid tokens; ``geometric``: its geometric mean. The log of
    the ratio is clamped to [-20, 20]."""
    check_choice("importance_level", level, IMPORTANCE_LEVELS)
    zero = torch.zeros((), dtype=torch.float64, device=target.device)
    log_r = torch.where(valid, target.detach().double() - behaviour.detach().double(), zero)
    if level != "token":
        log_r = log_r.sum(-1, keepdim=True)
        if level == "geometric":
            log_r = log_r / valid.sum(-1, keepdim=True).clamp(min=1).double()
        log_r = log_r.expand_as(target)
    rho = torch.exp(log_r.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))
    return torch.where(valid, rho, torch.ones_like(rho))


def importance_weights(target: torch.Tensor, behaviour: torch.Tensor, valid: torch.Tensor, cap: float,
                       cap_mode: str = "truncate", level: str = "token") -> tuple[torch.Tensor, WeightTally]:
    """The weights ``w`` of ``importance_ratios`` (no gradient, ``target``'s dtype): ``truncate``: ``min(rho,
    cap)``; ``mask``: ``rho``, or 0 where ``rho > cap``. Also the ``WeightTally`` of ``rho`` over ``valid``."""
    check_choice("importance_cap_mode", cap_mode, IMPORTANCE_CAP_MODES)
    rho = importance_ratios(target, behaviour, valid, level)
    above = valid & (rho > cap)
    weight = rho.clamp(max=cap) if cap_mode == "truncate" else torch.where(above, torch.zeros_like(rho), rho)
    tally = WeightTally(tokens=float(valid.sum()), weight_sum=float(rho[valid].sum()), capped=float(above.sum()),
                        weight_max=float(rho[valid].max()) if bool(valid.any()) else None)
    dtype = torch.promote_types(target.dtype, torch.float32)
    return weight.to(dtype), tally


def correction_weights(target: torch.Tensor, behaviour: torch.Tensor, valid: torch.Tensor,
                       correction: OffPolicyCorrection) -> tuple[torch.Tensor, WeightTally]:
    """``importance_weights`` with the settings of ``correction``."""
    return importance_weights(target, behaviour, valid, correction.cap, correction.cap_mode, correction.level)


def proximal_weights(proximal: torch.Tensor, behaviour: torch.Tensor, action_mask: torch.Tensor,
                     correction: OffPolicyCorrection) -> tuple[torch.Tensor, WeightTally, torch.Tensor]:
    """The decoupled correction's weights of a whole batch, known before the update (they depend on the proximal
    and behaviour log-probs only): the weights (0 outside the valid tokens), their tally and the valid tokens
    (action tokens where both log-probs are finite; the others leave the loss)."""
    valid = (action_mask > 0) & torch.isfinite(proximal) & torch.isfinite(behaviour)
    zero = torch.zeros((), dtype=proximal.dtype, device=proximal.device)
    weights, tally = correction_weights(torch.where(valid, proximal, zero), torch.where(valid, behaviour, zero),
                                        valid, correction)
    return torch.where(valid, weights, torch.zeros_like(weights)), tally, valid


def corrected_pg(pg: torch.Tensor, lp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, behaviour: torch.Tensor,
                 valid: torch.Tensor, correction: OffPolicyCorrection) -> tuple[torch.Tensor, WeightTally]:
    """The per-token policy-gradient term with the off-policy ``correction`` applied, and the weights' tally."""
    if correction.mode == "decoupled":
        weight, tally = correction_weights(old, behaviour, valid, correction)
        return pg * weight, tally
    weight, tally = correction_weights(lp, behaviour, valid, correction)
    return -adv * weight * torch.exp(lp - lp.detach()), tally


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                action_mask: torch.Tensor, cfg: PolicyLossConfig, ref_logprobs: torch.Tensor | None = None,
                entropy: torch.Tensor | None = None, denominators: LossDenominators | None = None,
                behaviour_logprobs: torch.Tensor | None = None,
                correction: OffPolicyCorrection | None = None) -> LossOutput:
    """Policy-gradient loss (+ KL penalty, − entropy bonus) per ``cfg``, with the off-policy ``correction``
    against ``behaviour_logprobs`` (default: ``old_logprobs``); see the module docstring."""
    correction = correction if correction is not None and correction.active else None
    behaviour = behaviour_logprobs if behaviour_logprobs is not None else old_logprobs
    use_kl = cfg.kl_coef > 0
    if use_kl and ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs")
    if cfg.entropy_coef > 0 and entropy is None:
        raise ValueError("entropy_coef > 0 needs per-token entropy")
    dtype = torch.promote_types(logprobs.dtype, torch.float32)
    mask = action_mask > 0
    lp_ok = torch.isfinite(logprobs) & torch.isfinite(old_logprobs)
    if use_kl:
        lp_ok &= torch.isfinite(ref_logprobs)
    if correction is not None:
        lp_ok &= torch.isfinite(behaviour)
    ent_ok = torch.isfinite(entropy) if entropy is not None else torch.ones_like(mask)
    if cfg.entropy_coef > 0:  # a token whose entropy cannot enter the loss is dropped from it, and counted
        lp_ok &= ent_ok
    valid = mask & lp_ok & torch.isfinite(advantages)
    zero = torch.zeros((), dtype=dtype, device=logprobs.device)

    def clean(x: torch.Tensor) -> torch.Tensor:
        return torch.where(valid, x.to(dtype), zero)

    lp, old, adv = clean(logprobs), clean(old_logprobs), clean(advantages)
    token_ratio = torch.exp((lp - old).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))
    ratio = token_ratio
    clip_on = dual_on = torch.zeros_like(valid)
    if cfg.loss_type == "reinforce":
        pg = -adv * lp
    elif cfg.loss_type == "ppo":
        pg, clip_on, dual_on = clipped_surrogate(adv, token_ratio, cfg, dual=True)
    else:
        ratio = gspo_ratio(lp, old, valid)
        pg, clip_on, _ = clipped_surrogate(adv, ratio, cfg, dual=False)
    weight_metrics: dict[str, float] = {}
    if correction is not None:
        pg, tally = corrected_pg(pg, lp, old, adv, clean(behaviour), valid, correction)
        weight_metrics = tally.metrics()
    pg_loss = aggregate(pg, valid, cfg.loss_agg, denominators)
    loss = pg_loss
    log_r = (lp - old).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    metrics = {
        "pg_loss": float(pg_loss.item()),
        "clip_fraction": masked_mean(clip_on.to(dtype), valid),
        "dual_clip_fraction": masked_mean(dual_on.to(dtype), valid),
        "approx_kl": masked_mean(token_ratio - 1.0 - log_r, valid),
        "ratio_mean": masked_mean(ratio, valid),
        "valid_tokens": float(valid.sum().item()),
        "nonfinite_logprob_tokens": float((mask & ~lp_ok).sum().item()),
        **weight_metrics,
    }
    if ref_logprobs is not None:
        kl = kl_penalty(lp, clean(ref_logprobs), cfg.kl_estimator)
        metrics["kl"] = masked_mean(kl, valid)
        if use_kl:
            loss = loss + cfg.kl_coef * aggregate(kl, valid, cfg.loss_agg, denominators)
    if entropy is not None:
        ent = clean(torch.where(ent_ok, entropy, torch.zeros((), dtype=entropy.dtype, device=entropy.device)))
        metrics["entropy"] = masked_mean(ent, valid & ent_ok)
        if cfg.entropy_coef > 0:
            loss = loss - cfg.entropy_coef * aggregate(ent, valid, cfg.loss_agg, denominators)
    return LossOutput(loss=loss, metrics=metrics)


def value_loss(values: torch.Tensor, old_values: torch.Tensor | None, returns: torch.Tensor,
               step_mask: torch.Tensor, clip: float | None = None,
               denominators: LossDenominators | None = None) -> LossOutput:
    """Critic loss ``0.5 * mean((V - R)^2)`` over ``step_mask`` steps with finite inputs (with ``denominators``, the
    sum is divided by the mini-batch's acting steps).

    With ``clip`` (and ``old_values``), PPO-style value clipping: ``0.5 * mean(max((V - R)^2, (V_c - R)^2))`` where
    ``V_c = V_old + clip(V - V_old, -clip, clip)``."""
    dtype = torch.promote_types(values.dtype, torch.float32)
    use_clip = clip is not None and clip > 0 and old_values is not None
    valid = step_mask.bool() & torch.isfinite(values) & torch.isfinite(returns)
    if use_clip:
        valid &= torch.isfinite(old_values)
    zero = torch.zeros((), dtype=dtype, device=values.device)
    v = torch.where(valid, values.to(dtype), zero)
    ret = torch.where(valid, returns.to(dtype), zero)
    err = (v - ret) ** 2
    clip_on = torch.zeros_like(valid)
    if use_clip:
        old = torch.where(valid, old_values.to(dtype), zero)
        v_clipped = old + (v - old).clamp(-clip, clip)
        err_clipped = (v_clipped - ret) ** 2
        clip_on = err_clipped > err
        err = torch.maximum(err, err_clipped)
    n = valid.sum().to(dtype) if denominators is None else values.new_tensor(denominators.steps, dtype=dtype)
    n = n.clamp(min=1.0)
    loss = 0.5 * torch.where(valid, err, zero).sum() / n
    metrics = {
        "vf_loss": float(loss.item()),
        "vf_clip_fraction": masked_mean(clip_on.to(dtype), valid),
        "value_pred_mean": masked_mean(v, valid),
        "value_error": masked_mean((v - ret).abs(), valid),
    }
    return LossOutput(loss=loss, metrics=metrics)
