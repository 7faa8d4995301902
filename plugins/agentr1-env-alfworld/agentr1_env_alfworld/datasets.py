"""The ``alfworld`` dataset loader: one row per game file found under an ALFWorld data folder.

Accepted layouts (the folder ALFWorld's ``$ALFWORLD_DATA`` points at, or any folder below it)::

    <path>/json_2.1.1/<split>/<task_type>-<obj>-<mrecep>-<recep>-<scene>/<trial>/game.tw-pddl
    <path>/<split>/<task dir>/<trial>/game.tw-pddl
    <path>/<task dir>/<trial>/game.tw-pddl            (a folder of one split's games, labelled ``split``)

Each row carries the game file (``gamefile`` and ``env_kwargs.gamefile``), the task type as ``data_source`` (from the
task folder's name), and the goal text as ``prompt`` (read from the game file; the env builds the real observation
at reset). Nothing is downloaded: ALFWorld ships no games, the user points at a folder that has them.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

from agentr1_core.config import ConfigError
from agentr1_core.plugins import suggest

GAME_FILE = "game.tw-pddl"
TASK_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
              "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")
SPLITS = ("train", "valid_seen", "valid_unseen", "valid_train")
_GOAL = re.compile(r'Your task is to: ([^\\"\n]*)')


def games_root(path: str, split: str) -> Path:
    """The folder to scan: ``path/json_2.1.1/split`` or ``path/split`` when one exists, else ``path`` itself when it
    is a loose folder of task folders (not a folder of splits, nor the folder of another split).

    A split that is not found is a ``ConfigError``: a typo never loads every split under the folder, and a folder
    holding only other splits is never loaded under the wrong label."""
    if not path:
        path = os.environ.get("ALFWORLD_DATA", "")
    if not path:
        raise ConfigError("config error at data: the alfworld dataset needs a path (or set ALFWORLD_DATA) to a "
                          "folder of ALFWorld games (json_2.1.1/<split>/<task>/<trial>/game.tw-pddl)")
    base = Path(path).expanduser()
    if not base.is_dir():
        raise ConfigError(f"alfworld games folder not found: {base}")
    for candidate in (base / "json_2.1.1" / split, base / split):
        if candidate.is_dir():
            return candidate
    found = sorted({p.name for folder in (base / "json_2.1.1", base) if folder.is_dir()
                    for p in folder.iterdir() if p.is_dir() and p.name in SPLITS})
    if split not in SPLITS:
        raise ConfigError(f"config error at data.split: unknown alfworld split {split!r}"
                          f"{suggest(split, SPLITS)}; valid: {', '.join(SPLITS)}")
    if found:
        raise ConfigError(f"config error at data.split: no {split!r} split under {base}; it holds: "
                          f"{', '.join(found)}")
    if base.name in SPLITS and base.name != split:
        raise ConfigError(f"config error at data.split: {base} is the {base.name!r} split, not {split!r}")
    return base


def task_type_of(task_dir: str) -> str:
    prefix = task_dir.split("-", 1)[0]
    return prefix if prefix in TASK_TYPES else "unknown"


def read_goal(gamefile: Path) -> str:
    """The "Your task is to: ..." text embedded in a game file ("" if absent)."""
    match = _GOAL.search(gamefile.read_text(encoding="utf-8", errors="replace"))
    return match.group(1).strip() if match else ""


def load_alfworld(path: str = "", split: str = "valid_seen", limit: int = 0, task_types: list[str] | None = None,
                  shuffle: bool = False, seed: int = 0, read_goals: bool = True) -> list[dict[str, Any]]:
    """Rows for every ``game.tw-pddl`` under the folder (sorted; optionally shuffled, filtered and limited)."""
    root = games_root(path, split)
    wanted = set(task_types or [])
    unknown = wanted - set(TASK_TYPES)
    if unknown:
        raise ConfigError(f"config error at data.task_types: unknown {sorted(unknown)}; valid: {', '.join(TASK_TYPES)}")
    files = sorted(root.rglob(GAME_FILE))
    if not files:
        raise ConfigError(f"no {GAME_FILE} files under {root}")
    if shuffle:
        random.Random(seed).shuffle(files)
    rows = []
    for file in files:
        task_dir = file.parent.parent.name
        task_type = task_type_of(task_dir)
        if wanted and task_type not in wanted:
            continue
        gamefile = str(file.resolve())
        rows.append({
            "prompt": read_goal(file) if read_goals else task_dir,
            "data_source": task_type,
            "gamefile": gamefile,
            "env_kwargs": {"gamefile": gamefile},
            "reward_model": {"ground_truth": "won"},
            "extra_info": {"task_dir": task_dir, "trial": file.parent.name, "split": split},
        })
        if limit and len(rows) >= limit:
            break
    return rows
