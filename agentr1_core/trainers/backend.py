"""What a training backend provides to the one training loop (``agentr1_core.trainers.loop``).

The loop owns everything that is the same on every backend: data order and epochs, the stages, validation, the
checkpoint cadence, resume, stops, metrics, episode files and the summary. A backend owns where the models live and
how episodes are generated and weights updated: ``local`` (this process), ``ray`` (the local update, rollouts on Ray
workers) and ``verl`` (verl's FSDP workers). It implements the methods of ``Backend`` and nothing else. With
``trainer.max_staleness`` > 0 (``trainers.pipeline``) ``rollout`` and ``publish_weights`` run on a second thread,
beside ``rl_update`` on the loop's, so a backend keeps the weights its rollouts sample apart from the ones it
updates.

``RunInputs`` is what the loop hands the backend when it builds: the config, the registry, the algorithm and the
dataset rows the loop already built (a backend never reads the datasets again).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence, runtime_checkable

from agentr1_core.mdp import Trajectory
from agentr1_core.rollout.base import SamplingParams


@dataclass
class RunInputs:
    config: Any
    registry: Any
    run_dir: Path
    algorithm: Any
    train_rows: list[dict[str, Any]]
    val_rows: list[dict[str, Any]]


@runtime_checkable
class Backend(Protocol):
    """The members the loop uses, methods in the order it calls them. The loop reaches nothing else of a backend
    (the conformance suite checks both: ``tests/distributed/test_backend_conformance.py``)."""

    #: where the trained tensors live (``cpu``, ``cuda``, ``cuda:1``); set by ``__init__``, final after ``build``.
    #: Off the CPU the loop lists ``memory_parts`` beside the device's peaks instead of inside the host's.
    device: str

    def build(self, run: RunInputs) -> str:
        """Load the models, start engines and workers; return one line for the ``[setup]`` message."""

    def rollout(self, rows: Sequence[dict[str, Any]], n: int, sampling: SamplingParams, *, policy: str = "model",
                desc: str = "rollout", prefix: str = "", greedy_baseline: bool = False) -> list[Trajectory]:
        """``n`` episodes per row, each through the configured flow (``policy="expert"`` replays the rows' experts).
        Episode uids start with ``prefix``. ``greedy_baseline`` (asked only by algorithms that need it, ReMax) adds
        one greedy episode per row, uid ``<group>/greedy`` (``rollout.driver``)."""

    def sft_update(self, steps: Any) -> dict[str, Any]:
        """Cross-entropy on the response tokens of expert step rows (``batching.StepRows``); returns metrics."""

    def start_rl(self, after_sft: bool) -> None:
        """Called once before the first RL iteration (e.g. the KL reference is taken from the policy here)."""

    def rl_update(self, steps: Any, trajectories: list[Trajectory], iteration: int) -> dict[str, Any]:
        """Scores, advantages (through the run's algorithm) and the policy (+ critic) update of one rollout batch.
        The metrics include ``onpolicy/*``: the first micro-batch's values before any optimizer step."""

    def snapshot_weights(self) -> Any:
        """A copy of the weights the rollouts need, taken right after an update (``trainer.max_staleness`` > 0:
        the next update may start before the snapshot is published). What was measured while taking it comes from
        ``take_snapshot_metrics``."""

    def take_snapshot_metrics(self) -> dict[str, Any]:
        """Metrics of the last ``snapshot_weights`` (verl: ``weight_change``, the gather time), once; ``{}`` when
        nothing was measured."""

    def publish_weights(self, snapshot: Any = None) -> dict[str, Any]:
        """Make ``snapshot`` (default: the current weights) the one the next rollout samples from; never called
        while a rollout runs. Returns metrics (seconds taken)."""

    def take_stats(self) -> dict[str, Any]:
        """Counters since the last call (engine prefix cache, ``dist/*`` worker counters); ``{}`` when none."""

    def memory_parts(self) -> dict[str, float]:
        """MiB of what the backend holds in this process, by part (weights, optimizer, gradients, activations, KV
        buffers, ...), measured on its tensors after each phase; ``{}`` when its models live in other processes
        (which the loop counts as child processes)."""

    def save_checkpoint(self, run_dir: Path, iteration: int, loop_state: dict[str, Any], metrics_offset: int) -> Path:
        """Write a complete checkpoint of iteration ``iteration`` atomically, with the loop's state in it."""

    def release_optimizer_state(self) -> None:
        """Free the optimizer's state once training is over and saved: only the last validation follows."""

    def load_latest_checkpoint(self, run_dir: Path) -> tuple[Path, dict[str, Any], int] | None:
        """Restore the newest complete checkpoint; returns (its path, the loop state saved in it, the metrics offset)
        or None when there is none."""

    def close(self) -> None:
        """Stop engines and workers; safe to call twice and after a failed ``build``."""
