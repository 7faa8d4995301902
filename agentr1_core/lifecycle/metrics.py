"""Metrics sinks: one JSON object per iteration in ``metrics.jsonl``, TensorBoard scalars, and W&B when installed
and asked for (``AGENTR1_WANDB_PROJECT``); plus the one readable console line per iteration.

``MetricsLogger`` is a trainer callback (``on_iteration_end(trainer, metrics)``); ``close()`` flushes everything.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

CONSOLE_KEYS = (
    ("reward/mean", "reward", "{:.3f}"), ("success/rate", "success", "{:.2f}"), ("val/success/rate", "val", "{:.2f}"),
    ("loss/policy", "loss", "{:.4f}"), ("kl", "kl", "{:.4f}"), ("grad_norm", "gnorm", "{:.2f}"),
    ("throughput/rollout_tok_s", "roll tok/s", "{:.0f}"), ("throughput/update_tok_s", "upd tok/s", "{:.0f}"),
    ("time/iteration_s", "s", "{:.1f}"),
)


def _scalar(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def console_line(step: int, metrics: dict[str, Any]) -> str:
    parts = [f"iter {step:>4}"]
    for key, label, fmt in CONSOLE_KEYS:
        if _scalar(metrics.get(key)) is not None:
            parts.append(f"{label} {fmt.format(metrics[key])}")
    return " | ".join(parts)


class MetricsLogger:
    """Writes every iteration's metrics to ``<run_dir>/metrics.jsonl`` and TensorBoard (``<run_dir>/tb``)."""

    def __init__(self, run_dir: str | os.PathLike, tensorboard: bool = True, wandb_project: str | None = None,
                 config: dict[str, Any] | None = None) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(Path(run_dir) / "tb"))
            except ImportError:
                self.tb = None
        self.wandb = None
        project = wandb_project or os.environ.get("AGENTR1_WANDB_PROJECT")
        if project:
            try:
                import wandb

                self.wandb = wandb.init(project=project, config=config, dir=str(run_dir))
            except ImportError:
                self.wandb = None

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, **metrics}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        scalars = {k: v for k, v in ((k, _scalar(v)) for k, v in metrics.items()) if v is not None}
        if self.tb is not None:
            for key, value in scalars.items():
                self.tb.add_scalar(key, value, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(scalars, step=step)

    def on_iteration_end(self, trainer: Any, metrics: dict[str, Any]) -> None:
        self.log(int(metrics.get("iteration", getattr(trainer, "iteration", 0))), metrics)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of ``metrics.jsonl`` (a torn last line from a killed run is skipped)."""
    path = Path(run_dir) / "metrics.jsonl"
    records = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records
