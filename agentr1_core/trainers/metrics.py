"""Run metrics: summaries of a rollout, validation results per ``data_source``, the ``metrics.jsonl`` writer and the
one-line console summary of an iteration.

``metrics.jsonl`` holds one JSON object per line (one per RL iteration, plus ``event`` lines for validation and the
SFT stage). Values are plain numbers, strings or small dicts; non-finite floats are written as null.
"""

from __future__ import annotations

import json
import math
import resource
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from agentr1_core.mdp import Trajectory


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def rollout_metrics(trajs: Sequence[Trajectory], seconds: float, success_threshold: float = 1.0) -> dict[str, Any]:
    """Reward mean/std, success rate, steps per episode, termination counts, tool errors, tokens and tok/s."""
    rewards = [float(t.final_reward) for t in trajs]
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

    def summary(ts: list[Trajectory]) -> dict[str, float]:
        return {"reward_mean": statistics.fmean([t.final_reward for t in ts]) if ts else 0.0,
                "success_rate": sum(t.success(success_threshold) for t in ts) / len(ts) if ts else 0.0,
                "cases": len(ts)}

    out: dict[str, Any] = summary(list(trajs))
    out["by_source"] = {src: summary(ts) for src, ts in sorted(by_source.items())}
    out["terminations"] = dict(Counter(t.termination for t in trajs))
    return out


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item"):  # numpy / torch scalars
        return _clean(value.item())
    return value


class MetricsWriter:
    """Appends one JSON object per call to ``<run_dir>/metrics.jsonl``."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(_clean(record), ensure_ascii=False) + "\n")


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, spec)


def console_line(m: dict[str, Any], total: int) -> str:
    """One readable line per iteration."""
    parts = [
        f"it {m.get('iteration', 0)}/{total}",
        f"reward {_fmt(m.get('reward_mean'))}±{_fmt(m.get('reward_std'), '.2f')}",
        f"success {_fmt(m.get('success_rate'), '.2f')}",
        f"steps {_fmt(m.get('steps_per_episode'), '.1f')}",
        f"loss {_fmt(m.get('loss'), '.4f')}",
        f"kl {_fmt(m.get('kl'), '.4f')}",
        f"ent {_fmt(m.get('entropy'), '.3f')}",
        f"gnorm {_fmt(m.get('grad_norm'), '.2f')}",
        f"clip {_fmt(m.get('clip_fraction'), '.3f')}",
        f"roll {_fmt(m.get('rollout_tok_s'), '.0f')} tok/s",
        f"upd {_fmt(m.get('update_tok_s'), '.0f')} tok/s",
        f"{_fmt(m.get('iteration_seconds'), '.0f')}s",
    ]
    val = m.get("validation")
    if isinstance(val, dict):
        parts.append(f"val success {_fmt(val.get('success_rate'), '.3f')} ({val.get('cases', 0)} cases)")
    return " | ".join(parts)
