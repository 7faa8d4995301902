"""Fixtures for the trainer tests: a tiny randomly initialised Llama that shares the real SmolLM2 tokenizer."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model(smol_tokenizer):
    from agentr1_core.testing.models import tiny_llama

    return tiny_llama(smol_tokenizer)
