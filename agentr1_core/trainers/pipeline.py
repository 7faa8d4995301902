"""Where each RL iteration's rollout comes from: generated in turn (``InlineRollouts``, ``trainer.max_staleness: 0``)
or ahead of the update by a producer thread (``PipelinedRollouts``, ``max_staleness: K`` > 0).

In turn: rollout i runs after update i - 1 and its weights were published right after that update, as always.

Ahead: a producer thread generates the rollouts of the next iterations while the trainer updates, so tools, env
processes and engines do not wait for the update, nor the update for them. The rules:

* **Staleness.** Rollout i starts only once the published weights have seen at least ``i - 1 - K`` updates. It is
  trained after update ``i - 1``, so every row is at most K updates old. A row older than that (it cannot happen by
  construction; this is the guard) is dropped with its whole group and counted (``async/dropped_stale_rows``), never
  trained on silently.
* **One version per rollout.** The producer makes the newest weight snapshot the engines' weights between two
  rollouts, never during one, so every response comes from a single weight version, and every step records it
  (``Step.policy_version``: the number of RL updates those weights had seen). Partial rollouts (an episode carried
  across a weight update) are not offered.
* **Counters.** The backend's counters (``take_stats``: prefix cache, ``dist/*``) are taken around each rollout by
  the producer and logged with the iteration that trains it.
* **Back-pressure.** At most ``max(1, K)`` finished rollouts wait for the trainer; a GRPO group always stays in one
  rollout. The producer's waits (for weights or for room) are ``async/engine_idle_seconds``, the trainer's wait
  for a finished rollout ``async/trainer_idle_seconds``.
* **Snapshots.** After each update the trainer takes ``backend.snapshot_weights()`` (a copy: the update goes on
  while the producer publishes it); ``backend.publish_weights(snapshot)`` runs on the producer's thread, between two
  rollouts, and announces the new version to the engines (``sync_weights``: no prefix cached under the old weights
  is reused). Validation during RL pauses the producer (it waits for the rollout in flight) and samples the
  trainer's current weights.
* **Stops, checkpoints, resume.** A checkpoint records the data order as of the last rollout trained, so the
  rollouts in flight are not part of it: when the pipeline stops (the end of RL, a signal, an error) the rollout in
  flight is finished and discarded with the ones waiting, the line ``[pipeline]`` says which, and a resumed run
  samples those rows again with its current weights.

What it does not do: split one rollout across weight versions, or run more than one rollout at a time (each rollout
already runs its episodes concurrently). The peak memory of the ``rollout`` phase is not measured on its own here:
the ``update`` phase's peak includes the rollout running beside it.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from agentr1_core.trainers.dynamic_sampling import SampledRollout, sample_rollout

@dataclass
class RolloutBatch:
    """One RL iteration's rollout, ready for the update."""

    iteration: int
    rows: list[dict[str, Any]]
    trajectories: list[Any]  # every episode rolled out (the rollout's metrics)
    seconds: float
    version: int  # RL updates the sampling weights had seen
    data_state: dict[str, Any] | None = None  # the data order after these rows were taken (pipelined only)
    data_epoch: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    train_trajectories: list[Any] | None = None  # the episodes to train on (dynamic sampling); None: every one

    @classmethod
    def of(cls, iteration: int, sampled: SampledRollout, version: int, **fields: Any) -> "RolloutBatch":
        metrics = {**sampled.metrics, **fields.pop("metrics", {})}
        return cls(iteration, sampled.rows, sampled.trajectories, sampled.seconds, version, metrics=metrics,
                   train_trajectories=sampled.train_trajectories, **fields)


def greedy_baseline(loop: Any) -> dict[str, bool]:
    """The rollout's ``greedy_baseline`` keyword when the algorithm asks for it (ReMax), else none: a loop or
    backend that predates it still works."""
    return {"greedy_baseline": True} if getattr(loop, "greedy_baseline", False) else {}


def tag_versions(trajectories: list[Any], version: int) -> None:
    for traj in trajectories:
        for step in traj.steps:
            step.policy_version = int(version)


def staleness_metrics(trajectories: list[Any], trained_version: int, max_staleness: int) -> tuple[list[Any], dict]:
    """Drop every group that holds a step sampled more than ``max_staleness`` updates before ``trained_version``;
    returns the kept trajectories and ``async/*`` metrics: the staleness of the kept step rows (mean, max, one count
    per value) and the rows dropped."""
    stale_groups = {t.group_id or t.uid for t in trajectories
                    if any(trained_version - s.policy_version > max_staleness for s in t.steps)}
    kept = [t for t in trajectories if (t.group_id or t.uid) not in stale_groups]
    dropped = sum(len(t.steps) for t in trajectories if (t.group_id or t.uid) in stale_groups)
    ages = [trained_version - s.policy_version for t in kept for s in t.steps]
    out: dict[str, Any] = {"async/dropped_stale_rows": dropped,
                           "async/staleness_mean": sum(ages) / len(ages) if ages else 0.0,
                           "async/staleness_max": max(ages) if ages else 0}
    for age in range(max_staleness + 1):
        out[f"async/staleness_{age}"] = sum(1 for a in ages if a == age)
    return kept, out


class InlineRollouts:
    """Rollout i after update i - 1, in this thread (``max_staleness: 0``)."""

    max_staleness = 0

    def __init__(self, loop: Any) -> None:
        self.loop = loop

    def __enter__(self) -> "InlineRollouts":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def next(self, iteration: int) -> RolloutBatch:
        loop = self.loop
        loop.backend.take_stats()  # start the counters' window at this rollout
        with loop.peaks.phase("rollout"):
            sampled = sample_rollout(loop, iteration, greedy_baseline(loop))
        tag_versions(sampled.trajectories, iteration - 1)
        return RolloutBatch.of(iteration, sampled, iteration - 1, data_epoch=loop.data.epoch)

    def after_update(self, iteration: int) -> dict[str, Any]:
        return self.loop.backend.publish_weights()

    def iteration_end(self, iteration: int) -> None:
        return None

    def stats(self) -> dict[str, Any]:
        """The backend's counters since the rollout began (engine prefix cache, ``dist/*``)."""
        return self.loop.backend.take_stats()

    def paused(self) -> Any:
        return contextlib.nullcontext()


class PipelinedRollouts:
    """Rollouts generated ahead of the update by a producer thread (see the module docstring)."""

    def __init__(self, loop: Any, max_staleness: int) -> None:
        if max_staleness < 0:
            raise ValueError("max_staleness must be >= 0")
        self.loop = loop
        self.max_staleness = int(max_staleness)
        self.total = loop.settings.total_steps
        self.cond = threading.Condition()
        self.engine_lock = threading.Lock()  # held by the producer while it publishes or generates
        self.ready: collections.deque[RolloutBatch] = collections.deque()
        self.next_iteration = loop.iteration + 1
        self.trained_version = loop.iteration  # RL updates the trainer's weights have seen
        self.snapshot: Any = None
        self.snapshot_version = -1
        self.pending: tuple[Any, int] | None = None  # the newest snapshot and its version
        self.engine_version: int | None = None  # the version the engines sample from
        self.failure: BaseException | None = None
        self.stopping = False
        self.in_flight: int | None = None
        self.thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------------------------
    def __enter__(self) -> "PipelinedRollouts":
        self.post_weights(self.loop.iteration)
        self.thread = threading.Thread(target=self._produce, name="rollout-pipeline", daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        with self.cond:
            self.stopping = True
            in_flight = self.in_flight
            self.cond.notify_all()
        if exc[0] is not None and issubclass(exc[0], KeyboardInterrupt):
            return  # a second signal: no waiting for the rollout in flight (the thread is a daemon)
        t0 = time.perf_counter()
        if self.thread is not None:
            self.thread.join()
        waiting = [b.iteration for b in self.ready]
        if in_flight is not None:
            waiting = sorted(set(waiting) | {in_flight})
        self.ready.clear()
        if waiting:
            finished = (f" (the one in flight finished in {time.perf_counter() - t0:.1f}s)"
                        if in_flight is not None else "")
            print(f"[pipeline] stopped at iteration {self.loop.iteration}: discarded the rollouts of iterations "
                  f"{waiting}{finished}; they are not in any checkpoint, a resumed run samples those rows again",
                  flush=True)
            writer = getattr(self.loop, "writer", None)
            if writer is not None:
                writer.write({"event": "pipeline_stopped", "iteration": self.loop.iteration, "discarded": waiting})
        if exc[0] is None and self.pending is not None:
            self._publish_current()  # what validation after RL samples from

    # -- trainer side -----------------------------------------------------------------------------------------------
    def post_weights(self, version: int) -> None:
        """Hand the producer the weights after ``version`` updates (the snapshot taken after that update)."""
        if self.pending is None or self.pending[1] != version:
            self.pending = (self.loop.backend.snapshot_weights(), int(version))
        with self.cond:
            (self.snapshot, self.snapshot_version), self.trained_version = self.pending, int(version)
            self.cond.notify_all()

    def next(self, iteration: int) -> RolloutBatch:
        t0 = time.perf_counter()
        with self.cond:
            self.cond.wait_for(lambda: self.ready or self.failure is not None)
            if not self.ready:
                raise self.failure  # type: ignore[misc]
            batch = self.ready.popleft()
            self.cond.notify_all()
        if batch.iteration != iteration:
            raise RuntimeError(f"rollout pipeline out of order: got iteration {batch.iteration}, expected {iteration}")
        self.loop.consumed_data_state = batch.data_state
        batch.metrics["async/trainer_idle_seconds"] = time.perf_counter() - t0
        return batch

    def after_update(self, iteration: int) -> dict[str, Any]:
        """A snapshot of the weights just updated; the producer gets it when the iteration ends (after its
        validation and checkpoint, as the loop in turn would start the next rollout)."""
        t0 = time.perf_counter()
        backend = self.loop.backend
        self.pending = (backend.snapshot_weights(), int(iteration))
        return {"snapshot_seconds": time.perf_counter() - t0, **backend.take_snapshot_metrics()}

    def iteration_end(self, iteration: int) -> None:
        self.post_weights(iteration)

    def stats(self) -> dict[str, Any]:
        """Nothing: the producer takes the backend's counters of each rollout into its batch's metrics."""
        return {}

    def paused(self) -> Any:
        """Hold the producer between two rollouts and make the trainer's weights the engines' (for validation)."""
        pipeline = self

        class Paused:
            def __enter__(self) -> None:
                pipeline.engine_lock.acquire()
                pipeline._publish(*pipeline.pending)

            def __exit__(self, *exc: Any) -> None:
                pipeline.engine_lock.release()

        return Paused()

    def _publish_current(self) -> None:
        with self.engine_lock:
            self._publish(*self.pending)

    def _publish(self, snapshot: Any, version: int) -> dict[str, Any]:
        if version == self.engine_version:
            return {}
        metrics = self.loop.backend.publish_weights(snapshot)
        self.engine_version = version
        return metrics

    # -- producer side ----------------------------------------------------------------------------------------------
    def _may_start(self, iteration: int) -> bool:
        fresh = self.trained_version >= iteration - 1 - self.max_staleness
        return self.stopping or (fresh and len(self.ready) < max(1, self.max_staleness))

    def _produce(self) -> None:
        loop = self.loop
        try:
            while True:
                with self.cond:
                    iteration = self.next_iteration
                    if iteration > self.total or self.stopping:
                        return
                    t0 = time.perf_counter()
                    self.cond.wait_for(lambda: self._may_start(iteration))
                    if self.stopping:
                        return
                    waited = time.perf_counter() - t0
                    self.in_flight = iteration
                with self.engine_lock:
                    with self.cond:  # the newest weights (validation may have published them meanwhile)
                        snapshot, version = self.snapshot, self.snapshot_version
                    published = self._publish(snapshot, version) or {"publish_seconds": 0.0}
                    loop.backend.take_stats()  # the counters' window starts at this rollout
                    sampled = sample_rollout(loop, iteration, greedy_baseline(loop))
                    data_state, epoch = loop.data.state_dict(), loop.data.epoch  # after every row it took
                    counters = loop.backend.take_stats()
                tag_versions(sampled.trajectories, version)
                batch = RolloutBatch.of(iteration, sampled, version, data_state=data_state, data_epoch=epoch,
                                        metrics={"async/engine_idle_seconds": waited, **published, **counters})
                with self.cond:
                    self.ready.append(batch)
                    self.in_flight = None
                    self.next_iteration = iteration + 1
                    self.cond.notify_all()
        except BaseException as exc:  # handed to the trainer's thread, which raises it
            with self.cond:
                self.failure = exc
                self.in_flight = None
                self.cond.notify_all()
