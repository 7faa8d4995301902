"""``agentr1-core eval CONFIG|RUN_DIR [key=value ...] --checkpoint PATH|latest [--out FILE]``: validation only.

Given a run directory, it uses the config the run saved there (``config.yaml``) and, unless told otherwise, the
run's latest checkpoint; it says which checkpoint it used.

Checks the config as ``run`` does (every problem at once, exit 2); a config read from a run directory names code
only as ``run RUN_DIR`` allows (``agentr1_core.trust``: shown, and refused outside the installed packages unless
``--trust-code``), and the checkpoint's state loads as data only. Builds the run's components exactly as the
local trainer does, loads the weights of a checkpoint (``latest``: the newest complete one in the config's
``run_dir``; omitted: the configured model as it is), runs ``validation.n``
episodes per ``data.val`` row (``validation.temperature``, greedy by default) and writes a JSON report: mean reward,
success rate, steps, termination reasons and tool errors, overall and per ``data_source``, plus the means of every
numeric per-episode metric a reward or env put in ``Trajectory.metrics`` (EM, F1, score, ...).

Next to the report, ``<report>.episodes.jsonl`` keeps what the agent did (task, actions, feedback, reward per
episode). It trains nothing and writes nothing into the run directory except these two files (when ``--out`` points
there).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from agentr1_core.lifecycle.checkpoint import latest_checkpoint, load_state


class _NoMetrics:
    def write(self, record: dict[str, Any]) -> None:
        return None

    def close(self) -> None:
        return None


def eval_trainer(cfg: Any, registry: Any, rows: dict[str, list[dict[str, Any]]] | None = None) -> Any:
    """The local trainer's setup and rollout, without resume, metric files or training (torch loads here, so that
    registering the command stays light)."""
    from agentr1_core.trainers.local import LocalTrainer

    class EvalTrainer(LocalTrainer):
        def make_writer(self) -> Any:
            return _NoMetrics()

    return EvalTrainer(cfg, registry, rows=rows)


def resolve_checkpoint(spec: str | None, run_dir: str | Path) -> Path | None:
    if spec in (None, "", "none"):
        return None
    if spec == "latest":
        found = latest_checkpoint(run_dir)
        if found is None:
            raise FileNotFoundError(f"no complete checkpoint under {Path(run_dir) / 'checkpoints'}")
        return found
    path = Path(spec)
    if not (path / "model").is_dir():
        raise FileNotFoundError(f"{path} is not a checkpoint folder (no model/ inside)")
    return path


def evaluate(cfg: Any, registry: Any, checkpoint: str | None = None, episodes: list[Any] | None = None,
             rows: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """Run validation with the weights of ``checkpoint``; returns the report (the trajectories are appended to
    ``episodes`` when given). ``rows``: the dataset rows the checks already read, by config key. The checkpoint's
    state is read (as data only) before anything is built."""
    from agentr1_core.lifecycle.trainer_state import load_weights
    from agentr1_core.trainers.metrics import validation_metrics

    cfg.trainer.resume = "never"
    ckpt = resolve_checkpoint(checkpoint, cfg.run_dir)
    state = load_state(ckpt) if ckpt is not None else {}
    trainer = eval_trainer(cfg, registry, rows)
    try:
        trainer.setup()
        if not trainer.val_rows:
            raise FileNotFoundError("the config has no validation rows (set data.val)")
        if ckpt is not None:
            load_weights(trainer.backend.policy.model, ckpt / "model")
            trainer.backend.publish_weights()
        trajs, seconds = trainer.rollout(trainer.val_rows, int(cfg.validation.n), trainer.val_sampling,
                                         desc="eval", prefix="eval-")
        result = validation_metrics(trajs)
        tokens = sum(len(s.response_ids) for t in trajs for s in t.steps)
        result.update(steps_per_episode=sum(t.num_steps for t in trajs) / max(1, len(trajs)),
                      tokens_generated=tokens, seconds=seconds)
        if episodes is not None:
            episodes.extend(trajs)
        return {"checkpoint": str(ckpt) if ckpt is not None else None,
                "iteration": (state.get("loop") or {}).get("iteration"), "model_path": str(cfg.model.path),
                "episodes": len(trajs), "n_per_row": int(cfg.validation.n),
                "temperature": float(cfg.validation.temperature), **result}
    finally:
        trainer.close()


def cmd_eval(args: argparse.Namespace) -> int:
    from agentr1_core.components import code_refs
    from agentr1_core.config import config_from_items
    from agentr1_core.lifecycle.metrics import clean, write_episodes
    from agentr1_core.plugins import configure_registry
    from agentr1_core.preflight import preflight
    from agentr1_core.trust import check_code_refs

    given = config_from_items(args.items)
    cfg, checkpoint = given.cfg, args.checkpoint
    if given.run_folder is not None:  # eval RUN_DIR: the run's own config, its run_dir, its latest checkpoint
        checkpoint = checkpoint or "latest"
    registry = configure_registry(cfg.plugins.allow, cfg.plugins.block)
    if given.run_folder is not None:
        check_code_refs(code_refs(cfg, registry, given.run_folder), given.run_folder, args.trust_code)
    checked = preflight(cfg, registry, problems=given.problems)
    t0 = time.perf_counter()
    trajs: list[Any] = []
    report = evaluate(cfg, registry, checkpoint, episodes=trajs, rows=checked.rows)
    print(f"[eval] checkpoint {report['checkpoint'] or 'none (the configured model as it is)'}", flush=True)
    name = Path(report["checkpoint"]).name if report["checkpoint"] else "base"
    out = Path(args.out) if args.out else Path(str(cfg.run_dir)) / f"eval_{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(clean(report), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    write_episodes(out.with_suffix(".episodes.jsonl"), trajs)
    by = ", ".join(f"{k} {v['success_rate']:.3f}" for k, v in report["by_source"].items())
    print(f"[eval] success {report['success_rate']:.3f} reward {report['reward_mean']:.3f} on {report['cases']} "
          f"episodes ({by}) in {time.perf_counter() - t0:.0f}s -> {out}", flush=True)
    return 0


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("items", nargs="*", metavar="CONFIG_OR_RUN_DIR_OR_OVERRIDE")
    parser.add_argument("--checkpoint", default=None,
                        help="a checkpoint folder, or 'latest' in run_dir (default: the configured model as is; "
                             "for a RUN_DIR: latest)")
    parser.add_argument("--out", default=None, help="JSON report path (default RUN_DIR/eval_<checkpoint>.json)")
    parser.add_argument("--trust-code", action="store_true",
                        help="import code that the run folder's config names outside the installed packages")
    parser.set_defaults(func=cmd_eval)
