"""The rollout engine interface shared by every engine plugin (local transformers, vLLM, ...).

An engine turns prompt token ids into sampled token ids plus the log-probs of the sampled tokens. Engines take token
ids in and give token ids out: no text round trip. Many coroutines may await ``generate`` at once; the engine batches
them. This module has no torch import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class SamplingParams:
    """Sampling settings for one request. ``temperature == 0`` means greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    seed: int | None = None


@dataclass
class Generation:
    """One engine answer: sampled ids, the log-prob of each under the sampling policy, decoded text."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str = "stop"  # stop | length | abort | error
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class RolloutEngine(Protocol):
    """What flows and trainers may rely on.

    ``tokenizer`` is a Hugging Face tokenizer (``apply_chat_template``, ``decode``, ``eos_token_id``).
    ``score`` returns, for each request, the log-probs of ``continuation_ids`` given ``prompt_ids`` (no sampling;
    used by teachers and reference models).

    ``sync_weights(state=None)`` is the trainer's announcement that the policy's weights changed. The trainer calls
    it after every change and before the next rollout: an RL update, the end of SFT, a restored checkpoint, the
    snapshot it hands to rollouts that run ahead of the update; never while a rollout runs. ``state`` (``{name:
    tensor}``) carries the new weights to an engine that holds its own copy (a Ray worker's engine, vLLM); without it
    the engine runs the trainer's own module, already changed in place. Either way each call starts a new weight
    version: an engine that keeps anything computed with the weights (the keys and values of prompt prefixes) must
    not reuse it across a call. The engine cannot reliably tell by itself: a fused optimizer kernel changes the
    parameters without bumping their in-place version counters. The signature is unchanged from the first release,
    so engine plugins written against it keep working.
    """

    tokenizer: Any

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation: ...

    async def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> list[float]: ...

    def sync_weights(self, state: Any = None) -> None: ...

    def close(self) -> None: ...
