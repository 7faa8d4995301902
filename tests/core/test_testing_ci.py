"""``agentr1_core.testing.ci.missing``: a test that lacks what it needs skips on a developer's machine and fails in
CI (``AGENTR1_CI=1``), where everything is installed and a skip would test nothing."""

from __future__ import annotations

import pytest

from agentr1_core.testing.ci import in_ci, missing


def test_missing_skips_outside_ci(monkeypatch):
    monkeypatch.delenv("AGENTR1_CI", raising=False)
    assert not in_ci()
    with pytest.raises(pytest.skip.Exception, match="shellcheck is not installed"):
        missing("shellcheck is not installed")


@pytest.mark.parametrize("value, fails", [("1", True), ("0", False), ("", False)])
def test_missing_fails_in_ci_only_when_the_variable_is_1(monkeypatch, value, fails):
    monkeypatch.setenv("AGENTR1_CI", value)
    assert in_ci() is fails
    expected = pytest.fail.Exception if fails else pytest.skip.Exception
    with pytest.raises(expected, match="the verl environment is missing"):
        missing("the verl environment is missing")
