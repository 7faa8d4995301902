"""The RL update on a tiny random Llama: the gradient of one update does not depend on the micro-batch size, the
multi-tensor optimizer and clipping give the old per-tensor results, a separate critic leaves the policy's update
alone, the engine-vs-trainer log-prob gap is measured, and truncated episodes are bootstrapped from the critic's
value of the next observation (a hand-worked case)."""

from __future__ import annotations

import copy

import pytest
import torch

from agentr1_core.algorithms.base import inert_rows_of
from agentr1_core.algorithms.components import ALGORITHM_CLASSES
from agentr1_core.algorithms.gae import step_gae
from agentr1_core.config import ConfigError
from agentr1_core.mdp import Observation, Step, Trajectory
from agentr1_core.trainers.batching import build_step_batch, collate, trajectories_to_rows
from agentr1_core.trainers.console import console_notes
from agentr1_core.trainers.forward import response_forward
from agentr1_core.trainers.roles import (bootstrap_values, engine_runs_module, recompute_old_logprobs,
                                         zero_value_head)
from agentr1_core.trainers.optimizer_steps import make_optimizer
from agentr1_core.trainers.update import Critic, Policy, UpdateSettings, policy_update, score_batch


def _rows(model, pad_id: int, lengths=((5, 2), (9, 2), (4, 20), (7, 20)), noise: float = 0.05):
    """Step rows with (prompt, response) lengths ``lengths``; old log-probs = the model's own plus noise, so that
    ratios are near 1 but not equal."""
    gen = torch.Generator().manual_seed(1)
    trajs = []
    for i, (p, r) in enumerate(lengths):
        prompt = torch.randint(10, 2000, (p,), generator=gen).tolist()
        resp = torch.randint(10, 2000, (r,), generator=gen).tolist()
        trajs.append(Trajectory(steps=[Step(prompt, resp, [0.0] * r, reward=float(i % 2), done=True)],
                                uid=f"t{i}", group_id="g"))
    rows = trajectories_to_rows(trajs).rows
    batch = build_step_batch(rows)
    with torch.no_grad():
        out = response_forward(model, collate(rows, pad_id), batch.action_mask.shape[1])
    batch.old_logprobs = (out.logprobs + noise * torch.randn(out.logprobs.shape, generator=gen)) * batch.action_mask
    for row, lp in zip(rows, batch.old_logprobs):
        row.old_logprobs = lp[:len(row.response_ids)].tolist()
    return rows, batch


def _update_delta(model, rows, batch, algo, micro: int, critic: str = "none", mini_batches: int = 1,
                  checkpointing: bool = False, share_prefix: int = 0):
    """Parameter change of one ``policy_update`` with plain SGD at lr 1 (so the change is minus the gradient)."""
    policy_model = copy.deepcopy(model).train()
    if checkpointing:
        from agentr1_core.trainers.local import enable_activation_checkpointing

        enable_activation_checkpointing(policy_model)
    torch.manual_seed(0)
    head = torch.nn.Linear(model.config.hidden_size, 1) if critic != "none" else None
    sep = None
    if critic == "separate":
        cm = copy.deepcopy(model)
        cparams = list(cm.parameters()) + list(head.parameters())
        sep = Critic(model=cm, head=head, optimizer=torch.optim.SGD(cparams, lr=1.0), params=cparams,
                     max_grad_norm=0.0)
        head = None
    params = list(policy_model.parameters()) + (list(head.parameters()) if head is not None else [])
    policy = Policy(model=policy_model, pad_id=0, value_head=head, params=params, critic=sep,
                    activation_checkpointing=checkpointing, share_prefix=share_prefix)
    b = copy.deepcopy(batch)
    if algo.needs_critic:
        b.values = torch.tensor([0.1, -0.2, 0.3, 0.0])
    adv = algo.compute_advantages(b)
    before = [p.detach().clone() for p in params]
    metrics = policy_update(policy, algo, torch.optim.SGD(params, lr=1.0), rows, b, adv.advantages, adv.returns,
                            UpdateSettings(micro_batch_size=micro, mini_batches=mini_batches, max_grad_norm=0.0,
                                           progress=False))
    delta = torch.cat([(p.detach() - b0).flatten() for p, b0 in zip(params, before)])
    return delta, metrics, policy


CASES = [("grpo", {"loss_agg": "token-mean"}), ("grpo", {"loss_agg": "seq-mean-token-sum"}),
         ("grpo", {"loss_agg": "seq-mean-token-mean"}), ("grpo", {"loss_agg": "token-mean", "entropy_coef": 0.01}),
         ("drgrpo", {}), ("reinforce", {}), ("ppo", {}), ("steppo", {})]


@pytest.mark.parametrize("name,params", CASES, ids=[f"{n}-{'-'.join(map(str, p.values()))}" for n, p in CASES])
def test_update_gradient_does_not_depend_on_micro_batch_size(tiny_model, name, params):
    """Rows of 2, 2, 20 and 20 response tokens: micro-batches 1, 2, 3 and 4 give the same update (1e-5 relative)
    and the same logged losses, for every loss aggregation and with the critic's value loss on the shared trunk."""
    rows, batch = _rows(tiny_model, 0)
    algo = ALGORITHM_CLASSES[name](**params)
    deltas = {m: _update_delta(tiny_model, rows, batch, algo, m, critic="head" if algo.needs_critic else "none")
              for m in (1, 2, 3, 4)}
    full, full_metrics, _ = deltas[4]
    assert float(full.norm()) > 0
    for m in (1, 2, 3):
        delta, metrics, _ = deltas[m]
        assert float((delta - full).norm()) <= 1e-5 * float(full.norm()), (name, m)
        assert metrics["loss"] == pytest.approx(full_metrics["loss"], rel=1e-4, abs=1e-7)  # fp32 sums
        assert metrics["pg_loss"] == pytest.approx(full_metrics["pg_loss"], rel=1e-4, abs=1e-7)


def test_multi_tensor_optimizer_and_clipping_match_the_per_tensor_update(tiny_model, monkeypatch):
    """AdamW(foreach) + foreach clipping (the trainer's) against AdamW(foreach=False) + per-tensor clipping."""
    rows, batch = _rows(tiny_model, 0)
    algo = ALGORITHM_CLASSES["grpo"]()
    adv = algo.compute_advantages(batch)
    per_tensor_clip = torch.nn.utils.clip_grad_norm_
    results = []
    for fast in (True, False):
        model = copy.deepcopy(tiny_model).train()
        params = list(model.parameters())
        if fast:
            opt = make_optimizer([{"params": params, "lr": 1e-3}], lr=1e-3)
        else:
            opt = torch.optim.AdamW(params, lr=1e-3, foreach=False)
            monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_",
                                lambda ps, mx, foreach=None: per_tensor_clip(ps, mx, foreach=False))
        assert opt.defaults["foreach"] is fast
        metrics = policy_update(Policy(model=model, pad_id=0, params=params), algo, opt, rows, copy.deepcopy(batch),
                                adv.advantages, adv.returns,
                                UpdateSettings(micro_batch_size=2, update_epochs=2, max_grad_norm=0.05,
                                               progress=False))
        monkeypatch.undo()
        results.append((torch.cat([p.detach().flatten() for p in params]), metrics))
    (fast_w, fast_m), (slow_w, slow_m) = results
    assert fast_m["optimizer_steps"] == slow_m["optimizer_steps"] == 2
    assert fast_m["grad_norm"] > 0.05  # clipping was active
    start = torch.cat([p.detach().flatten() for p in tiny_model.parameters()])
    # the kernels round differently; Adam's step g / (sqrt(v) + eps) magnifies that only where |g| is near eps
    assert float((fast_w - slow_w).norm()) <= 1e-3 * float((slow_w - start).norm())
    assert float((fast_w - slow_w).abs().max()) <= 0.05 * 1e-3  # 5% of one step of lr 1e-3, at worst
    assert fast_m["grad_norm"] == pytest.approx(slow_m["grad_norm"], rel=1e-4)
    assert fast_m["weight_change"] == pytest.approx(float((fast_w - start).norm()), rel=1e-4)


def test_separate_critic_leaves_the_policy_update_alone(tiny_model):
    """With a separate critic the policy's change is the critic-free one; a head on the shared trunk changes it."""
    rows, batch = _rows(tiny_model, 0)
    algo = ALGORITHM_CLASSES["steppo"](loss_type="ppo", clip_ratio=0.2, loss_agg="token-mean")
    sep, sep_metrics, sep_policy = _update_delta(tiny_model, rows, batch, algo, 2, critic="separate")
    none, _, _ = _update_delta(tiny_model, rows, batch, algo, 2, critic="none")
    shared, _, _ = _update_delta(tiny_model, rows, batch, algo, 2, critic="head")
    n = none.numel()
    assert torch.allclose(sep, none, rtol=0, atol=1e-7)
    assert float((shared[:n] - none).norm()) > 1e-4  # the value loss reaches the shared trunk
    assert sep_metrics["critic_grad_norm"] > 0 and sep_metrics["vf_loss"] > 0
    critic_change = sum(float((p.detach() - q.detach()).abs().sum()) for p, q in
                        zip(sep_policy.critic.model.parameters(), tiny_model.parameters()))
    assert critic_change > 0


def test_logprob_gap_is_measured_with_and_without_recompute(tiny_model):
    rows, batch = _rows(tiny_model, 0, noise=0.05)
    algo = ALGORITHM_CLASSES["grpo"]()
    _, metrics, _ = _update_delta(tiny_model, rows, batch, algo, 2)
    mask = batch.action_mask > 0
    with torch.no_grad():
        own = response_forward(tiny_model, collate(rows, 0), batch.action_mask.shape[1]).logprobs
    expected = (batch.old_logprobs - own)[mask].abs()
    assert metrics["logprob_gap_mean"] == pytest.approx(float(expected.mean()), rel=1e-4)
    assert metrics["logprob_gap_max"] == pytest.approx(float(expected.max()), rel=1e-4)
    b = copy.deepcopy(batch)
    policy = Policy(model=tiny_model, pad_id=0, params=[])
    scored = score_batch(policy, rows, b, 3, 1.0, recompute_old=True, need_ref=False, need_values=False)
    assert scored["logprob_gap_mean"] == pytest.approx(float(expected.mean()), rel=1e-4)
    assert torch.allclose(b.old_logprobs, own, atol=1e-6)
    assert torch.equal(b.extras["rollout_logprobs"], batch.old_logprobs)
    # the mismatch diagnostics of the same tokens, token means over every row, on both paths
    w = torch.exp(own.double() - batch.old_logprobs.double())[mask]
    diagnostics = {"mismatch/k3_kl": float((w - 1 - w.log()).mean()),
                   "mismatch/ess": float(w.sum() ** 2 / (w.numel() * (w * w).sum())),
                   "mismatch/chi2": float((w * w).mean() - 1)}
    assert 1e-4 < diagnostics["mismatch/k3_kl"] < 0.1 and 0.3 < diagnostics["mismatch/ess"] < 1.0
    for got in (metrics, scored):
        for key, value in diagnostics.items():
            assert got[key] == pytest.approx(value, rel=1e-3), key


class _Engine:
    def __init__(self, model):
        self.model = model


def test_recompute_old_logprobs_auto(tiny_model):
    own, other = _Engine(tiny_model), _Engine(copy.deepcopy(tiny_model))
    assert engine_runs_module(own, tiny_model) and not engine_runs_module(other, tiny_model)
    assert recompute_old_logprobs("auto", False, own, tiny_model) is False
    assert recompute_old_logprobs("auto", True, own, tiny_model) is True  # several optimizer steps per rollout
    assert recompute_old_logprobs("auto", False, other, tiny_model) is True  # a foreign engine (vLLM, a copy)
    assert recompute_old_logprobs("auto", False, object(), tiny_model) is True
    assert recompute_old_logprobs("false", False, other, tiny_model) is False
    assert recompute_old_logprobs(True, False, own, tiny_model) is True
    with pytest.raises(ConfigError, match="auto, true, false"):
        recompute_old_logprobs("sometimes", False, own, tiny_model)


def test_truncated_episodes_bootstrap_from_the_next_observation(tiny_model, smol_tokenizer):
    """Hand-worked step GAE (gamma = lam = 1, no whitening). The critic head is a constant 0.5 (zero weights), so
    the value of any next observation is 0.5.

    A: cut at max_turns after 2 steps, rewards [0, 0.1], V = [0.2, 0.4], next value 0.5:
       delta = [0 + 0.4 - 0.2, 0.1 + 0.5 - 0.4] = [0.2, 0.2]  ->  A = [0.4, 0.2]   (no bootstrap: [-0.1, -0.3])
    B: env fault on its only step (no next observation), r = 0, V = 0.3: next value = its own V  ->  A = 0
    C: done, r = 1, V = 0.3  ->  A = 0.7 (terminal: no bootstrap)."""
    head = torch.nn.Linear(tiny_model.config.hidden_size, 1)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.constant_(head.bias, 0.5)
    policy = Policy(model=tiny_model, pad_id=smol_tokenizer.pad_token_id, value_head=head)
    nxt = Observation(messages=[{"role": "user", "content": "What is 2+3?"}])
    a = Trajectory(steps=[Step([1, 2, 3], [4, 5], [-1.0, -1.0], reward=0.0, next_observation=nxt),
                          Step([1, 2, 3, 4, 5, 6], [7], [-1.0], reward=0.1, next_observation=nxt)],
                   uid="a", group_id="a", termination="max_turns")
    a.steps[-1].truncated = True
    b = Trajectory(steps=[Step([1, 2], [3], [-1.0], reward=0.0, truncated=True)], uid="b", group_id="b",
                   termination="env_error")
    c = Trajectory(steps=[Step([1, 2], [3], [-1.0], reward=1.0, done=True, next_observation=nxt)], uid="c",
                   group_id="c", termination="done")
    trajs = [a, b, c]
    rows = trajectories_to_rows(trajs).rows
    batch = build_step_batch(rows)
    batch.values = torch.tensor([0.2, 0.4, 0.3, 0.3])
    boot, from_obs = bootstrap_values(policy, trajs, rows, batch.values, smol_tokenizer, micro_batch_size=2)
    assert from_obs == 1
    assert boot[1].item() == pytest.approx(0.5, abs=1e-6) and boot[2].item() == pytest.approx(0.3)
    batch.extras["bootstrap_values"] = boot
    out = step_gae(batch, gamma=1.0, lam=1.0, whiten_advantages=False)
    step_adv = out.advantages[:, 0]
    assert step_adv.tolist() == pytest.approx([0.4, 0.2, 0.0, 0.7], abs=1e-6)
    assert out.returns.tolist() == pytest.approx([0.6, 0.6, 0.3, 1.0], abs=1e-6)


def test_bootstrap_reads_the_critic_at_the_next_prompts_last_token(tiny_model, smol_tokenizer):
    """With a non-constant head the bootstrap value is the head on the final hidden state of the rendered next
    observation, the same place a step's value is read."""
    from agentr1_core.flows import render_prompt

    torch.manual_seed(3)
    head = torch.nn.Linear(tiny_model.config.hidden_size, 1)
    policy = Policy(model=tiny_model, pad_id=smol_tokenizer.pad_token_id, value_head=head)
    nxt = Observation(text="Calculator result: 42")
    traj = Trajectory(steps=[Step([5, 6, 7], [8, 9], [-1.0, -1.0], next_observation=nxt, truncated=True)], uid="x")
    rows = trajectories_to_rows([traj]).rows
    boot, from_obs = bootstrap_values(policy, [traj], rows, torch.zeros(1), smol_tokenizer, micro_batch_size=1)
    ids = render_prompt(smol_tokenizer, nxt)
    with torch.no_grad():
        hidden = tiny_model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[-1]
        expected = head(hidden[0, -1]).item()
    assert from_obs == 1 and boot[0].item() == pytest.approx(expected, abs=1e-5)


def _two_groups(model):
    """Rows of two GRPO groups: group ``a`` with rewards 0, 1, 0, 1 (a gradient), group ``b`` all 1 (inert)."""
    rows, batch = _rows(model, 0, lengths=((5, 2), (9, 2), (4, 20), (7, 20), (6, 3), (8, 5), (5, 9), (9, 4)))
    for i, row in enumerate(rows):
        row.group = 0 if i < 4 else 1
    batch.group_ids = torch.tensor([r.group for r in rows])
    batch.rewards = torch.tensor([float(i % 2) if i < 4 else 1.0 for i in range(8)])
    return rows, batch


def _weights_after(model, rows, batch, algo, skip: bool, batches: int = 1, adam: bool = False,
                   step_without_gradient: bool = False):
    """Weights after ``batches`` updates on ``batch``: plain SGD at lr 1 (the change is minus the gradient), or AdamW
    (so that momentum carries across updates)."""
    model = copy.deepcopy(model).train()
    params = list(model.parameters())
    opt = make_optimizer([{"params": params, "lr": 1e-3}], lr=1e-3) if adam else torch.optim.SGD(params, lr=1.0)
    metrics = []
    for b in batches if isinstance(batches, list) else [batch] * batches:
        adv = algo.compute_advantages(copy.deepcopy(b))
        metrics.append(policy_update(Policy(model=model, pad_id=0, params=params), algo, opt, rows,
                                     copy.deepcopy(b), adv.advantages, adv.returns,
                                     UpdateSettings(micro_batch_size=3, max_grad_norm=0.0, progress=False,
                                                    skip_inert=skip,
                                                    step_without_gradient=step_without_gradient)))
    return torch.cat([p.detach().flatten() for p in params]), metrics


@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean"])
def test_inert_rows_are_skipped_and_the_update_is_the_same(tiny_model, loss_agg):
    """A group whose samples all scored the same has zero advantages: its rows are not run, and the weights come out
    the same (their tokens still count in the loss denominators)."""
    rows, batch = _two_groups(tiny_model)
    algo = ALGORITHM_CLASSES["grpo"](loss_agg=loss_agg)
    inert = algo.inert_rows(batch, algo.compute_advantages(copy.deepcopy(batch)).advantages)
    assert inert.tolist() == [False] * 4 + [True] * 4
    start = torch.cat([p.detach().flatten() for p in tiny_model.parameters()])
    full, full_m = _weights_after(tiny_model, rows, batch, algo, skip=False)
    skipped, skip_m = _weights_after(tiny_model, rows, batch, algo, skip=True)
    assert float((full - start).norm()) > 0
    assert float((full - skipped).norm()) <= 1e-5 * float((full - start).norm())
    assert skip_m[0]["update_inert_rows"] == 4 and full_m[0]["update_inert_rows"] == 0
    assert skip_m[0]["update_tokens"] < full_m[0]["update_tokens"]
    assert skip_m[0]["loss"] == pytest.approx(full_m[0]["loss"], rel=1e-4, abs=1e-7)


def test_an_all_inert_update_steps_the_optimizer_as_before_when_asked(tiny_model):
    """``step_without_gradient``: after an update with a gradient, an update where every row is inert runs no
    forward but leaves AdamW's momentum step exactly as the full pass (zero gradients) would."""
    rows, batch = _two_groups(tiny_model)
    batch.rewards = torch.tensor([float(i % 2) for i in range(8)])  # no inert row: the same first update either way
    flat = copy.deepcopy(batch)
    flat.rewards = torch.ones(8)
    algo = ALGORITHM_CLASSES["grpo"]()
    full, full_m = _weights_after(tiny_model, rows, batch, algo, skip=False, batches=[batch, flat], adam=True,
                                  step_without_gradient=True)
    skipped, skip_m = _weights_after(tiny_model, rows, batch, algo, skip=True, batches=[batch, flat], adam=True,
                                     step_without_gradient=True)
    after_first, _ = _weights_after(tiny_model, rows, batch, algo, skip=False, batches=[batch], adam=True)
    moved = float((full - after_first).norm())
    assert moved > 0  # momentum moved the weights in the second update
    assert float((full - skipped).norm()) <= 1e-6 * moved
    assert skip_m[1]["update_inert_rows"] == 8 and skip_m[1]["update_tokens"] == 0
    assert skip_m[1]["optimizer_steps"] == full_m[1]["optimizer_steps"] == 1
    assert skip_m[1]["update_skipped"] == full_m[1]["update_skipped"] == 0


@pytest.mark.parametrize("skip", [True, False])
def test_an_update_without_gradient_does_not_step_the_optimizer(tiny_model, skip):
    """After an update with a gradient, an update where no row carries a gradient (every GRPO group scored the
    same) leaves the weights exactly as they were: AdamW's momentum does not move them, whether inert rows are run
    or not. The update says it was skipped, and a later update with a gradient is the one it would have been."""
    rows, batch = _two_groups(tiny_model)
    batch.rewards = torch.tensor([float(i % 2) for i in range(8)])
    flat = copy.deepcopy(batch)
    flat.rewards = torch.ones(8)
    algo = ALGORITHM_CLASSES["grpo"]()
    after_first, first_m = _weights_after(tiny_model, rows, batch, algo, skip=skip, batches=[batch], adam=True)
    after_flat, flat_m = _weights_after(tiny_model, rows, batch, algo, skip=skip, batches=[batch, flat], adam=True)
    assert first_m[0]["update_skipped"] == 0 and first_m[0]["optimizer_steps"] == 1
    assert torch.equal(after_flat, after_first)
    assert flat_m[1]["update_skipped"] == 1 and flat_m[1]["optimizer_steps"] == 0
    assert flat_m[1]["weight_change"] == 0.0 and flat_m[1]["update_inert_rows"] == 8
    assert flat_m[1]["loss"] == 0.0 and flat_m[1]["update_tokens"] == 0
    twice, _ = _weights_after(tiny_model, rows, batch, algo, skip=skip, batches=[batch, batch], adam=True)
    resumed, _ = _weights_after(tiny_model, rows, batch, algo, skip=skip, batches=[batch, flat, batch], adam=True)
    assert torch.equal(resumed, twice)


def test_no_row_is_inert_with_an_entropy_bonus_or_a_kl_term(tiny_model):
    rows, batch = _two_groups(tiny_model)
    for name, params in (("grpo", {"entropy_coef": 0.01}), ("grpo", {"kl_coef": 0.1}),
                         ("steppo", {"entropy_coef": 0.01})):
        algo = ALGORITHM_CLASSES[name](**params)
        b = copy.deepcopy(batch)
        b.values = torch.zeros(8)
        b.rewards = torch.zeros(8)
        adv = algo.compute_advantages(b)
        assert inert_rows_of(algo, b, adv.advantages, adv.returns, algo.needs_critic) is None, name


def _critic_update(model, rows, batch, algo, full: bool = False):
    """Weights (trunk and value head) after one ``policy_update`` with the zero value head and a fresh AdamW;
    ``full``: every row runs and the optimizer steps, gradient or not."""
    model = copy.deepcopy(model).train()
    head = zero_value_head(model.config.hidden_size, "cpu")
    params = list(model.parameters()) + list(head.parameters())
    opt = make_optimizer([{"params": params, "lr": 1e-3}], lr=1e-3)
    adv = algo.compute_advantages(copy.deepcopy(batch))
    metrics = policy_update(Policy(model=model, pad_id=0, value_head=head, params=params), algo, opt, rows,
                            copy.deepcopy(batch), adv.advantages, adv.returns,
                            UpdateSettings(micro_batch_size=3, max_grad_norm=1.0, progress=False,
                                           skip_inert=not full, step_without_gradient=full))
    return torch.cat([p.detach().flatten() for p in params]), metrics


def test_a_fresh_critic_before_the_first_reward_skips_the_update(tiny_model):
    """StepPO with the zero value head on a batch without any reward: every advantage, value and return is 0, so
    neither the policy's nor the critic's loss has a gradient and the update is skipped; the weights are the ones a
    full pass (forward, backward, AdamW step on zero gradients) leaves. One reward, or a critic whose values are not
    the returns, and every row runs."""
    rows, batch = _two_groups(tiny_model)
    batch.values = torch.zeros(8)
    batch.rewards = torch.zeros(8)
    algo = ALGORITHM_CLASSES["steppo"]()
    adv = algo.compute_advantages(copy.deepcopy(batch))
    assert inert_rows_of(algo, batch, adv.advantages, adv.returns, True).all()
    head = torch.zeros(tiny_model.config.hidden_size + 1)
    start = torch.cat([p.detach().flatten() for p in tiny_model.parameters()] + [head])
    skipped, skip_m = _critic_update(tiny_model, rows, batch, algo)
    full, full_m = _critic_update(tiny_model, rows, batch, algo, full=True)
    assert skip_m["update_skipped"] == 1 and skip_m["update_tokens"] == 0 and skip_m["optimizer_steps"] == 0
    assert full_m["update_skipped"] == 0 and full_m["update_tokens"] > 0 and full_m["vf_loss"] == 0.0
    assert torch.equal(skipped, start) and torch.equal(full, start)

    rewarded = copy.deepcopy(batch)
    rewarded.rewards[0] = 1.0
    adv = algo.compute_advantages(copy.deepcopy(rewarded))
    assert not inert_rows_of(algo, rewarded, adv.advantages, adv.returns, True).any()
    moved, moved_m = _critic_update(tiny_model, rows, rewarded, algo)
    assert moved_m["update_skipped"] == 0 and moved_m["update_inert_rows"] == 0
    assert float((moved - start).norm()) > 0

    notes = console_notes({**skip_m, "adv/value_mean": 0.0})
    assert notes == ["[update] skipped: no row carries a gradient (every advantage is 0 and the critic already gives "
                     "every return, e.g. a fresh critic before the first reward); the optimizer did not step and the "
                     "weights are unchanged"]
    assert "each group scored the same" in console_notes(skip_m)[0]

    trained = copy.deepcopy(batch)  # a critic that expects reward where there is none: its loss has a gradient
    trained.values = torch.full((8,), 0.5)
    adv = algo.compute_advantages(copy.deepcopy(trained))
    assert (adv.advantages == 0).all()
    assert inert_rows_of(algo, trained, adv.advantages, adv.returns, True).tolist() == [False] * 8


def test_activation_checkpointing_gives_the_same_update(tiny_model):
    """Recomputing the blocks in the backward pass changes memory, not the gradient; a shared prefix (whose cache a
    recomputed block would write twice) is not used for the passes with gradients then."""
    rows, batch = _rows(tiny_model, 0, lengths=((40, 3), (40, 5), (40, 4), (40, 6)))
    for i in range(1, len(rows)):  # a long common prompt: share_prefix would apply
        rows[i].prompt_ids = list(rows[0].prompt_ids)
    batch = build_step_batch(rows)
    algo = ALGORITHM_CLASSES["grpo"](entropy_coef=0.01)
    plain, plain_metrics, _ = _update_delta(tiny_model, rows, batch, algo, 4, share_prefix=8)
    ckpt, ckpt_metrics, policy = _update_delta(tiny_model, rows, batch, algo, 4, checkpointing=True, share_prefix=8)
    assert policy.grad_share_prefix == 0 and policy.share_prefix == 8
    assert ckpt.abs().max() > 0
    torch.testing.assert_close(ckpt, plain, rtol=1e-4, atol=1e-6)
    assert ckpt_metrics["loss"] == pytest.approx(plain_metrics["loss"], rel=1e-5)


def _engine_logprobs(old: torch.Tensor, mask: torch.Tensor, spread: float = 0.8) -> torch.Tensor:
    """Sampling log-probs of an engine that disagrees with ``old`` by up to ``spread`` nats per token."""
    gen = torch.Generator().manual_seed(7)
    return (old + spread * (2 * torch.rand(old.shape, generator=gen) - 1)) * mask


def _correction_metrics(model, rows, batch, algo, correction, micro: int):
    policy_model = copy.deepcopy(model).train()
    params = list(policy_model.parameters())
    b = copy.deepcopy(batch)
    adv = algo.compute_advantages(b)
    return policy_update(Policy(model=policy_model, pad_id=0, params=params), algo, torch.optim.SGD(params, lr=0.1),
                         rows, b, adv.advantages, adv.returns,
                         UpdateSettings(micro_batch_size=micro, max_grad_norm=0.0, progress=False,
                                        correction=correction))


@pytest.mark.parametrize("mode", ["decoupled", "tis"])
def test_importance_weight_metrics_are_token_means_whatever_the_micro_batch_size(tiny_model, mode):
    """``offpolicy/*`` over rows of 2 to 20 tokens: micro-batches of 1, 3 and 8 rows log the same values, the
    token means of ``rho`` computed here by hand. ``decoupled``: ``rho = exp(old - mu)`` over every row, the inert
    ones (a group whose samples all scored the same) included, as on the verl backend; ``tis``: ``rho = exp(lp -
    mu)`` with the policy's own log-probs, over the rows that ran."""
    from agentr1_core.algorithms.losses import OffPolicyCorrection

    rows, batch = _two_groups(tiny_model)
    mask = batch.action_mask > 0
    with torch.no_grad():
        own = response_forward(tiny_model, collate(rows, 0), batch.action_mask.shape[1]).logprobs * batch.action_mask
    mu = _engine_logprobs(own, batch.action_mask)
    if mode == "decoupled":  # old: the proximal policy's, recomputed; mu: the engine's
        batch.old_logprobs = own.clone()
        batch.extras["rollout_logprobs"] = mu
        counted = mask
    else:  # old: the engine's own (no recomputation); the weights take the policy's current log-probs
        batch.old_logprobs = mu.clone()
        counted = mask & torch.tensor([i < 4 for i in range(8)]).unsqueeze(1)  # group b is inert and not run
    rho = torch.exp(own.double() - mu.double())[counted]
    cap = 1.5
    expected = {"offpolicy/is_weight_mean": float(rho.mean()), "offpolicy/is_weight_max": float(rho.max()),
                "offpolicy/is_capped_fraction": float((rho > cap).double().mean())}
    assert 0.1 < expected["offpolicy/is_capped_fraction"] < 0.5  # some tokens above the cap, most below
    algo = ALGORITHM_CLASSES["grpo"]()
    correction = OffPolicyCorrection(mode, cap=cap)
    for micro in (1, 3, 8):
        got = _correction_metrics(tiny_model, rows, batch, algo, correction, micro)
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, rel=1e-5), (micro, key)


@pytest.mark.slow
def test_a_run_whose_updates_carry_no_gradient_leaves_the_weights_alone_and_says_so(tmp_path, tiny_model_dir,
                                                                                     capsys):
    """The tiny task on a random tiny model: every episode scores 0, so every GRPO group is inert, and without an
    entropy bonus no row carries a gradient. Both updates are skipped and said so, the weights end as they began,
    the summary counts the two iterations; the rollouts come from a pipeline held to staleness 0, whose counters
    reach the records as the loop in turn's do; every step of every episode file records its policy version."""
    import json

    from transformers import AutoModelForCausalLM

    from agentr1_core.config import load_config
    from agentr1_core.plugins import configure_registry
    from agentr1_core.trainers.local import LocalTrainer
    from agentr1_core.trainers.pipeline import PipelinedRollouts

    run_dir = tmp_path / "run"
    cfg = load_config("tiny", [f"model.path={tiny_model_dir}", f"run_dir={run_dir}", "stages=[rl]",
                               "algorithm.entropy_coef=0", "trainer.total_steps=2", "rollout.max_new_tokens=8",
                               "validation.max_rows=1", "trainer.min_free_gb=0.01", "trainer.checkpoint_every=-1"])
    trainer = LocalTrainer(cfg, configure_registry())
    trainer.rollout_source = lambda: PipelinedRollouts(trainer, 0)
    summary = trainer.fit()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    iters = [r for r in records if "iteration" in r and r.get("event") is None]
    assert [r["reward_mean"] for r in iters] == [0.0, 0.0]
    assert all(r["update_skipped"] == 1 and r["optimizer_steps"] == 0 and r["weight_change"] == 0.0 for r in iters)
    assert all("prefix_hit_rate" in r and "async/trainer_idle_seconds" in r for r in iters)
    assert summary["skipped_updates"] == 2
    assert capsys.readouterr().out.count("[update] skipped: no row carries a gradient") == 2
    start = dict(AutoModelForCausalLM.from_pretrained(tiny_model_dir).named_parameters())
    assert all(torch.equal(p.detach(), start[n].detach()) for n, p in trainer.backend.policy.model.named_parameters())
    versions = {}
    for path in sorted((run_dir / "episodes").rglob("*.jsonl")):
        steps = [s for line in path.read_text().splitlines() for s in json.loads(line)["steps"]]
        versions[path.name] = {s["policy_version"] for s in steps}
    assert versions == {"before_rl.jsonl": {0}, "after_rl.jsonl": {2}, "iter_000001.jsonl": {0},
                        "iter_000002.jsonl": {1}}
