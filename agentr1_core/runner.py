"""``run(cfg)``: check every selected component before anything heavy loads, then hand the run to the trainer.

All names are resolved and all component params validated up front, and the run directory is checked (writable,
``trainer.min_free_gb`` free), so a typo or a full disk fails in a second with one line, not after the model has
loaded.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentr1_core.config import COMPONENT_KEYS, component
from agentr1_core.plugins import Registry, configure_registry

# Parameters the framework passes itself (not from the config) to each kind of factory.
RESERVED = {"engine": {"model", "tokenizer"}, "agent_flow": {"ctx"}, "trainer": {"config", "registry"},
            "reward": {"trajectory", "traj", "row"}}  # a function-style reward gets these per call


def check_components(cfg: DictConfig, registry: Registry) -> None:
    """Raise a one-line error for an unknown component name or a bad parameter anywhere in ``cfg``."""
    for key, kind in COMPONENT_KEYS.items():
        if OmegaConf.select(cfg, key) is None:
            continue
        if key == "trainer":
            registry.get("trainer", cfg.trainer.name)
            continue
        name, params = component(cfg, key)
        registry.validate(kind, name, params, key, reserved=RESERVED.get(kind, ()))
    for i, tool in enumerate(OmegaConf.select(cfg, "env.tools") or []):
        node = OmegaConf.to_container(tool) if not isinstance(tool, str) else {"name": tool}
        node = dict(node)
        registry.validate("tool", str(node.pop("name", "")), node, f"env.tools[{i}]")


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


def run(cfg: DictConfig) -> Any:
    from agentr1_core.lifecycle.checkpoint import check_run_dir

    registry = configure_registry(cfg.plugins.allow, cfg.plugins.block)
    check_components(cfg, registry)
    check_run_dir(cfg.run_dir, int(float(cfg.trainer.min_free_gb) * 1024 ** 3))  # unwritable / disk full: fail now
    trainer = registry.load("trainer", cfg.trainer.name)(config=cfg, registry=registry)
    return trainer.fit()
