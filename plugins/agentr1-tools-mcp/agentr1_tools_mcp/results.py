"""What an MCP tool call gives the model: a ``CallToolResult`` as a ``ToolResult``.

Text blocks are the observation, joined by newlines; a result with no text block shows its structured content as
JSON (a server that sends both repeats the structure as text, as the protocol asks). A result with an image, audio,
a resource or a resource link is refused with one error observation: the models trained here read text only. An
``isError`` result is a tool error (``tool_error`` in the metrics' ``tool_errors``) with the server's text.
"""

from __future__ import annotations

import json

import mcp_types as types

from agentr1_core.tools import ToolResult

KIND_NAMES = {"image": "an image", "audio": "audio", "resource": "an embedded resource",
              "resource_link": "a resource link"}


def to_tool_result(shown: str, result: types.CallToolResult) -> ToolResult:
    kinds = [getattr(block, "type", type(block).__name__) for block in result.content]
    other = [kind for kind in kinds if kind != "text"]
    if other:
        names = ", ".join(dict.fromkeys(KIND_NAMES.get(kind, kind) for kind in other))
        return ToolResult(f"Error: {shown} returned {names}, which this agent cannot read (only text and "
                          f"structured content are shown to the model)", error="unsupported_output")
    text = "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))
    if not result.content and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    if result.is_error:
        return ToolResult(f"Error: {shown}: {text or 'the tool reported an error'}", error="tool_error")
    return ToolResult(text)
