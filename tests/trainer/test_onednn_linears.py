"""The trainer's passes without gradients through oneDNN on CPU (``trainer.onednn_linears``, see
``agentr1_core.cpu_linears``): they really route their linear layers there and give what ``F.linear`` gives; the
update's forward and backward stay on autograd's own ``F.linear``."""

from __future__ import annotations

import copy

import pytest
import torch

import agentr1_core.cpu_linears as cpu_linears
from agentr1_core.algorithms.components import ALGORITHM_CLASSES
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.trainers.batching import build_step_batch, trajectories_to_rows
from agentr1_core.trainers.update import Policy, UpdateSettings, policy_update, score_batch, state_values


def _rows():
    gen = torch.Generator().manual_seed(5)
    trajs = []
    for g in range(2):
        prompt = torch.randint(200, 2000, (12 + 4 * g,), generator=gen).tolist()
        for s, r in enumerate((3, 11, 6)):
            resp = torch.randint(200, 2000, (r,), generator=gen).tolist()
            trajs.append(Trajectory(steps=[Step(prompt, resp, [-1.0] * r, reward=float((g + s) % 2), done=True)],
                                    uid=f"g{g}s{s}", group_id=f"g{g}"))
    return trajectories_to_rows(trajs).rows


@pytest.fixture
def onednn_calls(monkeypatch):
    calls = []
    real = cpu_linears.onednn_linear

    def counted(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(cpu_linears, "onednn_linear", counted)
    return calls


def test_scoring_passes_through_onednn_equal_f_linear(tiny_model, onednn_calls):
    rows = _rows()
    torch.manual_seed(0)
    head = torch.nn.Linear(tiny_model.config.hidden_size, 1)
    linears = sum(isinstance(m, torch.nn.Linear) for m in tiny_model.modules())
    results = []
    for onednn in (False, True):
        policy = Policy(model=copy.deepcopy(tiny_model), pad_id=0, value_head=head, onednn_linears=onednn)
        batch = build_step_batch(rows)
        start = len(onednn_calls)
        score_batch(policy, rows, batch, micro_batch_size=4, temperature=1.0, recompute_old=True, need_ref=False,
                    need_values=True)
        values = state_values(policy, [r.prompt_ids for r in rows], micro_batch_size=4)
        results.append((batch.old_logprobs, batch.values, values))
        routed = len(onednn_calls) - start
        assert routed >= 3 * linears if onednn else routed == 0  # two scoring micro-batches + the values pass
    assert float(results[0][0].abs().sum()) > 0
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_the_update_keeps_autograds_own_linears(tiny_model, onednn_calls):
    rows = _rows()
    model = copy.deepcopy(tiny_model).train()
    policy = Policy(model=model, pad_id=0, params=list(model.parameters()), onednn_linears=True)
    batch = build_step_batch(rows)
    algo = ALGORITHM_CLASSES["grpo"](loss_agg="token-mean")
    adv = algo.compute_advantages(batch)
    metrics = policy_update(policy, algo, torch.optim.SGD(policy.params, lr=1.0), rows, batch, adv.advantages,
                            adv.returns, UpdateSettings(micro_batch_size=4, max_grad_norm=0.0, progress=False))
    assert metrics["optimizer_steps"] == 1 and onednn_calls == []
