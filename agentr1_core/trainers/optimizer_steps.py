"""The optimizer and the bookkeeping of the update passes (``trainers.update``): AdamW with the configured kernel,
the guarded optimizer step (no NaN reaches the weights; it reports the gradient norms before clipping and whether
it clipped), per-update metric means (``UpdateTallies``), the rows of each optimizer step, the weights' change and
the gap between the engine's log-probs and the trainer's. It runs no forward or backward pass itself."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from agentr1_core.algorithms.base import StepBatch
from agentr1_core.algorithms.losses import OffPolicyCorrection, WeightTally, proximal_weights
from agentr1_core.algorithms.mismatch import MismatchTally
from agentr1_core.trainers.batching import ModelInputs
from agentr1_core.validation import OPTIMIZER_KERNELS


def make_optimizer(groups: list[dict[str, Any]], lr: float, betas: Sequence[float] = (0.9, 0.999),
                   weight_decay: float = 0.0, device: Any = "cpu", kernel: str = "auto") -> torch.optim.Optimizer:
    """AdamW with the ``kernel`` of ``trainer.optimizer_kernel``: ``fused`` (one kernel for all parameters; it updates
    them without bumping their in-place version counters), ``foreach`` (multi-tensor) or ``auto``: fused on CUDA,
    foreach elsewhere. Both run on a CPU too and give the same update up to float rounding."""
    if kernel not in OPTIMIZER_KERNELS:
        raise ValueError(f"optimizer kernel must be one of {', '.join(OPTIMIZER_KERNELS)}, got {kernel!r}")
    if kernel == "auto":
        kernel = "fused" if str(device).startswith("cuda") else "foreach"
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(float(b) for b in betas), weight_decay=weight_decay,
                             **{kernel: True})


@dataclass
class UpdateStats:
    """Accumulates per-micro-batch metrics into means (sums and counts, divided once in ``means``), plus counters."""

    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, float] = field(default_factory=dict)
    optimizer_steps: int = 0
    skipped_steps: int = 0
    inert_rows: int = 0  # rows not run because their loss and gradient are zero
    tokens: int = 0  # token positions of the rows (a shared prefix counts once per row)
    computed_tokens: int = 0  # token positions the forward ran (a shared prefix counts once per micro-batch)
    seconds: float = 0.0

    def add_tokens(self, inputs: ModelInputs) -> None:
        self.tokens += int(inputs.attention_mask.sum())
        self.computed_tokens += inputs.computed_tokens

    def add(self, metrics: dict[str, float], weight: float = 1.0) -> None:
        """Accumulate: a key ending in ``_max`` keeps its largest value, every other key its mean weighted by
        ``weight`` (e.g. a token mean by the tokens it covers, so that the result is the token mean of them all;
        nothing is added with weight 0)."""
        if weight <= 0:
            return
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and math.isfinite(float(v)):
                if k.endswith("_max"):
                    self.sums[k] = max(self.sums.get(k, float(v)), float(v))
                    self.counts[k] = 1.0
                    continue
                self.sums[k] = self.sums.get(k, 0.0) + float(v) * weight
                self.counts[k] = self.counts.get(k, 0.0) + weight

    def means(self) -> dict[str, float]:
        out = {k: self.sums[k] / self.counts[k] for k in self.sums}
        out.update(optimizer_steps=self.optimizer_steps, skipped_steps=self.skipped_steps,
                   update_tokens=self.tokens, update_computed_tokens=self.computed_tokens,
                   update_inert_rows=self.inert_rows,
                   update_tok_s=self.tokens / self.seconds if self.seconds > 0 else 0.0)
        return out


class WeightChange:
    """Measures ``||theta_after - theta_before||`` over the trained parameters (a cheap proof that an update landed).

    The copy of the weights is taken right before the first optimizer step (``mark``), after that step's backward
    pass has freed its activations, so it never adds to a forward's peak; the norm is taken one tensor at a time.
    ``enabled=False`` skips both."""

    def __init__(self, params: Sequence[torch.nn.Parameter], enabled: bool = True) -> None:
        self.params = [p for p in params] if enabled else []
        self.enabled = enabled
        self.before: list[torch.Tensor] | None = None

    def mark(self) -> None:
        """Copy the weights, once: call before every optimizer step."""
        if self.enabled and self.before is None:
            with torch.no_grad():
                self.before = [p.detach().clone() for p in self.params]

    def norm(self) -> float | None:
        if not self.enabled:
            return None
        if not self.params or self.before is None:  # no optimizer step ran
            return 0.0
        with torch.no_grad():
            total = sum(float(torch.linalg.vector_norm(p.detach() - b)) ** 2
                        for p, b in zip(self.params, self.before))
        return math.sqrt(total)


def zero_grads(params: Sequence[torch.nn.Parameter]) -> None:
    """Give every trained parameter a zero gradient (where it has none yet)."""
    for p in params:
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)


def grad_norm_of(params: Sequence[torch.nn.Parameter]) -> float:
    """The 2-norm of the gradients of ``params`` (those that have one) taken together; 0.0 when none has."""
    grads = [p.grad for p in params if p.grad is not None]
    return float(torch.nn.utils.get_total_norm(grads, foreach=True)) if grads else 0.0


def guarded_step(optimizer: torch.optim.Optimizer, params: Sequence[torch.nn.Parameter], max_grad_norm: float,
                 loss_ok: bool, stats: UpdateStats, scheduler: Any = None, prefix: str = "",
                 parts: dict[str, Sequence[torch.nn.Parameter]] | None = None) -> None:
    """Clip, then step only if the loss and the gradient norm are finite; otherwise drop the gradients.

    A step records ``grad_norm``: the norm of all of ``params``' gradients before clipping (what the clip compares
    with ``max_grad_norm``), ``grad_clip_fraction``: 1 when that norm was above ``max_grad_norm``, so the gradient
    was scaled down to it, else 0 (its mean over an update's steps is the fraction of steps clipped), and for each
    of ``parts`` (a name and some of ``params``) ``<name>_grad_norm``: their gradients' norm before clipping.
    ``prefix`` names the metrics and counters of a second optimizer (the separate critic's)."""
    params = [p for p in params if p.grad is not None]
    part_norms = {f"{name}_grad_norm": grad_norm_of(members) for name, members in (parts or {}).items()}
    limit = max_grad_norm if max_grad_norm > 0 else float("inf")
    norm = torch.nn.utils.clip_grad_norm_(params, limit, foreach=True) if params else torch.tensor(0.0)
    grad_norm = float(norm)
    if loss_ok and math.isfinite(grad_norm):
        if not prefix:
            stats.add({"lr": float(optimizer.param_groups[0]["lr"])})  # the rate this step uses
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        if not prefix:
            stats.optimizer_steps += 1
        stats.add({f"{prefix}grad_norm": grad_norm, f"{prefix}grad_clip_fraction": float(grad_norm > limit),
                   **part_norms})
    elif prefix:
        stats.add({f"{prefix}skipped_steps": 1.0})
    else:
        stats.skipped_steps += 1
    optimizer.zero_grad(set_to_none=True)


class LogprobGap:
    """|engine log-prob - trainer log-prob| over action tokens with finite values: mean and max."""

    def __init__(self) -> None:
        self.total, self.count, self.max = 0.0, 0, 0.0

    def add(self, engine: torch.Tensor, trainer: torch.Tensor, mask: torch.Tensor) -> None:
        trainer = trainer.detach().float().cpu()
        engine, mask = engine.float().cpu(), mask.cpu()
        ok = (mask > 0) & torch.isfinite(engine) & torch.isfinite(trainer)
        if bool(ok.any()):
            gap = (engine - trainer)[ok].abs()
            self.total += float(gap.sum())
            self.count += int(ok.sum())
            self.max = max(self.max, float(gap.max()))

    def metrics(self) -> dict[str, float]:
        if not self.count:
            return {}
        return {"logprob_gap_mean": self.total / self.count, "logprob_gap_max": self.max}


def correction_tallies(batch: StepBatch, correction: OffPolicyCorrection | None) -> WeightTally | None:
    """Hand the off-policy correction to the loss (``batch.extras["off_policy"]``); for ``decoupled`` with the
    engine's log-probs kept, return the tally of its weights over the whole batch (they are fixed before the
    update, so the ``offpolicy/*`` metrics come from it, not from the micro-batches)."""
    if correction is None:
        return None
    batch.extras["off_policy"] = correction
    if correction.mode == "decoupled" and "rollout_logprobs" in batch.extras:
        return proximal_weights(batch.old_logprobs, batch.extras["rollout_logprobs"], batch.action_mask,
                                correction)[1]
    return None


def mini_batches_of_pass(n: int, mini_batches: int, generator: torch.Generator | None) -> list[list[int]]:
    """The rows of each optimizer step of one pass over ``n`` rows: ``mini_batches`` slices, of a random order
    (drawn from ``generator``) when there are several."""
    order = torch.randperm(n, generator=generator).tolist() if mini_batches > 1 else list(range(n))
    chunks = max(1, min(mini_batches, n))
    return [order[m * n // chunks:(m + 1) * n // chunks] for m in range(chunks)]


@dataclass
class UpdateTallies:
    """What the micro-batches of one RL update add up to: metric means and counters (``UpdateStats``), the
    engine-vs-trainer log-prob gap and ``mismatch/*`` of the first mini-batch (None when the old log-probs were
    recomputed, which measured them already), ``onpolicy/*`` of the first micro-batch, and the decoupled
    correction's weights (fixed before the update)."""

    stats: UpdateStats
    gap: LogprobGap | None
    mismatch: MismatchTally | None
    fixed_weights: WeightTally | None
    onpolicy: dict[str, float] | None = None

    def metrics(self) -> dict[str, float]:
        return {**self.stats.means(), **(self.gap.metrics() if self.gap is not None else {}),
                **(self.mismatch.metrics() if self.mismatch is not None else {}), **(self.onpolicy or {}),
                **(self.fixed_weights.metrics() if self.fixed_weights is not None else {}), "update_skipped": 0}


def skipped_update(rows: int, fixed_weights: WeightTally | None, track_weight_change: bool) -> dict[str, float]:
    """The metrics of an update that did not run because no row carries a gradient (``update_skipped``)."""
    out = {**UpdateStats(inert_rows=rows).means(), "loss": 0.0, "pg_loss": 0.0, "policy_loss": 0.0,
           "update_skipped": 1, **(fixed_weights.metrics() if fixed_weights is not None else {})}
    if track_weight_change:
        out["weight_change"] = 0.0
    return out
