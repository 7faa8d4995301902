"""The step-level MDP data model: Observation, Action, Step, Trajectory.

One agent turn is one transition. A ``Step`` keeps the exact token ids the model was fed (``prompt_ids``), the
exact token ids it sampled (``response_ids``) with their sampling log-probs, what the environment answered, the
reward, whether the episode ended, and the observation the model will see next. Token ids are carried from the
engine to the loss as they are: nothing in this module tokenises or decodes.

This module is plain Python (no torch) so that it can be imported anywhere, including by ``agentr1-core plugins``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

TERMINATIONS = ("done", "truncated", "max_turns", "env_error", "engine_error", "context_limit")


@dataclass
class Observation:
    """What the model sees before it acts: exactly one of chat ``messages``, plain ``text`` or ``token_ids``.

    Environments usually return ``messages`` (the flow renders them with the model's chat template). An environment
    that manages tokens itself returns ``token_ids``; those are fed to the engine unchanged. ``anchor`` is an optional
    hashable summary of the state (GiGPO groups steps that share an anchor).
    """

    messages: list[dict[str, Any]] | None = None
    text: str | None = None
    token_ids: list[int] | None = None
    anchor: str | None = None
    tools: list[dict[str, Any]] | None = None  # OpenAI function schemas shown to the model, if any

    def __post_init__(self) -> None:
        given = [x for x in (self.messages, self.text, self.token_ids) if x is not None]
        if len(given) != 1:
            raise ValueError("Observation needs exactly one of messages, text or token_ids")


@dataclass
class Action:
    """What the model did: the decoded text (for the env) plus the sampled token ids and their log-probs."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str = "stop"  # stop | length | abort | error

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(
                f"Action has {len(self.token_ids)} token ids but {len(self.logprobs)} log-probs")


@dataclass
class StepResult:
    """What ``AgentEnv.step`` returns (Gymnasium-style, async)."""

    observation: Observation | None
    reward: float = 0.0
    done: bool = False
    truncated: bool = False
    feedback: str = ""
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Step:
    """One transition. ``prompt_ids``/``response_ids``/``response_logprobs`` are exactly what the engine saw/made."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float]
    action_text: str = ""
    feedback: str = ""
    reward: float = 0.0
    done: bool = False
    truncated: bool = False
    next_observation: Observation | None = None
    anchor: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    observation: Observation | None = None  # what prompt_ids were rendered from (e.g. for a teacher's template)
    policy_version: int = 0  # RL updates the sampling weights had seen (``trainer.max_staleness``)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    def has_finite_logprobs(self) -> bool:
        return all(math.isfinite(x) for x in self.response_logprobs)


@dataclass
class Trajectory:
    """One episode: its steps plus metadata. ``group_id`` ties the ``n`` samples of one dataset row together."""

    steps: list[Step] = field(default_factory=list)
    uid: str = ""
    group_id: str = ""
    data_source: str = "default"
    termination: str = "done"
    final_reward: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def total_reward(self) -> float:
        return sum(s.reward for s in self.steps)

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    def success(self, threshold: float = 1.0) -> bool:
        return self.final_reward >= threshold
