"""The ``webshop`` dataset loader: goal files -> rows for the ``webshop`` env.

Goal files are JSON lists in WebShop's goal format (asin, category, query, name, product_category, instruction_text,
attributes, price_upper, goal_options, weight), synthetic or human. Goals are shuffled with ``random.seed(233)`` like
WebShop's text env, then split by index: ``test`` = [0, 500), ``val`` = [500, 1500), ``train`` = [1500, end), ``all``
= everything (these ranges are the original's convention; ``start``/``end`` override them). Each row is
``{prompt, data_source, goal, goal_index}``; the env reads ``goal``.
"""

from __future__ import annotations

import random
from typing import Any

from agentr1_env_webshop.catalog import read_json_records

SPLITS = {"test": (0, 500), "val": (500, 1500), "train": (1500, None), "all": (0, None)}
GOAL_FIELDS = ("asin", "instruction_text", "attributes", "goal_options", "price_upper", "query", "name",
               "product_category")


def load_goals(goals: str | list[str] = "", split: str = "all", start: int | None = None, end: int | None = None,
               limit: int = 0, shuffle_seed: int | None = 233, data_source: str = "webshop") -> list[dict[str, Any]]:
    """Rows for the goals in ``goals`` (one path, comma-separated paths, or a list of paths)."""
    paths = [p.strip() for p in (goals.split(",") if isinstance(goals, str) else goals) if p.strip()]
    if not paths:
        raise ValueError("the webshop dataset needs goals=PATH (a goals JSON file)")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    all_goals: list[dict[str, Any]] = []
    for path in paths:
        for i, g in enumerate(read_json_records(path)):
            missing = [f for f in GOAL_FIELDS if f not in g]
            if missing:
                raise ValueError(f"{path}: goal #{i} lacks {', '.join(missing)}")
            all_goals.append(g)
    indices = list(range(len(all_goals)))
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(indices)
    lo, hi = SPLITS[split]
    lo = lo if start is None else start
    hi = hi if end is None else end
    chosen = indices[lo:hi]
    if limit:
        chosen = chosen[:limit]
    return [{"prompt": all_goals[i]["instruction_text"], "data_source": data_source, "goal": all_goals[i],
             "goal_index": i} for i in chosen]
