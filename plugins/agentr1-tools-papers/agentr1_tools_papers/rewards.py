"""``paper_recall``: the verifiable paper-search reward, and the episode metrics every paper reward records.

Called once per episode as ``fn(trajectory, row)``. The gold papers are ``row["reward_model"]["ground_truth"]``
(paper ids). ``paper_recall`` pays ``find_weight`` times the fraction of the gold papers the episode found (each
paper counts at the step that found it first, so the credit lands where the search happened) and ``select_weight``
times the selection's score (``select_metric``: f1, recall or precision) on the finishing step. An episode that
never finished gets no selection score.

Metrics (``Trajectory.metrics``, so validation reports them whichever paper reward runs): ``crawl_recall`` (gold
papers among all papers found), ``recall`` / ``precision`` / ``f1`` of the selection, ``selected``, ``searches``,
``expansions``.
"""

from __future__ import annotations

from typing import Any

from agentr1_core.mdp import Trajectory

SELECT_METRICS = ("f1", "recall", "precision")


def gold_ids(row: dict[str, Any]) -> list[str]:
    """The row's gold paper ids; a ``ValueError`` when it has none (never a score against a missing list)."""
    gold = (row.get("reward_model") or {}).get("ground_truth")
    if gold is None:
        raise ValueError("the row has no reward_model.ground_truth (gold paper ids) to score the episode against")
    return [str(g) for g in (gold if isinstance(gold, list) else [gold])]


def selection_scores(selected: list[str], gold: list[str]) -> dict[str, float]:
    """Recall, precision and F1 of ``selected`` against ``gold`` (0 for an empty side)."""
    chosen, truth = set(selected), set(gold)
    hit = len(chosen & truth)
    recall = hit / len(truth) if truth else 0.0
    precision = hit / len(chosen) if chosen else 0.0
    f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    return {"recall": recall, "precision": precision, "f1": f1}


def selected_ids(traj: Trajectory) -> list[str] | None:
    """The ids the episode selected, or None when it did not finish with an answer."""
    if not traj.steps or traj.termination != "done":
        return None
    return list(traj.steps[-1].info.get("selected") or [])


def episode_metrics(traj: Trajectory, row: dict[str, Any]) -> dict[str, float]:
    """The metrics of the module doc, written to ``traj.metrics`` and returned."""
    gold = gold_ids(row)
    found = {p["id"] for s in traj.steps for p in s.info.get("new_papers") or []}
    selected = selected_ids(traj) or []
    metrics = {"crawl_recall": len(found & set(gold)) / len(gold) if gold else 0.0,
               **selection_scores(selected, gold), "selected": float(len(selected)),
               "searches": float(sum(s.info.get("searches", 0) for s in traj.steps)),
               "expansions": float(sum(s.info.get("expansions", 0) for s in traj.steps))}
    traj.metrics.update(metrics)
    return metrics


class PaperRecall:
    """``find_weight`` x found gold fraction (per step) + ``select_weight`` x the selection's ``select_metric``."""

    def __init__(self, find_weight: float = 0.0, select_weight: float = 1.0, select_metric: str = "f1") -> None:
        if select_metric not in SELECT_METRICS:
            raise ValueError(f"paper_recall: select_metric must be one of {', '.join(SELECT_METRICS)}, "
                             f"got {select_metric!r}")
        if find_weight < 0 or select_weight < 0:
            raise ValueError("paper_recall: find_weight and select_weight must be >= 0")
        self.find_weight, self.select_weight, self.select_metric = find_weight, select_weight, select_metric

    def __call__(self, traj: Trajectory, row: dict[str, Any]) -> float:
        metrics = episode_metrics(traj, row)
        gold = set(gold_ids(row))
        if self.find_weight and gold:
            for step in traj.steps:
                new_gold = sum(1 for p in step.info.get("new_papers") or [] if p["id"] in gold)
                step.reward += self.find_weight * new_gold / len(gold)
        if selected_ids(traj) is None:
            return 0.0
        return self.select_weight * metrics[self.select_metric]
