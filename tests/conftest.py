"""Shared fixtures: the real SmolLM2 tokenizer (and model) loaded once per test session, and the lock that keeps
tests which start Ray apart when the suite runs in several processes (``pytest -n 2 --dist loadfile``, the README's
test command: each test file runs whole in one of them)."""

from __future__ import annotations

import contextlib
import fcntl

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


@pytest.fixture(scope="session")
def ray_lock(tmp_path_factory):
    """``with ray_lock(): ...`` holds the lock of the tests that start Ray (themselves, through verl, or with ``ray
    start``): ``ray.init()`` joins a Ray instance it finds running on the machine and ``ray stop --force`` stops every
    one, so two of them must not overlap. The lock file sits beside the worker processes' own temporary folders,
    where every worker process of the session finds the same one."""

    @contextlib.contextmanager
    def hold():
        with open(tmp_path_factory.getbasetemp().parent / "agentr1-ray.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # blocks until the other worker's Ray test is over
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    return hold
