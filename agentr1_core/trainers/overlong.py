"""Episodes cut by a limit (``rollout.overlong``), handled before an RL rollout becomes training rows.

An episode is *overlong* when a limit cut it: one of its replies stopped at ``rollout.max_new_tokens`` (the step's
``info["finish_reason"]`` is ``length``, as ``flows.AgentEnvLoop`` and the gateway flow record it), or the episode
itself ended at ``max_turns``, by the env's truncation (``truncated``) or at ``rollout.max_prompt_tokens``
(``context_limit``). Its reward says little about the reply that was cut off; ``rollout.overlong.mode`` decides:

* ``none``: trained on as it is (nothing here runs).
* ``mask``: the overlong episodes keep their reward, so that they count in their group's baseline (GRPO's mean and
  std, RLOO's leave-one-out mean), but their steps carry no loss: ``trajectories_to_rows`` gives their rows
  ``loss_masked`` and ``build_step_batch`` an all-zero ``action_mask`` row (verl's ``response_mask`` follows it);
  the trainer skips those rows as inert (``algorithms.base.inert_rows_of``).
* ``penalty``: DAPO's soft overlong punishment, by reply length ``L`` with ``B = rollout.max_new_tokens`` and
  ``N = buffer_tokens``: 0 for ``L <= B - N``, ``((B - N) - L) / N * penalty_factor`` for ``B - N < L <= B`` and
  ``-penalty_factor`` beyond. An episode's penalty is the most negative of its steps'; it is added to the episode's
  reward (``final_reward``) and to its last step's reward, which every advantage estimator sums (GRPO, RLOO,
  REINFORCE, ReMax's greedy baseline, GAE), so they all see the penalised reward. The raw reward stays in
  ``info["raw_reward"]``. It applies to any reply in the buffer, cut or not, as in DAPO.

Metrics (``apply_overlong``): ``overlong/episodes`` (sampled episodes cut by a limit), ``overlong/masked_steps`` with
``mask``, ``overlong/penalty_mean`` (over sampled episodes, zeros included) with ``penalty``. The rollout's own
metrics (reward, success) are computed before this runs, from the raw rewards, and the episode files keep them too.
Greedy baseline episodes (ReMax) are penalised like the samples they are a baseline for, and never masked or counted.

Plain Python: no torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from agentr1_core.mdp import Step, Trajectory
from agentr1_core.rollout.driver import is_greedy_baseline

MODES = ("none", "mask", "penalty")
CUT_TERMINATIONS = ("max_turns", "truncated", "context_limit")  # mdp.TERMINATIONS that a limit ends an episode with
LOSS_MASK_INFO_KEY = "overlong_masked"  # Trajectory.info: its steps carry no loss (trajectories_to_rows reads it)
PENALTY_INFO_KEY = "overlong_penalty"  # Trajectory.info: the penalty added to its reward
RAW_REWARD_INFO_KEY = "raw_reward"  # Trajectory.info: its reward before the penalty


def cut_by_length(step: Step) -> bool:
    """Whether the step's reply stopped at the token budget."""
    return step.info.get("finish_reason") == "length"


def is_overlong(traj: Trajectory) -> bool:
    """Whether a limit cut the episode: a reply at the token budget, or an ending at a turn, env or prompt limit."""
    return traj.termination in CUT_TERMINATIONS or any(cut_by_length(s) for s in traj.steps)


def length_penalty(length: int, budget: int, buffer_tokens: int, factor: float) -> float:
    """DAPO's soft overlong punishment of one reply of ``length`` tokens (module docstring); <= 0."""
    if buffer_tokens < 1 or buffer_tokens > budget:
        raise ValueError(f"the overlong buffer must be in [1, {budget}] tokens, got {buffer_tokens}")
    expected = budget - buffer_tokens
    if length <= expected:
        return 0.0
    if length >= budget:
        return -float(factor)
    return (expected - length) / buffer_tokens * float(factor)


def episode_penalty(traj: Trajectory, budget: int, buffer_tokens: int, factor: float) -> float:
    """The most negative ``length_penalty`` over the episode's steps (0 without steps)."""
    return min((length_penalty(len(s.response_ids), budget, buffer_tokens, factor) for s in traj.steps), default=0.0)


@dataclass(frozen=True)
class OverlongRule:
    """``rollout.overlong`` with the budget it is measured against (``rollout.max_new_tokens``)."""

    mode: str = "none"
    budget: int = 0
    buffer_tokens: int = 0
    penalty_factor: float = 1.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"rollout.overlong.mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.mode == "penalty" and not 0 < self.buffer_tokens <= self.budget:
            raise ValueError(f"rollout.overlong.buffer_tokens must be in [1, rollout.max_new_tokens={self.budget}] "
                             f"with mode penalty, got {self.buffer_tokens}")

    @classmethod
    def from_settings(cls, settings: Any) -> "OverlongRule":
        """From the loop's ``LoopSettings``."""
        return cls(mode=str(settings.overlong_mode), budget=int(settings.train_sampling.max_new_tokens),
                   buffer_tokens=int(settings.overlong_buffer_tokens),
                   penalty_factor=float(settings.overlong_penalty_factor))

    def scored_return(self, traj: Trajectory) -> float:
        """The return the advantage estimators will read for ``traj`` (the sum of its step rewards, with the
        penalty once ``apply`` adds it): what dynamic sampling compares within a group, as DAPO filters on the
        penalised reward."""
        if self.mode != "penalty" or PENALTY_INFO_KEY in traj.info or not traj.steps:
            return float(traj.total_reward)
        return float(traj.total_reward) + episode_penalty(traj, self.budget, self.buffer_tokens, self.penalty_factor)

    def apply(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        """Mark or penalise ``trajs`` in place; returns the ``overlong/*`` metrics ({} with mode ``none``). An
        episode already handled (its info says so) is left as it is."""
        if self.mode == "none":
            return {}
        sampled = [t for t in trajs if not is_greedy_baseline(t)]
        metrics = {"overlong/episodes": float(sum(is_overlong(t) for t in sampled))}
        if self.mode == "mask":
            masked = 0
            for traj in sampled:
                if is_overlong(traj):
                    traj.info[LOSS_MASK_INFO_KEY] = True
                    masked += len(traj.steps)
            metrics["overlong/masked_steps"] = float(masked)
            return metrics
        for traj in trajs:
            if traj.steps and PENALTY_INFO_KEY not in traj.info:
                penalty = episode_penalty(traj, self.budget, self.buffer_tokens, self.penalty_factor)
                traj.info[RAW_REWARD_INFO_KEY] = float(traj.final_reward)
                traj.info[PENALTY_INFO_KEY] = penalty
                traj.final_reward = float(traj.final_reward) + penalty
                traj.steps[-1].reward = float(traj.steps[-1].reward) + penalty
        penalties = [float(t.info.get(PENALTY_INFO_KEY, 0.0)) for t in sampled]
        metrics["overlong/penalty_mean"] = sum(penalties) / len(penalties) if penalties else 0.0
        return metrics


def apply_overlong(trajs: Sequence[Trajectory], settings: Any) -> dict[str, float]:
    """``OverlongRule.from_settings(settings).apply(trajs)``: what the training loop runs on each RL rollout."""
    return OverlongRule.from_settings(settings).apply(trajs)
