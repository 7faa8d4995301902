"""Episode failures the user must see: the first error text of each kind, and a stop when nothing can work.

``report_episode_errors(trainer, trajs, stage, record)`` is called by a trainer after each rollout (expert rollouts
for SFT, RL iterations, validations). The first time a kind of failure shows up in the run (``env_error``,
``engine_error``, ``reward_error``) its error text, one line (the last line of the traceback), is printed and added
to ``record["first_errors"]`` (so it reaches ``metrics.jsonl``; without a record, an ``event: errors`` line is
written). When every episode of the rollout ended in an env
error, no stage can do useful work: it raises ``AllEpisodesFailed`` (one line, exit code 2) with the first error,
instead of training on nothing and exiting 0. Single faulty episodes stay what they are: recorded, not fatal.
"""

from __future__ import annotations

from typing import Any, Sequence

from agentr1_core.plugins import PluginError

ERROR_TERMINATIONS = ("env_error", "engine_error")


class AllEpisodesFailed(PluginError):
    """Every episode of a rollout ended in an env error (one line, exit code 2)."""


def error_line(text: str) -> str:
    """The last non-empty line of a traceback (``CorpusError: corpus file not found: x``)."""
    lines = [ln.strip() for ln in str(text or "").splitlines() if ln.strip()]
    return lines[-1][:400] if lines else "(no error text)"


def first_errors(trajs: Sequence[Any]) -> dict[str, str]:
    """The first error line of each failure kind among ``trajs``."""
    found: dict[str, str] = {}
    for traj in trajs:
        if traj.termination in ERROR_TERMINATIONS:
            found.setdefault(traj.termination, error_line(traj.info.get("error", "")))
        if traj.info.get("reward_error"):
            found.setdefault("reward_error", error_line(traj.info["reward_error"]))
    return found


def report_episode_errors(trainer: Any, trajs: Sequence[Any], stage: str,
                          record: dict[str, Any] | None = None) -> None:
    """Print and record new failure kinds; raise ``AllEpisodesFailed`` when every episode hit an env error."""
    seen: dict[str, str] = trainer.__dict__.setdefault("_first_errors", {})
    found = first_errors(trajs)
    new = {kind: text for kind, text in found.items() if kind not in seen}
    seen.update(new)
    for kind, text in new.items():
        print(f"[{stage}] first {kind}: {text}", flush=True)
    if new and record is not None:
        record["first_errors"] = new
    elif new and getattr(trainer, "writer", None) is not None:
        trainer.writer.write({"event": "errors", "stage": stage, "first_errors": new})
    if trajs and all(t.termination == "env_error" for t in trajs):
        message = (f"every episode of {stage} ended in an env error ({len(trajs)} of {len(trajs)}), so the run "
                   f"stops; the first: {found['env_error']}")
        writer = getattr(trainer, "writer", None)
        if writer is not None:
            writer.write({"event": "stopped", "stage": stage, "reason": message, "first_errors": found})
        raise AllEpisodesFailed(message)
