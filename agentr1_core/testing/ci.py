"""What a test does when something it needs is missing: skip on a developer's machine, fail in CI.

CI (``.ci/run``) sets ``AGENTR1_CI=1`` and installs every optional environment and program the tests use (the verl
and vLLM environments, shellcheck, a headless browser), so there a missing one is a broken setup, not a reason to
skip: a test that skips in CI tests nothing. Elsewhere the test skips and says how to get what it needs. Needs
pytest (imported when called).
"""

from __future__ import annotations

import os
from typing import NoReturn

CI_VARIABLE = "AGENTR1_CI"


def in_ci() -> bool:
    """Whether the tests run in CI (``AGENTR1_CI=1``)."""
    return os.environ.get(CI_VARIABLE) == "1"


def missing(message: str) -> NoReturn:
    """``pytest.skip(message)``, or in CI ``pytest.fail``: ``message`` says what is missing and how to get it."""
    import pytest

    if in_ci():
        pytest.fail(f"{message} ({CI_VARIABLE}=1: CI installs it, so a missing one is a failure)")
    pytest.skip(message)
