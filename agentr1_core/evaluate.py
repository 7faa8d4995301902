"""``agentr1-core eval CONFIG|RUN_DIR [key=value ...] [--checkpoint PATH|latest | --model MODEL] [--rows ROWS]
[--attempts K] [--out FILE]``: validation only.

Given a run directory, it uses the config the run saved there (``config.yaml``) and, unless told otherwise, the
run's latest checkpoint; it says which checkpoint it used.

Checks the config as ``run`` does (every problem at once, exit 2); a config read from a run directory names code
only as ``run RUN_DIR`` allows (``agentr1_core.trust``: shown, and refused outside the installed packages unless
``--trust-code``), and the checkpoint's state loads as data only. Builds the run's components exactly as the
local trainer does, loads the weights of a checkpoint (``latest``: the newest complete one in the config's
``run_dir``; omitted: the configured model as it is), runs ``validation.n``
episodes per ``data.val`` row (``validation.temperature``, greedy by default) and writes a JSON report: mean reward,
success rate, steps, termination reasons and tool errors, overall and per ``data_source``, plus the means of every
numeric per-episode metric a reward or env put in ``Trajectory.metrics`` (EM, F1, score, ...), and pass@k for
k = 1, 2, 4, ... up to the attempts per row with mean@K (``agentr1_core.pass_at_k``), which it also prints as a
table per data source.

What it evaluates can come from the command line instead of the config:

* ``--model``: a checkpoint folder or a run folder (its latest checkpoint), on the model it was trained from (the
  checkpoint's ``model_path`` and LoRA settings; its state loads as data only, and the run folder's config is not
  read); else a model folder, a Hugging Face id or the offline alias, as ``model.path``.
* ``--rows``: a JSONL rows file, or ``hf:PATH[:SUBSET]:SPLIT`` (a ``datasets`` dataset, the ``hf`` dataset) whose
  columns ``--field KEY=COLUMN`` maps to row keys; it replaces ``data.val`` and every row is evaluated
  (``validation.max_rows=N`` on the command line still caps them). Its rows are checked like every other.
* ``--attempts K``: K episodes per row (``validation.n``); more than one needs ``validation.temperature`` > 0.

Next to the report, ``<report>.episodes.jsonl`` keeps what the agent did (task, actions, feedback, reward per
episode; the uid ``eval-<row>/<attempt>``). It trains nothing and writes nothing into the run directory except
these two files (when the report goes there: by default ``RUN_DIR/eval_<checkpoint>[_<rows>].json``, the run
directory being that of the ``--model`` checkpoint when one is given).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

from agentr1_core.errors import CheckpointMismatch, ConfigError
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
    state is read (as data only) before anything is built. Every row is tried ``validation.n`` times: the report
    has pass@k and mean@K over those attempts (``pass_at_k.attempt_metrics``)."""
    from omegaconf import OmegaConf

    from agentr1_core.lifecycle.trainer_state import load_weights
    from agentr1_core.pass_at_k import attempt_metrics
    from agentr1_core.trainers.metrics import validation_metrics

    cfg.trainer.resume = "never"
    ckpt = resolve_checkpoint(checkpoint, cfg.run_dir)
    state = load_state(ckpt) if ckpt is not None else {}
    attempts = int(cfg.validation.n)
    trainer = eval_trainer(cfg, registry, rows)
    try:
        trainer.setup()
        if not trainer.val_rows:
            raise FileNotFoundError("the config has no validation rows (set data.val)")
        if ckpt is not None:
            load_weights(trainer.backend.policy.model, ckpt / "model")
            trainer.backend.publish_weights()
        trajs, seconds = trainer.rollout(trainer.val_rows, attempts, trainer.val_sampling,
                                         desc="eval", prefix="eval-")
        result = validation_metrics(trajs)
        by_attempts = attempt_metrics(trajs, attempts)
        for source, values in by_attempts.pop("by_source").items():
            result["by_source"].setdefault(source, {}).update(values)
        result.update(by_attempts)
        tokens = sum(len(s.response_ids) for t in trajs for s in t.steps)
        result.update(steps_per_episode=sum(t.num_steps for t in trajs) / max(1, len(trajs)),
                      tokens_generated=tokens, seconds=seconds)
        if episodes is not None:
            episodes.extend(trajs)
        return {"checkpoint": str(ckpt) if ckpt is not None else None,
                "iteration": (state.get("loop") or {}).get("iteration"), "model_path": str(cfg.model.path),
                "data": OmegaConf.to_container(cfg.data.val, resolve=True),
                "episodes": len(trajs), "n_per_row": attempts, "attempts": attempts,
                "temperature": float(cfg.validation.temperature), **result}
    finally:
        trainer.close()


# -- what the command line names instead of the config ----------------------------------------------------------------

def rows_config(spec: str, fields: list[str] | None = None) -> dict[str, Any]:
    """``data.val`` for ``--rows SPEC``: a JSONL file, or ``hf:PATH[:SUBSET]:SPLIT`` with ``fields``
    (``KEY=COLUMN`` each) mapping the dataset's columns to row keys."""
    fields = list(fields or [])
    if not spec.startswith("hf:"):
        if fields:
            raise ConfigError(f"--field maps the columns of a dataset given as --rows hf:PATH[:SPLIT]; the rows of "
                              f"{spec} are used as they are (each line a row)")
        return {"name": "jsonl", "path": spec}
    parts = spec[len("hf:"):].split(":")
    if not parts[0] or len(parts) > 3 or any(not p for p in parts[1:]):
        raise ConfigError(f"--rows {spec}: write hf:PATH, hf:PATH:SPLIT or hf:PATH:SUBSET:SPLIT (PATH a saved "
                          f"dataset folder, a data file or folder, or a Hugging Face dataset name)")
    path, subset, split = parts[0], parts[1] if len(parts) == 3 else "", parts[-1] if len(parts) > 1 else ""
    mapping: dict[str, str] = {}
    for item in fields:
        key, sep, column = item.partition("=")
        if not sep or not key.strip() or not column.strip():
            raise ConfigError(f"--field {item!r} is not KEY=COLUMN (a row key, then the dataset column it takes: "
                              f"--field prompt=question --field ground_truth=answer)")
        mapping[key.strip()] = column.strip()
    return {"name": "hf", "path": path, "subset": subset, "split": split, "fields": mapping}


def _lora_settings(ckpt: Path) -> tuple[dict[str, Any], int]:
    """``model.lora`` and ``trainer.train_layers`` (the top layers that carry the adapter; 0: all) for the LoRA
    adapter of checkpoint ``ckpt``, from its ``adapter_config.json`` (read as JSON)."""
    found = json.loads((ckpt / "model" / "adapter_config.json").read_text(encoding="utf-8"))
    settings: dict[str, Any] = {"enabled": True}
    for ours, theirs in (("r", "r"), ("alpha", "lora_alpha"), ("dropout", "lora_dropout")):
        if found.get(theirs) is not None:
            settings[ours] = found[theirs]
    modules = found.get("target_modules")
    if modules:
        settings["target_modules"] = sorted(modules) if not isinstance(modules, str) else [modules]
    layers = found.get("layers_to_transform")
    return settings, len(layers) if isinstance(layers, list) else (1 if isinstance(layers, int) else 0)


def model_choice(spec: str) -> tuple[Path | None, dict[str, Any]]:
    """What ``--model SPEC`` evaluates: ``(checkpoint, model settings)``. A run folder gives its latest checkpoint, a
    checkpoint folder itself, each with the model it was trained from (``model_path`` of its state, which loads as
    data only; a LoRA adapter's settings and layers from its ``adapter_config.json``); anything else is a
    ``model.path`` (a model folder, a Hugging Face id or the offline alias), which the run's checks check."""
    from agentr1_core.lifecycle.checkpoint import STATE_FILE, checkpoint_root
    from agentr1_core.lifecycle.run_dir import saved_config

    path = Path(spec).expanduser()
    if saved_config(path) is not None or checkpoint_root(path).is_dir():
        ckpt = latest_checkpoint(path)
        if ckpt is None:
            raise FileNotFoundError(f"--model {spec}: no complete checkpoint under {checkpoint_root(path)}")
    elif (path / "model").is_dir() and (path / STATE_FILE).is_file():
        ckpt = path
    else:
        return None, {"path": spec}
    state = load_state(ckpt)
    if not state.get("model_path"):
        raise CheckpointMismatch(f"--model {spec}: {ckpt / STATE_FILE} does not say which model it was trained "
                                 f"from (no model_path); pass the config with --checkpoint {ckpt} instead")
    if not (ckpt / "model" / "adapter_config.json").is_file():
        return ckpt, {"path": str(state["model_path"]), "lora": {"enabled": False}}
    lora, train_layers = _lora_settings(ckpt)
    return ckpt, {"path": str(state["model_path"]), "lora": lora, "train_layers": train_layers}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "model"


def report_path(cfg: Any, report: dict[str, Any], model: str | None, rows: str | None) -> Path:
    """The default report: ``eval_<checkpoint, model or base>[_<rows>].json`` in the checkpoint's run directory
    (that of ``--model``'s checkpoint, else ``run_dir``)."""
    folder = Path(str(cfg.run_dir))
    if report["checkpoint"]:
        name = Path(report["checkpoint"]).name
        if model:
            folder = Path(report["checkpoint"]).parent.parent
    else:
        name = _slug(Path(model).name) if model else "base"
    if rows:  # data/val.jsonl -> val; hf:data/gsm8k:test -> gsm8k-test
        path, *parts = rows[len("hf:"):].split(":") if rows.startswith("hf:") else [rows]
        name += "_" + _slug("-".join([Path(path).stem, *parts]))
    return folder / f"eval_{name}.json"


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def command_line_choices(cfg: Any, args: argparse.Namespace, overrides: list[str]) -> tuple[str | None, list[str]]:
    """Apply ``--model``, ``--rows``/``--field`` and ``--attempts`` to ``cfg``; returns the checkpoint
    ``--model`` names (or None) and the problems found, for the run's checks to report with theirs."""
    from omegaconf import OmegaConf

    problems: list[str] = []
    checkpoint = None
    if args.model:
        if args.checkpoint:
            raise ConfigError("give --model or --checkpoint, not both (--model takes a checkpoint or run folder too)")
        ckpt, settings = model_choice(args.model)
        cfg.model.path = settings["path"]
        if "lora" in settings:
            cfg.model.lora = OmegaConf.merge(cfg.model.lora, settings["lora"])
        if "train_layers" in settings:  # the layers the adapter was put on (the trainer puts it on the top ones)
            cfg.trainer.train_layers = settings["train_layers"]
        checkpoint = str(ckpt) if ckpt is not None else None
    if args.rows:
        cfg.data.val = rows_config(args.rows, args.field)
        if not any(item.startswith("validation.max_rows=") for item in overrides):
            cfg.validation.max_rows = 0  # a rows file given to evaluate on: all of it
    elif args.field:
        raise ConfigError("--field maps the columns of a dataset given as --rows hf:PATH[:SPLIT]; give --rows too")
    if args.attempts is not None:
        cfg.validation.n = args.attempts
        temperature = _number(cfg.validation.temperature)
        if args.attempts > 1 and temperature is not None and temperature <= 0:
            problems.append(f"config error at validation.temperature: --attempts {args.attempts} needs sampling, "
                            f"but validation.temperature is {temperature:g} (greedy: every attempt would be the "
                            f"same); set validation.temperature=1.0, or --attempts 1")
    return checkpoint, problems


def cmd_eval(args: argparse.Namespace) -> int:
    from agentr1_core.components import code_refs
    from agentr1_core.config import config_from_items
    from agentr1_core.lifecycle.metrics import clean, write_episodes
    from agentr1_core.pass_at_k import table
    from agentr1_core.plugins import configure_registry
    from agentr1_core.preflight import preflight
    from agentr1_core.trust import check_code_refs

    given = config_from_items(args.items)
    cfg, checkpoint = given.cfg, args.checkpoint
    if given.run_folder is not None and not args.model:  # eval RUN_DIR: the run's config, run_dir, latest checkpoint
        checkpoint = checkpoint or "latest"
    chosen, problems = command_line_choices(cfg, args, given.overrides)
    checkpoint = chosen or checkpoint
    registry = configure_registry(cfg.plugins.allow, cfg.plugins.block)
    if given.run_folder is not None:
        check_code_refs(code_refs(cfg, registry, given.run_folder), given.run_folder, args.trust_code)
    checked = preflight(cfg, registry, problems=[*given.problems, *problems])
    t0 = time.perf_counter()
    trajs: list[Any] = []
    report = evaluate(cfg, registry, checkpoint, episodes=trajs, rows=checked.rows)
    print(f"[eval] checkpoint {report['checkpoint'] or 'none (the configured model as it is)'}; model "
          f"{report['model_path']}", flush=True)
    out = Path(args.out) if args.out else report_path(cfg, report, args.model, args.rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(clean(report), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    write_episodes(out.with_suffix(".episodes.jsonl"), trajs)
    print(table(report, report["attempts"]), flush=True)
    by = ", ".join(f"{k} {v['success_rate']:.3f}" for k, v in report["by_source"].items())
    print(f"[eval] success {report['success_rate']:.3f} reward {report['reward_mean']:.3f} on {report['cases']} "
          f"episodes ({by}) in {time.perf_counter() - t0:.0f}s -> {out}", flush=True)
    return 0


def _attempts(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("items", nargs="*", metavar="CONFIG_OR_RUN_DIR_OR_OVERRIDE")
    parser.add_argument("--checkpoint", default=None,
                        help="a checkpoint folder, or 'latest' in run_dir (default: the configured model as is; "
                             "for a RUN_DIR: latest)")
    parser.add_argument("--model", default=None,
                        help="a checkpoint or run folder (its latest checkpoint, on the model it was trained from), "
                             "or a model folder, Hugging Face id or smollm2-135m-instruct (as model.path)")
    parser.add_argument("--rows", default=None,
                        help="evaluate these rows instead of data.val, every one: a JSONL file, or "
                             "hf:PATH[:SUBSET]:SPLIT (a datasets dataset: saved folder, data file or folder, Hub name)")
    parser.add_argument("--field", action="append", default=[], metavar="KEY=COLUMN",
                        help="with --rows hf:...: the row key KEY (prompt, ground_truth, data_source, a.b) takes "
                             "the dataset column COLUMN; repeat for each")
    parser.add_argument("--attempts", type=_attempts, default=None, metavar="K",
                        help="episodes per row (validation.n; K > 1 needs validation.temperature > 0): pass@1, "
                             "pass@2, pass@4, ... up to K and mean@K per data source")
    parser.add_argument("--out", default=None,
                        help="JSON report path (default RUN_DIR/eval_<checkpoint>[_<rows>].json)")
    parser.add_argument("--trust-code", action="store_true",
                        help="import code that the run folder's config names outside the installed packages")
    parser.set_defaults(func=cmd_eval)
