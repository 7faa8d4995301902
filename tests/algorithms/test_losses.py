"""Hand-worked examples for the policy losses, aggregation modes, KL / entropy terms and the value loss."""

from __future__ import annotations

import math

import pytest
import torch

from agentr1_core.algorithms.losses import PolicyLossConfig, aggregate, kl_penalty, policy_loss, value_loss

NAN, INF = float("nan"), float("inf")


def ppo_case():
    """Row 0: A = +1, ratios [1.5, 0.9, 1.0] with the third token masked; row 1: A = -2, ratios [0.5, 1.1, 4.0]."""
    old = torch.full((2, 3), -1.0, dtype=torch.float64)
    ratios = torch.tensor([[1.5, 0.9, 1.0], [0.5, 1.1, 4.0]], dtype=torch.float64)
    lp = (old + ratios.log()).requires_grad_()
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    return lp, old, adv, mask


# Per-token PPO losses (clip 0.2, dual clip 3) of ppo_case:
#   row 0 (A=+1): r=1.5 -> max(-1.5, -1.2) = -1.2 (clipped); r=0.9 -> max(-0.9, -0.9) = -0.9
#   row 1 (A=-2): r=0.5 -> max(1.0, 1.6) = 1.6 (clipped); r=1.1 -> max(2.2, 2.2) = 2.2;
#                 r=4.0 -> max(8.0, 2.4) = 8.0, dual clip min(8.0, 2 * 3) = 6.0
# row sums: -2.1 and 9.8; token counts 2 and 3
PPO_EXPECTED = {
    "token-mean": (-2.1 + 9.8) / 5,  # 1.54
    "seq-mean-token-sum": (-2.1 + 9.8) / 2,  # 3.85
    "seq-mean-token-mean": (-2.1 / 2 + 9.8 / 3) / 2,  # 1.108333
}


@pytest.mark.parametrize("agg", list(PPO_EXPECTED))
def test_ppo_clip_and_dual_clip(agg):
    lp, old, adv, mask = ppo_case()
    out = policy_loss(lp, old, adv, mask, PolicyLossConfig(loss_type="ppo", loss_agg=agg))
    assert out.loss.item() == pytest.approx(PPO_EXPECTED[agg], abs=1e-9)
    assert out.metrics["clip_fraction"] == pytest.approx(2 / 5)  # r=1.5 and r=0.5
    assert out.metrics["dual_clip_fraction"] == pytest.approx(1 / 5)  # r=4.0
    assert out.metrics["ratio_mean"] == pytest.approx((1.5 + 0.9 + 0.5 + 1.1 + 4.0) / 5)
    assert out.metrics["nonfinite_logprob_tokens"] == 0.0


def test_ppo_gradient_token_mean():
    lp, old, adv, mask = ppo_case()
    policy_loss(lp, old, adv, mask, PolicyLossConfig(loss_agg="token-mean")).loss.backward()
    # only unclipped tokens carry gradient d(-A r)/d lp = -A r, divided by the 5 valid tokens:
    # r=0.9 (A=1): -0.9/5 = -0.18; r=1.1 (A=-2): 2.2/5 = 0.44; clipped, dual-clipped, masked tokens: 0
    want = torch.tensor([[0.0, -0.18, 0.0], [0.0, 0.44, 0.0]], dtype=torch.float64)
    assert torch.allclose(lp.grad, want, atol=1e-12)


def test_dual_clip_can_be_disabled_and_asymmetric_clip():
    lp, old, adv, mask = ppo_case()
    cfg = PolicyLossConfig(clip_ratio_low=0.2, clip_ratio_high=0.6, clip_ratio_c=None, loss_agg="seq-mean-token-sum")
    # row 0: r=1.5 within 1.6 -> -1.5; r=0.9 -> -0.9: sum -2.4.  row 1: 1.6 + 2.2 + 8.0 (no dual clip) = 11.8
    assert policy_loss(lp, old, adv, mask, cfg).loss.item() == pytest.approx((-2.4 + 11.8) / 2, abs=1e-9)


def test_reinforce_loss_and_gradient():
    lp = torch.tensor([[-0.5, -1.0]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([[2.0, 2.0]], dtype=torch.float64)
    out = policy_loss(lp, lp.detach(), adv, torch.ones(1, 2), PolicyLossConfig(loss_type="reinforce"))
    # -A * logp: -2 * -0.5 = 1, -2 * -1 = 2 -> token mean 1.5; gradient -A / 2 = -1
    assert out.loss.item() == pytest.approx(1.5)
    out.loss.backward()
    assert lp.grad.tolist() == [[-1.0, -1.0]]


def test_gspo_sequence_ratio():
    old = torch.zeros(2, 2, dtype=torch.float64)
    lp = torch.tensor([[0.1, -0.3], [0.5, 0.5]], dtype=torch.float64, requires_grad=True)
    adv = torch.ones(2, 2, dtype=torch.float64)
    cfg = PolicyLossConfig(loss_type="gspo", loss_agg="seq-mean-token-mean")
    out = policy_loss(lp, old, adv, torch.ones(2, 2), cfg)
    # row 0: s = exp((0.1 - 0.3) / 2) = exp(-0.1) = 0.904837, inside [0.8, 1.2] -> loss -0.904837
    # row 1: s = exp(0.5) = 1.648721 > 1.2, A > 0 -> clipped: max(-1.648721, -1.2) = -1.2
    s0 = math.exp(-0.1)
    assert out.loss.item() == pytest.approx((-s0 - 1.2) / 2, abs=1e-9)
    assert out.metrics["clip_fraction"] == pytest.approx(0.5)
    assert out.metrics["ratio_mean"] == pytest.approx((s0 + math.exp(0.5)) / 2)
    out.loss.backward()
    # d/d lp_t of -A * exp(mean(lp - old)) = -s / n; averaged over 2 rows: -s0 / 2 / 2; clipped row: 0
    assert torch.allclose(lp.grad, torch.tensor([[-s0 / 4, -s0 / 4], [0.0, 0.0]], dtype=torch.float64))


def test_aggregate_skips_empty_rows():
    loss = torch.tensor([[1.0, 2.0], [5.0, 5.0], [3.0, 0.0]])
    valid = torch.tensor([[True, True], [False, False], [True, False]])
    assert aggregate(loss, valid, "token-mean").item() == pytest.approx(6 / 3)
    assert aggregate(loss, valid, "seq-mean-token-sum").item() == pytest.approx((3 + 3) / 2)  # empty row not counted
    assert aggregate(loss, valid, "seq-mean-token-mean").item() == pytest.approx((1.5 + 3) / 2)


def test_kl_estimators():
    lp = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    # d = lp - ref = [0.5, -1.0]
    assert kl_penalty(lp, ref, "k1").tolist() == [[0.5, -1.0]]
    assert kl_penalty(lp, ref, "k2").tolist() == [[0.125, 0.5]]
    # k3 = exp(-d) - 1 + d: exp(-0.5) - 0.5 = 0.1065307, exp(1) - 2 = 0.7182818
    k3 = [math.exp(-0.5) - 0.5, math.e - 2.0]
    assert kl_penalty(lp, ref, "k3")[0].tolist() == pytest.approx(k3, abs=1e-6)


@pytest.mark.parametrize("est,mean", [("k1", -0.25), ("k2", 0.3125), ("k3", (math.exp(-0.5) - 0.5 + math.e - 2) / 2)])
def test_kl_penalty_in_loss(est, mean):
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]])
    zero_adv = torch.zeros(1, 2)
    cfg = PolicyLossConfig(kl_coef=0.1, kl_estimator=est)
    out = policy_loss(lp, lp.detach(), zero_adv, torch.ones(1, 2), cfg, ref_logprobs=ref)
    # pg term is 0 (A = 0); loss = 0.1 * token-mean of the estimator
    assert out.loss.item() == pytest.approx(0.1 * mean, abs=1e-6)
    assert out.metrics["kl"] == pytest.approx(mean, abs=1e-6)


def test_entropy_bonus():
    lp = torch.zeros(1, 2, requires_grad=True)
    ent = torch.tensor([[1.0, 3.0]], requires_grad=True)
    out = policy_loss(lp, lp.detach(), torch.zeros(1, 2), torch.ones(1, 2), PolicyLossConfig(entropy_coef=0.1),
                      entropy=ent)
    # loss = -0.1 * mean(1, 3) = -0.2; d loss / d entropy = -0.1 / 2
    assert out.loss.item() == pytest.approx(-0.2)
    assert out.metrics["entropy"] == pytest.approx(2.0)
    out.loss.backward()
    assert ent.grad[0].tolist() == pytest.approx([-0.05, -0.05])


def test_nonfinite_logprobs_are_dropped_and_counted():
    lp, old, adv, mask = ppo_case()
    bad_lp = lp.detach().clone()
    bad_lp[0, 0] = NAN  # r=1.5 token (loss -1.2) dropped
    bad_old = old.clone()
    bad_old[1, 2] = INF  # r=4 token (loss 6.0) dropped
    bad_lp[0, 2] = -INF  # already masked: not counted
    bad_lp.requires_grad_()
    out = policy_loss(bad_lp, bad_old, adv, mask, PolicyLossConfig())
    # remaining tokens: -0.9, 1.6, 2.2 -> token mean 2.9 / 3
    assert out.loss.item() == pytest.approx(2.9 / 3, abs=1e-9)
    assert out.metrics["nonfinite_logprob_tokens"] == 2.0
    out.loss.backward()
    assert torch.isfinite(bad_lp.grad).all() and bad_lp.grad[0, 0].item() == 0.0


def test_a_nonfinite_entropy_drops_its_token_only_when_the_entropy_is_in_the_loss():
    lp, old, adv, mask = ppo_case()
    ent = torch.ones_like(old)
    ent[1, 0] = NAN  # an action token whose entropy is not finite
    plain = policy_loss(lp, old, adv, mask, PolicyLossConfig())
    no_bonus = policy_loss(lp, old, adv, mask, PolicyLossConfig(), entropy=ent)
    assert no_bonus.loss.item() == pytest.approx(plain.loss.item())  # the token stays in the policy loss
    assert no_bonus.metrics["nonfinite_logprob_tokens"] == 0.0 and no_bonus.metrics["entropy"] == 1.0
    bonus = policy_loss(lp, old, adv, mask, PolicyLossConfig(entropy_coef=0.1), entropy=ent)
    assert bonus.metrics["nonfinite_logprob_tokens"] == 1.0  # dropped from the loss, and counted
    assert bonus.metrics["valid_tokens"] == plain.metrics["valid_tokens"] - 1


def test_empty_and_fully_masked_give_zero_loss_with_grad():
    for shape in [(2, 0), (0, 3), (2, 3)]:
        lp = torch.zeros(shape, requires_grad=True)
        for lt in ("reinforce", "ppo", "gspo"):
            out = policy_loss(lp, torch.zeros(shape), torch.ones(shape), torch.zeros(shape),
                              PolicyLossConfig(loss_type=lt, loss_agg="seq-mean-token-mean"))
            assert out.loss.item() == 0.0
            (g,) = torch.autograd.grad(out.loss, lp)
            assert g.shape == shape and torch.count_nonzero(g) == 0


def test_missing_reference_or_entropy_raise():
    x = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(x, x, x, x, PolicyLossConfig(kl_coef=0.1))
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(x, x, x, x, PolicyLossConfig(entropy_coef=0.1))


@pytest.mark.parametrize("field,value,listed", [
    ("loss_agg", "foo", "seq-mean-token-mean"), ("loss_type", "a2c", "gspo"), ("kl_estimator", "k9", "k3")])
def test_unknown_option_lists_valid_values(field, value, listed):
    with pytest.raises(ValueError, match=listed):
        PolicyLossConfig(**{field: value})


def test_value_loss_clipped_and_plain():
    values = torch.tensor([1.0, 2.0, 0.0], requires_grad=True)
    old = torch.tensor([0.5, 2.0, 0.0])
    returns = torch.tensor([2.0, 1.0, 5.0])
    step_mask = torch.tensor([True, True, False])
    out = value_loss(values, old, returns, step_mask, clip=0.2)
    # step 0: (1 - 2)^2 = 1; clipped V = 0.5 + 0.2 = 0.7 -> (0.7 - 2)^2 = 1.69 -> max 1.69
    # step 1: (2 - 1)^2 = 1; clipped V = 2 -> 1; step 2 masked.  loss = 0.5 * (1.69 + 1) / 2 = 0.6725
    assert out.loss.item() == pytest.approx(0.6725)
    assert out.metrics["vf_clip_fraction"] == pytest.approx(0.5)
    out.loss.backward()
    # the clipped branch is flat in V for step 0; step 1: 0.5 * 2 * (2 - 1) / 2 = 0.5
    assert values.grad.tolist() == pytest.approx([0.0, 0.5, 0.0])
    plain = value_loss(values, old, returns, step_mask, clip=None)
    assert plain.loss.item() == pytest.approx(0.5 * (1 + 1) / 2)
    nan_v = torch.tensor([NAN, 2.0, 0.0])
    assert value_loss(nan_v, old, returns, step_mask, clip=0.2).loss.item() == pytest.approx(0.5)
