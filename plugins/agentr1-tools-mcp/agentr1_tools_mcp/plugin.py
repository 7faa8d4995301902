"""Registers the tool source ``mcp`` (the tools of MCP servers), the ``agentr1-core mcp`` command, the example
time-conversion dataset and the named configs of ``configs/`` (``calculator-mcp``, ``time-mcp``).

Every factory is a lazy ``"module:attr"`` string: listing plugins imports neither the MCP SDK nor a server.
"""

from __future__ import annotations

from agentr1_core.hookspecs import hookimpl
from agentr1_core.named_configs import package_configs
from agentr1_core.specs import CommandSpec, DatasetSpec, ToolSourceSpec

PKG = "agentr1_tools_mcp"


@hookimpl
def agentr1_tool_sources():
    return [ToolSourceSpec("mcp", f"{PKG}.source:MCPToolSource",
                           "The tools of MCP servers, stdio or streamable HTTP: env.tools mcp:SERVER, mcp:SERVER/TOOL")]


@hookimpl
def agentr1_datasets():
    return [DatasetSpec("time_conversions", f"{PKG}.examples.time_task:time_conversion_rows",
                        "Generated time-zone conversions for the time MCP server's convert_time (fixed-offset zones)",
                        row_fields=("prompt", "reward_model.ground_truth"))]


@hookimpl
def agentr1_cli_commands():
    return [CommandSpec("mcp", f"{PKG}.cli:register", "List the tools of a config's MCP servers",
                        help="MCP servers: list (each server's tools and schemas, no model loaded)")]


@hookimpl
def agentr1_configs():
    return package_configs(PKG)
