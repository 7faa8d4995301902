"""``agentr1-core plot RUN_DIR``: PNG curves (reward, success, loss, throughput) from ``metrics.jsonl``."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentr1_core.lifecycle.metrics import read_metrics

PANELS = (
    ("reward", ("reward_mean", "val/reward_mean")),
    ("success rate", ("success_rate", "val/success_rate")),
    ("loss", ("loss", "policy_loss", "value_loss")),
    ("throughput (tok/s)", ("rollout_tok_s", "update_tok_s")),
)


def _series(records: list[dict], key: str) -> list[tuple[int, float]]:
    """(iteration, value) points of ``key``; ``val/...`` keys read the validation events."""
    if key.startswith("val/"):
        name = key[4:]
        rows = [r for r in records if r.get("event") == "validation"]
    else:
        name = key
        rows = [r for r in records if "event" not in r]
    return [(int(r.get("iteration") or 0), float(r[name])) for r in rows
            if isinstance(r.get(name), (int, float)) and not isinstance(r.get(name), bool)]


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    if not Path(run_dir).is_dir():
        raise FileNotFoundError(f"run directory not found: {run_dir}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(run_dir, warn=lambda line: print(f"[plot] {line}", flush=True))
    if not records:
        raise FileNotFoundError(f"no metrics in {Path(run_dir) / 'metrics.jsonl'}")
    out = Path(out) if out else Path(run_dir) / "curves.png"
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (title, keys) in zip(axes.flat, PANELS):
        for key in keys:
            points = _series(records, key)
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker="o", markersize=3, label=key)
        ax.set_title(title)
        ax.set_xlabel("iteration")
        if ax.lines:
            ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(Path(run_dir).resolve().name or str(run_dir))  # the run folder's name, not where it lives
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir")
    parser.add_argument("--out", default=None, help="PNG path (default RUN_DIR/curves.png)")
    parser.set_defaults(func=lambda args: print(plot_run(args.run_dir, args.out)) or 0)
