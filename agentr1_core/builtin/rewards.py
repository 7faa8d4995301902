"""Built-in reward functions. A reward function is called once per episode as ``fn(trajectory, row)`` and returns
the final reward (placed on the last step). ``AnswerMatch`` compares the final answer with the row's ground truth
(``reward_model.ground_truth``, or a top-level ``answer``); a row without one is an error, never a comparison with a
missing value (the run checks every row for it before the model loads, from the spec's ``row_fields``).
"""

from __future__ import annotations

import re
from typing import Any

from agentr1_core.mdp import Trajectory

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")


def final_answer(text: str, tag_required: bool = False) -> str | None:
    """The content of the last ``<answer>...</answer>``; without a tag, the last number (unless ``tag_required``)."""
    tagged = _ANSWER.findall(text)
    if tagged:
        return tagged[-1].strip()
    if tag_required:
        return None
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def _as_number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


GROUND_TRUTH = "reward_model.ground_truth|answer"  # what AnswerMatch reads from a row (its RewardSpec's row_fields)


def ground_truth(row: dict[str, Any]) -> Any:
    """The row's ``reward_model.ground_truth`` (or its ``answer``); a ``ValueError`` when it has neither."""
    rm = row.get("reward_model") or {}
    truth = rm.get("ground_truth") if isinstance(rm, dict) else None
    truth = row.get("answer") if truth is None else truth
    if truth is None:
        raise ValueError("the row has no reward_model.ground_truth to compare the answer with")
    return truth


class AnswerMatch:
    """1.0 when the episode's answer equals the ground truth (numerically if both are numbers), else 0.0;
    ``format_reward`` is given for a well-formed ``<answer>`` tag with a wrong answer. The answer is the last step's
    ``<answer>`` (or last number, unless ``tag_required``), or ``traj.info["answer"]`` when the flow recorded one
    (the value an OpenAI-client agent returned; an ``<answer>`` tag in it is read, else the whole text)."""

    def __init__(self, tag_required: bool = True, format_reward: float = 0.0) -> None:
        self.tag_required = tag_required
        self.format_reward = format_reward

    def __call__(self, traj: Trajectory, row: dict[str, Any]) -> float:
        truth = ground_truth(row)  # first: a row without one is an error, whatever the episode did
        if not traj.steps or traj.termination != "done":
            return 0.0
        given = traj.info.get("answer")
        if given is not None:
            tagged = _ANSWER.findall(str(given))
            answer: str | None = tagged[-1].strip() if tagged else str(given).strip()
        else:
            answer = final_answer(traj.steps[-1].action_text, self.tag_required)
        if answer is None:
            return 0.0
        truths = truth if isinstance(truth, list) else [truth]
        for t in truths:
            a, b = _as_number(answer), _as_number(str(t))
            if (a is not None and b is not None and abs(a - b) < 1e-6) or answer.strip().lower() == str(t).strip().lower():
                return 1.0
        return self.format_reward
