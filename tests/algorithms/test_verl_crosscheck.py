"""Numbers agree with verl's reference implementations where the definitions coincide (single-step trajectories).

Skipped unless ``verl`` is importable. Each trajectory here is one step with an outcome reward, which is the case
where step-level and verl's token-level definitions are the same (see docs/algorithms.md for where they differ).
"""

from __future__ import annotations

import pytest
import torch

core = pytest.importorskip("verl.trainer.ppo.core_algos")
np = pytest.importorskip("numpy")

from agentr1_core.algorithms.advantages import (  # noqa: E402
    grpo_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
)
from agentr1_core.algorithms.base import StepBatch  # noqa: E402
from agentr1_core.algorithms.remax import remax_advantages  # noqa: E402
from agentr1_core.algorithms.losses import PolicyLossConfig, kl_penalty, policy_loss, value_loss  # noqa: E402

TOL = 1e-6


def single_step_case(seed: int, n_groups: int = 3, group_size: int = 4, T: int = 6):
    """One-step trajectories in groups of ``group_size`` with right-padded masks and outcome rewards."""
    g = torch.Generator().manual_seed(seed)
    n = n_groups * group_size
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).double()
    reward = torch.randint(0, 3, (n,), generator=g).double() + torch.rand(n, generator=g, dtype=torch.float64)
    token_rewards = torch.zeros(n, T, dtype=torch.float64)
    token_rewards[torch.arange(n), lengths - 1] = reward
    group = torch.arange(n) // group_size
    batch = StepBatch(
        traj_ids=torch.arange(n), group_ids=group, step_index=torch.zeros(n, dtype=torch.long), rewards=reward,
        dones=torch.ones(n, dtype=torch.bool), truncated=torch.zeros(n, dtype=torch.bool), action_mask=mask,
        old_logprobs=torch.zeros(n, T, dtype=torch.float64),
    )
    return batch, token_rewards, mask, group.numpy()


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_matches(seed, norm_by_std):
    batch, token_rewards, mask, index = single_step_case(seed)
    ours = grpo_advantages(batch, norm_by_std=norm_by_std).advantages
    ref, _ = core.compute_grpo_outcome_advantage(token_rewards, mask, index, norm_adv_by_std_in_grpo=norm_by_std)
    assert torch.allclose(ours, ref, atol=TOL)


@pytest.mark.parametrize("seed", range(5))
def test_remax_matches(seed):
    """The greedy return of each row's group (one per group) as verl's ``reward_baselines``."""
    batch, token_rewards, mask, index = single_step_case(seed)
    greedy = torch.rand(int(index.max()) + 1, generator=torch.Generator().manual_seed(100 + seed), dtype=torch.float64)
    baseline = greedy[torch.as_tensor(index)] * 3
    batch.extras["greedy_returns"] = baseline
    ref, _ = core.compute_remax_outcome_advantage(token_rewards, baseline, mask)
    assert torch.allclose(remax_advantages(batch).advantages, ref, atol=TOL)


@pytest.mark.parametrize("seed", range(5))
def test_rloo_matches(seed):
    batch, token_rewards, mask, index = single_step_case(seed)
    ref, _ = core.compute_rloo_outcome_advantage(token_rewards, mask, index)
    assert torch.allclose(rloo_advantages(batch).advantages, ref, atol=TOL)


@pytest.mark.parametrize("seed", range(5))
def test_reinforce_pp_matches(seed):
    from verl.trainer.config import AlgoConfig

    batch, token_rewards, mask, _ = single_step_case(seed)
    ref, _ = core.compute_reinforce_plus_plus_outcome_advantage(token_rewards, mask, config=AlgoConfig(gamma=1.0))
    assert torch.allclose(reinforce_pp_advantages(batch, gamma=1.0).advantages, ref, atol=TOL)


def actor_config(low: float, high: float, c: float = 3.0):
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_mini_batch_size=1, ppo_micro_batch_size_per_gpu=1,
                       clip_ratio=low, clip_ratio_low=low, clip_ratio_high=high, clip_ratio_c=c)


def loss_case(seed: int, S: int = 8, T: int = 7, spread: float = 0.6):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(S, T, generator=g, dtype=torch.float64) * 3
    lp = old + (torch.rand(S, T, generator=g, dtype=torch.float64) - 0.5) * spread
    adv = torch.randn(S, 1, generator=g, dtype=torch.float64).expand(S, T).clone()
    lengths = torch.randint(1, T + 1, (S,), generator=g)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).double()
    return lp, old, adv * mask, mask


def compare_loss(ours_fn, ref_fn, lp):
    a = lp.clone().requires_grad_()
    b = lp.clone().requires_grad_()
    ours = ours_fn(a)
    ref = ref_fn(b)
    ours.backward()
    ref.backward()
    assert ours.item() == pytest.approx(ref.item(), abs=TOL)
    assert torch.allclose(a.grad, b.grad, atol=TOL)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_ppo_clip_loss_matches(seed, agg):
    lp, old, adv, mask = loss_case(seed, spread=3.0)  # wide spread: clip and dual clip both active
    cfg = PolicyLossConfig(loss_type="ppo", clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, loss_agg=agg)
    compare_loss(
        lambda x: policy_loss(x, old, adv, mask, cfg).loss,
        lambda x: core.compute_policy_loss_vanilla(old, x, adv, mask, agg, actor_config(0.2, 0.28))[0],
        lp,
    )


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_gspo_loss_matches(seed, agg):
    lp, old, adv, mask = loss_case(seed, spread=0.02)
    cfg = PolicyLossConfig(loss_type="gspo", clip_ratio_low=3e-3, clip_ratio_high=4e-3, loss_agg=agg)
    compare_loss(
        lambda x: policy_loss(x, old, adv, mask, cfg).loss,
        lambda x: core.compute_policy_loss_gspo(old, x, adv, mask, agg, actor_config(3e-3, 4e-3))[0],
        lp,
    )


@pytest.mark.parametrize("ours,theirs", [("k1", "kl"), ("k2", "mse"), ("k3", "low_var_kl")])
def test_kl_estimators_match(ours, theirs):
    lp, ref_lp, _, _ = loss_case(0, spread=2.0)
    assert torch.allclose(kl_penalty(lp, ref_lp, ours), core.kl_penalty(lp, ref_lp, theirs), atol=TOL)


def test_value_loss_matches_single_token_steps():
    g = torch.Generator().manual_seed(0)
    v, old, ret = (torch.randn(10, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(10, 1, dtype=torch.float64)
    ours = value_loss(v, old, ret, mask[:, 0] > 0, clip=0.2).loss
    ref = core.compute_value_loss(v[:, None], ret[:, None], old[:, None], mask, cliprange_value=0.2)
    ref = ref[0] if isinstance(ref, tuple) else ref
    assert ours.item() == pytest.approx(ref.item(), abs=TOL)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum"])
def test_reinforce_loss_matches_verl_gpg(seed, agg):
    """The ``reinforce`` loss (``-A log pi``) is what the verl trainer maps to verl's ``gpg`` policy loss."""
    lp, old, adv, mask = loss_case(seed, spread=1.0)
    cfg = PolicyLossConfig(loss_type="reinforce", loss_agg=agg)
    compare_loss(
        lambda x: policy_loss(x, old, adv, mask, cfg).loss,
        lambda x: core.compute_policy_loss_gpg(old, x, adv, mask, agg, actor_config(0.2, 0.2))[0],
        lp,
    )


@pytest.mark.parametrize("seed", range(3))
def test_dual_clip_off_matches_verl_with_the_off_constant(seed):
    """``clip_ratio_c: None`` (no dual clip) is mapped to a constant no ratio reaches; the losses then agree."""
    from agentr1_core.verl.data import DUAL_CLIP_OFF

    lp, old, adv, mask = loss_case(seed, spread=3.0)
    cfg = PolicyLossConfig(loss_type="ppo", clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=None)
    compare_loss(
        lambda x: policy_loss(x, old, adv, mask, cfg).loss,
        lambda x: core.compute_policy_loss_vanilla(old, x, adv, mask, "token-mean",
                                                   actor_config(0.2, 0.2, c=DUAL_CLIP_OFF))[0],
        lp,
    )


# -- the off-policy correction and non-finite log-probs: the verl trainer's update batch through verl's own loss -----
def verl_actor_loss(layout: dict, logprobs: torch.Tensor) -> torch.Tensor:
    """verl's actor loss (``ppo_loss``) on a ``step_rows_to_verl`` layout, as its FSDP engine runs it on one rank:
    the batch without padding, the token count of the loss mask as ``batch_num_tokens``, and ``logprobs`` (``[S, T]``)
    as the model's output at the positions verl reads them from (one before each response token)."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import left_right_2_no_padding

    batch = layout["batch"]
    rows, prompt_width = batch["prompts"].shape
    td = left_right_2_no_padding(TensorDict(dict(batch), batch_size=[rows]))
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=int(batch["response_mask"].sum()), global_batch_size=rows)
    flat = []
    for i in range(rows):
        attention = batch["attention_mask"][i]
        p_len, r_len = int(attention[:prompt_width].sum()), int(attention[prompt_width:].sum())
        flat += [logprobs.new_zeros(p_len - 1), logprobs[i, :r_len], logprobs.new_zeros(1)]
    loss, _ = ppo_loss(actor_config(0.2, 0.2), {"log_probs": torch.cat(flat).float()}, td)
    return loss


def off_policy_case():
    """Two steps of 4 and 3 action tokens: the engine's log-prob of one token is NaN, the trainer's recomputed
    (proximal) log-prob of another is -inf; old and engine log-probs differ enough that some weights pass 2."""
    from types import SimpleNamespace

    g = torch.Generator().manual_seed(5)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.float64)
    prox = -torch.rand(2, 4, generator=g, dtype=torch.float64) * 2 * mask
    mu = (prox + (torch.rand(2, 4, generator=g, dtype=torch.float64) - 0.5) * 3.0) * mask
    lp = (prox + (torch.rand(2, 4, generator=g, dtype=torch.float64) - 0.5) * 0.6) * mask
    mu[0, 1] = float("nan")
    prox[1, 2] = float("-inf")
    adv = torch.tensor([[1.0] * 4, [-0.5] * 3 + [0.0]], dtype=torch.float64)
    rows = [SimpleNamespace(prompt_ids=[5, 6, 7], response_ids=[8, 9, 10, 11], old_logprobs=mu[0].tolist(),
                            reward=1.0, group=0, traj=0, step_index=0),
            SimpleNamespace(prompt_ids=[5, 6], response_ids=[8, 9, 10], old_logprobs=mu[1, :3].tolist(),
                            reward=0.0, group=0, traj=1, step_index=0)]
    return rows, mask, prox, mu, lp, adv


@pytest.mark.parametrize("cap_mode,level", [("truncate", "token"), ("mask", "token"), ("truncate", "sequence"),
                                            ("mask", "geometric")])
def test_decoupled_correction_with_nonfinite_logprobs_matches_verls_loss(cap_mode, level):
    """The local and ray backends (``policy_update``: the algorithm's loss with the mini-batch's denominators) and
    the verl backend (``VerlBackend._update``: weights, loss tokens and layout, then verl's own ``ppo_loss``) give
    the same loss: the tokens with a non-finite engine or proximal log-prob leave numerator and denominator alike,
    masked tokens stay counted."""
    from agentr1_core.algorithms.components import GRPO
    from agentr1_core.algorithms.losses import OffPolicyCorrection, proximal_weights
    from agentr1_core.verl.data import loss_tokens, step_rows_to_verl

    rows, mask, prox, mu, lp, adv = off_policy_case()
    correction = OffPolicyCorrection("decoupled", cap=2.0, cap_mode=cap_mode, level=level)
    algo = GRPO(clip_ratio_c=3.0)
    batch = StepBatch(traj_ids=torch.arange(2), group_ids=torch.zeros(2, dtype=torch.long),
                      step_index=torch.zeros(2, dtype=torch.long), rewards=torch.zeros(2),
                      dones=torch.ones(2, dtype=torch.bool), truncated=torch.zeros(2, dtype=torch.bool),
                      action_mask=mask, old_logprobs=prox, extras={"rollout_logprobs": mu, "off_policy": correction})
    batch.extras["loss_denominators"] = algo.loss_denominators(batch, adv)
    ours = algo.policy_loss(lp, batch, adv).loss
    weights, tally, valid = proximal_weights(prox, mu, mask, correction)
    assert valid.sum() == 5 and (tally.capped > 0 or level != "token")  # two tokens out; token weights above 2
    layout = step_rows_to_verl(rows, adv.float(), None, 0, old_logprobs=prox, is_weights=weights,
                               loss_mask=loss_tokens(mask, prox, mu))
    assert all(torch.isfinite(layout["batch"][k]).all() for k in ("old_log_probs", "rollout_is_weights"))
    assert int(layout["batch"]["response_mask"].sum()) == 5
    theirs = verl_actor_loss(layout, lp)
    assert float(ours) == pytest.approx(float(theirs), abs=1e-6)
    assert abs(float(ours)) > 1e-3


def test_nonfinite_engine_logprobs_without_recomputation_match_verls_loss():
    """No correction, no recomputation: the engine's log-probs are the old ones, and its NaN token leaves the loss
    on both backends (denominator 6, not 7)."""
    from agentr1_core.algorithms.components import GRPO
    from agentr1_core.verl.data import loss_tokens, step_rows_to_verl

    rows, mask, _, mu, lp, adv = off_policy_case()
    algo = GRPO(clip_ratio_c=3.0)
    batch = StepBatch(traj_ids=torch.arange(2), group_ids=torch.zeros(2, dtype=torch.long),
                      step_index=torch.zeros(2, dtype=torch.long), rewards=torch.zeros(2),
                      dones=torch.ones(2, dtype=torch.bool), truncated=torch.zeros(2, dtype=torch.bool),
                      action_mask=mask, old_logprobs=mu)
    batch.extras["loss_denominators"] = algo.loss_denominators(batch, adv)
    assert batch.extras["loss_denominators"].tokens == 6
    ours = algo.policy_loss(lp, batch, adv).loss
    layout = step_rows_to_verl(rows, adv.float(), None, 0, loss_mask=loss_tokens(mask, mu))
    assert int(layout["batch"]["response_mask"].sum()) == 6
    assert float(ours) == pytest.approx(float(verl_actor_loss(layout, lp)), abs=1e-6)


class RecordingGroups:
    """verl's worker groups as ``VerlBackend._update`` uses them: recomputed log-probs, and the update batch kept."""

    ref = critic = None

    def __init__(self, actor_logprobs: torch.Tensor) -> None:
        self.actor_logprobs = actor_logprobs
        self.updates: list = []

    def log_probs(self, proto):
        return self.actor_logprobs.float()

    def update_actor(self, proto, mini_batches, epochs, seed):
        self.updates.append(proto)
        return {"actor/pg_loss": [0.1]}


def verl_backend(groups: RecordingGroups, *overrides: str):
    from omegaconf import OmegaConf

    from agentr1_core.algorithms.components import GRPO
    from agentr1_core.config import RunConfig
    from agentr1_core.verl.trainer import VerlBackend

    backend = VerlBackend.__new__(VerlBackend)
    backend.cfg = OmegaConf.merge(OmegaConf.structured(RunConfig), OmegaConf.from_dotlist(list(overrides)))
    backend.algorithm, backend.groups, backend.pad_id = GRPO(), groups, 0
    return backend


def step_rows(rewards):
    from agentr1_core.trainers.batching import StepRow, StepRows

    rows, _, _, mu, _, _ = off_policy_case()
    return StepRows(rows=[StepRow(prompt_ids=r.prompt_ids, response_ids=r.response_ids, old_logprobs=r.old_logprobs,
                                  traj=i, group=0, step_index=0, reward=reward, done=True, truncated=False)
                          for i, (r, reward) in enumerate(zip(rows, rewards))],
                    traj_uids=["a", "b"], group_keys=["g"]), mu


def test_the_verl_update_batch_leaves_nonfinite_tokens_out_and_logs_token_means():
    """``VerlBackend._update`` with the decoupled correction: the tokens with a NaN engine or -inf recomputed
    log-prob are out of verl's loss (``response_mask``), no NaN reaches verl, and the weights' and mismatch metrics
    are those of the local trainer's functions over the same tokens."""
    from agentr1_core.algorithms.losses import OffPolicyCorrection, proximal_weights
    from agentr1_core.algorithms.mismatch import mismatch_metrics

    _, mask, prox, _, _, _ = off_policy_case()
    steps, mu = step_rows([1.0, 0.0])
    groups = RecordingGroups(prox)
    out = verl_backend(groups, "trainer.off_policy_correction=decoupled", "trainer.importance_cap_mode=mask")._update(
        steps, [], 1)
    batch = groups.updates[0].batch
    assert batch["response_mask"].tolist() == [[1, 0, 1, 1], [1, 1, 0, 0]]
    assert all(bool(torch.isfinite(batch[k]).all()) for k in ("old_log_probs", "rollout_is_weights"))
    _, tally, _ = proximal_weights(prox.float(), mu, mask, OffPolicyCorrection("decoupled", cap_mode="mask"))
    assert out["offpolicy/is_weight_mean"] == pytest.approx(tally.metrics()["offpolicy/is_weight_mean"], rel=1e-6)
    assert out["offpolicy/is_capped_fraction"] == pytest.approx(tally.capped / 5)
    expected = mismatch_metrics(mu, prox.float() * mask, mask)
    assert all(out[k] == pytest.approx(v, rel=1e-6) for k, v in expected.items())
    assert out["update_skipped"] == 0 and all(v == v for v in out.values() if isinstance(v, float))


def test_the_verl_update_without_a_gradient_is_skipped_unless_asked():
    """Both steps of the only group scored the same: every advantage is 0, no row carries a gradient, and verl's
    optimizer is not called; ``trainer.step_without_gradient=true`` calls it as before."""
    steps, _ = step_rows([1.0, 1.0])
    groups = RecordingGroups(torch.zeros(2, 4))
    out = verl_backend(groups)._update(steps, [], 1)
    assert groups.updates == [] and out["update_skipped"] == 1 and out["optimizer_steps"] == 0
    out = verl_backend(groups, "trainer.step_without_gradient=true")._update(steps, [], 1)
    assert len(groups.updates) == 1 and out["update_skipped"] == 0


class RecordingCriticGroups(RecordingGroups):
    """The same, with verl's critic: its values of every step, and its update batch kept."""

    def __init__(self, actor_logprobs: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__(actor_logprobs)
        self.critic, self.critic_values, self.critic_updates = object(), values, []

    def values(self, proto):
        return self.critic_values

    def update_critic(self, proto, values, returns, epochs, seed):
        self.critic_updates.append(returns)
        return {"critic/vf_loss": [0.0]}


@pytest.mark.parametrize("value", [0.0, 0.5])
def test_the_verl_steppo_update_is_skipped_only_while_the_critic_already_gives_every_return(value):
    """StepPO without a reward: every whitened advantage is 0. A critic whose values are all 0 gives every return
    (0) already, so neither verl's actor nor its critic is updated; one that expects 0.5 has a value loss to learn
    from, and both are."""
    from agentr1_core.algorithms.components import StepPO

    steps, _ = step_rows([0.0, 0.0])
    groups = RecordingCriticGroups(torch.zeros(2, 4), torch.full((2,), value))
    backend = verl_backend(groups)
    backend.algorithm, backend.tokenizer, backend.max_positions = StepPO(), None, 64
    out = backend._update(steps, [], 1)
    skipped = value == 0.0
    assert out["update_skipped"] == int(skipped)
    assert len(groups.updates) == len(groups.critic_updates) == int(not skipped)
