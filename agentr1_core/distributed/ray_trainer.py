"""The ``ray`` trainer: the local trainer's algorithm and update, with rollouts on Ray rollout-worker actors.

``RayTrainer(config, registry).fit()`` (the plugin entry) starts or joins Ray, then runs ``RayRolloutTrainer`` in a
trainer actor (``trainer.params.trainer_in_actor``, the default) or in the driver process. ``RayRolloutTrainer`` is a
``LocalTrainer`` whose ``rollout`` goes through a ``RolloutPool`` instead of the in-process engine; everything else
(data order, SFT warm start, advantages, policy update, validation, metrics, state) is the local trainer's own code,
so the same config produces the same metrics keys, plus ``dist/*`` counters (worker failures, re-run and dropped
episodes, weight publish/apply seconds, dispatch overhead).

After every optimizer update the local trainer calls ``engine.sync_weights()``; here that call also publishes a CPU
snapshot of the changed weights to the object store, which each worker applies before its next episodes.

Memory. The GPU-dependent settings left ``null`` come from the memory plan (``settings.memory_plan``) once Ray is up.
When the rollout engines share a GPU with the trainer and have a sleep mode (vLLM, colocated), they are put to sleep
(level 1: the trainer sends only the trainable weights) right after each rollout, so that the update gets their
memory; they wake up by themselves when the next rollout reaches them. Engine failures stop the run with
``RolloutEngineError`` (one line, exit code 2).

The trainer process keeps a ``transformers`` engine on the shared module (the local trainer builds one) but generates
nothing with it; when ``engine`` names another engine (``vllm``), only the rollout workers build that one.
Callbacks are supported only with ``trainer_in_actor: false`` (they live in the driver). One-step off-policy
pipelining is not implemented: rollouts of iteration k+1 start after the update of k.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from agentr1_core.distributed.settings import ClusterSettings, init_ray
from agentr1_core.trainers.local import LocalTrainer


def run_name_for(run_dir: str) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(str(run_dir)).name or "run")[:40]
    return f"{base}-{uuid.uuid4().hex[:6]}"


def trainer_side_config(container: dict[str, Any]) -> Any:
    """The config the trainer process builds from: same run, but an in-process ``transformers`` engine."""
    from agentr1_core.config import RunConfig

    local = dict(container)
    if (local.get("engine") or {}).get("name") != "transformers":
        local["engine"] = {"name": "transformers"}
    return OmegaConf.merge(OmegaConf.structured(RunConfig), local)


class _PublishingEngine:
    """The trainer's engine, whose ``sync_weights`` also publishes the new weights to the rollout workers."""

    def __init__(self, inner: Any, publish: Any) -> None:
        self._inner = inner
        self._publish = publish

    def sync_weights(self, state: Any = None) -> None:
        self._inner.sync_weights(state)
        self._publish()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _DistMetricsWriter:
    """Adds the pool's ``dist/*`` counters to every iteration record before it is written."""

    def __init__(self, inner: Any, pool: Any) -> None:
        self._inner = inner
        self._pool = pool

    def write(self, record: dict[str, Any]) -> None:
        if "iteration" in record and "event" not in record:
            record.update(self._pool.take_stats())
        self._inner.write(record)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class RayRolloutTrainer(LocalTrainer):
    """``LocalTrainer`` with rollouts fanned out to a ``RolloutPool``."""

    def __init__(self, config: Any, registry: Any, worker_config: dict[str, Any], settings: ClusterSettings,
                 run_name: str, callbacks: list[Any] | None = None) -> None:
        super().__init__(config, registry, callbacks)
        self.worker_config = worker_config
        self.settings = settings
        self.run_name = run_name
        self.pool = None

    def setup(self) -> None:
        if self._setup_done:
            return
        super().setup()
        from agentr1_core.distributed.pool import RolloutPool

        t0 = time.perf_counter()
        self.pool = RolloutPool(self.worker_config, self.settings, self.run_name)
        print(f"[ray] {len(self.pool.workers)} rollout workers ready in {time.perf_counter() - t0:.1f}s "
              f"(pids {[w['pid'] for w in self.pool.worker_info]})", flush=True)
        self.writer = _DistMetricsWriter(self.writer, self.pool)
        self.engine = _PublishingEngine(self.engine, self.publish_weights)

    def publish_weights(self) -> None:
        from agentr1_core.distributed.weights import engine_state

        model = self.policy.model
        engine_model = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.pool.publish(engine_state(model, engine_model))

    def rollout(self, rows: list[dict[str, Any]], n: int, sampling: Any, policy: str = "model",
                desc: str = "rollout", prefix: str = ""):
        t0 = time.perf_counter()
        trajs = self.pool.run(rows, n, sampling, policy=policy, prefix=prefix, desc=desc)
        seconds = time.perf_counter() - t0
        if self.pool.sleep_enabled:
            self.pool.sleep(1)  # the update gets the engines' GPU memory; the next rollout wakes them
        return trajs, seconds

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        super().close()


class TrainerActor:
    """Runs ``RayRolloutTrainer`` inside a Ray actor; plugins are re-discovered in this process."""

    def __init__(self, container: dict[str, Any], settings: dict[str, Any], run_name: str) -> None:
        import torch

        from agentr1_core.plugins import configure_registry

        cfg = trainer_side_config(container)
        threads = int(cfg.trainer.threads) or (os.cpu_count() or 1)
        torch.set_num_threads(threads)  # Ray sets OMP_NUM_THREADS=1 in actors that reserve no CPU
        registry = configure_registry(list(cfg.plugins.allow), list(cfg.plugins.block))
        self.trainer = RayRolloutTrainer(cfg, registry, container, ClusterSettings(**settings), run_name)

    def fit(self) -> dict[str, Any]:
        return self.trainer.fit()


class RayTrainer:
    """Plugin entry (trainer ``ray``): start/join Ray, run the trainer in an actor or here, shut down."""

    def __init__(self, config: Any, registry: Any, callbacks: list[Any] | None = None) -> None:
        self.cfg = config
        self.registry = registry
        self.callbacks = list(callbacks or [])
        self.settings = ClusterSettings.from_params(OmegaConf.to_container(config.trainer.params, resolve=True))
        if self.callbacks and self.settings.trainer_in_actor:
            raise ValueError("callbacks need trainer.params.trainer_in_actor=false (they live in the driver)")
        self.run_name = run_name_for(str(config.run_dir))

    def fit(self) -> dict[str, Any]:
        import ray

        from agentr1_core.distributed.pool import error_cause
        from agentr1_core.distributed.settings import cluster_gpus, memory_plan

        container = OmegaConf.to_container(self.cfg, resolve=True)
        owns_ray = init_ray(self.settings)
        self.settings = self.settings.resolved(memory_plan(cluster_gpus(), "ray", self.settings.placement))
        actor = None
        try:
            if self.settings.trainer_in_actor:
                actor = ray.remote(TrainerActor).options(
                    name=f"{self.run_name}-trainer", namespace=self.settings.namespace, num_cpus=0,
                    num_gpus=float(self.settings.trainer_gpus), max_restarts=0,
                ).remote(container, self.settings.to_dict(), self.run_name)
                try:
                    return ray.get(actor.fit.remote())
                except ray.exceptions.RayTaskError as exc:
                    cause = error_cause(exc)  # the engine's own one-line message, not a remote traceback
                    if cause is not None:
                        raise type(cause)(str(cause)) from None
                    raise
            trainer = RayRolloutTrainer(trainer_side_config(container), self.registry, container, self.settings,
                                        self.run_name, callbacks=self.callbacks)
            try:
                return trainer.fit()
            finally:
                trainer.close()
        finally:
            if actor is not None:
                ray.kill(actor, no_restart=True)
            if owns_ray:
                ray.shutdown()
