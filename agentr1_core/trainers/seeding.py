"""Reproducible sampling: every sampled ``generate`` call of an episode gets its own seed, derived from the run seed,
the rollout (e.g. the iteration), the episode and the call's index within the episode.

The sampled tokens then depend on none of the things that vary between runs: which requests share a batch, the order
in which episodes finish, or how many draws earlier iterations made from a shared generator (which a resumed run
cannot replay). Bit-exact log-probs additionally need batch-invariant numerics (on CPU: ``engine.max_batch_size=1``).
This module only chooses seeds; it samples nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from agentr1_core.rollout.base import Generation, SamplingParams


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any printable parts (stable across processes and Python versions)."""
    digest = hashlib.blake2b("/".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class EpisodeSeededEngine:
    """The engine as one episode sees it: sampled requests without a seed get ``derive_seed(key, call_index)``."""

    def __init__(self, engine: Any, key: str) -> None:
        self._engine = engine
        self._key = key
        self._calls = 0

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        index = self._calls
        self._calls += 1
        if sampling.seed is None and sampling.temperature > 0:
            sampling = dataclasses.replace(sampling, seed=derive_seed(self._key, index))
        return await self._engine.generate(prompt_ids, sampling)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def seed_everything(seed: int) -> None:
    """Seed Python's, torch's and (when installed) numpy's global generators."""
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2 ** 32))
    except ImportError:
        pass
