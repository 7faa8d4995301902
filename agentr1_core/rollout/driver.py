"""The rollout driver: ``n`` episodes per dataset row, all of one call in flight at once.

Every episode is one coroutine running an AgentFlow over one row; they are gathered together so that every
``generate`` call of every live episode reaches the engine at the same time and can be batched. A tqdm bar counts
finished episodes. Each trajectory gets ``group_id`` (its row), ``uid`` (row and sample) and ``info["task_id"]``, an id
of its dataset row that stays the same across validations and runs (``task_id``). A flow that raises, or
returns something that is not a ``Trajectory``, becomes an empty trajectory with termination ``env_error`` and the
traceback in ``info["error"]``: one bad episode never stops a run.

Greedy baseline episodes (ReMax): with ``greedy_baseline=True`` every row gets one more episode, uid
``<group>/greedy``, in the same gather as its ``n`` sampled ones (so its ``generate`` calls batch with theirs). Its
flow samples greedily (``temperature 0``, ``top_p 1``, ``top_k 0``; the rest of the sampling settings kept) and its
trajectory carries ``info["greedy_baseline"] = True``; the trainer scores it as the row's baseline and never trains
on it (``split_greedy``). Any backend that runs episodes through ``run_episode`` gets this from the uid alone.

The driver knows nothing about models or losses; building the flow (and its ``FlowContext``) is the caller's job,
through ``make_flow``, which runs with ``current_episode_uid()`` set to the episode's uid (e.g. to seed it).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import hashlib
import json
import traceback
from typing import Any, Awaitable, Callable, Sequence

from agentr1_core.mdp import Trajectory
from agentr1_core.rollout.base import SamplingParams

FlowFactory = Callable[[], Any]  # returns an object with ``async run(row) -> Trajectory``

_EPISODE_UID: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentr1_episode_uid", default=None)


def current_episode_uid() -> str | None:
    """The uid of the episode whose flow is being built or run in this task (None outside an episode)."""
    return _EPISODE_UID.get()


ROW_ID_KEYS = ("id", "uid", "task_id", "question_id")
GREEDY_SAMPLE = "greedy"  # the sample name of a row's greedy baseline episode: uid ``<group>/greedy``
GREEDY_INFO_KEY = "greedy_baseline"


def greedy_uid(group_id: str) -> str:
    return f"{group_id}/{GREEDY_SAMPLE}"


def is_greedy_uid(uid: str) -> bool:
    return uid.rsplit("/", 1)[-1] == GREEDY_SAMPLE


def is_greedy_baseline(traj: Trajectory) -> bool:
    """Whether ``traj`` is a greedy baseline episode (scored, never trained on)."""
    return bool(traj.info.get(GREEDY_INFO_KEY))


def split_greedy(trajs: Sequence[Trajectory]) -> tuple[list[Trajectory], list[Trajectory]]:
    """``(sampled, greedy)``: the episodes to train on and the greedy baseline episodes, each in their order."""
    sampled = [t for t in trajs if not is_greedy_baseline(t)]
    return sampled, [t for t in trajs if is_greedy_baseline(t)]


def greedy_sampling(sampling: SamplingParams) -> SamplingParams:
    """``sampling`` made greedy: temperature 0, no nucleus or top-k cut, no seed; length and stops kept."""
    return dataclasses.replace(sampling, temperature=0.0, top_p=1.0, top_k=0, seed=None)


def make_greedy(flow: Any) -> None:
    """Switch a built flow to greedy sampling through its ``ctx`` (a copy: the caller's context is shared)."""
    ctx = getattr(flow, "ctx", None)
    if ctx is None or not dataclasses.is_dataclass(ctx) or not hasattr(ctx, "sampling"):
        raise TypeError(f"agent flow {type(flow).__name__} keeps no FlowContext at .ctx, so its greedy baseline "
                        "episode cannot switch it to greedy sampling")
    flow.ctx = dataclasses.replace(ctx, sampling=greedy_sampling(ctx.sampling))


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
    """One episode that never raises (except cancellation). A uid ending in ``/greedy`` runs greedily and is marked
    as a greedy baseline episode."""
    _EPISODE_UID.set(uid)  # each episode runs in its own task: the value stays local to it
    greedy = is_greedy_uid(uid)
    try:
        row_id: str | None = task_id(row)  # before the flow runs: the id of the row as the dataset gave it
    except Exception:  # an id is a convenience for reading episodes; it never fails one
        row_id = None
    try:
        flow = make_flow()
        if greedy:
            make_greedy(flow)
        traj = await flow.run(row)
        if not isinstance(traj, Trajectory):
            raise TypeError(f"agent flow returned {type(traj).__name__}, expected Trajectory")
    except asyncio.CancelledError:
        raise
    except Exception:
        traj = error_trajectory(row, traceback.format_exc())
    traj.group_id = group_id
    traj.uid = uid
    if greedy:
        traj.info[GREEDY_INFO_KEY] = True
    traj.info.setdefault("row_index", group_id)
    if row_id is not None:
        traj.info.setdefault("task_id", row_id)
    return traj


async def rollout_async(rows: Sequence[dict[str, Any]], n: int, make_flow: FlowFactory,
                        group_prefix: str = "", progress: bool = True, desc: str = "rollout",
                        max_concurrency: int = 0, greedy_baseline: bool = False) -> list[Trajectory]:
    """Run ``n`` samples of every row concurrently; trajectories come back ordered by (row, sample).

    ``group_prefix`` makes group ids unique across calls (e.g. the iteration). ``max_concurrency`` > 0 caps the
    episodes in flight (0: all at once). ``greedy_baseline`` adds one greedy episode per row after its samples.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(rows) * (n + int(greedy_baseline)), desc=desc, unit="ep", leave=False,
                   dynamic_ncols=True)
    limit = asyncio.Semaphore(max_concurrency) if max_concurrency > 0 else None

    async def one(row: dict[str, Any], r: int, k: int) -> Trajectory:
        group = f"{group_prefix}{r}"
        uid = greedy_uid(group) if k == n else f"{group}/{k}"
        coro: Awaitable[Trajectory] = run_episode(make_flow, row, group, uid)
        if limit is not None:
            async with limit:
                traj = await coro
        else:
            traj = await coro
        if bar is not None:
            bar.update(1)
        return traj

    try:
        tasks = [one(row, r, k) for r, row in enumerate(rows) for k in range(n + int(greedy_baseline))]
        return list(await asyncio.gather(*tasks))
    finally:
        if bar is not None:
            bar.close()


def rollout(rows: Sequence[dict[str, Any]], n: int, make_flow: FlowFactory, **kwargs: Any) -> list[Trajectory]:
    """Synchronous wrapper of ``rollout_async`` (runs its own event loop)."""
    return asyncio.run(rollout_async(rows, n, make_flow, **kwargs))
