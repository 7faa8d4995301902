"""Built-in dataset loaders. A loader returns a list of rows: dicts with ``prompt`` (text or chat messages),
``data_source``, ``reward_model: {ground_truth: ...}``, optional ``env_kwargs`` and ``expert_actions``.

``load_jsonl`` returns ``FileRows`` (each row's line kept), so that the row checks before a run
(``agentr1_core.rows``: the fields the dataset, reward and env declare) name the file and line of a bad row.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from agentr1_core.errors import ConfigError
from agentr1_core.jsonl import FileRows, read_jsonl


def load_jsonl(path: str = "", limit: int = 0, data_source: str = "") -> FileRows:
    """Rows from a JSONL file, one JSON object per line. Every line that is not one is reported, with the file and
    line, once the whole file has been read (``agentr1_core.jsonl``). What each row must carry (``prompt``, ...) is
    checked before the run from the components' ``row_fields``."""
    if not path:
        raise ConfigError("config error at data: the jsonl dataset needs a path")
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"dataset file not found: {file}")

    def with_source(row: dict[str, Any], _line: int) -> dict[str, Any]:
        if data_source:
            row.setdefault("data_source", data_source)
        return row

    return read_jsonl(file, limit=limit, transform=with_source)


# -- the calculator task of the embedded default run ------------------------------------------------------------------

_WORD_TEMPLATES = (
    ("A warehouse has {a} crates with {b} bottles in each, and {c} loose bottles. How many bottles are there?",
     "{a} * {b} + {c}"),
    ("A school orders {a} boxes of {b} pencils and gives away {c} pencils. How many pencils are left?",
     "{a} * {b} - {c}"),
    ("A train carries {a} passengers on each of {b} trips, plus {c} on a late trip. How many passengers in total?",
     "{a} * {b} + {c}"),
    ("A farm fills {a} cartons with {b} eggs each, then breaks {c} eggs. How many whole eggs are left?",
     "{a} * {b} - {c}"),
)


def _expression_problem(rng: random.Random) -> tuple[str, str]:
    a, b, c = rng.randint(12, 999), rng.randint(12, 99), rng.randint(10, 999)
    form = rng.choice(("{a} * {b} + {c}", "{a} * {b} - {c}", "({a} + {c}) * {b}"))
    expression = form.format(a=a, b=b, c=c)
    return f"What is {expression}?", expression


def _word_problem(rng: random.Random) -> tuple[str, str]:
    template, form = rng.choice(_WORD_TEMPLATES)
    values = {"a": rng.randint(12, 999), "b": rng.randint(12, 99), "c": rng.randint(10, 999)}
    return template.format(**values), form.format(**values)


def arithmetic_rows(split: str = "train", train_size: int = 256, val_size: int = 64, seed: int = 0,
                    kinds: list[str] | None = None) -> list[dict[str, Any]]:
    """Generated arithmetic problems that need the ``calculator`` tool (products of 2- and 3-digit numbers).

    ``kinds``: ``expression`` ("What is 347 * 29 + 118?") and/or ``word`` (the same arithmetic in a short story;
    the model must write the expression itself). One seeded stream of distinct problems is cut into ``train``
    (the first ``train_size``) and ``val`` (the next ``val_size``), so the splits never share a question. Each row
    has ``prompt``, ``data_source`` (``arithmetic_<kind>``), ``reward_model.ground_truth`` and ``expert_actions``:
    one hermes calculator call, then ``<answer>N</answer>``.
    """
    from agentr1_core.builtin.calculator import evaluate, format_number

    if split not in ("train", "val"):
        raise ConfigError(f"config error at data: arithmetic split must be 'train' or 'val', got {split!r}")
    kinds = list(kinds or ["expression", "word"])
    makers = {"expression": _expression_problem, "word": _word_problem}
    bad = [k for k in kinds if k not in makers]
    if bad:
        raise ConfigError(f"config error at data: unknown arithmetic kind {bad[0]!r}; valid: expression, word")
    rng = random.Random(seed)
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    while len(rows) < train_size + val_size:
        kind = kinds[len(rows) % len(kinds)]
        question, expression = makers[kind](rng)
        if question in seen:
            continue
        seen.add(question)
        answer = format_number(evaluate(expression))
        call = json.dumps({"name": "calculator", "arguments": {"expression": expression}})
        rows.append({
            "prompt": question,
            "data_source": f"arithmetic_{kind}",
            "reward_model": {"ground_truth": answer},
            "expert_actions": [f"<tool_call>{call}</tool_call>", f"<answer>{answer}</answer>"],
            "extra_info": {"expression": expression, "index": len(rows)},
        })
    return rows[:train_size] if split == "train" else rows[train_size:]
