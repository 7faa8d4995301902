"""Trajectories -> per-step training rows -> ``StepBatch`` and padded model inputs.

One row per step: the input is the step's ``prompt_ids + response_ids`` exactly as the engine saw and produced them
(nothing is decoded or re-encoded), the loss covers only the response tokens (the prompt is masked out), and the
engine's sampling log-probs become ``old_logprobs``. Non-finite engine log-probs are kept as they are (the algorithm
masks those tokens) and counted. The last step of an episode that ended neither ``done`` nor ``truncated`` is marked
truncated, so that bootstrapping estimators never read past the end of an episode; a step that is both ``done`` and
``truncated`` is terminal (no bootstrap), as in Gymnasium. Greedy baseline episodes (ReMax, ``rollout.driver``)
give no rows: they are scored, never trained on; the rows' ``traj`` indices still count them, so they index the
rollout's trajectory list as it came. The steps of an episode cut by a limit under ``rollout.overlong.mode: mask``
(``trainers.overlong``) give rows marked ``loss_masked``: their reward still counts (their group's baseline), their
``action_mask`` row is all zero, so no loss term and no gradient comes from them.

Critic prefix (``critic.prefix``): a row may carry ``critic_prefix_ids``, privileged token ids that only the
critic reads before the row's prompt (``critic_view``). ``None`` means the run has no critic prefix; ``[]`` is a
prefix of zero tokens, which reads exactly what the critic reads without one.

Model inputs are left-padded: every row then ends at the last column, so the response tokens of all rows sit in the
last ``max_response_len`` columns and one ``logits_to_keep`` covers them (see ``forward.py``).

Shared prefix: the rows of a micro-batch often start with the same tokens (the system prompt and tool schema of every
episode; the whole prompt of the n samples of one GRPO group; an earlier turn of the same episode). With
``share_prefix`` set, ``collate`` cuts the longest common prefix off (at most each row's prompt minus its last
token, so that the position predicting the first response token stays in every row) and returns it once as
``prefix_ids``; the forward runs it once and lets every row attend to its keys and values. ``micro_batches`` with
``share_prefix`` may order rows by their token ids instead of their lengths, so that rows sharing the longest
prefixes land in one micro-batch.

This module does no model computation.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from agentr1_core.algorithms.base import StepBatch
from agentr1_core.mdp import Trajectory
from agentr1_core.rollout.driver import GREEDY_INFO_KEY
from agentr1_core.trainers.overlong import LOSS_MASK_INFO_KEY


@dataclass
class StepRow:
    """One training row: one step of one episode."""

    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: list[float]
    traj: int  # index of the trajectory in the rollout
    group: int  # index of the prompt group
    step_index: int
    reward: float
    done: bool
    truncated: bool
    anchor: str | None = None
    policy_version: int = 0  # RL updates the weights that sampled this step had seen
    critic_prefix_ids: list[int] | None = None  # token ids only the critic reads before the prompt (None: no prefix)
    loss_masked: bool = False  # no action token enters a loss (rollout.overlong mode mask); the reward still counts

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


def critic_view(row: StepRow) -> StepRow:
    """The row as the critic reads it: its critic prefix ids, then its own prompt and response ids (joined as token
    ids; nothing is decoded). The value is still read at the last prompt token, the state the action starts from."""
    if not row.critic_prefix_ids:
        return row
    return dataclasses.replace(row, prompt_ids=list(row.critic_prefix_ids) + list(row.prompt_ids))


def critic_state_row(row: StepRow) -> StepRow:
    """``critic_view`` cut after the first response token, for the passes that only read the value: it sits at the
    last prompt token, which in a causal model attends to the prefix and the prompt alone, so the response tokens
    after it would be computed for nothing (the value equals the one of the whole row)."""
    view = critic_view(row)
    return dataclasses.replace(view, response_ids=list(row.response_ids[:1]),
                               old_logprobs=list(row.old_logprobs[:1]))


def has_critic_prefix(rows: Sequence[StepRow]) -> bool:
    """Whether the critic reads these rows through a prefix (``critic.prefix`` set; a zero-length one counts)."""
    return any(r.critic_prefix_ids is not None for r in rows)


@dataclass
class StepRows:
    rows: list[StepRow]
    traj_uids: list[str] = field(default_factory=list)
    group_keys: list[str] = field(default_factory=list)
    nonfinite_logprob_steps: int = 0
    empty_trajectories: int = 0


def trajectories_to_rows(trajectories: Sequence[Trajectory]) -> StepRows:
    """Flatten trajectories into step rows, in trajectory order then step order."""
    out = StepRows(rows=[])
    groups: dict[str, int] = {}
    for t_idx, traj in enumerate(trajectories):
        out.traj_uids.append(traj.uid or str(t_idx))
        key = traj.group_id or traj.uid or str(t_idx)
        if key not in groups:
            groups[key] = len(groups)
            out.group_keys.append(key)
        if traj.info.get(GREEDY_INFO_KEY):  # a greedy baseline episode: scored by the algorithm, never trained on
            continue
        if not traj.steps:
            out.empty_trajectories += 1
            continue
        last = len(traj.steps) - 1
        masked = bool(traj.info.get(LOSS_MASK_INFO_KEY))
        for s_idx, step in enumerate(traj.steps):
            if len(step.response_ids) != len(step.response_logprobs):
                raise ValueError(f"trajectory {traj.uid!r} step {s_idx}: {len(step.response_ids)} response ids "
                                 f"but {len(step.response_logprobs)} log-probs")
            if not all(math.isfinite(x) for x in step.response_logprobs):
                out.nonfinite_logprob_steps += 1
            # terminal wins: a step both done and truncated ended the episode (Gymnasium's terminated + truncated)
            truncated = not step.done and (bool(step.truncated) or s_idx == last)
            out.rows.append(StepRow(
                prompt_ids=list(step.prompt_ids), response_ids=list(step.response_ids),
                old_logprobs=[float(x) for x in step.response_logprobs], traj=t_idx, group=groups[key],
                step_index=s_idx, reward=float(step.reward), done=bool(step.done),
                truncated=truncated, anchor=step.anchor, policy_version=int(step.policy_version),
                loss_masked=masked))
    return out


def max_response_len(rows: Sequence[StepRow]) -> int:
    return max([len(r.response_ids) for r in rows] + [1])


def build_step_batch(rows: Sequence[StepRow], width: int | None = None) -> StepBatch:
    """The ``StepBatch`` of ``rows``: per-step tensors ``[S]`` and per-token tensors ``[S, T]`` (right-padded). A
    ``loss_masked`` row's ``action_mask`` is all zero."""
    width = width or max_response_len(rows)
    s = len(rows)
    mask = torch.zeros(s, width)
    old = torch.zeros(s, width)
    for i, r in enumerate(rows):
        n = len(r.response_ids)
        if n > width:
            raise ValueError(f"row {i} has {n} response tokens, more than the batch width {width}")
        if not r.loss_masked:
            mask[i, :n] = 1.0
        old[i, :n] = torch.tensor(r.old_logprobs, dtype=torch.float32) if n else old[i, :0]
    anchors = [r.anchor for r in rows]
    return StepBatch(
        traj_ids=torch.tensor([r.traj for r in rows], dtype=torch.long),
        group_ids=torch.tensor([r.group for r in rows], dtype=torch.long),
        step_index=torch.tensor([r.step_index for r in rows], dtype=torch.long),
        rewards=torch.tensor([r.reward for r in rows], dtype=torch.float32),
        dones=torch.tensor([r.done for r in rows], dtype=torch.bool),
        truncated=torch.tensor([r.truncated for r in rows], dtype=torch.bool),
        action_mask=mask,
        old_logprobs=old,
        anchors=anchors if any(a is not None for a in anchors) else None,
    )


@dataclass
class ModelInputs:
    """Left-padded inputs of a set of rows. ``keep`` = logits to keep (``max response length + 1``).

    With ``prefix_ids`` ([1, P], the tokens every row starts with), ``input_ids`` and ``position_ids`` hold only what
    follows the prefix (positions counting on from P) and ``attention_mask`` covers prefix and rest ([B, P + L])."""

    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L] (or [B, P + L] with a prefix)
    position_ids: torch.Tensor  # [B, L]
    response_lens: torch.Tensor  # [B]
    keep: int
    prefix_ids: torch.Tensor | None = None  # [1, P]

    @property
    def computed_tokens(self) -> int:
        """Token positions the forward actually runs: the prefix once, then each row's own tokens."""
        prefix = int(self.prefix_ids.shape[1]) if self.prefix_ids is not None else 0
        return prefix + int(self.attention_mask[:, prefix:].sum())

    @property
    def padded_positions(self) -> int:
        """Token positions the forward's tensors hold: the prefix once, then every row padded to the longest."""
        prefix = int(self.prefix_ids.shape[1]) if self.prefix_ids is not None else 0
        return prefix + int(self.input_ids.numel())

    def to(self, device: Any) -> "ModelInputs":
        prefix = self.prefix_ids.to(device) if self.prefix_ids is not None else None
        return ModelInputs(self.input_ids.to(device), self.attention_mask.to(device), self.position_ids.to(device),
                           self.response_lens.to(device), self.keep, prefix)


def shared_prefix_len(rows: Sequence[StepRow]) -> int:
    """Length of the token prefix all ``rows`` start with, at most the shortest prompt minus one token."""
    if not rows:
        return 0
    limit = min(len(r.prompt_ids) for r in rows) - 1
    return max(0, min(limit, len(os.path.commonprefix([r.prompt_ids for r in rows]))))


def _prefix_to_share(rows: Sequence[StepRow], share_prefix: int) -> int:
    if share_prefix <= 0 or len(rows) < 2:
        return 0
    skip = shared_prefix_len(rows)
    return skip if skip >= share_prefix else 0


def collate(rows: Sequence[StepRow], pad_id: int, share_prefix: int = 0) -> ModelInputs:
    """Left-pad ``prompt_ids + response_ids`` of every row to the longest one. With ``share_prefix`` > 0, two or
    more rows and a common prefix of at least that many tokens, the prefix is returned once as ``prefix_ids``."""
    skip = _prefix_to_share(rows, share_prefix)
    seqs = [(r.prompt_ids + r.response_ids)[skip:] for r in rows]
    length = max(len(x) for x in seqs)
    ids = torch.full((len(rows), length), int(pad_id), dtype=torch.long)
    attn = torch.zeros(len(rows), skip + length, dtype=torch.long)
    attn[:, :skip] = 1
    pos = torch.zeros(len(rows), length, dtype=torch.long)
    for i, seq in enumerate(seqs):
        n = len(seq)
        ids[i, length - n:] = torch.tensor(seq, dtype=torch.long)
        attn[i, skip + length - n:] = 1
        pos[i, length - n:] = torch.arange(skip, skip + n)
    resp = torch.tensor([len(r.response_ids) for r in rows], dtype=torch.long)
    prefix = torch.tensor([rows[0].prompt_ids[:skip]], dtype=torch.long) if skip else None
    return ModelInputs(ids, attn, pos, resp, keep=int(resp.max().clamp(min=1).item()) + 1, prefix_ids=prefix)


def micro_batches(indices: Sequence[int], rows: Sequence[StepRow], size: int,
                  share_prefix: int = 0, max_tokens: int = 0) -> list[list[int]]:
    """Split ``indices`` into micro-batches of at most ``size`` rows, after sorting by length so that padding stays
    small.

    With ``max_tokens`` > 0 a micro-batch also holds at most that many computed token positions
    (``computed_positions``: padding included, a shared prefix once), so that activation memory follows the tokens
    a pass runs, not the row count: long rows go fewer to a micro-batch, and a row longer than the budget runs
    alone. Rows that carry a critic prefix (``critic.prefix``) are also read by the critic as ``critic_state_row``
    in a pass of their own; that pass keeps to ``max_tokens`` too. With ``share_prefix`` (see ``collate``) a second
    split is considered, by token ids (rows with long common prefixes together), and the one with fewer computed
    token positions is returned."""
    size = max(1, int(size))
    max_tokens = max(0, int(max_tokens))
    critic_rows = ({i: critic_state_row(rows[i]) for i in indices}
                   if max_tokens and has_critic_prefix([rows[i] for i in indices]) else None)

    def too_many_tokens(candidate: list[int]) -> bool:
        if computed_positions([rows[j] for j in candidate], share_prefix) > max_tokens:
            return True
        return critic_rows is not None and computed_positions([critic_rows[j] for j in candidate],
                                                              share_prefix) > max_tokens

    def split(order: list[int]) -> list[list[int]]:
        if not max_tokens:
            return [order[k:k + size] for k in range(0, len(order), size)]
        out: list[list[int]] = []
        current: list[int] = []
        for i in order:
            candidate = current + [i]
            if current and (len(candidate) > size or too_many_tokens(candidate)):
                out.append(current)
                candidate = [i]
            current = candidate
        if current:
            out.append(current)
        return out

    by_length = split(sorted(indices, key=lambda i: rows[i].num_tokens))
    if share_prefix <= 0 or len(by_length) < 2:  # one micro-batch: the same rows either way
        return by_length
    by_tokens = split(sorted(indices, key=lambda i: (rows[i].prompt_ids + rows[i].response_ids, i)))
    cost = lambda plan: sum(computed_positions([rows[i] for i in mb], share_prefix) for mb in plan)  # noqa: E731
    return by_tokens if cost(by_tokens) < cost(by_length) else by_length


def computed_positions(rows: Sequence[StepRow], share_prefix: int) -> int:
    """Token positions ``collate(rows, share_prefix=...)`` makes the forward run (padding included)."""
    skip = _prefix_to_share(rows, share_prefix)
    return skip + len(rows) * max(r.num_tokens - skip for r in rows)
