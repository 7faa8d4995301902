"""The console's note on a critic that is still far from the returns, from the advantages' own metrics."""

from __future__ import annotations

import torch

from agentr1_core.algorithms.base import StepBatch
from agentr1_core.algorithms.components import ALGORITHM_CLASSES
from agentr1_core.trainers.console import console_notes


def _record(values: list[float], iteration: int) -> dict:
    """An iteration's record as the backends write it (``adv/`` + the advantages' metrics): eight one-step
    episodes, six rewarded, with the critic's ``values``."""
    rewards = [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    n = len(rewards)
    batch = StepBatch(traj_ids=torch.arange(n), group_ids=torch.zeros(n, dtype=torch.long),
                      step_index=torch.zeros(n, dtype=torch.long), rewards=torch.tensor(rewards),
                      dones=torch.ones(n, dtype=torch.bool), truncated=torch.zeros(n, dtype=torch.bool),
                      action_mask=torch.ones(n, 3), old_logprobs=torch.zeros(n, 3), values=torch.tensor(values))
    adv = ALGORITHM_CLASSES["steppo"]().compute_advantages(batch)
    return {"iteration": iteration, **{f"adv/{k}": v for k, v in adv.metrics.items()}}


def test_a_critic_far_from_the_returns_is_said_after_its_first_update():
    """Values of 0.03 against returns averaging 0.75 (a value head that barely moved) are worse than giving every
    step the mean return: said from the second iteration on (the first one's critic has not trained yet). A critic
    near the mean return, or one that fits, is not."""
    lagging = _record([0.03] * 8, iteration=2)
    [note] = console_notes(lagging)
    assert note.startswith("[critic] its values are still far from the returns: mean value 0.030 against mean "
                           "return 0.750, mean |value - return| 0.735 (R^2 ")
    assert "critic.lr" in note and lagging["adv/value_r2"] < -0.5
    assert console_notes(_record([0.03] * 8, iteration=1)) == []
    assert console_notes(_record([0.7] * 8, iteration=2)) == []
    assert console_notes(_record([0.9, 0.9, 0.1, 0.9, 0.9, 0.1, 0.9, 0.9], iteration=5)) == []
