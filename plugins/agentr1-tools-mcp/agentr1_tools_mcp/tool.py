"""``MCPTool``: one tool of an MCP server as a ``BaseTool``, named, described and typed exactly as the server lists
it (``inputSchema`` is ``parameters``), so a tool format shows it to the model as it shows a native tool.

A call is handed to the source's event loop and awaited from the episode's loop (``runs_in_thread = False``: the
episode's loop only waits, it never blocks). ``timeout`` is the server's: past it the core's ``call_tool`` gives the
episode a timeout error and the call is cancelled on the server's session.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import mcp_types as types

from agentr1_core.tools import BaseTool, ToolResult
from agentr1_tools_mcp.connection import ServerConnection
from agentr1_tools_mcp.loop import LoopThread


class MCPTool(BaseTool):
    runs_in_thread = False

    def __init__(self, loop: LoopThread, connection: ServerConnection, listed: types.Tool, shown: str) -> None:
        self.loop = loop
        self.connection = connection
        self.server_tool = listed.name  # the name the server knows it by (``rename`` changes only ``name``)
        self.name = shown
        self.description = listed.description or ""
        self.parameters = copy.deepcopy(listed.input_schema)
        self.timeout = connection.settings.timeout

    async def execute(self, **arguments: Any) -> ToolResult:
        call = self.connection.call(self.server_tool, self.name, arguments)
        return await asyncio.wrap_future(self.loop.submit(call))
