"""Cluster settings of the distributed trainers, read from ``trainer.params``, and a guarded ``ray.init``.

Everything is optional; the defaults fit one machine::

    trainer:
      name: ray
      params:
        rollout_workers: 2        # Ray actors, each with its own engine and env pool
        address: null             # null: start a local Ray; "auto" or "HOST:PORT": join a running cluster
        num_cpus: null            # logical CPUs of a local Ray (null: all cores)
        object_store_mb: 1024     # object store of a local Ray (weights travel through it)
        worker_cpus: 1.0          # logical CPUs reserved per rollout worker
        worker_gpus: 0.0          # GPUs per rollout worker (vLLM needs 1 or a fraction when colocated)
        worker_threads: 1         # torch threads inside each rollout worker
        trainer_gpus: 0.0         # GPUs of the trainer actor
        trainer_in_actor: true    # run the trainer in a Ray actor (false: in the driver process)
        max_restarts: 3           # restarts of a dead rollout worker before it is given up
        on_worker_failure: rerun  # rerun | drop: what happens to the episodes of a worker that died
        rollout_timeout_s: 0      # > 0: a worker that holds a chunk longer is killed (and restarted)
        namespace: agentr1        # Ray namespace of the named actors ("<run name>-rollout-<i>")

Unknown keys are an error naming the valid ones. This module imports ray only inside ``init_ray``.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from typing import Any

from agentr1_core.config import ConfigError
from agentr1_core.plugins import suggest


@dataclass
class ClusterSettings:
    rollout_workers: int = 2
    address: str | None = None
    num_cpus: int | None = None
    object_store_mb: int = 1024
    worker_cpus: float = 1.0
    worker_gpus: float = 0.0
    worker_threads: int = 1
    trainer_gpus: float = 0.0
    trainer_in_actor: bool = True
    max_restarts: int = 3
    on_worker_failure: str = "rerun"
    rollout_timeout_s: float = 0.0
    namespace: str = "agentr1"

    def __post_init__(self) -> None:
        if int(self.rollout_workers) < 1:
            raise ConfigError(f"config error at trainer.params.rollout_workers: must be >= 1, got "
                              f"{self.rollout_workers}")
        if self.on_worker_failure not in ("rerun", "drop"):
            raise ConfigError(f"config error at trainer.params.on_worker_failure: must be 'rerun' or 'drop', got "
                              f"{self.on_worker_failure!r}")
        if self.max_restarts < 0:
            raise ConfigError("config error at trainer.params.max_restarts: must be >= 0")

    @classmethod
    def from_params(cls, params: dict[str, Any] | None) -> "ClusterSettings":
        params = dict(params or {})
        valid = {f.name for f in fields(cls)}
        for key in params:
            if key not in valid:
                raise ConfigError(f"config error at trainer.params.{key}: unknown cluster setting"
                                  f"{suggest(key, valid)}; valid: {', '.join(sorted(valid))}")
        return cls(**params)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def init_ray(settings: ClusterSettings) -> bool:
    """Start or join Ray unless it is already initialised; returns True when this call initialised it."""
    import ray

    if ray.is_initialized():
        return False
    # Workers find the project's packages through the installed distributions, not the driver's sys.path.
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    if settings.address:
        ray.init(address=settings.address, namespace=settings.namespace, log_to_driver=True)
    else:
        ray.init(num_cpus=settings.num_cpus or os.cpu_count() or 1, include_dashboard=False,
                 object_store_memory=int(settings.object_store_mb) * 1024 * 1024,
                 namespace=settings.namespace, log_to_driver=True)
    return True
