"""Shared fixtures: the real SmolLM2 tokenizer (and model) loaded once per test session."""

from __future__ import annotations

import pytest

pytest_plugins = ["agentr1_core.testing.fixtures"]


@pytest.fixture(scope="session")
def smol_model_and_tokenizer():
    from agentr1_core.models import load_model_and_tokenizer

    return load_model_and_tokenizer("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def smol_tokenizer(smol_model_and_tokenizer):
    return smol_model_and_tokenizer[1]
