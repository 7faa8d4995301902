"""``MCPToolSource``: the tool source ``mcp``, the tools of the MCP servers of the run config's ``mcp.servers``.

``env.tools`` names them ``mcp:SERVER`` (every tool of the server, in its listing order) or ``mcp:SERVER/TOOL``
(one; TOOL is the server's name for it or its ``rename``). ``start`` connects every server at once on one event
loop thread (``loop``), lists all pages of each one's tools and reports every problem together, one line each
naming the server's key; ``close`` stops them all. The core starts one instance per process that plays episodes
and stops it at the end of the run (``agentr1_core.tool_sources``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentr1_core.errors import suggest
from agentr1_core.tool_sources import ToolSource, ToolSourceError
from agentr1_core.tools import BaseTool
from agentr1_tools_mcp.connection import ServerConnection, ServerDown, describe_error
from agentr1_tools_mcp.loop import LoopThread
from agentr1_tools_mcp.settings import ServerSettings, parse_servers
from agentr1_tools_mcp.tool import MCPTool

CLOSE_SECONDS = 30.0  # every server stopped within this (a stdio server: 2 s for its input, 2 s after SIGTERM)


def failed(settings: ServerSettings) -> str:
    return "did not start" if settings.command else "did not answer"


class MCPToolSource(ToolSource):
    def __init__(self, servers: dict[str, dict[str, Any]] | None = None) -> None:
        self.settings, self.setting_problems = parse_servers(servers)  # reported by start, with the servers'
        self.loop: LoopThread | None = None
        self.connections: dict[str, ServerConnection] = {}
        self.tools_by_server: dict[str, list[MCPTool]] = {}

    def start(self) -> None:
        self.loop = LoopThread("agentr1-mcp")
        self.connections = {s.name: ServerConnection(s) for s in self.settings}

        async def start_all() -> list[Any]:
            return await asyncio.gather(*(c.start() for c in self.connections.values()), return_exceptions=True)

        bound = max([s.start_timeout for s in self.settings] or [0.0]) + CLOSE_SECONDS
        outcomes = self.loop.run(start_all(), timeout=bound)
        problems = list(self.setting_problems)
        for connection, outcome in zip(self.connections.values(), outcomes):
            problems.extend(self._problems_of(connection, outcome))
        if problems:
            raise ToolSourceError("\n".join(problems))
        for name, connection in self.connections.items():
            rename = connection.settings.rename
            self.tools_by_server[name] = [MCPTool(self.loop, connection, t, rename.get(t.name, t.name))
                                          for t in connection.tools]

    @staticmethod
    def _problems_of(connection: ServerConnection, outcome: Any) -> list[str]:
        s = connection.settings
        if isinstance(outcome, ServerDown):
            return [f"config error at {s.key}: the {s.transport} server {failed(s)}: {outcome}"]
        if isinstance(outcome, BaseException):
            return [f"config error at {s.key}: the {s.transport} server {failed(s)}: {describe_error(outcome)}; "
                    f"{'command' if s.command else 'url'}: {s.describe()}"]
        listed = [t.name for t in connection.tools]
        if not listed:
            return [f"config error at {s.key}: the server lists no tools ({s.describe()})"]
        problems = [f"config error at {s.key}.rename: the server has no tool {name!r}{suggest(name, listed)}; its "
                    f"tools: {', '.join(listed)}" for name in s.rename if name not in listed]
        shown = [s.rename.get(n, n) for n in listed]
        problems += [f"config error at {s.key}.rename: two of its tools would be named {n!r}"
                     for n in sorted({n for n in shown if shown.count(n) > 1})]
        return problems

    def tools(self, reference: str) -> list[BaseTool]:
        server, _, wanted = reference.partition("/")
        if server not in self.tools_by_server:
            known = ", ".join(self.tools_by_server) or "none"
            raise ToolSourceError(f"config error at mcp.servers: env.tools names mcp:{reference}, but no server "
                                  f"{server!r} is configured{suggest(server, self.tools_by_server)}; servers: {known}")
        tools = self.tools_by_server[server]
        if not wanted:
            return list(tools)
        found = [t for t in tools if wanted in (t.name, t.server_tool)]
        if not found:
            names = [t.name for t in tools]
            raise ToolSourceError(f"config error at mcp.servers.{server}: env.tools names mcp:{reference}, but the "
                                  f"server has no tool {wanted!r}{suggest(wanted, names)}; its tools: "
                                  f"{', '.join(names)}")
        return found

    def listing(self) -> dict[str, list[dict[str, Any]]]:
        return {name: [t.openai_schema() for t in tools] for name, tools in self.tools_by_server.items()}

    def close(self) -> None:
        loop, self.loop = self.loop, None
        if loop is None:
            return
        connections = list(self.connections.values())

        async def close_all() -> None:
            await asyncio.gather(*(c.aclose() for c in connections), return_exceptions=True)

        try:
            loop.run(close_all(), timeout=CLOSE_SECONDS)
        except Exception:  # noqa: BLE001 - the loop's end below still stops what is left
            pass
        loop.stop()
