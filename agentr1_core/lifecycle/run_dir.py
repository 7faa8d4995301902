"""One run per run directory: the rule ``agentr1-core run`` applies before training, and the saved config.

* A fresh run (no ``--resume``) needs an empty or absent ``run_dir``. A directory that already holds files is
  refused with one line (exit code 2) unless ``--overwrite`` is given, which deletes the previous run's files
  (``metrics.jsonl``, ``tb/``, ``checkpoints/``, ``summary.json``, ``config.yaml``, ``curves.png``, ``episodes/``,
  ``errors.log``, ``view.html``, ``trackers.json``, ``wandb/``, ``mlruns/``, ``eval_*.json`` and
  ``eval_*.episodes.jsonl``) first; other files are left alone.
* ``--resume`` (``trainer.resume=auto``) needs a complete checkpoint in ``run_dir``; without one it is refused with
  one line instead of silently starting over. The run's saved ``config.yaml`` is the config of a resumed run
  (``resume_config``): a config that differs from it is refused with the keys that differ, except the keys in
  ``RESUMABLE`` (how long the run goes, how it checkpoints and validates): given on the command line they are
  applied and logged; otherwise the saved values stay (also logged). ``agentr1-core run RUN_DIR --resume`` resumes
  with the saved config itself.
* The resolved config is written to ``run_dir/config.yaml`` (atomically), so ``agentr1-core eval RUN_DIR`` and
  ``export RUN_DIR OUT`` need nothing retyped.

Two runs therefore never write into one ``metrics.jsonl``, and ``latest`` always means a checkpoint of this run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentr1_core.errors import ResumeMismatch, RunDirInUseError
from agentr1_core.lifecycle.checkpoint import latest_checkpoint

CONFIG_FILE = "config.yaml"
VERL_STATE_FILE = "agentr1_state.json"  # the verl trainer's state file, written last into verl_iter_N
RUN_FILES = ("metrics.jsonl", "tb", "checkpoints", "summary.json", CONFIG_FILE, "curves.png", "episodes", "errors.log",
             "view.html", "reference_model",  # reference_model: the verl backend's KL reference after SFT
             "trackers.json", "wandb", "mlruns")  # the trackers' state, W&B's and MLflow's files (lifecycle.trackers)


# What a resumed run may change: how long it goes and how it checkpoints, validates and uses the machine. Everything
# else (model, env, data, reward, algorithm, sizes, seed) must match the run's saved config.
RESUMABLE = ("trainer.total_steps", "trainer.checkpoint_every", "trainer.keep_checkpoints", "trainer.threads",
             "trainer.min_free_gb", "trainer.keep_train_episodes", "validation.every", "validation.max_rows",
             "plugins.allow", "plugins.block")
IGNORED_ON_RESUME = ("trainer.resume",)
_ABSENT = object()


def run_entries(run_dir: str | os.PathLike) -> list[str]:
    """Names of what ``run_dir`` holds (write probes excluded), sorted; [] when it does not exist."""
    path = Path(run_dir)
    if not path.is_dir():
        return []
    return sorted(p.name for p in path.iterdir() if not p.name.startswith(".write-probe-"))


def clear_previous_run(run_dir: str | os.PathLike) -> list[str]:
    """Delete the files a previous run wrote into ``run_dir``; returns the names removed."""
    path = Path(run_dir)
    removed = []
    for name in run_entries(path):
        if name in RUN_FILES or (name.startswith("eval_") and name.endswith((".json", ".episodes.jsonl"))):
            target = path / name
            shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()
            removed.append(name)
    return removed


def save_config(cfg: DictConfig, run_dir: str | os.PathLike) -> Path:
    """Write the resolved ``cfg`` to ``run_dir/config.yaml`` through a temporary file and a rename."""
    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{CONFIG_FILE}.", dir=path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(OmegaConf.to_yaml(cfg, resolve=True))
        os.replace(tmp, path / CONFIG_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path / CONFIG_FILE


def has_checkpoint(run_dir: str | os.PathLike) -> bool:
    """Whether ``run_dir`` holds a complete checkpoint of the local trainer (``step_N`` with its marker) or of the
    verl trainer (``verl_iter_N`` with its state file; ``.tmp`` folders are unfinished)."""
    return latest_checkpoint(run_dir) is not None or bool(verl_checkpoint_dirs(run_dir))


def verl_checkpoint_dirs(run_dir: str | os.PathLike) -> list[Path]:
    """The verl trainer's complete checkpoints in ``run_dir``, oldest first."""
    root = Path(run_dir) / "checkpoints"
    done = [p for p in root.glob("verl_iter_*") if (p / VERL_STATE_FILE).is_file() and not p.name.endswith(".tmp")]
    return sorted(done, key=lambda p: int(p.name.rsplit("_", 1)[-1]))


def prepare_run_dir(cfg: DictConfig, overwrite: bool = False) -> None:
    """Apply the rule above to ``cfg.run_dir`` (raise ``RunDirInUseError``), then save the config there."""
    run_dir = str(cfg.run_dir)
    resume = str(cfg.trainer.resume) == "auto"
    if resume and overwrite:
        raise RunDirInUseError("--resume and --overwrite exclude each other: continue the run or replace it")
    entries = run_entries(run_dir)
    if resume:
        if not has_checkpoint(run_dir):
            raise RunDirInUseError(
                f"nothing to resume: run_dir {run_dir} has no complete checkpoint; run without --resume"
                + (" (add --overwrite to replace what is there)" if entries else ""))
    elif entries:
        if not overwrite:
            shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
            raise RunDirInUseError(
                f"run_dir {run_dir} is not empty ({shown}); pass --resume to continue that run, --overwrite to "
                f"replace it, or set run_dir=... to a new folder")
        removed = clear_previous_run(run_dir)
        if removed:
            print(f"[run_dir] {run_dir}: removed the previous run ({', '.join(removed)})", flush=True)
    save_config(cfg, run_dir)


def saved_config(path: str | os.PathLike) -> Path | None:
    """``path/config.yaml`` when ``path`` is a run directory that saved its config, else None."""
    candidate = Path(path) / CONFIG_FILE
    return candidate if Path(path).is_dir() and candidate.is_file() else None


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a.b.c": leaf}`` for nested dicts; lists and scalars are leaves."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out or {prefix[:-1]: {}}
    return {prefix[:-1]: node}


def _under(key: str, roots: tuple[str, ...] | set[str]) -> bool:
    return any(key == r or key.startswith(r + ".") for r in roots)


def _short(value: Any) -> str:
    text = "(absent)" if value is _ABSENT else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def resume_config(cfg: DictConfig, explicit: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """The config a resumed run uses: the run's saved ``config.yaml``, plus the ``RESUMABLE`` keys the command line
    set (``explicit``: the override keys given). Raises ``ResumeMismatch`` naming the keys where ``cfg`` differs
    from the saved config elsewhere. A run directory without a saved config returns ``cfg`` unchanged."""
    run_dir = str(cfg.run_dir)
    path = saved_config(run_dir)
    if path is None:
        return cfg
    saved = _flatten(OmegaConf.to_container(OmegaConf.load(path), resolve=True))
    now = _flatten(OmegaConf.to_container(cfg, resolve=True))
    given = {k.partition("=")[0] for k in explicit}
    differ = sorted(k for k in set(saved) | set(now)
                    if saved.get(k, _ABSENT) != now.get(k, _ABSENT) and not _under(k, IGNORED_ON_RESUME))
    refused = sorted((k for k in differ if not _under(k, RESUMABLE)), key=lambda k: not k.endswith(".name"))
    if refused:
        shown = ", ".join(f"{k} (saved {_short(saved.get(k, _ABSENT))}, now {_short(now.get(k, _ABSENT))})"
                          for k in refused[:4])
        more = f" and {len(refused) - 4} more" if len(refused) > 4 else ""
        raise ResumeMismatch(
            f"--resume: the config differs from the run's saved {path} at {shown}{more}; resume it with its own "
            f"config (agentr1-core run {run_dir} --resume), or start a new run (another run_dir, or --overwrite)")
    out = cfg.copy()
    for key in differ:
        old, new = saved.get(key, _ABSENT), now.get(key, _ABSENT)
        if any(_under(key, {g}) or _under(g, {key}) for g in given):
            print(f"[resume] {key}: {_short(old)} -> {_short(new)} (from the command line)", flush=True)
        else:
            if old is _ABSENT:
                continue
            OmegaConf.update(out, key, old, merge=False)
            print(f"[resume] {key}: keeping the run's {_short(old)} (the config given says {_short(new)})",
                  flush=True)
    return out
