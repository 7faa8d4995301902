"""A token budget per micro-batch (``trainer.micro_batch_tokens``): every forward/backward of the scoring, RL and
SFT passes runs at most that many token positions (a row longer than the budget runs alone; the critic's pass over
rows with a ``critic.prefix`` too), every row runs once, and the updates are those without a budget: the budget only
bounds the activations a pass holds, which ``SavedActivations`` measures (what autograd saves for the backward pass,
parameters left out)."""

from __future__ import annotations

import copy

import pytest
import torch

import agentr1_core.trainers.update as update_module
from agentr1_core.algorithms.components import ALGORITHM_CLASSES
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.trainers.batching import (
    StepRow, build_step_batch, computed_positions, critic_state_row, micro_batches, trajectories_to_rows,
)
from agentr1_core.trainers.update import (
    Policy, SavedActivations, UpdateSettings, policy_update, score_batch, sft_update,
)

SYSTEM = list(range(100, 140))  # 40 tokens every prompt starts with


def _episodes() -> list[Trajectory]:
    """Three GRPO groups of three samples; prompts of 45-75 tokens, responses of 1 to 30 tokens."""
    gen = torch.Generator().manual_seed(5)
    trajs = []
    for g in range(3):
        prompt = SYSTEM + torch.randint(200, 2000, (5 + 15 * g,), generator=gen).tolist()
        for s, r in enumerate((1, 30, 8)):
            resp = torch.randint(200, 2000, (r,), generator=gen).tolist()
            trajs.append(Trajectory(steps=[Step(prompt, resp, [-1.0] * r, reward=float((g + s) % 2), done=True)],
                                    uid=f"g{g}s{s}", group_id=f"g{g}"))
    return trajs


@pytest.mark.parametrize("share", [0, 16])
@pytest.mark.parametrize("budget", [50, 120, 260])
def test_every_micro_batch_keeps_to_the_budget_and_every_row_runs_once(share, budget):
    rows = trajectories_to_rows(_episodes()).rows
    plan = micro_batches(range(len(rows)), rows, 4, share_prefix=share, max_tokens=budget)
    assert sorted(i for mb in plan for i in mb) == list(range(len(rows)))
    assert all(len(mb) <= 4 for mb in plan)
    for mb in plan:
        assert len(mb) == 1 or computed_positions([rows[i] for i in mb], share) <= budget, (mb, budget)
    unbounded = micro_batches(range(len(rows)), rows, 4, share_prefix=share)
    assert len(plan) > len(unbounded) or budget == 260  # the small budgets split more
    # rows longer than the budget run alone
    assert all(len(mb) == 1 for mb in micro_batches(range(len(rows)), rows, 4, share, max_tokens=10))
    # a budget no micro-batch reaches changes nothing
    assert micro_batches(range(len(rows)), rows, 4, share, max_tokens=10_000) == unbounded


class _Recorder:
    """Wraps ``response_forward`` in the update module and records the token positions of every pass."""

    def __init__(self, monkeypatch) -> None:
        self.positions: list[tuple[int, int]] = []  # (rows, computed positions)
        real = update_module.response_forward

        def recording(model, inputs, *args, **kwargs):
            self.positions.append((int(inputs.input_ids.shape[0]), inputs.padded_positions))
            return real(model, inputs, *args, **kwargs)

        monkeypatch.setattr(update_module, "response_forward", recording)


def _policy(model, share: int, budget: int) -> Policy:
    model = copy.deepcopy(model).train()
    return Policy(model=model, pad_id=0, params=list(model.parameters()), share_prefix=share,
                  micro_batch_tokens=budget)


def _rl_update(model, rows, batch, share: int, budget: int):
    policy = _policy(model, share, budget)
    algo = ALGORITHM_CLASSES["grpo"](loss_agg="token-mean")
    b = copy.deepcopy(batch)
    adv = algo.compute_advantages(b)
    before = [p.detach().clone() for p in policy.params]
    metrics = policy_update(policy, algo, torch.optim.SGD(policy.params, lr=1.0), rows, b, adv.advantages,
                            adv.returns, UpdateSettings(micro_batch_size=8, max_grad_norm=0.0, skip_inert=False,
                                                        progress=False))
    delta = torch.cat([(p.detach() - b0).flatten() for p, b0 in zip(policy.params, before)])
    return delta, {**metrics, "activations_mb": policy.activations_peak_mb}


@pytest.mark.parametrize("share", [0, 16])
def test_the_rl_update_under_a_budget_is_the_update_without(tiny_model, monkeypatch, share):
    rows = trajectories_to_rows(_episodes()).rows
    batch = build_step_batch(rows)
    free, free_metrics = _rl_update(tiny_model, rows, batch, share, 0)
    recorder = _Recorder(monkeypatch)
    bounded, bounded_metrics = _rl_update(tiny_model, rows, batch, share, 120)
    # the largest micro-batch's saved activations shrink with the budget
    assert 0 < bounded_metrics["activations_mb"] < 0.7 * free_metrics["activations_mb"]
    assert float(free.norm()) > 0
    assert float((free - bounded).norm()) <= 1e-5 * float(free.norm())
    assert bounded_metrics["loss"] == pytest.approx(free_metrics["loss"], rel=1e-4, abs=1e-7)
    assert bounded_metrics["update_tokens"] == free_metrics["update_tokens"]
    assert len(recorder.positions) > 2  # 9 rows in micro-batches of at most 8 would be 2 passes
    assert all(n == 1 or positions <= 120 for n, positions in recorder.positions), recorder.positions


def test_sft_and_scoring_under_a_budget_match_the_passes_without(tiny_model, monkeypatch):
    rows = trajectories_to_rows(_episodes()).rows
    deltas, scores = [], []
    recorder = None
    for budget in (0, 100):
        if budget:
            recorder = _Recorder(monkeypatch)
        policy = _policy(tiny_model, 16, budget)
        batch = build_step_batch(rows)
        score_batch(policy, rows, batch, micro_batch_size=8, temperature=1.0, recompute_old=True, need_ref=False,
                    need_values=False)
        scores.append(batch.old_logprobs.clone())
        before = [p.detach().clone() for p in policy.params]
        sft_update(policy, torch.optim.SGD(policy.params, lr=1.0), rows, epochs=1, batch_size=9,
                   micro_batch_size=8, max_grad_norm=0.0, generator=torch.Generator().manual_seed(0), progress=False)
        deltas.append(torch.cat([(p.detach() - b0).flatten() for p, b0 in zip(policy.params, before)]))
    assert float(deltas[0].norm()) > 0
    assert float((deltas[0] - deltas[1]).norm()) <= 1e-5 * float(deltas[0].norm())
    assert torch.allclose(scores[0], scores[1], atol=1e-5)
    assert len(recorder.positions) > 4  # scoring and SFT each split into more than two passes
    assert all(n == 1 or positions <= 100 for n, positions in recorder.positions), recorder.positions


def test_saved_activations_follow_the_tokens_and_leave_out_parameters(tiny_model):
    model = copy.deepcopy(tiny_model).train()
    policy = Policy(model=model, pad_id=0, params=list(model.parameters()))
    sizes = []
    for rows in (2, 4):
        ids = torch.randint(10, 2000, (rows, 64), generator=torch.Generator().manual_seed(0))
        with SavedActivations(policy) as saved:
            model(input_ids=ids, logits_to_keep=1).logits.sum()
        sizes.append(saved.mb)
    params_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2 ** 20
    assert sizes[0] > 0 and sizes[1] == pytest.approx(2 * sizes[0], rel=0.1)  # twice the tokens, twice the bytes
    assert sizes[0] < params_mb  # the weights a linear layer saves are not activations
    assert policy.activations_peak_mb == max(sizes)
    with torch.no_grad(), SavedActivations(policy) as saved:
        model(input_ids=ids, logits_to_keep=1)
    assert saved.mb == 0


def _tensors_in_a_graph() -> int:
    """Tensors alive that still belong to an autograd graph (what an update leaves behind)."""
    import gc

    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.grad_fn is not None)


@pytest.mark.parametrize("share", [0, 16])
def test_no_update_leaves_a_graph_behind(tiny_model, share):
    """The passes measure their activations through saved-tensor hooks; a hook that kept the saved tensors
    themselves would tie each saved output to its own node, and the nodes no loss reaches (a shared prefix's last
    block and head) would live on after every update."""
    rows = trajectories_to_rows(_episodes()).rows
    before = _tensors_in_a_graph()
    for _ in range(2):
        _rl_update(tiny_model, rows, build_step_batch(rows), share, 0)
        policy = _policy(tiny_model, share, 0)
        sft_update(policy, torch.optim.SGD(policy.params, lr=1.0), rows, epochs=1, batch_size=9,
                   micro_batch_size=8, max_grad_norm=0.0, progress=False)
        assert policy.activations_peak_mb > 0
    assert _tensors_in_a_graph() == before


def test_the_critics_prefixed_pass_keeps_to_the_token_budget_too():
    """Rows of 40 token positions (39 prompt + 1 response) under a budget of 100 go two to a micro-batch; with a
    30-token critic prefix the critic's pass over two of them would run 2 x (30 + 39 + 1) = 140 positions, so they go
    one at a time. A zero-length prefix changes nothing."""
    def rows(prefix):
        return [StepRow(prompt_ids=[7] * 39, response_ids=[8], old_logprobs=[0.0], traj=i, group=0, step_index=0,
                        reward=0.0, done=True, truncated=False, critic_prefix_ids=prefix) for i in range(4)]

    assert micro_batches(range(4), rows(None), size=8, max_tokens=100) == [[0, 1], [2, 3]]
    assert micro_batches(range(4), rows([]), size=8, max_tokens=100) == [[0, 1], [2, 3]]
    prefixed = rows([5] * 30)
    plan = micro_batches(range(4), prefixed, size=8, max_tokens=100)
    assert plan == [[0], [1], [2], [3]]
    for mb in plan:
        assert computed_positions([critic_state_row(prefixed[i]) for i in mb], 0) <= 100
    assert micro_batches(range(4), prefixed, size=8, max_tokens=0) == [[0, 1, 2, 3]]  # no budget: rows only
