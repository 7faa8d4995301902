"""The data algorithms see, and the interface every algorithm component implements.

An algorithm is an advantage estimator over step-level data plus a policy loss, both pure tensor functions. The
trainer builds one ``StepBatch`` from a rollout (one row per step: S steps, responses right-padded to T tokens),
asks the algorithm for advantages once, then calls ``policy_loss`` on micro-batches (row subsets of the batch).

Shapes: ``[S]`` per step, ``[S, T]`` per response token. ``action_mask`` is 1.0 on real response tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch


@dataclass
class StepBatch:
    """Step-level data. Rows are steps; a trajectory is the rows with one ``traj_ids`` value, ordered by
    ``step_index``; a group (GRPO's prompt group) is the rows with one ``group_ids`` value."""

    traj_ids: torch.Tensor  # [S] long
    group_ids: torch.Tensor  # [S] long
    step_index: torch.Tensor  # [S] long, 0-based position in its episode
    rewards: torch.Tensor  # [S] float, step reward (the final reward is on the episode's last step)
    dones: torch.Tensor  # [S] bool, the episode ended at this step (terminal: no bootstrap)
    truncated: torch.Tensor  # [S] bool, the episode was cut at this step (bootstrap from value if any)
    action_mask: torch.Tensor  # [S, T] float
    old_logprobs: torch.Tensor  # [S, T] float, log-probs of the sampling (behaviour) policy
    values: torch.Tensor | None = None  # [S] float, critic value at the step's first action token
    ref_logprobs: torch.Tensor | None = None  # [S, T] float, reference policy (KL)
    teacher_logprobs: torch.Tensor | None = None  # [S, T] float, teacher (distillation)
    anchors: list[str] | None = None  # [S] anchor observation per step (GiGPO)
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def num_steps(self) -> int:
        return int(self.traj_ids.shape[0])

    def select(self, index: torch.Tensor) -> "StepBatch":
        """Rows ``index`` of every per-step/per-token tensor (for micro-batches), those in ``extras`` included: an
        extra tensor whose first dimension is the number of steps is per-step and is sliced; other extras (numbers,
        lists, objects) are kept whole."""
        steps = self.num_steps
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, torch.Tensor):
                out[f.name] = v[index]
            elif f.name == "anchors" and v is not None:
                out[f.name] = [v[i] for i in index.tolist()]
            elif f.name == "extras" and isinstance(v, dict):
                out[f.name] = {k: x[index] if isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] == steps
                               else x for k, x in v.items()}
            else:
                out[f.name] = v
        return replace(self, **out)

    def to(self, device: Any) -> "StepBatch":
        """The same batch with every tensor (those in ``extras`` too) on ``device``."""
        out = {f.name: getattr(self, f.name).to(device) for f in fields(self)
               if isinstance(getattr(self, f.name), torch.Tensor)}
        extras = getattr(self, "extras", None)
        if isinstance(extras, dict):
            out["extras"] = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in extras.items()}
        return replace(self, **out)


@dataclass
class AdvantageOutput:
    """``advantages`` is per token ``[S, T]`` (zero outside ``action_mask``); ``returns`` per step ``[S]`` (critic
    targets; equal to the step return for critic-free estimators)."""

    advantages: torch.Tensor
    returns: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class LossOutput:
    loss: torch.Tensor  # scalar, finite
    metrics: dict[str, float] = field(default_factory=dict)


class Algorithm:
    """Base class of algorithm components (what ``agentr1_algorithms`` factories build).

    Subclasses set ``needs_critic`` / ``needs_groups`` and implement ``compute_advantages`` and ``policy_loss``.
    ``policy_loss`` receives the current policy's log-probs for the micro-batch rows and, optionally, per-token
    entropy; ``batch`` is the same micro-batch (``StepBatch.select``) and ``advantages`` its rows.
    """

    needs_critic: bool = False
    needs_groups: bool = False
    needs_reference: bool = False
    needs_teacher: bool = False
    needs_greedy_baseline: bool = False  # each training rollout adds one greedy episode per row (ReMax)

    def prepare_batch(self, batch: StepBatch, steps: Any, trajectories: list[Any]) -> dict[str, float]:
        """Called by the trainer before ``compute_advantages`` with the batch, its step rows (each with ``traj`` and
        ``step_index``) and the rollout's trajectories; may fill extra fields (e.g. ``teacher_logprobs``) and
        returns metrics. The default does nothing."""
        return {}

    def compute_advantages(self, batch: StepBatch) -> AdvantageOutput:
        raise NotImplementedError

    def loss_denominators(self, batch: StepBatch, advantages: torch.Tensor) -> Any:
        """Counts over a whole mini-batch (``batch`` and ``advantages`` are its rows) that the trainer puts into
        ``batch.extras["loss_denominators"]`` of each of its micro-batches; ``policy_loss``/``value_loss`` then
        divide their sums by these counts, so that the micro-batch losses add up to the mini-batch loss whatever the
        micro-batch size. The default, None, means the losses are means over the rows given: the trainer then
        weights each micro-batch by its share of rows."""
        return None

    def inert_rows(self, batch: StepBatch, advantages: torch.Tensor) -> torch.Tensor | None:
        """A ``[S]`` bool mask of the rows whose policy loss is zero, with a zero gradient, whatever the current
        log-probs (e.g. a GRPO group whose samples all scored the same): the trainer skips their forward and
        backward. The default, None, runs every row. With a critic the trainer also asks ``value_inert_rows``."""
        return None

    def value_inert_rows(self, batch: StepBatch, returns: torch.Tensor) -> torch.Tensor | None:
        """For algorithms with ``needs_critic``: a ``[S]`` bool mask of the rows whose value loss is zero, with a zero
        gradient, whatever the critic's current values. A row is skipped only when both this and ``inert_rows``
        say so. The default, None, runs every row."""
        return None

    def policy_loss(
        self,
        logprobs: torch.Tensor,
        batch: StepBatch,
        advantages: torch.Tensor,
        entropy: torch.Tensor | None = None,
    ) -> LossOutput:
        raise NotImplementedError

    def value_loss(self, values: torch.Tensor, batch: StepBatch, returns: torch.Tensor) -> LossOutput:
        """Critic loss for algorithms with ``needs_critic``; ``values`` is ``[S]`` for the micro-batch rows."""
        raise NotImplementedError


def inert_rows_of(algorithm: Algorithm, batch: StepBatch, advantages: torch.Tensor, returns: torch.Tensor,
                  with_critic: bool) -> torch.Tensor | None:
    """The rows neither of whose losses carries a gradient: ``inert_rows``, and with a critic ``value_inert_rows``
    as well (None: every row runs). A row without any action token (an episode kept out of the loss,
    ``rollout.overlong.mode: mask``) is inert for the policy whatever the algorithm says: every loss term is taken
    over action tokens, a KL or entropy term included."""
    policy = algorithm.inert_rows(batch, advantages)
    silent = ~(batch.action_mask > 0).any(dim=-1)
    if bool(silent.any()):
        policy = silent if policy is None else policy | silent.to(policy.device)
    if policy is None or not with_critic:
        return policy
    value = algorithm.value_inert_rows(batch, returns)
    return None if value is None else policy & value.to(policy.device)
