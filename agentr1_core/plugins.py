"""Plugin discovery and the component registry.

Plugins are modules announced in the ``agentr1`` entry-point group (the core's own built-ins included). Each is
imported in a guard: a plugin that fails to import is recorded with its traceback (status ``error``) and only a run
that selects one of its components fails. Hook results are collected into one registry per component kind, keyed by
name. Two distributions claiming one name is an error that names both.

Which plugins load can be narrowed with an allow list and a block list (entry-point names or distribution names), from
the config (``plugins: {allow: [...], block: [...]}``) or the environment (``AGENTR1_PLUGINS_ALLOW``,
``AGENTR1_PLUGINS_BLOCK``, comma-separated). The core's built-ins cannot be blocked.

A name that is not registered is explained from what installed distributions declare in their metadata
(``agentr1_core.declared``): blocked, failed to load, or installed by nobody. The error classes live in
``agentr1_core.errors``. Nothing here imports torch, ray or vllm.
"""

from __future__ import annotations

import importlib
import os
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any, Iterable

import pluggy

from agentr1_core import declared, hookspecs
from agentr1_core.errors import DuplicateComponentError, PluginError, UnknownComponentError, UserError, suggest
from agentr1_core.params import validate_params
from agentr1_core.specs import SPEC_TYPES, ComponentSpec, Registered

ENTRY_POINT_GROUP = "agentr1"
BUILTIN_PLUGIN = "agentr1_core.builtin.plugin"
PLUGIN_MODULES_VAR = "AGENTR1_PLUGIN_MODULES"  # extra plugin modules by import path (see ``_load_env_modules``)
CORE_DISTRIBUTION = "agentr1-core"


@dataclass
class PluginInfo:
    """One loaded (or failed) plugin module."""

    name: str
    distribution: str
    version: str
    module: str
    status: str = "ok"  # ok | error | blocked
    error: str = ""
    hooks: list[str] = field(default_factory=list)
    components: dict[str, list[str]] = field(default_factory=dict)


def _split_env(var: str) -> set[str]:
    return {x.strip() for x in os.environ.get(var, "").split(",") if x.strip()}


class Registry:
    """All components of all loaded plugins, by kind and name."""

    def __init__(self, allow: Iterable[str] = (), block: Iterable[str] = ()) -> None:
        self.allow = set(allow) | _split_env("AGENTR1_PLUGINS_ALLOW")
        self.block = set(block) | _split_env("AGENTR1_PLUGINS_BLOCK")
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.components: dict[str, dict[str, Registered]] = {kind: {} for kind in SPEC_TYPES}
        self.conflicts: dict[tuple[str, str], list[Registered]] = {}

    # -- loading ------------------------------------------------------------------------------------------------
    def load_entry_points(self) -> "Registry":
        seen_builtin = False
        for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            dist = ep.dist.name if ep.dist is not None else "unknown"
            version = ep.dist.version if ep.dist is not None else ""
            if ep.value == BUILTIN_PLUGIN:
                if seen_builtin:
                    continue
                seen_builtin = True
            elif self._is_blocked(ep.name, dist):
                self.plugins[ep.name] = PluginInfo(ep.name, dist, version, ep.value, status="blocked")
                continue
            try:
                module = ep.load()
            except Exception:  # a broken plugin must not break the others
                self.plugins[ep.name] = PluginInfo(
                    ep.name, dist, version, ep.value, status="error", error=traceback.format_exc())
                continue
            self.register_module(module, name=ep.name, distribution=dist, version=version)
        if not seen_builtin:  # running from a source tree without the package installed
            from agentr1_core.builtin import plugin as builtin

            self.register_module(builtin, name="builtin", distribution=CORE_DISTRIBUTION, version="")
        self._load_env_modules()
        return self

    def _load_env_modules(self) -> None:
        """Plugin modules named in ``AGENTR1_PLUGIN_MODULES`` (comma-separated import paths): plugins that are not
        packaged, e.g. in tests. Like ``PYTEST_PLUGINS``, the variable reaches every process of the run (Ray
        workers, the trainer actor), where registrations made in the driver do not."""
        for path in filter(None, (x.strip() for x in os.environ.get(PLUGIN_MODULES_VAR, "").split(","))):
            try:
                module = importlib.import_module(path)
            except Exception:
                self.plugins[path] = PluginInfo(path, PLUGIN_MODULES_VAR, "", path, status="error",
                                                error=traceback.format_exc())
                continue
            self.register_module(module, name=path, distribution=PLUGIN_MODULES_VAR, version="")

    def plugin_names(self) -> dict[str, str]:
        """Every name ``plugins.allow`` / ``plugins.block`` may hold: each installed plugin's entry-point name and
        its distribution's name (canonical, ``agentr1-env-webshop``), mapped to the distribution."""
        names: dict[str, str] = {}
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist is not None else "unknown"
            names[ep.name] = dist
            names[declared.canonical(dist)] = dist
        for info in self.plugins.values():
            names.setdefault(info.name, info.distribution)
        return names

    def list_problems(self, allow: Iterable[str], block: Iterable[str]) -> list[str]:
        """One line per name in the allow and block lists (the config's, at ``plugins.allow[i]`` /
        ``plugins.block[i]``, and the environment's) that is not an installed plugin, with the closest match; the
        core named in a block list (its built-ins cannot be blocked) is a problem too."""
        known = self.plugin_names()
        core = {name for name, dist in known.items() if declared.canonical(dist) == CORE_DISTRIBUTION}
        sources = [(f"plugins.{which}[{i}]", str(name)) for which, names in (("allow", allow), ("block", block))
                   for i, name in enumerate(names)]
        sources += [(var, name) for var in ("AGENTR1_PLUGINS_ALLOW", "AGENTR1_PLUGINS_BLOCK")
                    for name in sorted(_split_env(var))]
        problems = []
        for where, name in sources:
            label = f"config error at {where}" if where.startswith("plugins.") else f"{where}"
            if name not in known and declared.canonical(name) not in known:
                problems.append(f"{label}: {name!r} is not an installed plugin{suggest(name, known)}; installed: "
                                f"{', '.join(sorted(known))}")
            elif "BLOCK" in where.upper() and (name in core or declared.canonical(name) in core):
                problems.append(f"{label}: {name!r} is the core; its built-in components cannot be blocked")
        return problems

    def _is_blocked(self, ep_name: str, dist: str) -> bool:
        """Whether the plugin is blocked or not allowed; names compare as packaging compares distribution names."""
        names = {declared.canonical(ep_name), declared.canonical(dist)}
        if {declared.canonical(n) for n in self.block} & names:
            return True
        return bool(self.allow) and not ({declared.canonical(n) for n in self.allow} & names)

    def register_module(self, module: ModuleType | Any, name: str, distribution: str = "local",
                        version: str = "") -> PluginInfo:
        """Register a plugin object (module or instance with hookimpls) and collect its components."""
        info = PluginInfo(name, distribution, version, getattr(module, "__name__", repr(module)))
        try:
            self.pm.register(module, name=name)
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            if self.pm.is_registered(module):
                self.pm.unregister(module)
            info.status, info.error = "error", f"{exc}"
            self.plugins[name] = info
            return info
        for impl_hook in self.pm.get_hookcallers(module) or []:
            hook_name = impl_hook.name
            info.hooks.append(hook_name)
            kind = hookspecs.HOOK_KINDS[hook_name]
            impl = next(i for i in impl_hook.get_hookimpls() if i.plugin is module)
            try:
                specs = impl.function() or []
                self._add_specs(kind, specs, info)
            except UserError:
                raise
            except Exception:
                info.status, info.error = "error", traceback.format_exc()
        self.plugins[name] = info
        return info

    def _add_specs(self, kind: str, specs: Iterable[ComponentSpec], info: PluginInfo) -> None:
        expected = SPEC_TYPES[kind]
        for spec in specs:
            if not isinstance(spec, expected):
                raise PluginError(
                    f"plugin {info.name!r} ({info.distribution}) returned {type(spec).__name__} from "
                    f"the {kind} hook; expected {expected.__name__}")
            existing = self.components[kind].get(spec.name)
            if existing is not None:
                self.conflicts.setdefault((kind, spec.name), [existing]).append(
                    Registered(spec, info.name, info.distribution))
                continue
            self.components[kind][spec.name] = Registered(spec, info.name, info.distribution)
            info.components.setdefault(kind, []).append(spec.name)

    # -- lookup -------------------------------------------------------------------------------------------------
    def names(self, kind: str) -> list[str]:
        return sorted(self.components[kind])

    def get(self, kind: str, name: str) -> ComponentSpec:
        """The spec for ``name``; an unknown name raises with the valid names and a close match."""
        if (kind, name) in self.conflicts:
            raise DuplicateComponentError(self.conflict_message(kind, name))
        found = self.components[kind].get(name)
        if found is not None:
            return found.spec
        raise UnknownComponentError(
            f"unknown {kind} {name!r}{suggest(name, self.components[kind])}; valid: "
            f"{', '.join(self.names(kind)) or '(none installed)'}; {self.missing_hint(kind, name)}")

    def missing_hint(self, kind: str, name: str) -> str:
        """Why ``name`` is not registered, from the distributions that declare it in their metadata."""
        for decl in declared.declared_by(kind, name):
            owners = [p for p in self.plugins.values()
                      if declared.canonical(p.distribution) == declared.canonical(decl.distribution)]
            if any(p.status == "blocked" for p in owners):
                return (f"{decl.distribution} declares it but is blocked (plugins.allow / plugins.block, "
                        f"AGENTR1_PLUGINS_ALLOW / AGENTR1_PLUGINS_BLOCK)")
            failed = [p for p in owners if p.status == "error"]
            if failed:
                last = (failed[0].error.strip().splitlines() or ["error"])[-1]
                return (f"{decl.distribution} declares it but its plugin failed to load: {last} "
                        f"(`agentr1-core plugins --verbose` shows the traceback)")
            if owners:
                return f"{decl.distribution} declares it but its plugin did not register it"
        broken = [p for p in self.plugins.values() if p.status == "error"]
        hint = "no installed distribution declares it (`agentr1-core plugins` lists what is installed)"
        if broken:
            hint += "; plugins that failed to load: " + ", ".join(f"{p.name} ({p.distribution})" for p in broken)
        return hint

    def load(self, kind: str, name: str) -> Any:
        """Import and return the factory of ``name``; an import failure is a PluginError naming the plugin."""
        spec = self.get(kind, name)
        try:
            return spec.load()
        except Exception as exc:
            owner = self.components[kind][name]
            extra = None
            if isinstance(exc, ModuleNotFoundError) and exc.name:
                extra = declared.extra_with(owner.distribution, exc.name, prefer=name)
            needs = f" (it needs {owner.distribution}[{extra}])" if extra else ""
            raise PluginError(
                f"{kind} {name!r} from {owner.distribution} failed to import ({spec.factory}): "
                f"{type(exc).__name__}: {exc}{needs}") from exc

    def validate(self, kind: str, name: str, params: dict[str, Any], where: str = "",
                 reserved: Iterable[str] = ()) -> Any:
        """Import the factory of ``name`` and check ``params`` against its signature; returns the factory."""
        factory = self.load(kind, name)
        validate_params(self.get(kind, name), params, where or kind, reserved=set(reserved))
        return factory

    def build(self, kind: str, name: str, params: dict[str, Any] | None = None, where: str = "",
              **context: Any) -> Any:
        """Validate ``params`` against the factory signature, then call it with ``context`` + ``params``."""
        params = dict(params or {})
        factory = self.validate(kind, name, params, where, reserved=context)
        return factory(**context, **params)

    def conflict_message(self, kind: str, name: str) -> str:
        owners = " and ".join(f"{r.distribution} (plugin {r.plugin})" for r in self.conflicts[(kind, name)])
        return f"{kind} {name!r} is registered by more than one distribution: {owners}; uninstall or block one"

    def table(self) -> list[dict[str, Any]]:
        rows = []
        for info in sorted(self.plugins.values(), key=lambda p: (p.distribution != CORE_DISTRIBUTION, p.name)):
            rows.append({
                "plugin": info.name, "distribution": info.distribution, "version": info.version,
                "module": info.module, "status": info.status, "hooks": sorted(info.hooks),
                "components": {k: sorted(v) for k, v in sorted(info.components.items())},
                "error": info.error,
            })
        return rows


_default: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry (entry points loaded once, on first use)."""
    global _default
    if _default is None:
        _default = Registry().load_entry_points()
    return _default


def configure_registry(allow: Iterable[str] = (), block: Iterable[str] = ()) -> Registry:
    """Rebuild the process-wide registry with an allow/block list (what a run's ``plugins:`` config does)."""
    global _default
    _default = Registry(allow, block).load_entry_points()
    return _default


def reset_registry() -> None:
    global _default
    _default = None
