"""``run(cfg)``: check every selected component before anything heavy loads, then hand the run to the trainer.

All names are resolved, all values and component params validated and the light components built once up front
(``preflight``), and the run directory is checked (writable, ``trainer.min_free_gb`` free, not holding another run:
``lifecycle.run_dir``), so a typo, a missing data file or a full disk fails in seconds with one line, not after the
model has loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentr1_core.plugins import configure_registry


def _missing_dirs(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, deepest first."""
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    return missing


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:
        try:
            folder.rmdir()  # only when empty
        except OSError:
            return


def run(cfg: DictConfig, overwrite: bool = False) -> Any:
    """Check everything (``preflight``), prepare the run directory (``lifecycle.run_dir``), then train. A first
    SIGTERM or SIGINT stops the run after the current iteration, with a checkpoint."""
    from agentr1_core.lifecycle.checkpoint import check_run_dir
    from agentr1_core.lifecycle.memory import set_mmap_threshold
    from agentr1_core.lifecycle.run_dir import prepare_run_dir
    from agentr1_core.lifecycle.stop import GracefulStop
    from agentr1_core.preflight import preflight

    set_mmap_threshold(int(cfg.trainer.mmap_threshold_kb))  # before anything large is allocated
    registry = configure_registry(cfg.plugins.allow, cfg.plugins.block)
    created = _missing_dirs(Path(str(cfg.run_dir)))
    try:
        check_run_dir(cfg.run_dir, int(float(cfg.trainer.min_free_gb) * 1024 ** 3))  # unwritable / full: fail now
        # the rows checked here are the rows the training loop trains on, when it runs in this process
        name = str(cfg.trainer.name)
        in_actor = name == "ray" and OmegaConf.select(cfg, "trainer.params.trainer_in_actor", default=True)
        in_process = name in ("local", "verl") or (name == "ray" and not in_actor)
        preflight(cfg, registry, keep_rows=in_process)
        prepare_run_dir(cfg, overwrite=overwrite)
    except BaseException:
        _remove_empty(created)  # a refused run leaves no trace
        raise
    trainer = registry.load("trainer", cfg.trainer.name)(config=cfg, registry=registry)
    with GracefulStop() as stop:
        if isinstance(getattr(trainer, "callbacks", None), list):
            trainer.callbacks.append(stop)
        return trainer.fit()
