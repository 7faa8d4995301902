"""A reward for tests that need groups whose episodes score differently, whatever the model: ``response_parity``
gives 1.0 to an episode whose reply token ids sum to an even number, else 0.0. With a random tiny model at
temperature 1 about half of the groups of two then differ (dynamic sampling's informative groups) and half do not.

Loaded by naming this module in ``AGENTR1_PLUGIN_MODULES``; it is no reward to train a real task on.
"""

from __future__ import annotations

from typing import Any

from agentr1_core.hookspecs import hookimpl
from agentr1_core.mdp import Trajectory
from agentr1_core.specs import RewardSpec


class ResponseParity:
    def __call__(self, traj: Trajectory, row: dict[str, Any]) -> float:
        return 1.0 if sum(sum(s.response_ids) for s in traj.steps) % 2 == 0 else 0.0


@hookimpl
def agentr1_rewards():
    return [RewardSpec("response_parity", "agentr1_core.testing.rewards:ResponseParity",
                       "1 when the episode's reply token ids sum to an even number (tests)")]
