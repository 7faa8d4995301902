"""Hand-worked cases of the off-policy corrections (``losses.OffPolicyCorrection``): decoupled PPO and truncated
importance sampling, their weights' metrics, and the path through an algorithm and ``batch.extras``."""

from __future__ import annotations

import math

import pytest
import torch

from agentr1_core.algorithms.base import StepBatch
from agentr1_core.algorithms.components import GRPO
from agentr1_core.algorithms.losses import OffPolicyCorrection, PolicyLossConfig, policy_loss

# One row of three action tokens. Probabilities of the sampled tokens under the current weights (lp), the proximal
# policy the update started from (old, recomputed) and the behaviour policy that sampled them (mu, the engine's).
CURRENT = [0.5, 0.18, 0.9]
PROXIMAL = [0.5, 0.2, 0.6]
BEHAVIOUR = [0.4, 0.5, 0.1]
ADVANTAGE = [1.0, -1.0, 2.0]


def case():
    log = lambda xs: torch.tensor(xs, dtype=torch.float64).log().unsqueeze(0)  # noqa: E731
    lp = log(CURRENT).requires_grad_()
    return lp, log(PROXIMAL), log(BEHAVIOUR), torch.tensor([ADVANTAGE], dtype=torch.float64), torch.ones(1, 3)


def run(mode: str):
    lp, old, mu, adv, mask = case()
    out = policy_loss(lp, old, adv, mask, PolicyLossConfig(loss_type="ppo"), behaviour_logprobs=mu,
                      correction=OffPolicyCorrection(mode=mode, cap=2.0))
    out.loss.backward()
    return out, lp.grad[0].tolist()


def test_decoupled_ppo_hand_worked():
    # ratio to the proximal policy r = lp / old = [1.0, 0.9, 1.5]; clip 0.2 -> token 3 is clipped at 1.2
    # PPO terms max(-A r, -A clip(r)) = [-1.0, 0.9, -2.4]
    # weights old / mu = [1.25, 0.4, 6.0] -> capped at 2: [1.25, 0.4, 2.0]
    # corrected terms [-1.25, 0.36, -4.8]; token-mean -5.69 / 3
    # gradient d(-A r w)/d lp = -A r w where not clipped: [-1.25, 0.36, 0] / 3
    out, grad = run("decoupled")
    assert float(out.loss.detach()) == pytest.approx(-5.69 / 3, abs=1e-12)
    assert grad == pytest.approx([-1.25 / 3, 0.36 / 3, 0.0], abs=1e-12)
    assert out.metrics["offpolicy/is_weight_mean"] == pytest.approx((1.25 + 0.4 + 6.0) / 3)
    assert out.metrics["offpolicy/is_weight_max"] == pytest.approx(6.0)
    assert out.metrics["offpolicy/is_capped_fraction"] == pytest.approx(1 / 3)
    assert out.metrics["clip_fraction"] == pytest.approx(1 / 3)


def test_truncated_importance_sampling_hand_worked():
    # weights lp / mu = [1.25, 0.36, 9.0] -> capped at 2: [1.25, 0.36, 2.0]; the PPO clip is not used
    # terms -A w = [-1.25, 0.36, -4.0]; token-mean -4.89 / 3; gradient -A w / 3 (the capped token keeps its gradient)
    out, grad = run("tis")
    assert float(out.loss.detach()) == pytest.approx(-4.89 / 3, abs=1e-12)
    assert grad == pytest.approx([-1.25 / 3, 0.36 / 3, -4.0 / 3], abs=1e-12)
    assert out.metrics["offpolicy/is_weight_mean"] == pytest.approx((1.25 + 0.36 + 9.0) / 3)
    assert out.metrics["offpolicy/is_weight_max"] == pytest.approx(9.0)
    assert out.metrics["offpolicy/is_capped_fraction"] == pytest.approx(1 / 3)


def test_no_correction_is_the_plain_loss():
    lp, old, mu, adv, mask = case()
    plain = policy_loss(lp, old, adv, mask, PolicyLossConfig())
    none = policy_loss(lp, old, adv, mask, PolicyLossConfig(), behaviour_logprobs=mu,
                       correction=OffPolicyCorrection("none"))
    assert float(none.loss.detach()) == float(plain.loss.detach())
    assert not any(k.startswith("offpolicy/") for k in none.metrics)


def test_on_policy_tokens_get_weight_one():
    """Sampled by the weights being trained (mu = old = lp): both corrections give the plain PPO loss's value."""
    lp, old, _, adv, mask = case()
    plain = policy_loss(lp, lp.detach(), adv, mask, PolicyLossConfig())
    for mode in ("decoupled", "tis"):
        out = policy_loss(lp, lp.detach(), adv, mask, PolicyLossConfig(), behaviour_logprobs=lp.detach(),
                          correction=OffPolicyCorrection(mode))
        assert float(out.loss.detach()) == pytest.approx(float(plain.loss.detach()), abs=1e-12)
        assert out.metrics["offpolicy/is_weight_max"] == pytest.approx(1.0)


def test_a_nonfinite_behaviour_logprob_drops_its_token():
    lp, old, mu, adv, mask = case()
    mu[0, 2] = math.nan
    out = policy_loss(lp, old, adv, mask, PolicyLossConfig(), behaviour_logprobs=mu,
                      correction=OffPolicyCorrection("decoupled"))
    assert out.metrics["nonfinite_logprob_tokens"] == 1.0 and out.metrics["valid_tokens"] == 2.0
    assert math.isfinite(float(out.loss.detach()))


def test_an_algorithm_reads_the_correction_from_the_batch_extras():
    lp, old, mu, adv, mask = case()
    batch = StepBatch(traj_ids=torch.zeros(1, dtype=torch.long), group_ids=torch.zeros(1, dtype=torch.long),
                      step_index=torch.zeros(1, dtype=torch.long), rewards=torch.zeros(1),
                      dones=torch.ones(1, dtype=torch.bool), truncated=torch.zeros(1, dtype=torch.bool),
                      action_mask=mask, old_logprobs=old,
                      extras={"rollout_logprobs": mu, "off_policy": OffPolicyCorrection("decoupled", cap=2.0)})
    out = GRPO().policy_loss(lp, batch.select(torch.tensor([0])), adv)
    assert float(out.loss.detach()) == pytest.approx(-5.69 / 3, abs=1e-12)


@pytest.mark.parametrize("mode, cap", [("v-trace", 2.0), ("tis", 0.5)])
def test_bad_settings_are_refused(mode, cap):
    with pytest.raises(ValueError):
        OffPolicyCorrection(mode, cap)
