"""Run metrics computed from trajectories: summaries of a rollout and validation results per ``data_source``.

Where they go (``metrics.jsonl``, TensorBoard, W&B, the console line) is ``agentr1_core.lifecycle.metrics``.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Any, Sequence

from agentr1_core.memory import overall_peak_mb
from agentr1_core.mdp import Trajectory


def peak_rss_mb() -> float:
    """Peak resident memory of the run in MiB, since it started: the figure ``/usr/bin/time -v`` reports
    (``memory.overall_peak_mb``)."""
    return overall_peak_mb()


def expert_problems(expert: dict[str, Any]) -> str:
    """What went wrong in the expert demonstrations, for the ``[sft]`` line: tool errors and endings other than
    ``done`` (``"; tool errors exception:2,timeout:1; ends max_turns:1"``), or ``""``."""
    parts = []
    errors = expert.get("tool_errors") or {}
    if errors:
        parts.append("tool errors " + ",".join(f"{k}:{v}" for k, v in sorted(errors.items())))
    ends = {k: v for k, v in (expert.get("terminations") or {}).items() if k != "done"}
    if ends:
        parts.append("ends " + ",".join(f"{k}:{v}" for k, v in sorted(ends.items())))
    return "".join(f"; {p}" for p in parts)


def rollout_metrics(trajs: Sequence[Trajectory], seconds: float, success_threshold: float = 1.0) -> dict[str, Any]:
    """Reward mean/std (the episode reward), the mean return (the sum of step rewards that trajectory-level
    estimators score: the episode reward plus any env step rewards next to a reward function), success rate, steps
    per episode, termination counts, tool errors, tokens and tok/s."""
    rewards = [float(t.final_reward) for t in trajs]
    returns = [float(t.total_reward) for t in trajs if math.isfinite(float(t.total_reward))]
    finite = [r for r in rewards if math.isfinite(r)]
    tokens = sum(len(s.response_ids) for t in trajs for s in t.steps)
    prompt_tokens = sum(len(s.prompt_ids) for t in trajs for s in t.steps)
    tool_errors: Counter[str] = Counter()
    for t in trajs:
        tool_errors.update(t.info.get("tool_errors") or {})
    return {
        "episodes": len(trajs),
        "reward_mean": statistics.fmean(finite) if finite else 0.0,
        "reward_std": statistics.pstdev(finite) if len(finite) > 1 else 0.0,
        "return_mean": statistics.fmean(returns) if returns else 0.0,
        "success_rate": sum(t.success(success_threshold) for t in trajs) / len(trajs) if trajs else 0.0,
        "steps_per_episode": statistics.fmean([t.num_steps for t in trajs]) if trajs else 0.0,
        "terminations": dict(Counter(t.termination for t in trajs)),
        "tool_errors": dict(tool_errors),
        "tokens_generated": tokens,
        "prompt_tokens": prompt_tokens,
        "rollout_seconds": seconds,
        "rollout_tok_s": tokens / seconds if seconds > 0 else 0.0,
    }


def validation_metrics(trajs: Sequence[Trajectory], success_threshold: float = 1.0) -> dict[str, Any]:
    """Mean reward and success rate overall and per ``data_source``."""
    by_source: dict[str, list[Trajectory]] = {}
    for t in trajs:
        by_source.setdefault(t.data_source, []).append(t)

    def summary(ts: list[Trajectory]) -> dict[str, Any]:
        out = {"reward_mean": statistics.fmean([t.final_reward for t in ts]) if ts else 0.0,
               "success_rate": sum(t.success(success_threshold) for t in ts) / len(ts) if ts else 0.0,
               "cases": len(ts)}
        out.update(episode_metric_means(ts))
        return out

    out: dict[str, Any] = summary(list(trajs))
    out["by_source"] = {src: summary(ts) for src, ts in sorted(by_source.items())}
    out["terminations"] = dict(Counter(t.termination for t in trajs))
    tool_errors: Counter[str] = Counter()
    for t in trajs:
        tool_errors.update(t.info.get("tool_errors") or {})
    out["tool_errors"] = dict(tool_errors)
    return out


def episode_metric_means(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Means of the numeric per-episode metrics a reward or env put in ``Trajectory.metrics`` (EM, F1, score, ...),
    each over the episodes that report it."""
    values: dict[str, list[float]] = {}
    for t in trajs:
        for key, value in t.metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value)):
                values.setdefault(str(key), []).append(float(value))
    return {key: statistics.fmean(vs) for key, vs in sorted(values.items())}
