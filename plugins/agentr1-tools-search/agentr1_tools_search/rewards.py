"""Episode rewards for QA: ``qa_em`` and ``qa_f1``, with an optional format reward.

A reward is called once per episode as ``fn(trajectory, row)``; the flow puts it on the last step (search steps keep
the env's own reward, 0 unless ``search_reward`` is set on the env). The prediction is the last ``<answer>`` of the
last step of an episode that ended with an answer; the gold answers are ``row["reward_model"]["ground_truth"]``
(a string or a list of aliases: the best alias counts). Both rewards record the episode's ``em`` and ``f1`` in
``Trajectory.metrics``, so validation reports both whichever one is the reward.
"""

from __future__ import annotations

from typing import Any

from agentr1_core.mdp import Trajectory

from agentr1_tools_search.answers import best_score, exact_match, extract_answer, f1_score


def gold_answers(row: dict[str, Any]) -> Any:
    """``reward_model.ground_truth``, else the row's ``answer`` or ``answers``; a ``ValueError`` when it has none (an
    episode is never scored against a missing answer)."""
    rm = row.get("reward_model") or {}
    for gold in (rm.get("ground_truth") if isinstance(rm, dict) else None, row.get("answer"), row.get("answers")):
        if gold is not None:
            return gold
    raise ValueError("the row has no reward_model.ground_truth (gold answers) to score the answer against")


class _QAReward:
    metric = staticmethod(exact_match)

    def __init__(self, format_reward: float = 0.0) -> None:
        if not 0.0 <= format_reward < 1.0:
            raise ValueError(f"format_reward must be in [0, 1), got {format_reward}")
        self.format_reward = format_reward

    def __call__(self, traj: Trajectory, row: dict[str, Any]) -> float:
        gold = gold_answers(row)
        answered = bool(traj.steps) and traj.termination == "done"
        answer = extract_answer(traj.steps[-1].action_text) if answered else None
        if answer is None:
            traj.metrics.update(em=0.0, f1=0.0)
            return 0.0
        traj.metrics.update(em=best_score(answer, gold, exact_match), f1=best_score(answer, gold, f1_score))
        return max(best_score(answer, gold, self.metric), self.format_reward)


class QAExactMatch(_QAReward):
    """1 when the normalised answer equals a normalised gold alias; else ``format_reward`` for a well-formed
    ``<answer>`` (0 by default)."""

    metric = staticmethod(exact_match)


class QAF1(_QAReward):
    """Token F1 against the best gold alias (HotpotQA rules); at least ``format_reward`` for a well-formed answer."""

    metric = staticmethod(f1_score)
