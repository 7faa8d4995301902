"""Episode failures the user must see: the first error text of each kind, and a stop when nothing can work.

``report_episode_errors(trainer, trajs, stage, record)`` is called by a trainer after each rollout (expert rollouts
for SFT, RL iterations, validations). The first time a kind of failure shows up in the run (``env_error``,
``engine_error``, ``reward_error``) its error text, one line (the last line of the traceback), is printed and added
to ``record["first_errors"]`` (so it reaches ``metrics.jsonl``; without a record, an ``event: errors`` line is
written). The full traceback of each distinct error goes to ``<run_dir>/errors.log`` (with the stage, the episode
and how often it was seen so far), and the console line says so. When every episode of the rollout ended in an env
error, no stage can do useful work: it raises ``AllEpisodesFailed`` (one line, exit code 2) with the first error,
instead of training on nothing and exiting 0. Single faulty episodes stay what they are: recorded, not fatal.

``check_expert_steps`` stops an SFT stage whose expert produced no step at all (``NoExpertSteps``, exit code 2).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

from agentr1_core.errors import AllEpisodesFailed, NoExpertSteps

ERROR_TERMINATIONS = ("env_error", "engine_error")
ERRORS_LOG = "errors.log"


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


def episode_tracebacks(trajs: Sequence[Any]) -> list[tuple[str, str, str]]:
    """``(kind, episode uid, full traceback)`` of every failed episode and reward error among ``trajs``."""
    out = []
    for traj in trajs:
        if traj.termination in ERROR_TERMINATIONS and traj.info.get("error"):
            out.append((traj.termination, traj.uid, str(traj.info["error"])))
        if traj.info.get("reward_error"):
            out.append(("reward_error", traj.uid, str(traj.info["reward_error"])))
    return out


def log_tracebacks(run_dir: str | Path | None, trajs: Sequence[Any], stage: str, seen: dict[str, int]) -> Path | None:
    """Append the full traceback of each error not yet logged in this run (keyed by its last line) to
    ``run_dir/errors.log``; ``seen`` counts every occurrence. Returns the log's path when it holds anything."""
    if run_dir is None:
        return None
    path = Path(run_dir) / ERRORS_LOG
    entries = []
    for kind, uid, text in episode_tracebacks(trajs):
        key = f"{kind}: {error_line(text)}"
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 1:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            entries.append(f"=== {stamp} {stage}, episode {uid or '?'}: {kind}\n{text.rstrip()}\n")
    if entries:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write("\n".join(entries) + "\n")
    return path if path.is_file() else None


def report_episode_errors(trainer: Any, trajs: Sequence[Any], stage: str,
                          record: dict[str, Any] | None = None) -> None:
    """Print and record new failure kinds, log their tracebacks; raise ``AllEpisodesFailed`` when every episode hit
    an env error."""
    seen: dict[str, str] = trainer.__dict__.setdefault("_first_errors", {})
    logged: dict[str, int] = trainer.__dict__.setdefault("_logged_errors", {})
    log = log_tracebacks(getattr(trainer, "run_dir", None), trajs, stage, logged)
    found = first_errors(trajs)
    new = {kind: text for kind, text in found.items() if kind not in seen}
    seen.update(new)
    for kind, text in new.items():
        where = f" (traceback in {log})" if log is not None else ""
        print(f"[{stage}] first {kind}: {text}{where}", flush=True)
    if new and record is not None:
        record["first_errors"] = new
    elif new and getattr(trainer, "writer", None) is not None:
        trainer.writer.write({"event": "errors", "stage": stage, "first_errors": new})
    if trajs and all(t.termination == "env_error" for t in trajs):
        message = (f"every episode of {stage} ended in an env error ({len(trajs)} of {len(trajs)}), so the run "
                   f"stops; the first: {found['env_error']}" + (f" (traceback in {log})" if log is not None else ""))
        writer = getattr(trainer, "writer", None)
        if writer is not None:
            writer.write({"event": "stopped", "stage": stage, "reason": message, "first_errors": found})
        raise AllEpisodesFailed(message)


def check_expert_steps(trajs: Sequence[Any], steps: int) -> None:
    """Raise ``NoExpertSteps`` when the SFT stage's expert episodes gave no step: the model would learn nothing."""
    if steps > 0 or not trajs:
        return
    ends = sorted({t.termination for t in trajs})
    raise NoExpertSteps(
        f"sft: the expert produced no steps in {len(trajs)} episodes (terminations: {', '.join(ends)}): the env's "
        f"expert_action() returned nothing at the first turn. Give the dataset rows 'expert_actions' (a list of "
        f"action texts, replayed by AgentEnv.expert_action), implement expert_action() in the env, or drop 'sft' "
        f"from stages")
