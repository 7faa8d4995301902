"""Tool sources: tools that live outside agentr1 (an MCP server's), named in ``env.tools`` as ``SOURCE:REFERENCE``
and configured in the run config's top-level section named after the source.

::

    mcp:                                   # the section of the source ``mcp`` (its factory's keyword parameters)
      servers: {calc: {command: python, args: [-m, my_calc_server]}}
    env:
      name: tool_env
      tools: [calculator, mcp:calc]        # a registered tool, and every tool the source gives for ``calc``

A plugin registers a source with the ``agentr1_tool_sources`` hook (``ToolSourceSpec``); its factory is a
``ToolSource`` subclass. What a reference means is the source's: for MCP, ``calc`` is every tool of the server
``calc`` and ``calc/add`` one of them. The section is checked against the factory's signature like any component's
params, and a section whose source is not installed is an unknown key.

A process has one instance per source (``active``), started on first use and shared by all its episodes, so the
tools it gives are called concurrently: the process that trains and each Ray rollout worker start their own.
``configure(cfg)`` tells a process the run's sections; ``close_all`` stops every instance (a backend's ``close``,
the end of the process). The checks before a run (``preflight``) start the sources a config names, list their tools,
and refuse an unknown reference and two tools of one name, all with the other problems of the run.
"""

from __future__ import annotations

import atexit
import re
import threading
from typing import Any

from agentr1_core.errors import ConfigError, UserError
from agentr1_core.tools import BaseTool

REFERENCE = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*):(.+)$")


class ToolSourceError(ConfigError):
    """A tool source that cannot give its tools (a server that does not start, a reference it does not know)."""


class ToolSource:
    """Subclass and implement ``start``, ``tools``, ``listing`` and ``close``; the constructor's keyword parameters
    are the source's config section. ``start`` and ``close`` are called once per process; ``tools`` for every env
    built, so it returns tools bound to what ``start`` started (no new server per episode)."""

    def start(self) -> None:
        """Start what the tools need (servers, sessions). A problem is a ``ToolSourceError`` naming the section's
        key (``config error at mcp.servers.calc: ...``), one line per problem."""

    def tools(self, reference: str) -> list[BaseTool]:
        """The tools ``reference`` names, in a stable order; a ``ToolSourceError`` (with a close match) for an
        unknown one."""
        raise NotImplementedError

    def listing(self) -> dict[str, list[dict[str, Any]]]:
        """What the source offers, by group (a server): each tool's OpenAI function schema."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop what ``start`` started; safe to call twice."""


def split_reference(name: str) -> tuple[str, str] | None:
    """``("mcp", "calc/add")`` for ``"mcp:calc/add"``; None for a plain tool name."""
    match = REFERENCE.match(name)
    return (match.group(1), match.group(2)) if match else None


def tool_entries(cfg: Any) -> list[tuple[str, str]]:
    """``[(key path, entry)]`` of every named ``env.tools`` entry of the run config ``cfg``: registered tool names
    and source references."""
    from omegaconf import OmegaConf

    node = OmegaConf.select(cfg, "env.tools")
    if not OmegaConf.is_list(node):
        return []
    out = []
    for i, item in enumerate(node):
        name = item if isinstance(item, str) else (item.get("name") if OmegaConf.is_dict(item) else None)
        if isinstance(name, str):
            out.append((f"env.tools[{i}]", name))
    return out


def references(cfg: Any) -> list[tuple[str, str]]:
    """The ``tool_entries`` that name a tool source's tools (``mcp:calc``)."""
    return [(key, name) for key, name in tool_entries(cfg) if split_reference(name) is not None]


_lock = threading.Lock()
_sections: dict[str, dict[str, Any]] = {}
_active: dict[str, ToolSource] = {}


def sections_of(cfg: Any, names: list[str]) -> dict[str, dict[str, Any]]:
    """The sections of the sources ``names`` in the run config ``cfg`` (an empty one where the config has none)."""
    from omegaconf import OmegaConf

    out = {}
    for name in names:
        node = OmegaConf.select(cfg, name, default=None) if OmegaConf.is_config(cfg) else (cfg or {}).get(name)
        section = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        out[name] = dict(section or {})
    return out


def configure(cfg: Any, registry: Any) -> None:
    """Remember the run's section of every installed source for this process; sources already started with another
    section are stopped (a new run in the same process)."""
    names = registry.names("tool_source")
    fresh = sections_of(cfg, names)
    with _lock:
        for name, source in list(_active.items()):
            if fresh.get(name) != _sections.get(name):
                source.close()
                del _active[name]
        _sections.clear()
        _sections.update(fresh)


def active(name: str, registry: Any | None = None) -> ToolSource:
    """This process's started instance of the source ``name`` (built from its section on first use)."""
    with _lock:
        source = _active.get(name)
        if source is not None:
            return source
        if registry is None:
            from agentr1_core.plugins import get_registry

            registry = get_registry()
        source = registry.build("tool_source", name, dict(_sections.get(name) or {}), where=name)
        try:
            source.start()
        except BaseException:
            source.close()
            raise
        _active[name] = source
        return source


def resolve(name: str, registry: Any | None = None) -> list[BaseTool]:
    """The tools of the ``env.tools`` entry ``SOURCE:REFERENCE``."""
    parts = split_reference(name)
    if parts is None:
        raise ValueError(f"{name!r} is not a tool source reference (SOURCE:REFERENCE)")
    source, reference = parts
    return active(source, registry).tools(reference)


def close_all() -> None:
    """Stop every source this process started (at a backend's close and at the process's exit)."""
    with _lock:
        sources = list(_active.values())
        _active.clear()
    for source in sources:
        try:
            source.close()
        except Exception:  # one source that fails to stop must not keep the others running
            pass


def start_referenced(cfg: Any, registry: Any) -> list[str]:
    """Configure this process for the run ``cfg`` and start every source its ``env.tools`` names, before the first
    episode (a trainer that plays episodes, each Ray rollout worker); returns the sources started."""
    configure(cfg, registry)
    names = list(dict.fromkeys(name.partition(":")[0] for _, name in references(cfg)))
    for name in names:
        active(name, registry)
    return names


def check_references(cfg: Any, registry: Any, entries: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """``(problems, listing lines)`` for the ``env.tools`` entries ``[(key path, name)]``: each source reference is
    resolved (its source started as a run starts it; the caller stops it with ``close_all``), and two entries
    giving tools of one name are a problem. A source that fails to start is reported once, not once per entry."""
    configure(cfg, registry)
    problems: list[str] = []
    lines: list[str] = []
    seen: dict[str, str] = {}
    failed: set[str] = set()
    for key, name in entries:
        parts = split_reference(name)
        if parts is None:
            try:
                called = str(getattr(registry.load("tool", name), "name", "") or name)
            except UserError:
                continue  # an unknown tool is reported by the component checks
            names = [called]
        else:
            if parts[0] in failed:
                continue
            try:
                active(parts[0], registry)
            except Exception as exc:  # the source's own problems (a server that does not start), once
                failed.add(parts[0])
                problems.extend(str(exc).splitlines() if isinstance(exc, UserError) else
                                [f"config error at {parts[0]}: failed to start: {type(exc).__name__}: {exc}"])
                continue
            try:
                tools = resolve(name, registry)
            except UserError as exc:
                problems.extend(line if name in line else f"{line} ({key} = {name})"  # which entry, unless it says
                                for line in str(exc).splitlines())
                continue
            except Exception as exc:
                problems.append(f"config error at {key}: {name} failed: {type(exc).__name__}: {exc}")
                continue
            names = [t.name for t in tools]
            lines.append(f"[tools] {key} = {name}: {', '.join(names) or '(none)'}")
        for tool in names:
            if tool in seen:
                problems.append(f"config error at {key}: a tool named {tool!r} comes from {name} and from "
                                f"{seen[tool]}; the model could not tell them apart")
            else:
                seen[tool] = f"{key} ({name})"
    return problems, lines


atexit.register(close_all)
