"""The core's ``calculator`` as an MCP server (``python -m agentr1_tools_mcp.examples.calculator_server``, stdio;
``--http PORT`` serves streamable HTTP on 127.0.0.1): the same name, description and JSON schema, and the core's
bounded evaluator, so a model sees the same prompt and the same results as with the native tool."""

from __future__ import annotations

import argparse

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool

from agentr1_core.builtin.calculator import CalculatorError, CalculatorTool, evaluate, format_number


def calculator(expression: str) -> str:
    try:
        return format_number(evaluate(expression))
    except CalculatorError as exc:
        return f"Error: {exc}"  # the native tool's text: an answer the model reads, not a failed call


TOOL = Tool.from_function(calculator, description=CalculatorTool.description, structured_output=False)
server = MCPServer("calculator", tools=[TOOL.model_copy(update={"parameters": CalculatorTool.parameters})])

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    port = parser.parse_args().http
    server.run("streamable-http", host="127.0.0.1", port=port) if port else server.run()
