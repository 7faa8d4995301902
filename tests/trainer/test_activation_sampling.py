"""The update measures its saved activations (``update.SavedActivations``) only on micro-batches that compute more
token positions than any before them in the same update (``update.measure_if_largest``), not on every one: the
hooks cost a Python call per saved tensor, and the largest micro-batch's bytes are the update's peak. The peak it
reports is the one that measuring every micro-batch gives."""

from __future__ import annotations

import copy

import pytest
import torch

import agentr1_core.trainers.update as update_module
from agentr1_core.algorithms.components import ALGORITHM_CLASSES
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.trainers.batching import build_step_batch, computed_positions, micro_batches, trajectories_to_rows
from agentr1_core.trainers.update import Policy, SavedActivations, UpdateSettings, policy_update, sft_update


def _rows(lengths: list[int]):
    """One step row per prompt length (10-token responses); rewards alternate, so every row has a gradient."""
    gen = torch.Generator().manual_seed(3)
    trajs = [Trajectory(steps=[Step(torch.randint(200, 2000, (n,), generator=gen).tolist(),
                                    torch.randint(200, 2000, (10,), generator=gen).tolist(), [-1.0] * 10,
                                    reward=float(i % 2), done=True)], uid=f"t{i}", group_id="g")
             for i, n in enumerate(lengths)]
    return trajectories_to_rows(trajs).rows


def _update(tiny_model, rows, monkeypatch, measure_every: bool, sft: bool) -> tuple[float, int]:
    """The reported activation peak and how many micro-batches were measured."""
    measured = []

    class Counting(SavedActivations):
        def __enter__(self):
            measured.append(1)
            return super().__enter__()

    monkeypatch.setattr(update_module, "SavedActivations", Counting)
    if measure_every:  # the former behaviour: every micro-batch under the hooks
        monkeypatch.setattr(update_module, "measure_if_largest", lambda policy, inputs, largest: Counting(policy))
    model = copy.deepcopy(tiny_model).train()
    policy = Policy(model=model, pad_id=0, params=list(model.parameters()))
    optimizer = torch.optim.SGD(policy.params, lr=0.1)
    if sft:
        sft_update(policy, optimizer, rows, epochs=1, batch_size=len(rows), micro_batch_size=2, max_grad_norm=0.0,
                   progress=False)
    else:
        algo = ALGORITHM_CLASSES["grpo"](loss_agg="token-mean")
        batch = build_step_batch(rows)
        adv = algo.compute_advantages(batch)
        policy_update(policy, algo, optimizer, rows, batch, adv.advantages, adv.returns,
                      UpdateSettings(micro_batch_size=2, max_grad_norm=0.0, progress=False))
    monkeypatch.undo()
    return policy.activations_peak_mb, len(measured)


@pytest.mark.parametrize("sft", [False, True])
def test_equal_micro_batches_are_measured_once_and_the_peak_is_the_same(tiny_model, monkeypatch, sft):
    rows = _rows([40] * 6)
    plan = micro_batches(range(len(rows)), rows, 2)
    assert [computed_positions([rows[i] for i in mb], 0) for mb in plan] == [100, 100, 100]  # 2 rows of 40 + 10
    peak_every, measured_every = _update(tiny_model, rows, monkeypatch, measure_every=True, sft=sft)
    peak, measured = _update(tiny_model, rows, monkeypatch, measure_every=False, sft=sft)
    assert (measured_every, measured) == (3, 1)
    assert peak > 0 and peak == pytest.approx(peak_every, rel=1e-9)


def test_a_larger_micro_batch_is_measured_and_an_equal_or_smaller_one_is_not():
    policy = Policy(model=torch.nn.Linear(2, 2), pad_id=0)

    class Inputs:
        def __init__(self, positions: int) -> None:
            self.computed_tokens = positions

    largest = [0]
    measured = [isinstance(update_module.measure_if_largest(policy, Inputs(n), largest), SavedActivations)
                for n in (100, 100, 90, 150, 120)]
    assert measured == [True, False, False, True, False]
    assert largest == [150]
