"""One RL iteration's rollout, with DAPO's dynamic sampling when ``rollout.dynamic_sampling.enabled``.

``sample_rollout(loop, iteration)`` takes ``rollout.batch_size`` rows from the data order and rolls them out
(``rollout.n`` episodes each); each rollout is one visit of its rows for the curriculum, if the run has one
(``trainers.data_order``). Without dynamic sampling that is all: every episode trains.

With it, a group (the episodes of one row) whose episodes all got the same return (the sum of their step rewards,
what GRPO and RLOO score, with ``rollout.overlong``'s length penalty when the run has one) carries no gradient
through a group baseline: its advantages are all zero. Such groups are dropped, and more rows are rolled out,
``rollout.batch_size`` at a time, until ``rollout.batch_size`` informative groups are there or ``max_rounds`` extra
rounds are spent; informative groups beyond the batch size are dropped too (verl does the same), so an update sees at
most the configured number of groups. When the cap is hit, what was found trains (possibly nothing: then the update
is skipped, as for any batch without a gradient) and the iteration's metrics say so (``dynamic/cap_hit``) with the
rewards the dropped groups shared: dynamic sampling cannot invent a reward, so a task the model never solves (every
group all 0) stays without a gradient.

Every episode rolled out counts in the iteration's rollout metrics (reward, success, tokens), the dropped ones
included, so they stay comparable with a run without dynamic sampling; only the training rows are filtered.
Greedy baseline episodes (ReMax) stay with their row's group and do not count in its rewards. A group's episodes
all fit one rollout call, so a group is never split. Works the same on every backend: the rounds are ordinary
``backend.rollout`` calls, each with its own episode ids (``it<N>-r<K>-<row>``).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from agentr1_core.rollout.driver import is_greedy_baseline
from agentr1_core.trainers.overlong import OverlongRule


@dataclass
class SampledRollout:
    """The rows taken and every episode rolled out (for metrics), and the episodes to train on."""

    rows: list[dict[str, Any]]
    trajectories: list[Any]
    train_trajectories: list[Any]
    seconds: float
    metrics: dict[str, Any] = field(default_factory=dict)


def group_key(traj: Any) -> str:
    return traj.group_id or traj.uid


def group_returns(trajs: list[Any], score: Callable[[Any], float] | None = None) -> dict[str, list[float]]:
    """Each group's sampled episodes' returns (``score``, by default the sum of step rewards), in first-seen order;
    greedy baselines left out."""
    out: dict[str, list[float]] = collections.OrderedDict()
    for traj in trajs:
        returns = out.setdefault(group_key(traj), [])
        if not is_greedy_baseline(traj):
            returns.append(float(score(traj)) if score is not None else float(traj.total_reward))
    return out


def is_informative(returns: list[float]) -> bool:
    """Whether a group's returns differ, read as the advantage estimators read them (a non-finite return as 0); a
    group of one episode never does. Exact comparison, as verl's filter (``np.std(values) == 0``)."""
    scored = [r if math.isfinite(r) else 0.0 for r in returns]
    return len(scored) >= 2 and max(scored) != min(scored)


def sample_rollout(loop: Any, iteration: int, greedy: dict[str, bool]) -> SampledRollout:
    """Rows and episodes of RL iteration ``iteration`` (see the module docstring). ``greedy``: the rollout's
    ``greedy_baseline`` keyword (ReMax) or none."""
    settings = loop.settings

    def roll(desc: str, prefix: str) -> tuple[list[dict[str, Any]], list[Any], float]:
        taken = loop.data.take_indexed(settings.batch_size)
        rows = [row for _, row in taken]
        trajs, seconds = loop.rollout(rows, settings.n, loop.sampling, desc=desc, prefix=prefix, **greedy)
        loop.data.record([index for index, _ in taken], prefix, trajs)  # the curriculum's visits, if any
        return rows, trajs, seconds

    rows, trajs, seconds = roll(f"rollout {iteration}", f"it{iteration}-")
    if not settings.dynamic_sampling:
        return SampledRollout(rows, trajs, list(trajs), seconds, loop.data.take_counts())
    all_rows, all_trajs = list(rows), list(trajs)
    kept: list[str] = []
    dropped: collections.Counter = collections.Counter()  # the return every episode of a dropped group got
    rounds = 0

    score = OverlongRule.from_settings(settings).scored_return  # with DAPO's length penalty, if the run has it

    def sort(batch: list[Any]) -> None:
        for key, returns in group_returns(batch, score).items():
            if is_informative(returns):
                kept.append(key)
            else:
                dropped[_shared_return(returns)] += 1

    sort(trajs)
    while len(kept) < settings.batch_size and rounds < settings.dynamic_sampling_rounds:
        rounds += 1
        more_rows, more, more_seconds = roll(f"rollout {iteration} (round {rounds + 1})",
                                             f"it{iteration}-r{rounds}-")
        all_rows += more_rows
        all_trajs += more
        seconds += more_seconds
        sort(more)
    trained = set(kept[:settings.batch_size])
    train = [t for t in all_trajs if group_key(t) in trained]
    metrics = {"dynamic/target_groups": settings.batch_size, "dynamic/kept_groups": len(trained),
               "dynamic/dropped_groups": sum(dropped.values()),
               "dynamic/surplus_groups": max(0, len(kept) - settings.batch_size), "dynamic/extra_rounds": rounds,
               "dynamic/rows_sampled": len(all_rows), "dynamic/cap_hit": int(len(kept) < settings.batch_size),
               "dynamic/dropped_by_return": {_label(r): c for r, c in sorted(dropped.items())},
               **loop.data.take_counts()}
    return SampledRollout(all_rows, all_trajs, train, seconds, metrics)


def _shared_return(returns: list[float]) -> float:
    return round(returns[0], 6) if returns and math.isfinite(returns[0]) else 0.0


def _label(value: float) -> str:
    return f"{value:g}"


def cap_note(metrics: dict[str, Any]) -> str | None:
    """The console line of an iteration whose extra rounds ran out before the batch's informative groups were
    found, or None."""
    if not metrics.get("dynamic/cap_hit"):
        return None
    shared = ", ".join(f"all {r}: {c}" for r, c in metrics.get("dynamic/dropped_by_return", {}).items())
    kept = metrics.get("dynamic/kept_groups", 0)
    what = (f"training on the {kept} found" if kept else "no gradient this iteration: the update is skipped")
    return (f"[dynamic sampling] {kept} of {metrics.get('dynamic/target_groups')} informative groups after "
            f"{metrics.get('dynamic/extra_rounds', 0)} extra rounds (rollout.dynamic_sampling.max_rounds, the cap); "
            f"{metrics.get('dynamic/dropped_groups', 0)} groups dropped because each one's episodes got the same "
            f"return ({shared}), which no group baseline can learn from; {what}")
