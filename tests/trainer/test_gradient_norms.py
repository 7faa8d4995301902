"""The gradient norms an RL update reports and the console line that shows them: the norm the policy's step clips
(before clipping) and whether it clipped, the policy's own norm and the critic's (the value head in the policy's
step, or a separate critic with its own), and the policy and value losses apart."""

from __future__ import annotations

import copy

import pytest
import torch

from agentr1_core.algorithms.components import ALGORITHM_CLASSES
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.trainers.batching import build_step_batch, collate, trajectories_to_rows
from agentr1_core.trainers.console import console_line
from agentr1_core.trainers.forward import response_forward
from agentr1_core.trainers.update import Critic, Policy, UpdateSettings, policy_update


def _rows(model):
    """Four one-step episodes (rewards 0, 1, 0, 1) whose old log-probs are the model's own."""
    gen = torch.Generator().manual_seed(3)
    trajs = []
    for i, (p, r) in enumerate(((5, 3), (8, 4), (6, 6), (7, 2))):
        prompt = torch.randint(10, 2000, (p,), generator=gen).tolist()
        resp = torch.randint(10, 2000, (r,), generator=gen).tolist()
        trajs.append(Trajectory(steps=[Step(prompt, resp, [-2.0] * r, reward=float(i % 2), done=True)],
                                uid=f"t{i}", group_id="g"))
    rows = trajectories_to_rows(trajs).rows
    batch = build_step_batch(rows)
    with torch.no_grad():
        batch.old_logprobs = response_forward(model, collate(rows, 0), batch.action_mask.shape[1]).logprobs
    batch.old_logprobs = batch.old_logprobs * batch.action_mask
    return rows, batch


def _update(model, algo, critic: str, max_grad_norm: float, mini_batches: int = 1):
    """One update with plain SGD at lr 1 (the change of the weights is minus the clipped gradient): the change of
    the policy's weights, of the critic's (the head on the trunk, or the separate critic) and the metrics."""
    rows, batch = _rows(model)
    torch.manual_seed(0)
    policy_model = copy.deepcopy(model).train()
    head = torch.nn.Linear(model.config.hidden_size, 1)
    own = list(policy_model.parameters())
    separate = None
    if critic == "separate":
        critic_model = copy.deepcopy(model)
        cparams = list(critic_model.parameters()) + list(head.parameters())
        separate = Critic(model=critic_model, head=head, optimizer=torch.optim.SGD(cparams, lr=1.0), params=cparams,
                          max_grad_norm=max_grad_norm)
        critic_params, params, head = cparams, own, None
    elif critic == "head":
        critic_params = list(head.parameters())
        params = own + critic_params
    else:
        critic_params, params, head = [], own, None
    policy = Policy(model=policy_model, pad_id=0, value_head=head, params=params, critic=separate)
    if algo.needs_critic:
        batch.values = torch.tensor([0.1, -0.2, 0.3, 0.0])
    adv = algo.compute_advantages(batch)
    before = [p.detach().clone() for p in own + critic_params]
    metrics = policy_update(policy, algo, torch.optim.SGD(params, lr=1.0), rows, batch, adv.advantages, adv.returns,
                            UpdateSettings(micro_batch_size=2, mini_batches=mini_batches,
                                           max_grad_norm=max_grad_norm, progress=False))
    change = [p.detach() - b for p, b in zip(own + critic_params, before)]
    return _norm(change[:len(own)]), _norm(change[len(own):]), metrics


def _norm(tensors: list[torch.Tensor]) -> float:
    return float(sum(float((t.double() ** 2).sum()) for t in tensors)) ** 0.5


def test_the_value_head_in_the_policys_step_has_its_own_norm_and_shares_the_clip(tiny_model):
    """StepPO with the value head on the trunk: unclipped, the trunk's and the head's changes are minus their
    gradients, whose norms the update reports as ``policy_grad_norm`` and ``critic_grad_norm``; ``grad_norm`` (what
    the clip sees) is both together. Clipped to 1e-3 the same norms are reported (before clipping), the step moved
    by 1e-3 in all and ``grad_clip_fraction`` says so; the console gives the losses and the norms apart."""
    algo = ALGORITHM_CLASSES["steppo"]()
    policy_change, head_change, m = _update(tiny_model, algo, "head", max_grad_norm=0.0)
    assert m["policy_grad_norm"] == pytest.approx(policy_change, rel=1e-4)
    assert m["critic_grad_norm"] == pytest.approx(head_change, rel=1e-4)
    assert m["grad_norm"] == pytest.approx((policy_change ** 2 + head_change ** 2) ** 0.5, rel=1e-4)
    assert m["grad_clip_fraction"] == 0.0 and head_change > 0 and policy_change > 0

    clipped_policy, clipped_head, c = _update(tiny_model, algo, "head", max_grad_norm=1e-3)
    assert c["grad_norm"] == pytest.approx(m["grad_norm"], rel=1e-4) and c["grad_norm"] > 1e-3
    assert c["policy_grad_norm"] == pytest.approx(m["policy_grad_norm"], rel=1e-4)
    assert c["critic_grad_norm"] == pytest.approx(m["critic_grad_norm"], rel=1e-4)
    assert (clipped_policy ** 2 + clipped_head ** 2) ** 0.5 == pytest.approx(1e-3, rel=1e-3)
    assert c["grad_clip_fraction"] == 1.0

    line = console_line({**c, "iteration": 1}, 6)
    assert f"| policy loss {c['policy_loss']:.4f} | value loss {c['value_loss']:.4f} |" in line
    assert (f"| gnorm {c['grad_norm']:.2f} (clipped; policy {c['policy_grad_norm']:.2f}, value head "
            f"{c['critic_grad_norm']:.2f}) |") in line
    assert "| loss " not in line and "critic gnorm" not in line


def test_a_separate_critic_reports_its_own_norm_and_clip(tiny_model):
    """With a separate critic the policy's step clips the policy alone (``grad_norm`` is ``policy_grad_norm``) and
    the critic's step clips the critic (``critic_grad_norm``, ``critic_grad_clip_fraction``)."""
    algo = ALGORITHM_CLASSES["steppo"](loss_type="ppo", clip_ratio=0.2, loss_agg="token-mean")
    policy_change, critic_change, m = _update(tiny_model, algo, "separate", max_grad_norm=0.0)
    assert m["grad_norm"] == m["policy_grad_norm"] == pytest.approx(policy_change, rel=1e-4)
    assert m["critic_grad_norm"] == pytest.approx(critic_change, rel=1e-4)
    assert m["grad_clip_fraction"] == 0.0 and m["critic_grad_clip_fraction"] == 0.0

    limit = 0.5 * min(m["grad_norm"], m["critic_grad_norm"])
    _, _, c = _update(tiny_model, algo, "separate", max_grad_norm=limit)
    assert c["grad_clip_fraction"] == 1.0 and c["critic_grad_clip_fraction"] == 1.0
    line = console_line(c, 6)
    assert (f"| gnorm {c['grad_norm']:.2f} (clipped) | critic gnorm {c['critic_grad_norm']:.2f} (clipped) |"
            in line)


def test_without_a_critic_the_line_keeps_the_loss_and_says_how_often_it_clipped(tiny_model):
    """GRPO: ``loss`` is the policy's loss and ``policy_grad_norm`` the whole norm; over two optimizer steps the
    line says whether none, all or what share of them was clipped."""
    algo = ALGORITHM_CLASSES["grpo"]()
    _, _, m = _update(tiny_model, algo, "none", max_grad_norm=0.0, mini_batches=2)
    assert m["policy_grad_norm"] == pytest.approx(m["grad_norm"]) and m["optimizer_steps"] == 2
    assert "critic_grad_norm" not in m and m["grad_clip_fraction"] == 0.0
    assert f"| loss {m['loss']:.4f} |" in console_line(m, 6)
    assert f"| gnorm {m['grad_norm']:.2f} (not clipped) |" in console_line(m, 6)
    _, _, c = _update(tiny_model, algo, "none", max_grad_norm=1e-6, mini_batches=2)
    assert c["grad_clip_fraction"] == 1.0 and f"| gnorm {c['grad_norm']:.2f} (clipped) |" in console_line(c, 6)
    assert "gnorm 1.00 (clipped in 50% of steps)" in console_line({"grad_norm": 1.0, "grad_clip_fraction": 0.5}, 6)


def test_verls_update_metrics_get_the_names_of_the_local_update(tiny_model):
    """verl's critic is a separate value model: its actor's and critic's update metrics (one value per optimizer
    step, as verl's workers give them), named by ``verl.data.update_metrics``, carry the same loss and gradient
    keys as the local update with a separate critic, and mean the same: norms before clipping, the share of steps
    above the limit, the policy's loss plus the value loss."""
    from agentr1_core.verl.data import update_metrics

    algo = ALGORITHM_CLASSES["steppo"](loss_type="ppo", clip_ratio=0.2, loss_agg="token-mean")
    _, _, local = _update(tiny_model, algo, "separate", max_grad_norm=1e-3)
    named = update_metrics({"loss": [0.1, 0.3], "grad_norm": [2.0, 0.5], "actor/pg_loss": [0.1, 0.2]},
                           {"critic/vf_loss": [0.2, 0.4], "grad_norm": [3.0, 4.0]}, max_grad_norm=1.0)
    assert set(named) <= set(local)
    assert local["loss"] == pytest.approx(local["policy_loss"] + local["value_loss"], rel=1e-5)
    assert named == pytest.approx({"policy_loss": 0.2, "policy_grad_norm": 1.25, "grad_clip_fraction": 0.5,
                                   "critic_grad_norm": 3.5, "critic_grad_clip_fraction": 1.0, "value_loss": 0.3,
                                   "loss": 0.5})
    assert console_line({**named, "grad_norm": 1.25}, 6).count("clipped") == 2
