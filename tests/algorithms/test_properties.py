"""Property tests: random degenerate batches never give NaN/inf advantages, losses or gradients.

About 10,000 generated cases in total over the tests below (sizes incl. empty batches and T = 0, random masks,
groups of one, identical rewards, truncation without final reward, NaN/inf log-probs, missing anchors).
"""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentr1_core.algorithms.base import StepBatch
from agentr1_core.algorithms.components import ALGORITHM_CLASSES
from agentr1_core.algorithms.losses import LOSS_AGGS, LOSS_TYPES

NAMES = sorted(ALGORITHM_CLASSES)
SPECIAL = [float("nan"), float("inf"), float("-inf")]
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True, database=None)


def sprinkle(x: torch.Tensor, p: float, gen: torch.Generator) -> torch.Tensor:
    """Replace a fraction ``p`` of the entries of ``x`` by NaN / +inf / -inf."""
    hit = torch.rand(x.shape, generator=gen) < p
    special = torch.tensor(SPECIAL)[torch.randint(0, 3, x.shape, generator=gen)]
    return torch.where(hit, special, x)


@st.composite
def step_batches(draw) -> StepBatch:
    """A few structural choices are drawn by hypothesis (sizes, group count, reward pattern, mask and NaN rates);
    the bulk (episode lengths/ends, groups, numbers, row order) comes from a drawn seed to keep generation cheap."""
    n_traj, T, n_groups = draw(st.integers(0, 5)), draw(st.integers(0, 4)), draw(st.integers(1, 3))
    reward_kind = draw(st.sampled_from(["outcome", "dense", "identical", "zero"]))
    p_mask = draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]))
    p_bad = draw(st.sampled_from([0.0, 0.0, 0.1, 0.5]))
    with_anchors, with_bootstrap = draw(st.booleans()), draw(st.booleans())
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    lengths = torch.randint(1, 5, (n_traj,), generator=gen).tolist()
    groups = torch.randint(0, n_groups, (n_traj,), generator=gen).tolist()
    ends = [["done", "truncated", "open"][i] for i in torch.randint(0, 3, (n_traj,), generator=gen).tolist()]
    S = sum(lengths)

    def per_step(per_traj: list) -> list:
        return [v for v, n in zip(per_traj, lengths) for _ in range(n)]

    traj = torch.tensor(per_step([t * 7 + 3 for t in range(len(lengths))]), dtype=torch.long)  # sparse ids
    group = torch.tensor(per_step([g * 11 for g in groups]), dtype=torch.long)
    step = torch.cumsum(torch.randint(1, 3, (S,), generator=gen), 0)  # increasing, with gaps
    last = torch.tensor([k == n - 1 for n in lengths for k in range(n)], dtype=torch.bool)
    end_of = per_step(ends)
    done = torch.tensor([e == "done" for e in end_of], dtype=torch.bool) & last
    cut = torch.tensor([e == "truncated" for e in end_of], dtype=torch.bool) & last
    rewards = torch.randn(S, generator=gen) * 5
    if reward_kind == "outcome":
        rewards = torch.where(last, rewards.round(), torch.zeros(S))
    elif reward_kind == "identical":
        rewards = torch.full((S,), 0.5)
    elif reward_kind == "zero":  # e.g. truncated episodes that never got a final reward
        rewards = torch.zeros(S)
    rewards = sprinkle(rewards, p_bad * 0.1, gen)
    old = sprinkle(-torch.rand(S, T, generator=gen) * 30, p_bad, gen)
    letters = ["a", "b", None]
    anchors = [letters[i] for i in torch.randint(0, 3, (S,), generator=gen).tolist()] if with_anchors else None
    perm = torch.randperm(S, generator=gen)
    extras = {"bootstrap_values": torch.randn(S, generator=gen)} if with_bootstrap else {}
    # ReMax's greedy return per row's group (NaN / inf: no usable greedy episode)
    extras["greedy_returns"] = sprinkle(torch.tensor(per_step([float(g) for g in groups])), p_bad, gen)[perm]
    return StepBatch(
        traj_ids=traj[perm], group_ids=group[perm], step_index=step[perm], rewards=rewards[perm],
        dones=done[perm], truncated=cut[perm],
        action_mask=(torch.rand(S, T, generator=gen) < p_mask).float(), old_logprobs=old,
        values=torch.randn(S, generator=gen), ref_logprobs=sprinkle(-torch.rand(S, T, generator=gen) * 30, p_bad, gen),
        anchors=None if anchors is None else [anchors[i] for i in perm.tolist()],
        extras=extras,
    )


def check_advantages(algo, batch):
    out = algo.compute_advantages(batch)
    S, T = batch.action_mask.shape
    assert out.advantages.shape == (S, T) and out.returns.shape == (S,)
    assert torch.isfinite(out.advantages).all() and torch.isfinite(out.returns).all()
    assert (out.advantages[batch.action_mask == 0] == 0).all()
    assert all(isinstance(v, float) and v == v for v in out.metrics.values())
    return out


@settings(max_examples=4000, **SETTINGS)
@given(batch=step_batches(), name=st.sampled_from(NAMES))
def test_advantages_are_finite(batch, name):
    check_advantages(ALGORITHM_CLASSES[name](), batch)


@st.composite
def loss_setups(draw):
    name = draw(st.sampled_from(NAMES))
    kw = dict(loss_type=draw(st.sampled_from(LOSS_TYPES)), loss_agg=draw(st.sampled_from(LOSS_AGGS)),
              kl_coef=draw(st.sampled_from([0.0, 0.1])), kl_estimator=draw(st.sampled_from(["k1", "k2", "k3"])),
              entropy_coef=draw(st.sampled_from([0.0, 0.01])), clip_ratio_c=draw(st.sampled_from([None, 3.0])))
    return ALGORITHM_CLASSES[name](**kw)


@settings(max_examples=5000, **SETTINGS)
@given(batch=step_batches(), algo=loss_setups(), data=st.data())
def test_loss_and_gradient_are_finite(batch, algo, data):
    out = check_advantages(algo, batch)
    S, T = batch.action_mask.shape
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    drift = (torch.rand(S, T, generator=gen) - 0.5) * data.draw(st.sampled_from([0.0, 0.1, 1.0, 6.0]))
    lp = torch.nan_to_num(batch.old_logprobs, nan=-1.0, posinf=-1.0, neginf=-1.0) + drift
    lp = sprinkle(lp, data.draw(st.sampled_from([0.0, 0.2])), gen)  # NaN/inf in the current log-probs too
    lp.requires_grad_()
    entropy = torch.rand(S, T, requires_grad=True)
    res = algo.policy_loss(lp, batch, out.advantages, entropy=entropy)
    assert res.loss.shape == () and torch.isfinite(res.loss)
    res.loss.backward()
    assert torch.isfinite(lp.grad).all()
    if entropy.grad is not None:
        assert torch.isfinite(entropy.grad).all()
    valid = (batch.action_mask > 0) & torch.isfinite(lp.detach()) & torch.isfinite(batch.old_logprobs)
    if algo.needs_reference:
        valid &= torch.isfinite(batch.ref_logprobs)
    assert (lp.grad[~valid] == 0).all()
    n_bad = ((batch.action_mask > 0) & ~valid).sum().item()
    assert res.metrics["nonfinite_logprob_tokens"] == n_bad
    if algo.needs_critic:
        v = (batch.values + 0.5).requires_grad_()
        vl = algo.value_loss(v, batch, out.returns)
        vl.loss.backward()
        assert torch.isfinite(vl.loss) and torch.isfinite(v.grad).all()


@settings(max_examples=1000, **SETTINGS)
@given(batch=step_batches(), name=st.sampled_from(NAMES), data=st.data())
def test_microbatch_rows(batch, name, data):
    algo = ALGORITHM_CLASSES[name]()
    out = check_advantages(algo, batch)
    S = batch.num_steps
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    size = data.draw(st.integers(0, S))
    idx = torch.randint(0, max(S, 1), (size,), generator=gen)  # any rows, repeats allowed
    mb = batch.select(idx)
    lp = torch.nan_to_num(mb.old_logprobs, nan=0.0, posinf=0.0, neginf=0.0).requires_grad_()
    res = algo.policy_loss(lp, mb, out.advantages[idx])
    res.loss.backward()
    assert torch.isfinite(res.loss) and torch.isfinite(lp.grad).all()
    # at the behaviour policy (ratio 1) PPO/GSPO clip nothing
    assert res.metrics["clip_fraction"] == 0.0
