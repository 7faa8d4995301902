"""How far the engine's sampling distribution is from the trainer's, per RL iteration (``mismatch/*`` metrics).

For every action token both log-probs are known: ``mu`` (the engine's, as it sampled) and ``pi`` (the trainer's,
for the same weights, before any optimizer step of the update). With the token importance ratio
``w = exp(pi - mu)`` (its log clamped to [-20, 20]), over the ``n`` action tokens where both are finite:

* ``mismatch/k3_kl = mean(w - 1 - log w)``: the k3 estimate of KL(engine || trainer) from the engine's samples
  (non-negative, low variance; computed as ``expm1(log w) - log w`` in float64, so that tiny gaps do not cancel);
* ``mismatch/ess = (sum w)^2 / (n sum w^2)``: the effective sample size of the token weights as a fraction of ``n``
  (1 when every weight is equal, down to ``1 / n`` when one token carries all of it);
* ``mismatch/chi2 = mean(w^2) - 1``: the chi-square divergence of the trainer's distribution from the engine's
  (0 on-policy).

``MismatchTally`` keeps token sums, so that micro-batches add up to the token means of the whole set. The same
definitions are those of verl's rollout-correction diagnostics (``rollout_corr/k3_kl``, ``chi2_token``,
``rollout_is_eff_sample_size``, there on the truncated weights; here on the raw ones). ``mismatch_warning`` names
the values past the limits verl's documentation treats as unhealthy: KL above 0.1, ESS below 0.3.

This module does not change any loss: it only measures.
"""

from __future__ import annotations

import torch

KL_LIMIT = 0.1  # mismatch/k3_kl above this is reported on the console
ESS_LIMIT = 0.3  # mismatch/ess below this is reported on the console
LOG_RATIO_LIMIT = 20.0


class MismatchTally:
    """Token sums of ``w``, ``w^2`` and ``w - 1 - log w`` (see the module docstring), added batch by batch."""

    def __init__(self) -> None:
        self.tokens = 0
        self.weight_sum = 0.0
        self.square_sum = 0.0
        self.k3_sum = 0.0

    def add(self, engine: torch.Tensor, trainer: torch.Tensor, mask: torch.Tensor) -> None:
        """Add the action tokens (``mask > 0``) of ``[S, T]`` log-probs where both are finite."""
        engine = engine.detach().to("cpu", torch.float64)
        trainer = trainer.detach().to("cpu", torch.float64)
        ok = (mask.cpu() > 0) & torch.isfinite(engine) & torch.isfinite(trainer)
        if not bool(ok.any()):
            return
        log_w = (trainer - engine)[ok].clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
        w = torch.exp(log_w)
        self.tokens += int(ok.sum())
        self.weight_sum += float(w.sum())
        self.square_sum += float((w * w).sum())
        self.k3_sum += float((torch.expm1(log_w) - log_w).sum())

    def metrics(self) -> dict[str, float]:
        """``mismatch/k3_kl``, ``mismatch/ess``, ``mismatch/chi2`` (nothing when no token was added)."""
        n = self.tokens
        if not n:
            return {}
        return {"mismatch/k3_kl": self.k3_sum / n,
                "mismatch/ess": self.weight_sum ** 2 / (n * self.square_sum) if self.square_sum > 0 else 0.0,
                "mismatch/chi2": self.square_sum / n - 1.0}


def mismatch_metrics(engine: torch.Tensor, trainer: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """``MismatchTally`` of one batch."""
    tally = MismatchTally()
    tally.add(engine, trainer, mask)
    return tally.metrics()


def mismatch_warning(metrics: dict) -> str | None:
    """One line when a limit is crossed (``KL_LIMIT``, ``ESS_LIMIT``), naming the values; None otherwise."""
    kl, ess = metrics.get("mismatch/k3_kl"), metrics.get("mismatch/ess")
    crossed = []
    if isinstance(kl, (int, float)) and kl > KL_LIMIT:
        crossed.append(f"k3 KL {kl:.3g} > {KL_LIMIT}")
    if isinstance(ess, (int, float)) and ess < ESS_LIMIT:
        crossed.append(f"effective sample size {ess:.3f} < {ESS_LIMIT}")
    if not crossed:
        return None
    return (f"[mismatch] the engine's sampling log-probs and the trainer's disagree ({', '.join(crossed)}): the "
            f"rollouts are off-policy for the trainer; check the engine's dtype and weights, or use "
            f"trainer.off_policy_correction")
