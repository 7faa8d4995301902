"""``run(cfg)``: check every selected component before anything heavy loads, then hand the run to the trainer.

All names are resolved, all values and component params validated and the light components built once up front
(``preflight``), and the run directory is checked (writable, ``trainer.min_free_gb`` free, not holding another run:
``lifecycle.run_dir``), so a typo, a missing data file or a full disk fails in seconds with one line, not after the
model has loaded.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from agentr1_core.components import code_refs
from agentr1_core.plugins import configure_registry
from agentr1_core.trust import check_code_refs


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


def run(cfg: DictConfig, overwrite: bool = False, problems: list[str] | None = None,
        code_source: str | None = None, trust_code: bool = False) -> Any:
    """Check everything (``preflight``: ``problems`` are what loading the config already found), prepare the run
    directory (``lifecycle.run_dir``), then train. ``code_source``: the run folder the config came from (``run
    RUN_DIR``, ``--resume``): the code it names is shown and checked first (``trust``). A first SIGTERM or SIGINT
    stops the run after the current iteration, with a checkpoint."""
    from agentr1_core.lifecycle.checkpoint import RunDirError, check_run_dir
    from agentr1_core.lifecycle.run_dir import prepare_run_dir
    from agentr1_core.lifecycle.stop import GracefulStop
    from agentr1_core.memory import set_mmap_threshold
    from agentr1_core.preflight import preflight

    set_mmap_threshold(int(cfg.trainer.mmap_threshold_kb))  # before anything large is allocated
    registry = configure_registry(cfg.plugins.allow, cfg.plugins.block)
    if code_source is not None:
        check_code_refs(code_refs(cfg, registry, code_source), code_source, trust_code)
    created = _missing_dirs(Path(str(cfg.run_dir)))
    try:
        problems = list(problems or [])
        try:  # unwritable or full: reported with the other problems
            check_run_dir(cfg.run_dir, int(float(cfg.trainer.min_free_gb) * 1024 ** 3))
        except RunDirError as exc:
            problems.append(str(exc))
        checked = preflight(cfg, registry, problems=problems)
        prepare_run_dir(cfg, overwrite=overwrite)
    except BaseException:
        _remove_empty(created)  # a refused run leaves no trace
        raise
    factory = registry.load("trainer", cfg.trainer.name)
    extra = {"rows": checked.rows} if _accepts(factory, "rows") else {}  # the rows checked are the rows trained on
    trainer = factory(config=cfg, registry=registry, **extra)
    with GracefulStop() as stop:
        if isinstance(getattr(trainer, "callbacks", None), list):
            trainer.callbacks.append(stop)
        return trainer.fit()


def _accepts(factory: Any, name: str) -> bool:
    try:
        return name in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
