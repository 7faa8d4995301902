"""The optimisation passes of the local trainer: scoring (no grad), the RL policy update, and the SFT update.

``score_batch`` fills what the algorithm needs before advantages: log-probs of the current weights (replacing the
engine's as ``old_logprobs`` when the update takes several optimizer steps per rollout), reference log-probs for the
KL term, and critic values. ``policy_update`` runs ``update_epochs`` passes of ``mini_batches`` optimizer steps, each
over micro-batches of ``micro_batch_size`` steps with gradient accumulation. ``sft_update`` trains cross-entropy on
the response tokens of expert steps with the same rows and masks.

Every optimizer step goes through ``guarded_step``: a non-finite loss or gradient norm skips the step (gradients are
dropped and the skip counted), so no NaN ever reaches the weights.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from agentr1_core.algorithms.base import Algorithm, StepBatch
from agentr1_core.trainers.batching import StepRow, collate, micro_batches
from agentr1_core.trainers.forward import response_forward


@dataclass
class Policy:
    """What the update passes need: the trained module, optional critic head, optional reference."""

    model: Any
    pad_id: int
    device: Any = "cpu"
    value_head: torch.nn.Module | None = None
    ref_model: Any = None  # a frozen copy, or None
    ref_context: Callable[[], Any] | None = None  # e.g. a LoRA model's disable_adapter (reference = base weights)
    params: list[torch.nn.Parameter] = field(default_factory=list)  # what gradient clipping covers


@dataclass
class UpdateStats:
    """Accumulates per-micro-batch metrics into means, plus counters."""

    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    optimizer_steps: int = 0
    skipped_steps: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def add(self, metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and math.isfinite(float(v)):
                self.sums[k] = self.sums.get(k, 0.0) + float(v)
                self.counts[k] = self.counts.get(k, 0) + 1

    def means(self) -> dict[str, float]:
        out = {k: self.sums[k] / self.counts[k] for k in self.sums}
        out.update(optimizer_steps=self.optimizer_steps, skipped_steps=self.skipped_steps,
                   update_tokens=self.tokens,
                   update_tok_s=self.tokens / self.seconds if self.seconds > 0 else 0.0)
        return out


class WeightChange:
    """Measures ``||theta_after - theta_before||`` over the trained parameters (a cheap proof that an update landed)."""

    def __init__(self, params: Sequence[torch.nn.Parameter]) -> None:
        self.params = list(params)
        self.before = [p.detach().clone() for p in self.params]

    def norm(self) -> float:
        total = sum(float((p.detach() - b).float().pow(2).sum()) for p, b in zip(self.params, self.before))
        return math.sqrt(total)


def _sub_batch(batch: StepBatch, idx: list[int]) -> StepBatch:
    return batch.select(torch.tensor(idx, dtype=torch.long))


def guarded_step(optimizer: torch.optim.Optimizer, policy: Policy, max_grad_norm: float, loss_ok: bool,
                 stats: UpdateStats, scheduler: Any = None) -> None:
    """Clip, then step only if the loss and the gradient norm are finite; otherwise drop the gradients."""
    params = [p for p in policy.params if p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm > 0 else float("inf")) \
        if params else torch.tensor(0.0)
    grad_norm = float(norm)
    if loss_ok and math.isfinite(grad_norm):
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        stats.optimizer_steps += 1
        stats.add({"grad_norm": grad_norm})
    else:
        stats.skipped_steps += 1
    optimizer.zero_grad(set_to_none=True)


@torch.no_grad()
def score_batch(policy: Policy, rows: Sequence[StepRow], batch: StepBatch, micro_batch_size: int,
                temperature: float, recompute_old: bool, need_ref: bool, need_values: bool) -> dict[str, float]:
    """Fill ``batch.old_logprobs`` (if ``recompute_old``), ``batch.ref_logprobs`` and ``batch.values`` in place."""
    if not (recompute_old or need_ref or need_values):
        return {}
    width = batch.action_mask.shape[1]
    if need_ref:
        batch.ref_logprobs = torch.zeros_like(batch.old_logprobs)
    if need_values:
        batch.values = torch.zeros(batch.num_steps)
    if recompute_old:
        batch.extras["rollout_logprobs"] = batch.old_logprobs.clone()
    policy.model.eval()
    for idx in micro_batches(range(len(rows)), rows, micro_batch_size):
        inputs = collate([rows[i] for i in idx], policy.pad_id).to(policy.device)
        index = torch.tensor(idx, dtype=torch.long)
        if recompute_old or need_values:
            out = response_forward(policy.model, inputs, width, temperature,
                                   value_head=policy.value_head if need_values else None)
            if recompute_old:
                batch.old_logprobs[index] = out.logprobs.float().cpu()
            if need_values:
                batch.values[index] = out.values.float().cpu()
        if need_ref:
            ctx = policy.ref_context() if policy.ref_context is not None else contextlib.nullcontext()
            with ctx:
                ref = policy.ref_model if policy.ref_model is not None else policy.model
                batch.ref_logprobs[index] = response_forward(ref, inputs, width, temperature).logprobs.float().cpu()
    metrics = {}
    if recompute_old:
        mask = batch.action_mask > 0
        rollout = batch.extras["rollout_logprobs"]
        ok = mask & torch.isfinite(rollout)
        if bool(ok.any()):
            metrics["engine_trainer_logprob_diff"] = float((rollout - batch.old_logprobs)[ok].abs().mean())
    return metrics


def policy_update(policy: Policy, algorithm: Algorithm, optimizer: torch.optim.Optimizer,
                  rows: Sequence[StepRow], batch: StepBatch, advantages: torch.Tensor, returns: torch.Tensor,
                  micro_batch_size: int, mini_batches: int, update_epochs: int, temperature: float,
                  max_grad_norm: float, value_coef: float = 1.0, scheduler: Any = None,
                  generator: torch.Generator | None = None, progress: bool = True) -> dict[str, float]:
    """The RL update over one rollout; returns mean metrics (loss, kl, entropy, clip fraction, grad norm, ...)."""
    stats = UpdateStats()
    start = time.perf_counter()
    width = batch.action_mask.shape[1]
    n = len(rows)
    use_critic = algorithm.needs_critic and policy.value_head is not None
    change = WeightChange(policy.params)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=max(1, update_epochs) * len(micro_batches(range(n), rows, micro_batch_size)), desc="update",
                   unit="mb", leave=False, dynamic_ncols=True)
    policy.model.train()
    for _epoch in range(max(1, update_epochs)):
        order = torch.randperm(n, generator=generator).tolist() if mini_batches > 1 else list(range(n))
        chunks = max(1, min(mini_batches, n))
        for m in range(chunks):
            mini = order[m * n // chunks:(m + 1) * n // chunks]
            loss_ok = True
            for idx in micro_batches(mini, rows, micro_batch_size):
                sub = _sub_batch(batch, idx)
                inputs = collate([rows[i] for i in idx], policy.pad_id).to(policy.device)
                out = response_forward(policy.model, inputs, width, temperature, with_entropy=True,
                                       value_head=policy.value_head if use_critic else None)
                index = torch.tensor(idx, dtype=torch.long)
                result = algorithm.policy_loss(out.logprobs, sub, advantages[index].to(out.logprobs.device),
                                               entropy=out.entropy)
                loss = result.loss
                stats.add({"policy_loss": float(loss.detach()), **result.metrics})
                if use_critic:
                    vres = algorithm.value_loss(out.values, sub, returns[index].to(out.values.device))
                    loss = loss + value_coef * vres.loss
                    stats.add(vres.metrics)
                stats.add({"loss": float(loss.detach())})
                stats.tokens += int(inputs.attention_mask.sum())
                if bar is not None:
                    bar.update(1)
                if not torch.isfinite(loss):
                    loss_ok = False
                    continue
                (loss * (len(idx) / len(mini))).backward()
            guarded_step(optimizer, policy, max_grad_norm, loss_ok, stats, scheduler)
    if bar is not None:
        bar.close()
    policy.model.eval()
    stats.seconds = time.perf_counter() - start
    return {**stats.means(), "weight_change": change.norm()}


def sft_update(policy: Policy, optimizer: torch.optim.Optimizer, rows: Sequence[StepRow], epochs: int,
               batch_size: int, micro_batch_size: int, max_grad_norm: float,
               generator: torch.Generator | None = None, progress: bool = True) -> dict[str, float]:
    """Cross-entropy on the response tokens of ``rows`` (prompt tokens masked), ``batch_size`` steps per update."""
    stats = UpdateStats()
    start = time.perf_counter()
    n = len(rows)
    if n == 0:
        return stats.means()
    batch_size = max(1, batch_size)
    total = max(1, epochs) * math.ceil(n / batch_size)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc="sft", unit="step", leave=False, dynamic_ncols=True)
    change = WeightChange(policy.params)
    policy.model.train()
    try:
        for _epoch in range(max(1, epochs)):
            order = torch.randperm(n, generator=generator).tolist()
            for b in range(0, n, batch_size):
                chunk = order[b:b + batch_size]
                tokens_in_chunk = sum(len(rows[i].response_ids) for i in chunk) or 1
                loss_ok = True
                for idx in micro_batches(chunk, rows, micro_batch_size):
                    sub = [rows[i] for i in idx]
                    inputs = collate(sub, policy.pad_id).to(policy.device)
                    width = max(len(r.response_ids) for r in sub) or 1
                    out = response_forward(policy.model, inputs, width)
                    resp_tokens = sum(len(r.response_ids) for r in sub)
                    loss = -out.logprobs.sum() / tokens_in_chunk
                    stats.add({"sft_nll": float(-out.logprobs.detach().sum()) / max(1, resp_tokens)})
                    stats.tokens += int(inputs.attention_mask.sum())
                    if not torch.isfinite(loss):
                        loss_ok = False
                        continue
                    loss.backward()
                guarded_step(optimizer, policy, max_grad_norm, loss_ok, stats)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(nll=f"{stats.sums.get('sft_nll', 0) / max(1, stats.counts.get('sft_nll', 1)):.3f}")
    finally:
        if bar is not None:
            bar.close()
        policy.model.eval()
    stats.seconds = time.perf_counter() - start
    return {**stats.means(), "weight_change": change.norm()}
