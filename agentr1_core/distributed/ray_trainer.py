"""The ``ray`` backend: the local backend's models and updates, with rollouts on Ray rollout-worker actors.

``RayTrainer(config, registry).fit()`` (the plugin entry) starts or joins Ray, then runs the training loop
(``trainers.loop``) on a ``RayBackend`` in a trainer actor (``trainer.params.trainer_in_actor``, the default) or in
the driver process. ``RayBackend`` is a ``LocalBackend`` whose ``rollout`` goes through a ``RolloutPool`` instead of
the in-process engine; everything else (SFT, advantages, policy update, state) is the local backend's own code, and
the loop is the one every backend runs, so the same config produces the same stages and metric keys, plus
``dist/*`` counters (worker failures, re-run and dropped episodes, weight publish/apply seconds, dispatch overhead).

``publish_weights`` publishes a CPU snapshot of the changed weights (``snapshot_weights``) to the object store,
which each worker applies before its next episodes.

Memory. The GPU-dependent settings left ``null`` come from the memory plan (``settings.memory_plan``) once Ray is up.
When the rollout engines share a GPU with the trainer and have a sleep mode (vLLM, colocated), they are put to sleep
(level 1: the trainer sends only the trainable weights) right after each rollout, so that the update gets their
memory; they wake up by themselves when the next rollout reaches them. Not with ``trainer.max_staleness`` > 0:
rollouts then run beside the update. Engine failures stop the run with
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
from agentr1_core.trainers.local import LocalBackend
from agentr1_core.trainers.loop import TrainingLoop


def run_name_for(run_dir: str) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(str(run_dir)).name or "run")[:40]
    return f"{base}-{uuid.uuid4().hex[:6]}"


def trainer_side_config(container: dict[str, Any]) -> Any:
    """The config the trainer process builds from: same run, but an in-process ``transformers`` engine."""
    from agentr1_core.config import run_config_tree

    local = dict(container)
    if (local.get("engine") or {}).get("name") != "transformers":
        local["engine"] = {"name": "transformers"}
    return OmegaConf.merge(run_config_tree(), local)


class RayBackend(LocalBackend):
    """``LocalBackend`` with rollouts fanned out to a ``RolloutPool``."""

    rollouts_run_policy_module = False  # the workers run their own copy of the weights

    def __init__(self, config: Any, registry: Any, worker_config: dict[str, Any], settings: ClusterSettings,
                 run_name: str) -> None:
        super().__init__(config, registry)
        self.worker_config = worker_config
        self.settings = settings
        self.run_name = run_name
        self.pool = None

    def start_tool_sources(self) -> None:
        """Nothing here: each rollout worker starts the tool sources for its own episodes."""

    def build(self, run: Any) -> str:
        line = super().build(run)
        from agentr1_core.distributed.pool import RolloutPool

        t0 = time.perf_counter()
        self.pool = RolloutPool(self.worker_config, self.settings, self.run_name)
        print(f"[ray] {len(self.pool.workers)} rollout workers ready in {time.perf_counter() - t0:.1f}s "
              f"(pids {[w['pid'] for w in self.pool.worker_info]})", flush=True)
        return line + f"; {len(self.pool.workers)} Ray rollout workers"

    def snapshot_weights(self) -> dict[str, Any]:
        """The weights the workers need (``weights.engine_state``: CPU copies, LoRA merged)."""
        from agentr1_core.distributed.weights import engine_state

        model = self.policy.model
        return engine_state(model, model.get_base_model() if hasattr(model, "get_base_model") else model)

    def publish_weights(self, snapshot: dict[str, Any] | None = None) -> dict[str, Any]:
        t0 = time.perf_counter()
        self.pool.publish(snapshot if snapshot is not None else self.snapshot_weights())
        return {"publish_seconds": time.perf_counter() - t0}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.publish_weights()  # the workers sample from the restored weights

    def rollout(self, rows: list[dict[str, Any]], n: int, sampling: Any, *, policy: str = "model",
                desc: str = "rollout", prefix: str = "", greedy_baseline: bool = False) -> list[Any]:
        trajs = self.pool.run(rows, n, sampling, policy=policy, prefix=prefix, desc=desc,
                              greedy_baseline=greedy_baseline)
        if self.pool.sleep_enabled and int(self.cfg.trainer.max_staleness) == 0:
            self.pool.sleep(1)  # the update gets the engines' GPU memory; the next rollout wakes them
        return trajs

    def take_stats(self) -> dict[str, Any]:
        return {**super().take_stats(), **(self.pool.take_stats() if self.pool is not None else {})}

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        super().close()


def ray_training_loop(config: Any, registry: Any, worker_config: dict[str, Any], settings: ClusterSettings,
                      run_name: str, callbacks: list[Any] | None = None,
                      rows: dict[str, list[dict[str, Any]]] | None = None) -> TrainingLoop:
    return TrainingLoop(config, registry, RayBackend(config, registry, worker_config, settings, run_name), callbacks,
                        rows)


class TrainerActor:
    """Runs the training loop on a ``RayBackend`` inside a Ray actor; plugins are re-discovered in this process.
    ``request_stop`` (a second concurrent call) passes on a signal the driver received: the loop stops after its
    current iteration with a checkpoint, as it does when it runs in the driver."""

    def __init__(self, container: dict[str, Any], settings: dict[str, Any], run_name: str) -> None:
        import torch

        from agentr1_core.lifecycle.stop import GracefulStop
        from agentr1_core.plugins import configure_registry

        cfg = trainer_side_config(container)
        threads = int(cfg.trainer.threads) or (os.cpu_count() or 1)
        torch.set_num_threads(threads)  # Ray sets OMP_NUM_THREADS=1 in actors that reserve no CPU
        registry = configure_registry(list(cfg.plugins.allow), list(cfg.plugins.block))
        self.stop = GracefulStop()  # not entered: no signal handlers here, the driver forwards the signal
        self.trainer = ray_training_loop(cfg, registry, container, ClusterSettings(**settings), run_name,
                                         callbacks=[self.stop])

    def request_stop(self, signum: int) -> None:
        if self.stop.signum is None:
            self.stop.signum = int(signum)

    def fit(self) -> dict[str, Any]:
        return self.trainer.fit()


def user_error_behind(exc: BaseException) -> BaseException | None:
    """The exception a user should see behind a Ray error from the trainer actor: a one-line user error (exit 2) or
    a ``RunStopped`` (exit 128 + signal), as it was raised in the actor (Ray's wrappers, which are instances of the
    remote type too, carry its traceback in their text); None for anything else (a bug: its traceback is shown)."""
    from agentr1_core.errors import UserError
    from agentr1_core.lifecycle.stop import RunStopped

    found = None
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (UserError, RunStopped)):
            found = exc  # keep going: the innermost one is the original
        exc = getattr(exc, "cause", None) or exc.__cause__  # Ray's task errors carry the remote exception in .cause
    if found is None or "\n" not in str(found):
        return found
    if isinstance(found, RunStopped):
        return RunStopped(str(found).splitlines()[-1], found.signum)
    return UserError(next((ln.strip() for ln in reversed(str(found).splitlines()) if ln.strip()), str(found)))


class RayTrainer:
    """Plugin entry (trainer ``ray``): start/join Ray, run the trainer in an actor or here, shut down."""

    def __init__(self, config: Any, registry: Any, callbacks: list[Any] | None = None,
                 rows: dict[str, list[dict[str, Any]]] | None = None) -> None:
        self.cfg = config
        self.registry = registry
        self.callbacks = list(callbacks or [])
        self.rows = rows  # what the driver's checks read: used when the loop runs here (the actor reads its own)
        self.settings = ClusterSettings.from_params(OmegaConf.to_container(config.trainer.params, resolve=True))
        if self.callbacks and self.settings.trainer_in_actor:
            raise ValueError("callbacks need trainer.params.trainer_in_actor=false (they live in the driver)")
        self.run_name = run_name_for(str(config.run_dir))

    def _wait(self, actor: Any) -> dict[str, Any]:
        """The actor's ``fit`` result; a signal the driver's ``GracefulStop`` caught meanwhile is passed on."""
        import ray

        ref = actor.fit.remote()
        forwarded = False
        while not ray.wait([ref], timeout=0.5)[0]:
            signum = next((cb.signum for cb in self.callbacks if getattr(cb, "signum", None)), None)
            if signum is not None and not forwarded:
                actor.request_stop.remote(signum)
                forwarded = True
        return ray.get(ref)

    def fit(self) -> dict[str, Any]:
        import ray

        from agentr1_core.distributed.settings import cluster_gpus, memory_plan

        container = OmegaConf.to_container(self.cfg, resolve=True)
        owns_ray = init_ray(self.settings)
        for callback in self.callbacks:  # Ray's driver replaced the SIGTERM handler of GracefulStop
            getattr(callback, "reinstall", lambda: None)()
        self.settings = self.settings.resolved(memory_plan(cluster_gpus(), "ray", self.settings.placement))
        actor = None
        try:
            if self.settings.trainer_in_actor:
                actor = ray.remote(TrainerActor).options(
                    name=f"{self.run_name}-trainer", namespace=self.settings.namespace, num_cpus=0,
                    num_gpus=float(self.settings.trainer_gpus), max_restarts=0, max_concurrency=2,
                ).remote(container, self.settings.to_dict(), self.run_name)
                try:
                    return self._wait(actor)
                except ray.exceptions.RayTaskError as exc:
                    cause = user_error_behind(exc)
                    if cause is not None:
                        raise cause from None
                    raise
            loop = ray_training_loop(trainer_side_config(container), self.registry, container, self.settings,
                                     self.run_name, callbacks=self.callbacks, rows=self.rows)
            return loop.fit()
        finally:
            if actor is not None:
                ray.kill(actor, no_restart=True)
            if owns_ray:
                ray.shutdown()
