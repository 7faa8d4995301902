"""Hand-worked cases of the engine-vs-trainer mismatch diagnostics (``algorithms.mismatch``): k3 KL, effective
sample size and chi-square of the token importance weights, their token sums across batches, and the console
warning past verl's limits."""

from __future__ import annotations

import math

import pytest
import torch

from agentr1_core.algorithms.mismatch import MismatchTally, mismatch_metrics, mismatch_warning


def logprobs(weights, engine=-1.0):
    """Engine log-probs ``engine`` and trainer log-probs ``engine + log w`` for the token weights ``weights``."""
    w = torch.tensor([weights], dtype=torch.float64)
    mu = torch.full_like(w, engine)
    return mu, mu + w.log()


def test_hand_worked_weights():
    # w = [1, 2, 0.5, 1]: sum w = 4.5, sum w^2 = 6.25, n = 4
    # ESS = 4.5^2 / (4 * 6.25) = 0.81; chi2 = 6.25 / 4 - 1 = 0.5625
    # k3 = mean(w - 1 - log w) = (0 + (1 - ln 2) + (-0.5 + ln 2) + 0) / 4 = 0.125
    mu, pi = logprobs([1.0, 2.0, 0.5, 1.0])
    got = mismatch_metrics(mu, pi, torch.ones(1, 4))
    assert got == pytest.approx({"mismatch/k3_kl": 0.125, "mismatch/ess": 0.81, "mismatch/chi2": 0.5625}, abs=1e-12)


def test_on_policy_is_zero_kl_full_sample_size_and_zero_chi2():
    mu, _ = logprobs([1.0, 1.0, 1.0])
    assert mismatch_metrics(mu, mu.clone(), torch.ones(1, 3)) == {"mismatch/k3_kl": 0.0, "mismatch/ess": 1.0,
                                                                  "mismatch/chi2": 0.0}


def test_a_tiny_gap_does_not_cancel_away():
    # log w = 1e-6: k3 = expm1(d) - d = d^2 / 2 + d^3 / 6 = 5.0000017e-13 (exp(d) - 1 - d in float32 would be 0 or
    # 1e-7-sized noise)
    mu = torch.full((1, 2), -2.0, dtype=torch.float32)
    pi = mu.double() + 1e-6
    got = mismatch_metrics(mu, pi, torch.ones(1, 2))
    assert got["mismatch/k3_kl"] == pytest.approx(0.5e-12, rel=1e-5)


def test_token_sums_add_up_across_batches_and_skip_masked_or_nonfinite_tokens():
    """Two batches of 1 and 3 tokens give the token means of the four, not the mean of two batch means; padding and
    a NaN trainer log-prob are left out."""
    mu, pi = logprobs([1.0, 2.0, 0.5, 1.0])
    tally = MismatchTally()
    tally.add(mu[:, :1], pi[:, :1], torch.ones(1, 1))
    padded_mu = torch.cat([mu[:, 1:], torch.tensor([[-3.0, -3.0]], dtype=torch.float64)], dim=1)
    padded_pi = torch.cat([pi[:, 1:], torch.tensor([[0.0, math.nan]], dtype=torch.float64)], dim=1)
    tally.add(padded_mu, padded_pi, torch.tensor([[1, 1, 1, 0, 1]]))
    assert tally.tokens == 4
    assert tally.metrics() == pytest.approx({"mismatch/k3_kl": 0.125, "mismatch/ess": 0.81,
                                             "mismatch/chi2": 0.5625}, abs=1e-12)
    assert MismatchTally().metrics() == {}


def test_the_console_warns_past_the_limits_only():
    # w = [36, 1, 1, 1]: ESS = 39^2 / (4 * 1299) = 0.2927 < 0.3; k3 = (35 - ln 36) / 4 = 7.854 > 0.1
    mu, pi = logprobs([36.0, 1.0, 1.0, 1.0])
    bad = mismatch_metrics(mu, pi, torch.ones(1, 4))
    assert bad["mismatch/ess"] == pytest.approx(1521 / 5196, abs=1e-12)
    line = mismatch_warning(bad)
    assert "\n" not in line and "k3 KL 7.85 > 0.1" in line and "effective sample size 0.293 < 0.3" in line
    assert mismatch_warning({"mismatch/k3_kl": 0.01, "mismatch/ess": 0.95}) is None
    assert "k3 KL" not in mismatch_warning({"mismatch/k3_kl": 0.01, "mismatch/ess": 0.2})
    assert mismatch_warning({}) is None
