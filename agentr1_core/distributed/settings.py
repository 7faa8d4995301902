"""Cluster settings of the distributed trainers, read from ``trainer.params``, the memory plan that fills the
GPU-dependent ones, and a guarded ``ray.init``.

Everything is optional; the defaults fit one machine::

    trainer:
      name: ray
      params:
        placement: auto           # auto | colocated | separate: where rollout engines sit relative to the trainer
        rollout_workers: null     # Ray actors, each with its own engine and env pool (null: from the memory plan)
        address: null             # null: start a local Ray; "auto" or "HOST:PORT": join a running cluster
        num_cpus: null            # logical CPUs of a local Ray (null: all cores)
        object_store_mb: 1024     # object store of a local Ray (weights travel through it)
        worker_cpus: 1.0          # logical CPUs reserved per rollout worker
        worker_gpus: null         # Ray GPUs per rollout worker (null: from the memory plan)
        worker_threads: 1         # torch threads inside each rollout worker
        trainer_gpus: null        # Ray GPUs of the ray trainer's actor (null: from the memory plan)
        trainer_in_actor: true    # run the trainer in a Ray actor (false: in the driver process)
        max_restarts: 3           # restarts of a dead rollout worker before it is given up
        on_worker_failure: rerun  # rerun | drop: what happens to the episodes of a worker that died
        rollout_timeout_s: 0      # > 0: a worker that holds a chunk longer is killed (and restarted)
        namespace: agentr1        # Ray namespace of the named actors ("<run name>-rollout-<i>")

Unknown keys are an error naming the valid ones. This module imports ray only inside ``init_ray``.

The memory plan (``memory_plan(gpus, trainer, placement)``) turns the cluster's GPU count into the settings left
``null`` and into the vLLM engine's ``gpu_memory_utilization`` / ``enable_sleep_mode`` when the config does not set
them (``RolloutPool`` applies it; explicit values always win):

* no GPU: 2 CPU rollout workers, as before;
* one GPU (``placement: auto`` -> colocated): ONE rollout engine on GPU 0 next to the trainer, holding
  ``COLOCATED_ENGINE_FRACTION`` (0.4) of its memory and sleeping (sleep mode, level 1) while the trainer updates, so
  that the trainer keeps 60 % of the GPU during rollouts and nearly all of it during the update;
* N >= 2 GPUs (auto -> separate): engines on GPUs of their own (``SEPARATE_ENGINE_FRACTION``, 0.85, no sleep);
  ``ray`` trainer: 1 trainer GPU and N-1 engines; ``verl``: N//2 engines and N - N//2 GPUs for the FSDP actor;
* ``placement: colocated`` on N GPUs: one engine per GPU next to the trainer's shard (fraction 0.4, sleep mode).

With ``verl`` colocated, verl's resource pool reserves whole GPUs; the engines then reserve no Ray GPU and are pinned
to a GPU through ``CUDA_VISIBLE_DEVICES`` (one node).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from agentr1_core.errors import ConfigError, suggest


PLACEMENTS = ("auto", "colocated", "separate")
COLOCATED_ENGINE_FRACTION = 0.4  # an engine's share of a GPU it shares with the trainer (weights + KV cache)
SEPARATE_ENGINE_FRACTION = 0.85  # an engine's share of a GPU of its own
CPU_ROLLOUT_WORKERS = 2


@dataclass(frozen=True)
class MemoryPlan:
    """Where the rollout engines and the trainer go, derived from the GPU count (see the module docstring)."""

    gpus: int
    placement: str  # cpu | colocated | separate
    rollout_workers: int
    worker_gpus: float  # Ray GPUs reserved per rollout worker
    trainer_gpus: float  # the ray trainer's actor GPUs; for verl, the FSDP actor group's GPU count
    engine_fraction: float | None  # vLLM gpu_memory_utilization of each engine (None: no GPU)
    sleep_mode: bool  # engines sleep while the trainer updates on their GPU
    pin_devices: bool  # engines reserve no Ray GPU: each gets CUDA_VISIBLE_DEVICES=<worker index % gpus>

    def engine_defaults(self) -> dict[str, Any]:
        """Engine parameters this plan sets where the config leaves them out (vLLM only)."""
        if self.engine_fraction is None:
            return {}
        return {"gpu_memory_utilization": self.engine_fraction, "enable_sleep_mode": self.sleep_mode}

    def worker_env(self, worker_index: int) -> dict[str, str]:
        """Environment of rollout worker ``worker_index``'s process (device pinning outside Ray's reservations)."""
        if not self.pin_devices:
            return {}
        return {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
                "CUDA_VISIBLE_DEVICES": str(worker_index % self.gpus)}

    def describe(self) -> str:
        if self.placement == "cpu":
            return f"no GPU: {self.rollout_workers} CPU rollout workers"
        return (f"{self.gpus} GPU(s), {self.placement}: {self.rollout_workers} rollout engine(s) x "
                f"{self.worker_gpus:g} Ray GPU at gpu_memory_utilization={self.engine_fraction:g}"
                f"{' with sleep mode' if self.sleep_mode else ''}; trainer {self.trainer_gpus:g} GPU(s)")


def memory_plan(gpus: int, trainer: str = "ray", placement: str = "auto") -> MemoryPlan:
    """The memory plan for ``gpus`` GPUs in the cluster and trainer ``ray`` or ``verl`` (see the module docstring)."""
    if placement not in PLACEMENTS:
        raise ConfigError(f"config error at trainer.params.placement: must be one of {', '.join(PLACEMENTS)}, got "
                          f"{placement!r}")
    gpus = int(gpus)
    if gpus <= 0:
        return MemoryPlan(0, "cpu", CPU_ROLLOUT_WORKERS, 0.0, 0.0, None, False, False)
    if placement == "auto":
        placement = "colocated" if gpus == 1 else "separate"
    if placement == "colocated":
        frac = COLOCATED_ENGINE_FRACTION
        if trainer == "verl":  # verl's pool reserves whole GPUs: the engines share them without a Ray reservation
            return MemoryPlan(gpus, "colocated", gpus, 0.0, float(gpus), frac, True, True)
        # ray trainer: one trainer actor; every GPU gets one engine, GPU 0 also the trainer (Ray fractions)
        return MemoryPlan(gpus, "colocated", gpus, frac, round(1.0 - frac, 6), frac, True, False)
    if gpus < 2:
        raise ConfigError("config error at trainer.params.placement: 'separate' needs at least 2 GPUs (one for the "
                          "rollout engine, one for the trainer); this cluster has 1")
    engines = gpus - 1 if trainer != "verl" else gpus // 2
    return MemoryPlan(gpus, "separate", engines, 1.0, float(gpus - engines), SEPARATE_ENGINE_FRACTION, False, False)


@dataclass
class ClusterSettings:
    rollout_workers: int | None = None
    address: str | None = None
    num_cpus: int | None = None
    object_store_mb: int = 1024
    worker_cpus: float = 1.0
    worker_gpus: float | None = None
    worker_threads: int = 1
    trainer_gpus: float | None = None
    placement: str = "auto"
    trainer_in_actor: bool = True
    max_restarts: int = 3
    on_worker_failure: str = "rerun"
    rollout_timeout_s: float = 0.0
    namespace: str = "agentr1"

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"config error at trainer.params.placement: must be one of {', '.join(PLACEMENTS)}, "
                              f"got {self.placement!r}")
        if self.rollout_workers is not None and int(self.rollout_workers) < 1:
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

    def resolved(self, plan: MemoryPlan) -> "ClusterSettings":
        """A copy whose ``null`` GPU-dependent settings come from ``plan``."""
        out = replace(self)
        if out.rollout_workers is None:
            out.rollout_workers = plan.rollout_workers
        if out.worker_gpus is None:
            out.worker_gpus = plan.worker_gpus
        if out.trainer_gpus is None:
            out.trainer_gpus = plan.trainer_gpus if plan.placement != "cpu" else 0.0
        return out


def cluster_gpus() -> int:
    """GPUs of the running Ray cluster (all nodes)."""
    import ray

    return int(ray.cluster_resources().get("GPU", 0))


def plan_engine_config(config: dict[str, Any], plan: MemoryPlan) -> dict[str, Any]:
    """``config`` with the plan's engine defaults added to a ``vllm`` engine's section (explicit values kept)."""
    engine = dict(config.get("engine") or {})
    if engine.get("name") != "vllm":
        return config
    for key, value in plan.engine_defaults().items():
        if engine.get(key) is None:
            engine[key] = value
    return {**config, "engine": engine}


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
