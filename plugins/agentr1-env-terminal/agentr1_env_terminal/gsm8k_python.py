"""GSM8K with a ``python`` tool (ReTool-style): the core's GSM8K rows, their expert replays written as Python.

Each calculator call of a row's expert replay (``agentr1_core.builtin.gsm8k``: one annotation of the solution per
turn, then ``<answer>N</answer>``) becomes a ``python`` call that prints the same expression, run in the episode's
sandbox by the ``terminal`` env without a task folder; the reward is the config's (``answer_match`` on the final
number). Rows, splits and the shipped sample are the core recipe's, so ``gsm8k-python`` and ``gsm8k-cpu`` train and
validate on the same problems.
"""

from __future__ import annotations

from typing import Any

from agentr1_core.tool_formats import HermesFormat

_HERMES = HermesFormat()


def as_python_call(action: str) -> str:
    """A hermes calculator call as a hermes ``python`` call printing the expression; other text is kept."""
    parsed = _HERMES.parse(action)
    if not parsed.calls:
        return action
    calls = []
    for call in parsed.calls:
        if call.name != "calculator" or not isinstance(call.arguments, dict):
            return action
        calls.append(_HERMES.format_call("python", {"code": f"print({call.arguments['expression']})"}))
    return "".join(calls)


def gsm8k_python_rows(path: str = "", split: str = "train", limit: int = 0,
                      expert_only: bool = False) -> list[dict[str, Any]]:
    """The rows of the core's ``gsm8k`` dataset (same ``path``, ``split``, ``limit``, ``expert_only``), one call
    per expert turn, with the expert's calculator calls written as ``python`` calls."""
    from agentr1_core.builtin.gsm8k import gsm8k_rows

    rows = gsm8k_rows(path=path, split=split, limit=limit, calls_per_turn=1, expert_only=expert_only)
    for row in rows:
        if row.get("expert_actions"):
            row["expert_actions"] = [as_python_call(a) for a in row["expert_actions"]]
    return rows
