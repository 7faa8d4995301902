"""The rollout driver: ``n`` episodes per dataset row, all of one call in flight at once.

Every episode is one coroutine running an AgentFlow over one row; they are gathered together so that every
``generate`` call of every live episode reaches the engine at the same time and can be batched. A tqdm bar counts
finished episodes. Each trajectory gets ``group_id`` (its row), ``uid`` (row and sample) and ``info["task_id"]``, an id
of its dataset row that stays the same across validations and runs (``task_id``). A flow that raises, or
returns something that is not a ``Trajectory``, becomes an empty trajectory with termination ``env_error`` and the
traceback in ``info["error"]``: one bad episode never stops a run.

The driver knows nothing about models or losses; building the flow (and its ``FlowContext``) is the caller's job,
through ``make_flow``, which runs with ``current_episode_uid()`` set to the episode's uid (e.g. to seed it).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import traceback
from typing import Any, Awaitable, Callable, Sequence

from agentr1_core.mdp import Trajectory

FlowFactory = Callable[[], Any]  # returns an object with ``async run(row) -> Trajectory``

_EPISODE_UID: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentr1_episode_uid", default=None)


def current_episode_uid() -> str | None:
    """The uid of the episode whose flow is being built or run in this task (None outside an episode)."""
    return _EPISODE_UID.get()


ROW_ID_KEYS = ("id", "uid", "task_id", "question_id")


def task_id(row: dict[str, Any]) -> str:
    """A stable id of a dataset row: its own ``id`` (``uid``, ``task_id``, ``question_id``) when it has one, else a
    short hash of its prompt and ``env_kwargs`` (of the whole row when it has neither)."""
    for key in ROW_ID_KEYS:
        value = row.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    basis: Any = {"prompt": row.get("prompt"), "env_kwargs": row.get("env_kwargs")}
    if basis["prompt"] is None and basis["env_kwargs"] is None:
        basis = row
    text = json.dumps(basis, sort_keys=True, default=str, ensure_ascii=False)
    return "h" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def error_trajectory(row: dict[str, Any], error: str) -> Trajectory:
    """The trajectory that stands in for an episode whose flow crashed."""
    traj = Trajectory(data_source=str(row.get("data_source", "default")), termination="env_error")
    traj.info["error"] = error
    traj.metrics["num_steps"] = 0.0
    return traj


async def run_episode(make_flow: FlowFactory, row: dict[str, Any], group_id: str, uid: str) -> Trajectory:
    """One episode that never raises (except cancellation)."""
    _EPISODE_UID.set(uid)  # each episode runs in its own task: the value stays local to it
    try:
        flow = make_flow()
        traj = await flow.run(row)
        if not isinstance(traj, Trajectory):
            raise TypeError(f"agent flow returned {type(traj).__name__}, expected Trajectory")
    except asyncio.CancelledError:
        raise
    except Exception:
        traj = error_trajectory(row, traceback.format_exc())
    traj.group_id = group_id
    traj.uid = uid
    traj.info.setdefault("row_index", group_id)
    try:
        traj.info.setdefault("task_id", task_id(row))
    except Exception:  # an id is a convenience for reading episodes; it never fails one
        pass
    return traj


async def rollout_async(rows: Sequence[dict[str, Any]], n: int, make_flow: FlowFactory,
                        group_prefix: str = "", progress: bool = True, desc: str = "rollout",
                        max_concurrency: int = 0) -> list[Trajectory]:
    """Run ``n`` samples of every row concurrently; trajectories come back ordered by (row, sample).

    ``group_prefix`` makes group ids unique across calls (e.g. the iteration). ``max_concurrency`` > 0 caps the
    episodes in flight (0: all at once).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(rows) * n, desc=desc, unit="ep", leave=False, dynamic_ncols=True)
    limit = asyncio.Semaphore(max_concurrency) if max_concurrency > 0 else None

    async def one(row: dict[str, Any], r: int, k: int) -> Trajectory:
        group = f"{group_prefix}{r}"
        coro: Awaitable[Trajectory] = run_episode(make_flow, row, group, f"{group}/{k}")
        if limit is not None:
            async with limit:
                traj = await coro
        else:
            traj = await coro
        if bar is not None:
            bar.update(1)
        return traj

    try:
        tasks = [one(row, r, k) for r, row in enumerate(rows) for k in range(n)]
        return list(await asyncio.gather(*tasks))
    finally:
        if bar is not None:
            bar.close()


def rollout(rows: Sequence[dict[str, Any]], n: int, make_flow: FlowFactory, **kwargs: Any) -> list[Trajectory]:
    """Synchronous wrapper of ``rollout_async`` (runs its own event loop)."""
    return asyncio.run(rollout_async(rows, n, make_flow, **kwargs))
