"""``webshop_score``: the final reward of a WebShop episode, the benchmark's purchase reward (0 without a purchase).

The env computes the reward on ``click[buy now]`` and reports it in the last step's ``info["webshop_reward"]``.
Validation metrics (``reward_mean``, ``success_rate`` = share of episodes with reward 1.0) are computed from the
episode's final reward, so a recipe that wants them must set the final reward: use this reward with the env's
``step_reward: false`` (the purchase reward then counts once, as the final reward). It does not re-score anything.
"""

from __future__ import annotations

from typing import Any

from agentr1_core.mdp import Trajectory


def webshop_score(traj: Trajectory, row: dict[str, Any]) -> float:
    if not traj.steps:
        return 0.0
    return float(traj.steps[-1].info.get("webshop_reward", 0.0) or 0.0)
