"""The tests that need verl importable (the cross-checks against verl's reference implementations and its DAPO
overlong reward, the real ``DataProto``) skip in the main environment, where verl cannot be installed (verl 0.9 pins
transformers<5.11), so this test runs them with the Python of verl's own environment (``.venv-verl``), where they
must pass, none skipped.
A missing ``.venv-verl`` skips here and fails in CI (``verl_python``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NEEDS_VERL = ["tests/algorithms/test_verl_crosscheck.py", "tests/algorithms/test_verl_crosscheck_dapo.py",
              "tests/distributed/test_verl_data.py::test_real_dataproto_holds_the_layout",
              "tests/trainer/test_overlong.py::test_penalty_matches_verls_dapo_reward_manager"]


@pytest.mark.slow
def test_the_tests_that_need_verl_pass_in_verls_environment(verl_python, tmp_path):
    # a temporary folder of its own: the Ray lock (``ray_lock``) this test holds lives beside the session's
    proc = subprocess.run([str(verl_python), "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           f"--basetemp={tmp_path / 'verl-tests'}", *NEEDS_VERL],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    summary = proc.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary and "deselected" not in summary, tail
    assert int(summary.split(" passed")[0].split()[-1]) >= 30, tail  # the cross-check's cases ran, not only one
