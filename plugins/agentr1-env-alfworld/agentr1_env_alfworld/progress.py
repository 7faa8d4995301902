"""Subgoal progress of an ALFWorld episode, read from the game's own feedback, and the ``alfworld_progress`` reward.

A won game pays 1; ALFWorld itself pays nothing before that. A small model rarely wins a game outright, so every
group of a GRPO batch scores 0 and carries no gradient. This module credits the steps towards the goal that the
game confirms in its feedback, per task type (the task folder ``<task_type>-<Object>-<Mrecep>-<Parent>-<scene>``
names the object and the receptacle type):

==============================  =====================================================================
task type                       subgoals before the win
==============================  =====================================================================
pick_and_place_simple           picked the object; arrived at a target receptacle holding it
look_at_obj_in_light            picked the object; turned a lamp on
pick_clean/heat/cool_then_...   picked the object; cleaned/heated/cooled it; arrived at a target receptacle holding it
pick_two_obj_and_place          picked the object; put one in a target receptacle; picked a second one
==============================  =====================================================================

Progress is ``reached / (subgoals + 1)`` (so 1/3 or 2/3 for two subgoals, 1/4 to 3/4 for three) and 1.0 for a won
game. The subgoals are order-free and read from text such as "You pick up the apple 1 from the fridge 1.", so an
object picked up and put back still counts as picked: the credit is for reaching a step, not for keeping it. A task
folder that does not follow ALFWorld's naming has no subgoals: its progress is 0 or 1 (the win alone).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from agentr1_core.mdp import Trajectory
from agentr1_env_alfworld.datasets import TASK_TYPES

TREATMENT = {"pick_clean_then_place_in_recep": "clean", "pick_heat_then_place_in_recep": "heat",
             "pick_cool_then_place_in_recep": "cool"}
SUBGOALS = {
    "pick_and_place_simple": ("picked", "at_target"),
    "look_at_obj_in_light": ("picked", "lamp_on"),
    "pick_clean_then_place_in_recep": ("picked", "treated", "at_target"),
    "pick_heat_then_place_in_recep": ("picked", "treated", "at_target"),
    "pick_cool_then_place_in_recep": ("picked", "treated", "at_target"),
    "pick_two_obj_and_place": ("picked", "placed_one", "picked_second"),
}
_LAMP_ON = re.compile(r"\bYou turn on the \w*lamp \d+")


@dataclass(frozen=True)
class Target:
    """What a game asks for: its task type, the object type and the receptacle type, as the game text names them."""

    task_type: str
    obj: str
    parent: str

    @property
    def subgoals(self) -> tuple[str, ...]:
        return SUBGOALS[self.task_type]


def target_of(task_dir: str) -> Target | None:
    """The ``Target`` named by an ALFWorld task folder (e.g. ``pick_clean_then_place_in_recep-Ladle-None-Drawer-8``),
    or ``None`` for a folder that does not follow that naming."""
    parts = task_dir.split("-")
    if len(parts) != 5 or parts[0] not in TASK_TYPES or not parts[1] or not parts[3]:
        return None
    return Target(parts[0], parts[1].lower(), parts[3].lower())


def target_of_row(row: dict[str, Any]) -> Target | None:
    task_dir = (row.get("extra_info") or {}).get("task_dir")
    if not task_dir and row.get("gamefile"):
        task_dir = Path(str(row["gamefile"])).parent.parent.name
    return target_of(task_dir) if task_dir else None


def subgoals_reached(target: Target, feedbacks: Iterable[str]) -> set[str]:
    """The subgoals of ``target`` that the game's feedback, in episode order, confirms."""
    obj, parent = re.escape(target.obj), re.escape(target.parent)
    pick = re.compile(rf"\bYou pick up the {obj} (\d+) from\b")
    place = re.compile(rf"\bYou (?:move|put) the {obj} (\d+) (?:to|in|on) the {parent} \d+")
    put_down = re.compile(r"\bYou (?:move|put) the (\w+ \d+) (?:to|in|on) the\b")
    arrive = re.compile(rf"\bYou arrive at {parent} \d+")
    treatment = TREATMENT.get(target.task_type)
    treat = re.compile(rf"\bYou {treatment} the {obj} (\d+) using\b") if treatment else None
    reached: set[str] = set()
    holding: str | None = None  # the index of the target object held, if one is
    treated: set[str] = set()
    placed: set[str] = set()
    for text in feedbacks:
        if match := pick.search(text):
            holding = match.group(1)
            reached.add("picked")
            if placed and holding not in placed:
                reached.add("picked_second")
        elif match := place.search(text):
            placed.add(match.group(1))
            reached.add("placed_one")
            holding = None
        elif put_down.search(text):
            holding = None
        elif treat is not None and (match := treat.search(text)) and match.group(1) == holding:
            treated.add(holding)
            reached.add("treated")
        elif _LAMP_ON.search(text):
            reached.add("lamp_on")
        elif holding is not None and arrive.search(text) and (treat is None or holding in treated):
            reached.add("at_target")
    return reached & set(target.subgoals)


def episode_progress(target: Target | None, feedbacks: Iterable[str], won: bool) -> float:
    """1.0 for a won game, else the share of the path to the win that the subgoals reached cover (module doc)."""
    if won:
        return 1.0
    if target is None:
        return 0.0
    return len(subgoals_reached(target, feedbacks)) / (len(target.subgoals) + 1)


def record_progress(traj: Trajectory, row: dict[str, Any]) -> tuple[bool, float]:
    """``(won, progress)`` of a finished episode; also written to ``traj.metrics`` so validation reports them."""
    won = bool(traj.steps and traj.steps[-1].info.get("won"))
    progress = episode_progress(target_of_row(row), (s.feedback for s in traj.steps), won)
    traj.metrics.update(won=float(won), progress=progress)
    return won, progress


class AlfworldProgress:
    """Callable ``(trajectory, row) -> float``: ``success_reward`` for a win, else ``partial_weight`` x
    ``success_reward`` x the episode's progress (module doc). ``partial_weight: 0`` is the win-only reward."""

    def __init__(self, success_reward: float = 1.0, partial_weight: float = 1.0) -> None:
        if not 0.0 <= partial_weight <= 1.0:
            raise ValueError(f"partial_weight must be in [0, 1], got {partial_weight}")
        self.success_reward = success_reward
        self.partial_weight = partial_weight

    def __call__(self, traj: Trajectory, row: dict[str, Any]) -> float:
        won, progress = record_progress(traj, row)
        return self.success_reward if won else self.success_reward * self.partial_weight * progress
