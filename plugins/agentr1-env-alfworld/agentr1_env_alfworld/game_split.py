"""The ``alfworld_split`` dataset loader: one folder of ALFWorld games cut into disjoint training and held-out games.

Only the 140 valid_seen games may be at hand (ALFWorld's 3,553 training games are a large download), so a recipe
that trains and evaluates on one folder needs a split by game that never puts a game on both sides. The games are
sorted by file path, which groups them by task type (the task folder's name starts with it); every
``heldout_every``-th game of that list (the 1st, (k+1)-th, ...) is held out and the rest are training games, so
each task type lands on both sides in about the same proportion. ``part`` picks the side. Rows are those of the
``alfworld`` loader (task type as ``data_source``); this module reads no game file itself, it only partitions the
rows that loader returns.
"""

from __future__ import annotations

import random
from typing import Any

from agentr1_core.config import ConfigError
from agentr1_env_alfworld.datasets import load_alfworld

PARTS = ("train", "heldout")


def split_games(rows: list[dict[str, Any]], heldout_every: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(train, heldout)``: in path order, every ``heldout_every``-th game is held out, the others train."""
    train, heldout = [], []
    for index, row in enumerate(sorted(rows, key=lambda r: r["gamefile"])):
        (heldout if index % heldout_every == 0 else train).append(row)
    return train, heldout


def load_alfworld_split(path: str = "", split: str = "valid_seen", part: str = "train", heldout_every: int = 3,
                        task_types: list[str] | None = None, shuffle: bool = False, seed: int = 0,
                        limit: int = 0) -> list[dict[str, Any]]:
    """Rows of one side (``part``: train | heldout) of the game split of ``path``/``split`` (see module doc)."""
    if part not in PARTS:
        raise ConfigError(f"config error at data.part: {part!r}; valid: {', '.join(PARTS)}")
    if heldout_every < 2:
        raise ConfigError(f"config error at data.heldout_every: must be >= 2, got {heldout_every}")
    train, heldout = split_games(load_alfworld(path, split, task_types=task_types), heldout_every)
    rows = train if part == "train" else heldout
    if shuffle:
        random.Random(seed).shuffle(rows)
    return rows[:limit] if limit else rows
