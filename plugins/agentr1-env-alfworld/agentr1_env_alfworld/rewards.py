"""``alfworld_won``: the final reward of an ALFWorld episode, 1.0 when the game's goal was reached, else 0.0.

It reads ``info["won"]`` of the last step. Use it with the env's ``win_reward: 0`` so a won episode's return is
exactly 1 (the recipe does); it does not look at the action text. It also records the episode's ``won`` and subgoal
``progress`` (see ``progress.py``, where the ``alfworld_progress`` reward pays for that progress) as episode
metrics, so validation reports how far episodes got even when none wins.
"""

from __future__ import annotations

from typing import Any

from agentr1_core.mdp import Trajectory
from agentr1_env_alfworld.progress import record_progress


class AlfworldWon:
    """Callable ``(trajectory, row) -> float``; ``success_reward`` is what a won episode gets."""

    def __init__(self, success_reward: float = 1.0) -> None:
        self.success_reward = success_reward

    def __call__(self, traj: Trajectory, row: dict[str, Any]) -> float:
        won, _progress = record_progress(traj, row)
        return self.success_reward if won else 0.0


def alfworld_won(traj: Trajectory, row: dict[str, Any]) -> float:
    return AlfworldWon()(traj, row)
