"""The optimisation passes of the local trainer: scoring (no grad), the RL policy update, and the SFT update.

``score_batch`` fills what the algorithm needs before advantages: log-probs of the current weights (replacing the
engine's as ``old_logprobs`` when asked to recompute them), reference log-probs for the KL term, and critic values.
``policy_update`` runs ``update_epochs`` passes of ``mini_batches`` optimizer steps, each over micro-batches of
``micro_batch_size`` steps with gradient accumulation. The micro-batch size is a memory knob only: every micro-batch's
loss is divided by counts of its whole mini-batch (``Algorithm.loss_denominators``), so the summed gradient is the
mini-batch's. Every pass runs a micro-batch's common token prefix once (``Policy.share_prefix``, see
``batching.collate``), and the RL update skips rows without a gradient (``policy_update``; its passes are
``GradientPasses``: a mini-batch's gradient summed over its micro-batches, a micro-batch's forward and loss, the
critic's part, the optimizer steps). ``sft_update`` trains
cross-entropy on the response tokens of expert steps with the same rows and masks. On the CPU the passes without
gradients run their linear layers through oneDNN (``Policy.onednn_linears``, see ``agentr1_core.cpu_linears``).

The critic is either a linear head on the policy trunk (``Policy.value_head``: its loss is added to the policy loss
with ``value_coef`` and shares the policy's optimizer step and clipping) or a separate model (``Policy.critic``: own
trunk, head, optimizer and clipping). ``state_values`` evaluates it on plain prompts (bootstrapping truncated
episodes).

Every optimizer step goes through ``optimizer_steps.guarded_step``: a non-finite loss or gradient norm skips the step
(gradients are dropped and the skip counted), so no NaN ever reaches the weights; it reports the norm before clipping,
whether it clipped, and the policy's and the critic's own norms. The optimizers
(``optimizer_steps.make_optimizer``) are AdamW with the kernel of ``trainer.optimizer_kernel``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from agentr1_core.algorithms.base import Algorithm, StepBatch, inert_rows_of
from agentr1_core.algorithms.losses import OffPolicyCorrection
from agentr1_core.algorithms.mismatch import MismatchTally
from agentr1_core.cpu_linears import CpuLinears
from agentr1_core.trainers.batching import (ModelInputs, StepRow, collate, critic_state_row, has_critic_prefix,
                                            micro_batches)
from agentr1_core.trainers.forward import ForwardOutput, response_forward
from agentr1_core.trainers.optimizer_steps import (LogprobGap, UpdateStats, UpdateTallies, WeightChange,
                                                   correction_tallies, guarded_step, mini_batches_of_pass,
                                                   skipped_update, zero_grads)


@dataclass
class Critic:
    """A separate value model: a causal LM trunk plus a linear head read at the state's last token, with its own
    optimizer and gradient clipping."""

    model: Any
    head: torch.nn.Module
    optimizer: torch.optim.Optimizer
    params: list[torch.nn.Parameter]
    max_grad_norm: float = 1.0


@dataclass
class Policy:
    """What the update passes need: the trained module, optional critic (head or separate), optional reference."""

    model: Any
    pad_id: int
    device: Any = "cpu"
    value_head: torch.nn.Module | None = None  # critic head on the policy trunk
    ref_model: Any = None  # a frozen copy, or None
    ref_context: Callable[[], Any] | None = None  # e.g. a LoRA model's disable_adapter (reference = base weights)
    params: list[torch.nn.Parameter] = field(default_factory=list)  # what gradient clipping covers
    critic: Critic | None = None  # a separate critic model (instead of value_head)
    share_prefix: int = 0  # run a micro-batch's common token prefix once when it is at least this long (0: never)
    micro_batch_tokens: int = 0  # at most this many computed token positions per micro-batch (0: rows only)
    onednn_linears: bool = False  # on CPU, the linear layers of passes without gradients go through oneDNN
    activation_checkpointing: bool = False  # the model recomputes its blocks' activations in the backward pass
    activations_peak_mb: float = 0.0  # the most a micro-batch's forward saved for its backward, since last taken

    @property
    def has_critic(self) -> bool:
        return self.value_head is not None or self.critic is not None

    @property
    def grad_share_prefix(self) -> int:
        """``share_prefix`` for the passes with gradients: off under activation checkpointing (a recomputed block
        would write its keys into the shared prefix's cache a second time)."""
        return 0 if self.activation_checkpointing else self.share_prefix

    def linears(self) -> contextlib.AbstractContextManager:
        """Where this policy's passes compute their linear layers: oneDNN on CPU when asked, else ``F.linear``."""
        if self.onednn_linears and torch.device(self.device).type == "cpu":
            return CpuLinears(weight_major_rows=0, onednn=True)
        return contextlib.nullcontext()


class SavedActivations:
    """``with SavedActivations(policy) as saved: forward + loss``; ``saved.mb`` is then what autograd holds for the
    backward pass (the micro-batch's activations at their peak), measured through torch's saved-tensor hooks: each
    storage once, the models' parameters left out. Under activation checkpointing only what the checkpointed blocks
    keep between them is seen. The highest value goes to ``policy.activations_peak_mb``."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        models = [policy.model] + ([policy.critic.model] if policy.critic is not None else [])
        self.skip = {p.untyped_storage().data_ptr() for m in models for p in m.parameters()}
        self.sizes: dict[int, int] = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, tensor: Any) -> Any:
        if not isinstance(tensor, torch.Tensor):
            return tensor
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key and key not in self.skip:
            self.sizes[key] = storage.nbytes()
        # Detached: a saved output packed as itself would hold its own graph node (tensor -> grad_fn -> saved
        # tensor), a cycle the backward pass breaks only for the nodes it runs; the parts of a forward that no
        # loss reaches (a shared prefix's last block) would then never be freed. The backward formulas read the
        # values only, and the version counter is shared, so in-place changes are still caught.
        return tensor.detach()

    @property
    def mb(self) -> float:
        return sum(self.sizes.values()) / 2 ** 20

    def __enter__(self) -> "SavedActivations":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)
        self.policy.activations_peak_mb = max(self.policy.activations_peak_mb, self.mb)


def measure_if_largest(policy: Policy, inputs: ModelInputs, largest: list[int]) -> contextlib.AbstractContextManager:
    """``SavedActivations`` for a micro-batch that computes more token positions than any before it in this update
    (``largest[0]``, updated), else nothing: what a forward saves grows with the positions it runs, so the update's
    peak is the largest micro-batch's, and the hooks (a Python call per saved tensor, about 3% of a micro-batch's
    forward and backward) run on the first micro-batch and those that outgrow it, not on every one."""
    if inputs.computed_tokens <= largest[0]:
        return contextlib.nullcontext()
    largest[0] = inputs.computed_tokens
    return SavedActivations(policy)


def with_policy_linears(fn: Callable) -> Callable:
    """Run a pass without gradients (whose first argument is the ``Policy``) inside ``policy.linears()``."""

    @functools.wraps(fn)
    def wrapper(policy: Policy, *args, **kwargs):
        with policy.linears():
            return fn(policy, *args, **kwargs)

    return wrapper


def _sub_batch(batch: StepBatch, idx: list[int]) -> StepBatch:
    return batch.select(torch.tensor(idx, dtype=torch.long))


def forward_with_values(policy: Policy, inputs: ModelInputs, width: int, temperature: float = 1.0,
                        with_entropy: bool = False, with_values: bool = True,
                        critic_inputs: ModelInputs | None = None) -> tuple[ForwardOutput, torch.Tensor | None]:
    """The policy forward (log-probs, optional entropy) and the critic's values of the same rows: from the head on
    the policy trunk (one pass) or from the separate critic model (a second pass). ``critic_inputs`` (the rows as
    the critic reads them, ``batching.critic_state_row``: a privileged prefix first) get a pass of their own, on the
    policy trunk or the separate critic; the policy's pass is then exactly the one without a critic."""
    joint = with_values and policy.critic is None and critic_inputs is None
    head = policy.value_head if joint else None
    out = response_forward(policy.model, inputs, width, temperature, with_entropy=with_entropy, value_head=head)
    if not with_values:
        return out, None
    if joint:
        return out, out.values
    return out, state_values_of_rows(policy, critic_inputs if critic_inputs is not None else inputs,
                                     1 if critic_inputs is not None else width)


@with_policy_linears
@torch.no_grad()
def state_values(policy: Policy, prompts: Sequence[Sequence[int]], micro_batch_size: int) -> torch.Tensor:
    """The critic's value ``V(s)`` of each prompt (a state the policy is about to act in), as float32 ``[N]``.

    The value is read at the state's last token, exactly as for a step whose prompt is that state."""
    out = torch.zeros(len(prompts))
    if not prompts or not policy.has_critic:
        return out
    rows = [StepRow(prompt_ids=list(p), response_ids=[int(policy.pad_id)], old_logprobs=[0.0], traj=i, group=0,
                    step_index=0, reward=0.0, done=False, truncated=False) for i, p in enumerate(prompts)]
    model = policy.critic.model if policy.critic is not None else policy.model
    head = policy.critic.head if policy.critic is not None else policy.value_head
    was_training = model.training
    model.eval()
    try:
        for idx in micro_batches(range(len(rows)), rows, micro_batch_size, policy.share_prefix,
                                 policy.micro_batch_tokens):
            inputs = collate([rows[i] for i in idx], policy.pad_id, policy.share_prefix).to(policy.device)
            values = response_forward(model, inputs, 1, value_head=head).values
            out[torch.tensor(idx, dtype=torch.long)] = values.float().cpu()
    finally:
        model.train(was_training)
    return out


@with_policy_linears
@torch.no_grad()
def score_batch(policy: Policy, rows: Sequence[StepRow], batch: StepBatch, micro_batch_size: int,
                temperature: float, recompute_old: bool, need_ref: bool, need_values: bool) -> dict[str, float]:
    """Fill ``batch.old_logprobs`` (if ``recompute_old``), ``batch.ref_logprobs`` and ``batch.values`` in place.

    With ``recompute_old`` the engine's log-probs are kept in ``batch.extras["rollout_logprobs"]`` and their gap to
    the trainer's is returned (``logprob_gap_mean`` / ``logprob_gap_max``, and the ``mismatch/*`` diagnostics of
    ``algorithms.mismatch``)."""
    if not (recompute_old or need_ref or need_values):
        return {}
    width = batch.action_mask.shape[1]
    if need_ref:
        batch.ref_logprobs = torch.zeros_like(batch.old_logprobs)
    if need_values:
        batch.values = torch.zeros(batch.num_steps)
    if recompute_old:
        batch.extras["rollout_logprobs"] = batch.old_logprobs.clone()
    gap, mismatch = LogprobGap(), MismatchTally()
    prefixed = need_values and has_critic_prefix(rows)  # the critic reads its own, prefixed rows (critic.prefix)
    policy.model.eval()
    for idx in micro_batches(range(len(rows)), rows, micro_batch_size, policy.share_prefix,
                             policy.micro_batch_tokens):
        inputs = collate([rows[i] for i in idx], policy.pad_id, policy.share_prefix).to(policy.device)
        index = torch.tensor(idx, dtype=torch.long)
        critic_inputs = critic_inputs_of(policy, [rows[i] for i in idx], policy.share_prefix) if prefixed else None
        if recompute_old or need_values:
            if recompute_old:
                out, values = forward_with_values(policy, inputs, width, temperature, with_values=need_values,
                                                  critic_inputs=critic_inputs)
                gap.add(batch.old_logprobs[index], out.logprobs, batch.action_mask[index])
                mismatch.add(batch.old_logprobs[index], out.logprobs, batch.action_mask[index])
                batch.old_logprobs[index] = out.logprobs.float().cpu()
            elif critic_inputs is not None:  # values only, of the prefixed rows
                values = state_values_of_rows(policy, critic_inputs, 1)
            else:  # values only: the separate critic needs no policy forward
                values = state_values_of_rows(policy, inputs, width)
            if need_values:
                batch.values[index] = values.float().cpu()
        if need_ref:
            ctx = policy.ref_context() if policy.ref_context is not None else contextlib.nullcontext()
            with ctx:
                ref = policy.ref_model if policy.ref_model is not None else policy.model
                batch.ref_logprobs[index] = response_forward(ref, inputs, width, temperature).logprobs.float().cpu()
    return {**gap.metrics(), **mismatch.metrics()}


def critic_inputs_of(policy: Policy, rows: Sequence[StepRow], share_prefix: int) -> ModelInputs:
    """The model inputs of ``rows`` as the critic reads them (``batching.critic_state_row``)."""
    return collate([critic_state_row(r) for r in rows], policy.pad_id, share_prefix).to(policy.device)


def state_values_of_rows(policy: Policy, inputs: ModelInputs, width: int) -> torch.Tensor:
    """Critic values of collated step rows (no policy log-probs are needed)."""
    if policy.critic is not None:
        return response_forward(policy.critic.model, inputs, width, value_head=policy.critic.head).values
    return response_forward(policy.model, inputs, width, value_head=policy.value_head).values


@dataclass(frozen=True)
class UpdateSettings:
    """The knobs of one RL update (``policy_update``), from the ``trainer`` and ``rollout`` config sections."""

    micro_batch_size: int
    mini_batches: int = 1
    update_epochs: int = 1
    temperature: float = 1.0  # the sampling temperature the log-probs are computed at
    max_grad_norm: float = 1.0  # 0: no clipping
    value_coef: float = 1.0  # weight of a value head's loss in the policy's step
    skip_inert: bool = True  # do not run rows without a gradient (``Algorithm.inert_rows``)
    track_weight_change: bool = True
    progress: bool = True
    correction: OffPolicyCorrection | None = None  # importance weights for stale or mismatched sampling
    step_without_gradient: bool = False  # step the optimizer even when no row carries a gradient

    @classmethod
    def from_config(cls, cfg: Any) -> "UpdateSettings":
        tr = cfg.trainer
        return cls(micro_batch_size=int(tr.micro_batch_size), mini_batches=int(tr.mini_batches),
                   update_epochs=int(tr.update_epochs), temperature=float(cfg.rollout.temperature),
                   max_grad_norm=float(tr.max_grad_norm), value_coef=float(tr.value_coef),
                   skip_inert=bool(tr.skip_inert_rows), correction=off_policy_correction(cfg),
                   step_without_gradient=bool(tr.step_without_gradient))


def off_policy_correction(cfg: Any) -> OffPolicyCorrection | None:
    """``trainer.off_policy_correction`` / ``importance_cap`` / ``importance_cap_mode`` / ``importance_level``
    checked (a one-line ``ConfigError``), or None for ``none``."""
    from agentr1_core.config import ConfigError

    tr = cfg.trainer
    try:
        correction = OffPolicyCorrection(mode=str(tr.off_policy_correction).strip().lower(),
                                         cap=float(tr.importance_cap),
                                         cap_mode=str(tr.importance_cap_mode).strip().lower(),
                                         level=str(tr.importance_level).strip().lower())
    except ValueError as exc:
        raise ConfigError(f"config error at trainer: {exc}") from None
    return correction if correction.active else None


def on_policy_metrics(logprobs: torch.Tensor, batch: StepBatch, metrics: dict[str, float]) -> dict[str, float]:
    """``onpolicy/*``: what the first micro-batch of an update sees before any optimizer step. On-policy (one
    rollout, the first iteration or recomputed old log-probs) every one of them is 0 up to float noise: the largest
    |ratio - 1|, the approximate KL to the old policy, the clip fraction and the KL to the reference."""
    mask = batch.action_mask > 0
    delta = (logprobs.detach().float() - batch.old_logprobs.to(logprobs.device).float())
    ok = mask & torch.isfinite(delta)
    dev = (torch.exp(delta[ok]) - 1.0).abs()
    out = {"onpolicy/ratio_dev_max": float(dev.max()) if dev.numel() else 0.0,
           "onpolicy/approx_kl": abs(float(metrics.get("approx_kl", 0.0))),
           "onpolicy/clip_fraction": float(metrics.get("clip_fraction", 0.0))}
    if "kl" in metrics:
        out["onpolicy/ref_kl"] = abs(float(metrics["kl"]))
    return out


@dataclass
class GradientPasses:
    """The forward and backward passes of one RL update: each mini-batch's gradient, summed over its
    micro-batches, and the optimizer steps that follow. ``inert`` marks the rows not run (None: run every row)."""

    policy: Policy
    algorithm: Algorithm
    rows: Sequence[StepRow]
    batch: StepBatch
    advantages: torch.Tensor
    returns: torch.Tensor
    settings: UpdateSettings
    use_critic: bool
    inert: list[bool] | None
    tallies: UpdateTallies
    largest: list[int] = field(default_factory=lambda: [0])  # see measure_if_largest
    bar: Any = None  # the progress bar, one tick per micro-batch

    def __post_init__(self) -> None:
        # the separate critic model this update trains, if any (the value head on the trunk is the policy's)
        self.critic: Critic | None = self.policy.critic if self.use_critic else None
        # the critic reads its own, prefixed rows (critic.prefix)
        self.prefixed = self.use_critic and has_critic_prefix(self.rows)

    def rows_to_run(self, rows: Sequence[int]) -> list[int]:
        return [i for i in rows if self.inert is None or not self.inert[i]]

    def open_progress_bar(self) -> None:
        if not self.settings.progress:
            return
        from tqdm.auto import tqdm

        plan = micro_batches(self.rows_to_run(range(len(self.rows))), self.rows, self.settings.micro_batch_size,
                             self.policy.grad_share_prefix, self.policy.micro_batch_tokens)
        self.bar = tqdm(total=max(1, self.settings.update_epochs) * len(plan), desc="update", unit="mb",
                        leave=False, dynamic_ncols=True)

    def close_progress_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def train_mode(self, training: bool) -> None:
        self.policy.model.train(training)
        if self.critic is not None:
            self.critic.model.train(training)

    def accumulate(self, mini: list[int], first_mini_batch: bool) -> bool:
        """Backward every micro-batch of ``mini`` into the gradients; False when a loss was not finite (that
        micro-batch is not backpropagated, and the step is dropped). The micro-batch losses add up to the
        mini-batch's (``Algorithm.loss_denominators``); their sums are added to the metrics once per mini-batch."""
        stats = self.tallies.stats
        mini_index = torch.tensor(mini, dtype=torch.long)
        denominators = self.algorithm.loss_denominators(_sub_batch(self.batch, mini), self.advantages[mini_index])
        loss_ok = True
        sums: dict[str, float] = {}
        active = self.rows_to_run(mini)
        if self.inert is not None:
            stats.inert_rows += len(mini) - len(active)
            if not active:  # what the full pass would leave: zero loss and gradients; the optimizer steps the same
                zero_grads(self.policy.params)
                sums = {"policy_loss": 0.0, "pg_loss": 0.0, "loss": 0.0}
        for idx in micro_batches(active, self.rows, self.settings.micro_batch_size, self.policy.grad_share_prefix,
                                 self.policy.micro_batch_tokens):
            share = 1.0 if denominators is not None else len(idx) / len(mini)
            loss, parts = self.micro_batch_loss(idx, denominators, share, first_mini_batch)
            for k, v in parts.items():
                sums[k] = sums.get(k, 0.0) + v
            if self.bar is not None:
                self.bar.update(1)
            if not torch.isfinite(loss):
                loss_ok = False
                continue
            loss.backward()
        stats.add(sums)  # per mini-batch: the micro-batch parts add up to the mini-batch loss
        if "value_loss" in sums:
            stats.add({"vf_loss": sums["value_loss"]})
        return loss_ok

    def micro_batch_loss(self, idx: list[int], denominators: Any, share: float,
                         first_mini_batch: bool) -> tuple[torch.Tensor, dict[str, float]]:
        """The forward pass of the rows ``idx`` and their loss (policy, plus the critic's), with its parts as
        numbers (``policy_loss``, ``pg_loss``, ``value_loss``, ``loss``); the forward's metrics go to the tallies."""
        policy, tallies = self.policy, self.tallies
        sub = _sub_batch(self.batch, idx).to(policy.device)
        if denominators is not None:
            sub.extras = {**sub.extras, "loss_denominators": denominators}
        inputs = collate([self.rows[i] for i in idx], policy.pad_id, policy.grad_share_prefix).to(policy.device)
        index = torch.tensor(idx, dtype=torch.long)
        critic_inputs = (critic_inputs_of(policy, [self.rows[i] for i in idx], policy.grad_share_prefix)
                         if self.prefixed else None)
        with measure_if_largest(policy, inputs, self.largest):
            out, values = forward_with_values(policy, inputs, self.batch.action_mask.shape[1],
                                              self.settings.temperature, with_entropy=True,
                                              with_values=self.use_critic, critic_inputs=critic_inputs)
            result = self.algorithm.policy_loss(out.logprobs, sub, self.advantages[index].to(out.logprobs.device),
                                                entropy=out.entropy)
        if tallies.gap is not None and first_mini_batch:
            tallies.gap.add(sub.old_logprobs, out.logprobs, sub.action_mask)
            tallies.mismatch.add(sub.old_logprobs, out.logprobs, sub.action_mask)
        loss = result.loss * share
        parts = {"policy_loss": float(loss.detach())}
        self.add_policy_metrics(dict(result.metrics), out.logprobs, sub, share, parts)
        if self.use_critic:
            loss = loss + self.value_loss(values, sub, index, share, parts)
        parts["loss"] = float(loss.detach())
        tallies.stats.add_tokens(inputs)
        return loss, parts

    def add_policy_metrics(self, metrics: dict[str, float], logprobs: torch.Tensor, sub: StepBatch, share: float,
                           parts: dict[str, float]) -> None:
        """The policy loss's metrics into the tallies: ``onpolicy/*`` from the first micro-batch, ``pg_loss`` as a
        part of the loss, the correction's weights as token means (unless fixed before the update)."""
        tallies = self.tallies
        if tallies.onpolicy is None:
            tallies.onpolicy = on_policy_metrics(logprobs, sub, metrics)
        if "pg_loss" in metrics:  # a micro-batch's part of the mini-batch's loss, summed like the loss
            parts["pg_loss"] = metrics.pop("pg_loss") * share
        weights = {k: metrics.pop(k) for k in list(metrics) if k.startswith("offpolicy/")}
        if tallies.fixed_weights is None:  # token means: weighted by the tokens they cover
            tallies.stats.add(weights, weight=float(metrics.get("valid_tokens", 0.0)))
        tallies.stats.add(metrics)

    def value_loss(self, values: torch.Tensor, sub: StepBatch, index: torch.Tensor, share: float,
                   parts: dict[str, float]) -> torch.Tensor:
        """The critic's loss of the micro-batch as it enters the backward pass: times ``value_coef`` for the head
        on the policy trunk (it shares the policy's step), as it is for a separate critic (its own step)."""
        vres = self.algorithm.value_loss(values, sub, self.returns[index].to(values.device))
        vloss = vres.loss * share
        parts["value_loss"] = float(vloss.detach())
        self.tallies.stats.add({k: v for k, v in vres.metrics.items() if k != "vf_loss"})
        return self.settings.value_coef * vloss if self.critic is None else vloss

    def gradient_parts(self) -> dict[str, list[torch.nn.Parameter]]:
        """What the policy's optimizer step reports a gradient norm of besides the whole: the policy's own
        parameters, and, with the value head on the trunk (in the same step and clip), the head's."""
        head = self.policy.value_head
        head_ids = {id(p) for p in head.parameters()} if head is not None else set()
        parts = {"policy": [p for p in self.policy.params if id(p) not in head_ids]}
        if head_ids and self.use_critic:
            parts["critic"] = [p for p in self.policy.params if id(p) in head_ids]
        return parts

    def step(self, optimizer: torch.optim.Optimizer, scheduler: Any, loss_ok: bool) -> None:
        """The policy's optimizer step (with the value head on its trunk, if any), then the separate critic's."""
        stats = self.tallies.stats
        guarded_step(optimizer, self.policy.params, self.settings.max_grad_norm, loss_ok, stats, scheduler,
                     parts=self.gradient_parts())
        if self.critic is not None:
            guarded_step(self.critic.optimizer, self.critic.params, self.critic.max_grad_norm, loss_ok, stats,
                         prefix="critic_")


def policy_update(policy: Policy, algorithm: Algorithm, optimizer: torch.optim.Optimizer,
                  rows: Sequence[StepRow], batch: StepBatch, advantages: torch.Tensor, returns: torch.Tensor,
                  settings: UpdateSettings, scheduler: Any = None,
                  generator: torch.Generator | None = None) -> dict[str, float]:
    """The RL update over one rollout; returns mean metrics (loss, kl, entropy, clip fraction, grad norm, ...).

    Losses and gradients do not depend on ``micro_batch_size`` (see the module docstring). Rows the algorithm calls
    inert (``Algorithm.inert_rows``: zero loss and gradient, e.g. every sample of a GRPO group scored the same) are
    not run (``skip_inert``); with a critic only rows whose value loss is zero as well (``value_inert_rows``: a
    fresh critic before the first reward). The update is the same, and the metrics of the forward (entropy, ratios,
    clip fractions) cover the rows that ran. ``update_inert_rows`` counts them. When every row is inert, no row
    carries a gradient and the update is skipped (``update_skipped`` 1: no forward, no optimizer or scheduler step,
    so no momentum moves the weights) unless ``settings.step_without_gradient``. Unless the old log-probs were
    recomputed, the first mini-batch's forward (before any optimizer step) measures the engine-vs-trainer log-prob
    gap and the ``mismatch/*`` diagnostics for free, and the first micro-batch's gives ``on_policy_metrics``.

    The ``offpolicy/*`` metrics of a correction are token means: with ``decoupled`` over every valid token of the
    batch (its weights are fixed before the update, as on the verl backend), with ``tis`` over the tokens of every
    micro-batch run (its weights move with the policy).

    Gradient norms (``optimizer_steps.guarded_step``): ``grad_norm`` is what the policy's step clips, before
    clipping (with the value head on the trunk, the policy's and the head's gradients together), and
    ``grad_clip_fraction`` the fraction of steps it was above ``max_grad_norm``; ``policy_grad_norm`` is the
    policy's parameters' alone, ``critic_grad_norm`` the value head's or the separate critic's (whose own step adds
    ``critic_grad_clip_fraction``)."""
    start = time.perf_counter()
    use_critic = algorithm.needs_critic and policy.has_critic
    gap = LogprobGap() if "rollout_logprobs" not in batch.extras else None
    tallies = UpdateTallies(UpdateStats(), gap, MismatchTally() if gap is not None else None,
                            correction_tallies(batch, settings.correction))
    inert_mask = inert_rows_of(algorithm, batch, advantages, returns, use_critic)
    if len(rows) and inert_mask is not None and bool(inert_mask.all()) and not settings.step_without_gradient:
        return skipped_update(len(rows), tallies.fixed_weights, settings.track_weight_change)
    inert = inert_mask.tolist() if inert_mask is not None and settings.skip_inert else None
    passes = GradientPasses(policy, algorithm, rows, batch, advantages, returns, settings, use_critic, inert,
                            tallies)
    change = WeightChange(policy.params, enabled=settings.track_weight_change)
    passes.open_progress_bar()
    passes.train_mode(True)
    for epoch in range(max(1, settings.update_epochs)):
        for m, mini in enumerate(mini_batches_of_pass(len(rows), settings.mini_batches, generator)):
            loss_ok = passes.accumulate(mini, first_mini_batch=epoch == 0 and m == 0)
            change.mark()
            passes.step(optimizer, scheduler, loss_ok)
    passes.close_progress_bar()
    passes.train_mode(False)
    tallies.stats.seconds = time.perf_counter() - start
    metrics = tallies.metrics()
    weight_change = change.norm()
    if weight_change is not None:
        metrics["weight_change"] = weight_change
    return metrics


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
    largest = [0]  # computed positions of the largest micro-batch measured so far (measure_if_largest)
    policy.model.train()
    try:
        for _epoch in range(max(1, epochs)):
            order = torch.randperm(n, generator=generator).tolist()
            for b in range(0, n, batch_size):
                chunk = order[b:b + batch_size]
                tokens_in_chunk = sum(len(rows[i].response_ids) for i in chunk) or 1
                loss_ok = True
                for idx in micro_batches(chunk, rows, micro_batch_size, policy.grad_share_prefix,
                                         policy.micro_batch_tokens):
                    sub = [rows[i] for i in idx]
                    inputs = collate(sub, policy.pad_id, policy.grad_share_prefix).to(policy.device)
                    width = max(len(r.response_ids) for r in sub) or 1
                    with measure_if_largest(policy, inputs, largest):
                        out = response_forward(policy.model, inputs, width)
                        loss = -out.logprobs.sum() / tokens_in_chunk
                    resp_tokens = sum(len(r.response_ids) for r in sub)
                    stats.add({"sft_nll": float(-out.logprobs.detach().sum()) / max(1, resp_tokens)})
                    stats.add_tokens(inputs)
                    if not torch.isfinite(loss):
                        loss_ok = False
                        continue
                    loss.backward()
                change.mark()
                guarded_step(optimizer, policy.params, max_grad_norm, loss_ok, stats)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(nll=f"{stats.sums.get('sft_nll', 0) / max(1, stats.counts.get('sft_nll', 1)):.3f}")
    finally:
        if bar is not None:
            bar.close()
        policy.model.eval()
    stats.seconds = time.perf_counter() - start
    return {**stats.means(), "weight_change": change.norm()}
