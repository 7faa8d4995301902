"""Shared fixtures: the real SmolLM2 tokenizer (and model) loaded once per test session. The lock that keeps tests
which start Ray apart when the suite runs in several processes (``pytest -n 2 --dist loadfile``, the README's test
command: each test file runs whole in one of them), ``ray_lock``, comes with ``agentr1_core.testing.fixtures``, where
the plugins' tests find it too."""

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


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smol_tokenizer) -> str:
    """A tiny random Llama (2 layers, hidden 32) with the real SmolLM2 tokenizer, saved to a folder."""
    from agentr1_core.testing.models import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), smol_tokenizer)
