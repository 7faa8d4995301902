"""The one metrics path of a run: ``metrics.jsonl`` (one JSON object per record) and the experiment trackers of
``logging.trackers`` (TensorBoard by default; W&B, MLflow, Trackio: ``agentr1_core.lifecycle.trackers``). The
console line of an iteration is ``agentr1_core.trainers.console``'s.

Records are what the trainer produces: one per RL iteration (flat keys such as ``reward_mean``, ``loss``, with small
dicts for ``terminations`` and ``tool_errors``) plus ``event`` records (``validation``, ``sft``). Non-finite floats
are written as null. Every tracker gets every numeric value under one name, nested dicts flattened with ``/``
(``tool_errors/timeout``), at the record's iteration. On resume, ``truncate_to(offset)`` drops the records written
after the checkpoint, TensorBoard purges its events from the first repeated iteration on and the other trackers skip
the steps they already have, so no iteration is ever logged twice.

``write_episodes`` keeps what the agent did in a validation (``episodes/<label>.jsonl``: per episode its task and
stable task id, and per step the prompt messages as the env gave them, the response text, the parsed tool calls with
their outputs, env feedback, reward, done/truncated and token counts; per episode the reward, success, termination
and, for a failed episode, the full traceback), to read next to the numbers or with ``agentr1-core view``.
``write_train_episodes`` keeps a few training episodes per RL iteration (``episodes/train/iter_<N>.jsonl``).
The prompt is kept as messages (or text), not as the chat template's rendering: no tokenizer is needed here.

This module computes no metrics (see ``agentr1_core.trainers.metrics``).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

from agentr1_core.jsonl import read_jsonl


def clean(value: Any) -> Any:
    """JSON-safe copy: non-finite floats -> None, numpy/torch scalars -> Python numbers, keys -> str."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        try:
            return clean(value.item())
        except (ValueError, RuntimeError):
            return str(value)
    return value


def scalars(record: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Every finite number in ``record``, nested dicts flattened to ``a/b`` keys (bools count as 0/1)."""
    out: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(scalars(value, f"{name}/"))
        elif isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
            out[name] = float(value)
    return out


def tracker_scalars(record: dict[str, Any]) -> tuple[int, dict[str, float]]:
    """The step and the named numbers every tracker gets for one record: an iteration's values under their own
    names, an event's under ``val/`` (validation) or ``<event>/`` (``sft/``), at the record's iteration."""
    event = record.get("event")
    step = int(record.get("iteration") or 0)
    if event is None:
        body = {k: v for k, v in record.items() if k not in ("iteration", "validation")}
        return step, scalars(body)
    body = {k: v for k, v in record.items() if k not in ("event", "label", "iteration")}
    return step, scalars(body, f"{'val' if event == 'validation' else event}/")


class MetricsLogger:
    """Appends records to ``<run_dir>/metrics.jsonl`` (fsync'ed) and mirrors their numbers to the trackers named in
    ``trackers`` (``lifecycle.trackers``), filed under ``project`` / ``run_name``.

    ``purge_step`` (the first iteration a resumed run logs again) makes TensorBoard drop older events from that
    step on and the other trackers reopen their run and skip what they already logged.
    """

    def __init__(self, run_dir: str | os.PathLike, trackers: Sequence[str] = ("tensorboard",),
                 config: dict[str, Any] | None = None, purge_step: int | None = None, project: str = "agentr1",
                 run_name: str | None = None) -> None:
        from agentr1_core.lifecycle.trackers import Trackers

        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.trackers: Trackers | None = Trackers(list(trackers), self.run_dir, project,
                                                  run_name or self.run_dir.resolve().name, config, purge_step)

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(clean(record), ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        step, values = tracker_scalars(record)
        if self.trackers is not None and values:
            self.trackers.log(step, values)

    def offset(self) -> int:
        """The current size of ``metrics.jsonl`` in bytes (stored in checkpoints)."""
        return self.path.stat().st_size if self.path.is_file() else 0

    def close(self) -> None:
        if self.trackers is not None:
            self.trackers.close()
            self.trackers = None


def _task_text(observation: Any) -> str:
    """The last user message (or the text) of an episode's first observation, or ``""``."""
    if observation is None:
        return ""
    for message in reversed(observation.messages or []):
        if message.get("role") == "user":
            return str(message.get("content", ""))
    return observation.text or ""


def _prompt(obs: Any) -> dict[str, Any]:
    """What a step's prompt was rendered from: the env's chat messages, its plain text, or (for an env that gave
    token ids) nothing but the count in ``prompt_tokens``."""
    if obs is None:
        return {}
    if obs.messages is not None:
        return {"prompt": [dict(m) for m in obs.messages]}
    if obs.text is not None:
        return {"prompt_text": obs.text}
    return {}


BRANCH_KEYS = ("parent", "branch", "branch_of", "shared_prefix_tokens")  # where a step sits in a tree of calls


def _step_record(s: Any, tools: Any) -> dict[str, Any]:
    info = s.info or {}
    record: dict[str, Any] = {"action": s.action_text, "feedback": s.feedback, "reward": s.reward,
                              **({"tool_errors": info["tool_errors"]} if info.get("tool_errors") else {}),
                              "done": bool(s.done), "truncated": bool(s.truncated),
                              "prompt_tokens": len(s.prompt_ids), "response_tokens": len(s.response_ids),
                              **_prompt(s.observation)}
    record["policy_version"] = int(s.policy_version or 0)  # weights after this many RL updates sampled it
    if s.observation is not None and s.observation.tools and s.observation.tools != tools:
        record["tools"] = s.observation.tools  # the schemas the chat template showed, where they change
    for key in ("finish_reason", "calls", "answer", *BRANCH_KEYS):
        if info.get(key) is not None:
            record[key] = info[key]
    return record


def episode_record(t: Any) -> dict[str, Any]:
    """What ``episodes/<label>.jsonl`` keeps of one episode: its task and ``task_id`` (the same dataset row has the
    same id in every validation), reward (the episode's reward, by the rule of ``AgentFlowBase.finish``), success,
    termination, metrics, steps (prompt messages, action, parsed tool calls, feedback, reward, done/truncated, token
    counts, tool errors, ``policy_version``: the RL updates the sampling weights had seen; for a flow that records
    branches, ``parent``, ``branch``, ``branch_of`` and ``shared_prefix_tokens``), the number of ``branches`` when
    the flow counted them, and the full traceback of an env, engine or reward error."""
    first = t.steps[0].observation if t.steps else None
    steps, tools = [], None
    for s in t.steps:
        steps.append(_step_record(s, tools))
        tools = s.observation.tools if s.observation is not None else tools
    record = {"uid": t.uid, "task_id": t.info.get("task_id"), "data_source": t.data_source,
              "task": _task_text(first), "reward": t.final_reward, "success": bool(t.success()),
              "termination": t.termination, "metrics": t.metrics, "steps": steps}
    for key in ("tool_errors", "error", "reward_error", "close_error", "branches"):
        if t.info.get(key):
            record[key] = t.info[key]
    return record


def write_episodes(path: str | os.PathLike, trajs: Any) -> Path:
    """One JSON line per episode (``episode_record``). Written to a temporary file and renamed, so a reader never
    sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part")
    with open(tmp, "w", encoding="utf-8") as fh:
        for t in trajs:
            fh.write(json.dumps(clean(episode_record(t)), ensure_ascii=False, default=str) + "\n")
    tmp.replace(path)
    return path


def write_train_episodes(run_dir: str | os.PathLike, iteration: int, trajs: list[Any], keep: int) -> Path | None:
    """Keep ``keep`` episodes of an RL iteration's rollout in ``episodes/train/iter_<N>.jsonl``, spread evenly over
    the batch (so over its different rows); nothing when ``keep`` is 0. A resumed run rewrites the iterations it
    repeats."""
    if keep <= 0 or not trajs:
        return None
    picked = sorted({(i * len(trajs)) // min(keep, len(trajs)) for i in range(min(keep, len(trajs)))})
    return write_episodes(Path(run_dir) / "episodes" / "train" / f"iter_{int(iteration):06d}.jsonl",
                          [trajs[i] for i in picked])


def truncate_metrics(run_dir: str | os.PathLike, offset: int) -> int:
    """Cut ``metrics.jsonl`` back to ``offset`` bytes (what a checkpoint saw); returns the records dropped."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file() or path.stat().st_size <= offset:
        return 0
    with path.open("rb+") as fh:
        fh.seek(offset)
        dropped = fh.read().count(b"\n")
        fh.truncate(offset)
        fh.flush()
        os.fsync(fh.fileno())
    return dropped


def read_metrics(run_dir: str | os.PathLike, warn: Any = None) -> list[dict[str, Any]]:
    """The records of ``metrics.jsonl``; a line that cannot be read (a torn last line from a killed run, a hand
    edit) is skipped and, with ``warn``, named (``agentr1_core.jsonl``)."""
    path = Path(run_dir) / "metrics.jsonl"
    return list(read_jsonl(path, on_bad="skip", warn=warn)) if path.is_file() else []
