"""One run per run directory: the rule ``agentr1-core run`` applies before training, and the saved config.

* A fresh run (no ``--resume``) needs an empty or absent ``run_dir``. A directory that already holds files is
  refused with one line (exit code 2) unless ``--overwrite`` is given, which deletes the previous run's files
  (``metrics.jsonl``, ``tb/``, ``checkpoints/``, ``summary.json``, ``config.yaml``, ``curves.png``, ``episodes/``,
  ``eval_*.json`` and ``eval_*.episodes.jsonl``) first; other files are left alone.
* ``--resume`` (``trainer.resume=auto``) needs a complete checkpoint in ``run_dir``; without one it is refused with
  one line instead of silently starting over.
* The resolved config is written to ``run_dir/config.yaml`` (atomically), so ``agentr1-core eval RUN_DIR`` and
  ``export RUN_DIR OUT`` need nothing retyped.

Two runs therefore never write into one ``metrics.jsonl``, and ``latest`` always means a checkpoint of this run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from agentr1_core.lifecycle.checkpoint import latest_checkpoint
from agentr1_core.plugins import PluginError

CONFIG_FILE = "config.yaml"
VERL_STATE_FILE = "agentr1_state.json"  # the verl trainer's state file, written last into verl_iter_N
RUN_FILES = ("metrics.jsonl", "tb", "checkpoints", "summary.json", CONFIG_FILE, "curves.png", "episodes")


class RunDirInUseError(PluginError):
    """A run directory that already holds another run (one line, exit code 2)."""


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
