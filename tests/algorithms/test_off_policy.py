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


def run_with(mode: str, cap: float = 2.0, cap_mode: str = "truncate", level: str = "token"):
    lp, old, mu, adv, mask = case()
    out = policy_loss(lp, old, adv, mask, PolicyLossConfig(loss_type="ppo"), behaviour_logprobs=mu,
                      correction=OffPolicyCorrection(mode=mode, cap=cap, cap_mode=cap_mode, level=level))
    out.loss.backward()
    return out, lp.grad[0].tolist()


def test_decoupled_mask_drops_the_tokens_above_the_cap_from_the_numerator_only():
    # weights old / mu = [1.25, 0.4, 6.0]: the third is above the cap 2 and gets weight 0 (AReaL's rule)
    # terms [-1.0 * 1.25, 0.9 * 0.4, 0] = [-1.25, 0.36, 0]; the token still counts: token-mean -0.89 / 3
    out, grad = run_with("decoupled", cap_mode="mask")
    assert float(out.loss.detach()) == pytest.approx(-0.89 / 3, abs=1e-12)
    assert grad == pytest.approx([-1.25 / 3, 0.36 / 3, 0.0], abs=1e-12)
    assert out.metrics["offpolicy/is_capped_fraction"] == pytest.approx(1 / 3)
    assert out.metrics["offpolicy/is_weight_mean"] == pytest.approx((1.25 + 0.4 + 6.0) / 3)
    assert out.metrics["valid_tokens"] == 3.0


def test_tis_mask_zeroes_the_gradient_of_the_tokens_above_the_cap():
    # weights lp / mu = [1.25, 0.36, 9.0] -> [1.25, 0.36, 0]; terms -A w = [-1.25, 0.36, 0]; token-mean -0.89 / 3
    out, grad = run_with("tis", cap_mode="mask")
    assert float(out.loss.detach()) == pytest.approx(-0.89 / 3, abs=1e-12)
    assert grad == pytest.approx([-1.25 / 3, 0.36 / 3, 0.0], abs=1e-12)


def test_decoupled_sequence_level_weighs_every_token_by_the_product():
    # rho = 1.25 * 0.4 * 6.0 = 3.0 for every token of the step
    # truncate at 2: w = 2; PPO terms [-1.0, 0.9, -2.4] * 2 = [-2.0, 1.8, -4.8]; token-mean -5.0 / 3
    # gradient -A r w where not clipped: [-2.0, 1.8, 0] / 3
    out, grad = run_with("decoupled", level="sequence")
    assert float(out.loss.detach()) == pytest.approx(-5.0 / 3, abs=1e-12)
    assert grad == pytest.approx([-2.0 / 3, 1.8 / 3, 0.0], abs=1e-12)
    assert out.metrics["offpolicy/is_weight_mean"] == pytest.approx(3.0)
    assert out.metrics["offpolicy/is_weight_max"] == pytest.approx(3.0)
    assert out.metrics["offpolicy/is_capped_fraction"] == pytest.approx(1.0)
    # mask at 2: the whole step gets weight 0 (loss 0, still a valid token count of 3); at 4 it is kept whole
    masked, masked_grad = run_with("decoupled", cap_mode="mask", level="sequence")
    assert float(masked.loss.detach()) == 0.0 and masked_grad == [0.0, 0.0, 0.0]
    assert masked.metrics["valid_tokens"] == 3.0
    kept, _ = run_with("decoupled", cap=4.0, cap_mode="mask", level="sequence")
    assert float(kept.loss.detach()) == pytest.approx(-2.5 * 3.0 / 3, abs=1e-12)


def test_geometric_level_weighs_every_token_by_the_geometric_mean():
    # rho = (1.25 * 0.4 * 6.0) ** (1/3) = 3 ** (1/3) = 1.44225 (below the cap of 2)
    # PPO terms [-1.0, 0.9, -2.4] * g: token-mean -2.5 g / 3
    g = 3.0 ** (1 / 3)
    out, grad = run_with("decoupled", level="geometric")
    assert float(out.loss.detach()) == pytest.approx(-2.5 * g / 3, abs=1e-12)
    assert grad == pytest.approx([-1.0 * g / 3, 0.9 * g / 3, 0.0], abs=1e-12)
    assert out.metrics["offpolicy/is_capped_fraction"] == 0.0


def test_tis_sequence_level_hand_worked():
    # rho = 1.25 * 0.36 * 9.0 = 4.05 -> truncated at 2 for every token; terms -A w = [-2, 2, -4]; token-mean -4 / 3
    out, grad = run_with("tis", level="sequence")
    assert float(out.loss.detach()) == pytest.approx(-4.0 / 3, abs=1e-12)
    assert grad == pytest.approx([-2.0 / 3, 2.0 / 3, -4.0 / 3], abs=1e-12)
    assert out.metrics["offpolicy/is_weight_mean"] == pytest.approx(4.05)


def test_a_nonfinite_behaviour_logprob_leaves_numerator_and_denominator():
    """The engine's log-prob of the third token is NaN: the loss is the decoupled loss of the first two tokens
    alone, [-1.25, 0.36] / 2, through the mini-batch denominators the trainer uses (not / 3)."""
    lp, old, mu, adv, mask = case()
    mu[0, 2] = math.nan
    batch = StepBatch(traj_ids=torch.zeros(1, dtype=torch.long), group_ids=torch.zeros(1, dtype=torch.long),
                      step_index=torch.zeros(1, dtype=torch.long), rewards=torch.zeros(1),
                      dones=torch.ones(1, dtype=torch.bool), truncated=torch.zeros(1, dtype=torch.bool),
                      action_mask=mask, old_logprobs=old,
                      extras={"rollout_logprobs": mu, "off_policy": OffPolicyCorrection("decoupled", cap=2.0)})
    algo = GRPO()
    sub = batch.select(torch.tensor([0]))
    sub.extras["loss_denominators"] = algo.loss_denominators(batch, adv)
    out = algo.policy_loss(lp, sub, adv)
    out.loss.backward()
    assert sub.extras["loss_denominators"].tokens == 2.0
    assert float(out.loss.detach()) == pytest.approx((-1.25 + 0.36) / 2, abs=1e-12)
    assert lp.grad[0].tolist() == pytest.approx([-1.25 / 2, 0.36 / 2, 0.0], abs=1e-12)
    assert out.metrics["nonfinite_logprob_tokens"] == 1.0


def test_proximal_weights_of_a_batch_with_nonfinite_logprobs_are_finite():
    """Non-finite proximal (recomputed) or behaviour log-probs: those tokens get weight 0 and leave the valid set;
    no weight and no metric is NaN."""
    from agentr1_core.algorithms.losses import proximal_weights

    lp, old, mu, _, mask = case()
    old = old.repeat(2, 1)
    mu = mu.repeat(2, 1)
    old[0, 1] = math.nan
    mu[1, 2] = -math.inf
    weights, tally, valid = proximal_weights(old, mu, mask.repeat(2, 1), OffPolicyCorrection("decoupled", cap=2.0))
    assert valid.tolist() == [[True, False, True], [True, True, False]]
    assert weights.flatten().tolist() == pytest.approx([1.25, 0.0, 2.0, 1.25, 0.4, 0.0])
    assert tally.metrics() == pytest.approx({"offpolicy/is_weight_mean": (1.25 + 6.0 + 1.25 + 0.4) / 4,
                                             "offpolicy/is_weight_max": 6.0, "offpolicy/is_capped_fraction": 0.25})


@pytest.mark.parametrize("field, value", [("cap_mode", "clip"), ("level", "step")])
def test_bad_cap_modes_and_levels_are_refused(field, value):
    with pytest.raises(ValueError, match=value):
        OffPolicyCorrection("decoupled", **{field: value})
