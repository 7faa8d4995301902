"""Shared prefixes in the trainer's forward (``trainer.share_prefix``): a micro-batch's common token prefix runs once
and every row attends to its keys and values. The same log-probs, entropy, critic values and gradients as running
every row whole; the same RL and SFT updates; fewer computed token positions; and micro-batches that keep a GRPO
group together when that computes less."""

from __future__ import annotations

import copy

import pytest
import torch

from agentr1_core.algorithms.components import ALGORITHM_CLASSES
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.trainers.batching import (
    StepRow, build_step_batch, collate, computed_positions, micro_batches, shared_prefix_len, trajectories_to_rows,
)
from agentr1_core.trainers.forward import response_forward
from agentr1_core.trainers.update import Policy, UpdateSettings, policy_update, sft_update

SYSTEM = list(range(100, 148))  # 48 tokens every prompt starts with


def _tokens(gen: torch.Generator, n: int) -> list[int]:
    return torch.randint(200, 2000, (n,), generator=gen).tolist()


def _episodes() -> list[Trajectory]:
    """Two GRPO groups of three samples (one prompt per group, responses of 1 to 19 tokens) plus a two-turn episode
    whose second prompt extends its first turn: rows share the system prompt, a group's whole prompt, or a turn."""
    gen = torch.Generator().manual_seed(3)
    trajs = []
    for g in range(2):
        prompt = SYSTEM + _tokens(gen, 7 + 5 * g)
        for s, r in enumerate((1, 19, 6)):
            resp = _tokens(gen, r)
            trajs.append(Trajectory(steps=[Step(prompt, resp, [-1.0] * r, reward=float((g + s) % 2), done=True)],
                                    uid=f"g{g}s{s}", group_id=f"g{g}"))
    first = SYSTEM + _tokens(gen, 4)
    resp1 = _tokens(gen, 5)
    second = first + resp1 + _tokens(gen, 9)
    resp2 = _tokens(gen, 3)
    trajs.append(Trajectory(steps=[Step(first, resp1, [-1.0] * 5, reward=0.0),
                                   Step(second, resp2, [-1.0] * 3, reward=1.0, done=True)], uid="turns",
                            group_id="turns"))
    return trajs


def _row(prompt: list[int], response: list[int]) -> StepRow:
    return StepRow(prompt_ids=prompt, response_ids=response, old_logprobs=[0.0] * len(response), traj=0, group=0,
                   step_index=0, reward=0.0, done=True, truncated=False)


def test_collate_cuts_the_common_prefix_once_and_keeps_each_rows_last_prompt_token():
    a = _row(SYSTEM + [5, 6, 7], [8, 9])
    b = _row(SYSTEM + [5, 6, 7], [10])
    c = _row(SYSTEM + [5, 11], [12, 13, 14])
    assert shared_prefix_len([a, b]) == len(SYSTEM) + 2  # identical prompts: all but the last prompt token
    assert shared_prefix_len([a, b, c]) == len(SYSTEM) + 1
    inputs = collate([a, b, c], pad_id=0, share_prefix=32)
    p = len(SYSTEM) + 1
    assert inputs.prefix_ids.tolist() == [SYSTEM + [5]]
    assert inputs.input_ids.tolist() == [[6, 7, 8, 9], [0, 6, 7, 10], [11, 12, 13, 14]]
    assert inputs.attention_mask.shape == (3, p + 4)
    assert inputs.attention_mask[:, :p].all() and inputs.attention_mask[1, p].item() == 0
    assert inputs.position_ids[0].tolist() == [p, p + 1, p + 2, p + 3]
    assert inputs.position_ids[1, 1:].tolist() == [p, p + 1, p + 2]
    assert inputs.computed_tokens == p + 4 + 3 + 4
    assert int(inputs.attention_mask.sum()) == sum(r.num_tokens for r in (a, b, c))  # rows' own count unchanged
    # below the threshold, for a single row, or when off: no prefix
    assert collate([a, b, c], pad_id=0, share_prefix=p + 1).prefix_ids is None
    assert collate([a], pad_id=0, share_prefix=1).prefix_ids is None
    assert collate([a, b, c], pad_id=0).prefix_ids is None


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shared_prefix_forward_equals_the_whole_rows(tiny_model, temperature):
    rows = trajectories_to_rows(_episodes()).rows
    width = max(len(r.response_ids) for r in rows)
    model = copy.deepcopy(tiny_model).train()
    torch.manual_seed(0)
    head = torch.nn.Linear(model.config.hidden_size, 1)
    results = []
    for share in (0, 16):
        model.zero_grad(set_to_none=True)
        head.zero_grad(set_to_none=True)
        inputs = collate(rows, pad_id=0, share_prefix=share)
        assert (inputs.prefix_ids is not None) == bool(share)
        out = response_forward(model, inputs, width, temperature, with_entropy=True, value_head=head)
        (out.logprobs.sum() + 0.3 * out.entropy.sum() + out.values.sum()).backward()
        grads = torch.cat([p.grad.flatten() for p in list(model.parameters()) + list(head.parameters())])
        results.append((out.logprobs.detach(), out.entropy.detach(), out.values.detach(), grads,
                        inputs.computed_tokens))
    whole, shared = results
    assert float(whole[0].abs().sum()) > 0 and float(whole[3].norm()) > 0
    for a, b in zip(whole[:3], shared[:3]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert float((whole[3] - shared[3]).norm()) <= 1e-5 * float(whole[3].norm())
    assert shared[4] < whole[4] - len(SYSTEM) * (len(rows) - 2)  # the system prompt ran once, not once per row


def _update(model, rows, batch, share: int, micro: int):
    policy_model = copy.deepcopy(model).train()
    params = list(policy_model.parameters())
    policy = Policy(model=policy_model, pad_id=0, params=params, share_prefix=share)
    b = copy.deepcopy(batch)
    algo = ALGORITHM_CLASSES["grpo"](loss_agg="token-mean")
    adv = algo.compute_advantages(b)
    before = [p.detach().clone() for p in params]
    metrics = policy_update(policy, algo, torch.optim.SGD(params, lr=1.0), rows, b, adv.advantages, adv.returns,
                            UpdateSettings(micro_batch_size=micro, max_grad_norm=0.0, progress=False))
    delta = torch.cat([(p.detach() - b0).flatten() for p, b0 in zip(params, before)])
    return delta, metrics


@pytest.mark.parametrize("micro", [3, 8])
def test_rl_update_with_shared_prefixes_equals_the_plain_update(tiny_model, micro):
    steps = trajectories_to_rows(_episodes())
    batch = build_step_batch(steps.rows)
    plain, plain_metrics = _update(tiny_model, steps.rows, batch, 0, micro)
    shared, shared_metrics = _update(tiny_model, steps.rows, batch, 16, micro)
    assert float(plain.norm()) > 0
    assert float((plain - shared).norm()) <= 1e-5 * float(plain.norm())
    assert shared_metrics["update_tokens"] == plain_metrics["update_tokens"]
    assert plain_metrics["update_computed_tokens"] == plain_metrics["update_tokens"]
    assert shared_metrics["update_computed_tokens"] < plain_metrics["update_computed_tokens"]


def test_sft_update_with_shared_prefixes_equals_the_plain_update(tiny_model):
    rows = trajectories_to_rows(_episodes()).rows
    deltas = []
    for share in (0, 16):
        model = copy.deepcopy(tiny_model)
        params = list(model.parameters())
        before = [p.detach().clone() for p in params]
        sft_update(Policy(model=model, pad_id=0, params=params, share_prefix=share),
                   torch.optim.SGD(params, lr=1.0), rows, epochs=1, batch_size=4, micro_batch_size=2,
                   max_grad_norm=0.0, generator=torch.Generator().manual_seed(0), progress=False)
        deltas.append(torch.cat([(p.detach() - b0).flatten() for p, b0 in zip(params, before)]))
    assert float(deltas[0].norm()) > 0
    assert float((deltas[0] - deltas[1]).norm()) <= 1e-5 * float(deltas[0].norm())


def test_micro_batches_keep_a_group_together_when_that_computes_less():
    """Two groups of four samples with long, different prompts and responses of mixed lengths: sorted by length,
    micro-batches of four mix the groups and share only the system prompt; sorted by tokens each micro-batch is one
    group and shares its whole prompt."""
    gen = torch.Generator().manual_seed(0)
    rows = []
    for g in range(2):
        prompt = SYSTEM + _tokens(gen, 200)
        rows += [_row(prompt, _tokens(gen, n)) for n in (2, 30, 4, 28)]
    plan = micro_batches(range(8), rows, 4, share_prefix=32)
    assert sorted(map(sorted, plan)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    by_length = micro_batches(range(8), rows, 4)
    assert sorted(map(sorted, by_length)) != [[0, 1, 2, 3], [4, 5, 6, 7]]
    cost = lambda p: sum(computed_positions([rows[i] for i in mb], 32) for mb in p)  # noqa: E731
    assert cost(plan) < cost(by_length)
    # rows with nothing in common: the plan by length stays
    loose = [_row(_tokens(gen, 40 + 10 * i), _tokens(gen, 3)) for i in range(4)]
    assert micro_batches(range(4), loose, 2, share_prefix=32) == micro_batches(range(4), loose, 2)
