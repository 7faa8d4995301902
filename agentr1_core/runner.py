"""``run(cfg)``: check every selected component before anything heavy loads, then hand the run to the trainer.

All names are resolved, all values and component params validated and the light components built once up front
(``preflight``), and the run directory is checked (writable, ``trainer.min_free_gb`` free, not holding another run:
``lifecycle.run_dir``), so a typo, a missing data file or a full disk fails in seconds with one line, not after the
model has loaded.
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentr1_core.config import COMPONENT_KEYS, ConfigError, component
from agentr1_core.plugins import PluginError, Registry, configure_registry

# Parameters the framework passes itself (not from the config) to each kind of factory.
RESERVED = {"engine": {"model", "tokenizer"}, "agent_flow": {"ctx"}, "trainer": {"config", "registry"},
            "reward": {"trajectory", "traj", "row"}}  # a function-style reward gets these per call


def _validate(registry: Registry, kind: str, name: str, params: dict[str, Any], key: str) -> None:
    """``registry.validate`` with the key path in every message, and the distribution to install when a known
    component is missing."""
    from agentr1_core.preflight import missing_component_hint

    try:
        if kind == "trainer":
            registry.load("trainer", name)
        else:
            registry.validate(kind, name, params, key, reserved=RESERVED.get(kind, ()))
    except PluginError as exc:
        message = str(exc)
        if message.startswith("config error"):
            raise
        raise ConfigError(f"config error at {key}: {message}{missing_component_hint(kind, name, registry)}") from exc


def check_components(cfg: DictConfig, registry: Registry) -> None:
    """Raise a one-line error for an unknown component name or a bad parameter anywhere in ``cfg``. Names are
    looked up first (no imports), then each factory is imported and its params checked."""
    from agentr1_core.preflight import missing_component_hint

    for key, kind in COMPONENT_KEYS.items():
        if OmegaConf.select(cfg, key) is not None:
            name = str(OmegaConf.select(cfg, f"{key}.name"))
            try:
                registry.get(kind, name)
            except PluginError as exc:
                where = "trainer.name" if key == "trainer" else key
                raise ConfigError(f"config error at {where}: {exc}{missing_component_hint(kind, name, registry)}")
    for key, kind in COMPONENT_KEYS.items():
        if OmegaConf.select(cfg, key) is None:
            continue
        if key == "trainer":
            _validate(registry, "trainer", str(cfg.trainer.name), {}, "trainer.name")
            continue
        name, params = component(cfg, key)
        _validate(registry, kind, name, params, key)
    tools = OmegaConf.select(cfg, "env.tools")
    if tools is not None and not OmegaConf.is_list(tools):
        raise ConfigError("config error at env.tools: must be a list of tool names or {name: ..., ...} entries")
    for i, tool in enumerate(tools or []):
        node = {"name": tool} if isinstance(tool, str) else (
            OmegaConf.to_container(tool) if OmegaConf.is_config(tool) else tool)
        if not isinstance(node, dict) or not node.get("name"):
            raise ConfigError(f"config error at env.tools[{i}]: each tool needs a name")
        node = dict(node)
        _validate(registry, "tool", str(node.pop("name")), node, f"env.tools[{i}]")


def build_reward_fn(cfg: DictConfig, registry: Registry) -> Any:
    """The configured reward as a callable ``fn(trajectory, row)``, or None: a class-style reward is instantiated
    with its params, a function-style one gets its params bound."""
    if OmegaConf.select(cfg, "reward") is None:
        return None
    name, params = component(cfg, "reward")
    factory = registry.load("reward", name)
    if inspect.isclass(factory):
        return registry.build("reward", name, params, where="reward")
    return functools.partial(factory, **params)


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
    from agentr1_core.lifecycle.run_dir import prepare_run_dir
    from agentr1_core.lifecycle.stop import GracefulStop
    from agentr1_core.preflight import preflight

    registry = configure_registry(cfg.plugins.allow, cfg.plugins.block)
    created = _missing_dirs(Path(str(cfg.run_dir)))
    try:
        check_run_dir(cfg.run_dir, int(float(cfg.trainer.min_free_gb) * 1024 ** 3))  # unwritable / full: fail now
        preflight(cfg, registry, keep_rows=str(cfg.trainer.name) == "local")
        prepare_run_dir(cfg, overwrite=overwrite)
    except BaseException:
        _remove_empty(created)  # a refused run leaves no trace
        raise
    trainer = registry.load("trainer", cfg.trainer.name)(config=cfg, registry=registry)
    with GracefulStop() as stop:
        if isinstance(getattr(trainer, "callbacks", None), list):
            trainer.callbacks.append(stop)
        return trainer.fit()
