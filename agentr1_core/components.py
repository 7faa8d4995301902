"""The components a run config selects, checked by name and params, and the configured reward built.

Which keys select which kind of component is ``agentr1_core.kinds``: a ``{name: ..., **params}`` node (``env``,
``data.train``), a list of them (``env.tools``) or a bare name (``trainer.name``). ``check_components`` looks every
name up first (no imports), then imports each factory and checks its params; the parameters the framework passes
itself (``kinds.RESERVED``) are not expected from the config. Every problem is a one-line ``ConfigError`` with the
key path.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Iterator

from omegaconf import DictConfig, OmegaConf

from agentr1_core.errors import ConfigError, UserError
from agentr1_core.kinds import RESERVED, config_keys, key_form
from agentr1_core.plugins import Registry
from agentr1_core.tool_sources import references as source_references, split_reference


def component(cfg: DictConfig, key: str) -> tuple[str, dict[str, Any]]:
    """``(name, params)`` of a ``{name: ..., **params}`` node (also importable from ``agentr1_core.config``)."""
    node = OmegaConf.to_container(OmegaConf.select(cfg, key), resolve=True)
    assert isinstance(node, dict)
    node = dict(node)
    return str(node.pop("name")), node


def _validate(registry: Registry, kind: str, name: str, params: dict[str, Any], key: str) -> None:
    """``registry.validate`` with the key path in every message."""
    try:
        if key_form(key) == "name":  # the params are the framework's own section, not the factory's
            registry.load(kind, name)
        else:
            registry.validate(kind, name, params, key, reserved=RESERVED[kind])
    except UserError as exc:
        message = str(exc)
        if message.startswith("config error"):
            raise
        raise ConfigError(f"config error at {key}: {message}") from exc


def selected(cfg: DictConfig) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """``(key path, kind, name, params)`` of every component ``cfg`` selects, list entries (``env.tools``) last."""
    for key, kind in sorted(config_keys().items(), key=lambda item: key_form(item[0]) == "list"):
        form = key_form(key)
        path = key.removesuffix("[]")
        node = OmegaConf.select(cfg, path)
        if node is None:
            continue
        if form == "name":
            yield key, kind, str(node), {}
        elif form == "node":
            name, params = component(cfg, key)
            yield key, kind, name, params
        else:
            if not OmegaConf.is_list(node):
                raise ConfigError(f"config error at {path}: must be a list of {kind} names or {{name: ..., ...}} "
                                  f"entries")
            for i, item in enumerate(node):
                entry = {"name": item} if isinstance(item, str) else (
                    OmegaConf.to_container(item) if OmegaConf.is_config(item) else item)
                if not isinstance(entry, dict) or not entry.get("name"):
                    raise ConfigError(f"config error at {path}[{i}]: each {kind} needs a name")
                entry = dict(entry)
                name = str(entry.pop("name"))
                if kind == "tool" and split_reference(name) is not None:
                    continue  # a tool source's reference (mcp:calc): source_references
                yield f"{path}[{i}]", kind, name, entry


def _source_problems(cfg: DictConfig, registry: Registry) -> dict[str, str]:
    """The references to tool sources no plugin registers, and the sections of those referenced that their
    factory does not accept (``mcp.servers``), by key path."""
    from agentr1_core.tool_sources import sections_of

    problems: dict[str, str] = {}
    used = []
    for key, name in source_references(cfg):
        source = name.partition(":")[0]
        try:
            registry.get("tool_source", source)
        except UserError as exc:
            problems[key] = f"config error at {key}: {exc}"
            continue
        if source not in used:
            used.append(source)
    for source, section in sections_of(cfg, used).items():
        try:
            registry.validate("tool_source", source, section, where=source)
        except UserError as exc:
            message = str(exc)
            problems[source] = message if message.startswith("config error") else f"config error at {source}: {message}"
    return problems


def unknown_names(cfg: DictConfig, registry: Registry) -> list[str]:
    """One line per component name in ``cfg`` that no loaded plugin registers (looked up without imports)."""
    problems = []
    for key, kind, name, _ in selected(cfg):
        try:
            registry.get(kind, name)
        except UserError as exc:
            problems.append(f"config error at {key}: {exc}")
    for key, name in source_references(cfg):
        try:
            registry.get("tool_source", name.partition(":")[0])
        except UserError as exc:
            problems.append(f"config error at {key}: {exc}")
    return problems


def component_problems(cfg: DictConfig, registry: Registry) -> dict[str, str]:
    """``{key path: problem}`` for every component of ``cfg`` whose name no loaded plugin registers or whose params
    its factory does not accept. Names are looked up first (no imports); each known one's factory is then imported
    and its params checked."""
    problems: dict[str, str] = {}
    try:
        chosen = list(selected(cfg))
    except ConfigError as exc:  # a malformed list of components (env.tools: 5)
        return {str(exc).partition(":")[0].removeprefix("config error at "): str(exc)}
    for key, kind, name, _ in chosen:
        try:
            registry.get(kind, name)
        except UserError as exc:
            problems[key] = f"config error at {key}: {exc}"
    for key, kind, name, params in chosen:
        if key in problems:
            continue
        try:
            _validate(registry, kind, name, params, key)
        except ConfigError as exc:
            problems[key] = str(exc)
    problems.update(_source_problems(cfg, registry))
    return problems


def check_components(cfg: DictConfig, registry: Registry) -> None:
    """Raise a ``ConfigError`` for the unknown component names or bad parameters anywhere in ``cfg``, one line each
    (``component_problems``)."""
    problems = component_problems(cfg, registry)
    if problems:
        raise ConfigError("\n".join(problems.values()))


def code_refs(cfg: DictConfig, registry: Registry, run_dir: str | None = None) -> list[Any]:
    """The code ``cfg`` names (``agentr1_core.trust.CodeRef``), at the ``code_params`` each selected component's
    spec declares; found without importing it."""
    from agentr1_core.trust import environment_ref, resolve_code, resolve_command

    refs = []
    for key, kind, name, params in selected(cfg):
        try:
            spec = registry.get(kind, name)
        except UserError:  # an unknown name is reported by the checks of the run
            continue
        for param in spec.code_params:
            value = params.get(param)
            if isinstance(value, str) and value.strip():
                refs.append(resolve_code(value.strip(), run_dir, f"{key}.{param}"))
        for param in spec.command_params:
            value = params.get(param)
            if isinstance(value, (str, list, tuple)) and value:
                refs.append(resolve_command(value, run_dir, f"{key}.{param}"))
            elif isinstance(value, dict) and (env := environment_ref(value, f"{key}.{param}")) is not None:
                refs.append(env)
    return refs


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
