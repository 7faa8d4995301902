"""Shared fixtures: the six shipped ALFWorld games (one per task type), a two-worker game pool, the real SmolLM2
tokenizer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import agentr1_env_alfworld
from agentr1_env_alfworld.datasets import load_alfworld
from agentr1_env_alfworld.pool import GamePool

DATA = Path(agentr1_env_alfworld.__file__).parent / "data" / "alfworld_sample"  # shipped in the wheel


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="session")
def rows() -> list[dict]:
    return load_alfworld(str(DATA))


@pytest.fixture(scope="session")
def short_row(rows) -> dict:
    """The game with the shortest walkthrough (look_at_obj_in_light, 3 commands)."""
    return next(r for r in rows if r["data_source"] == "look_at_obj_in_light")


@pytest.fixture(scope="session")
def pool():
    game_pool = GamePool(workers=2, hang_timeout=300.0)
    yield game_pool
    game_pool.close()


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The real SmolLM2-135M-Instruct tokenizer: from the converted-model cache if present, else from the GGUF."""
    from transformers import AutoTokenizer

    from agentr1_core import models

    cached = models.cache_root() / models.SMOLLM2_CACHE_NAME
    if models._is_complete_cache(cached):
        return AutoTokenizer.from_pretrained(str(cached))
    gguf = models.smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
