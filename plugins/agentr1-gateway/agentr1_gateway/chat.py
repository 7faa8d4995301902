"""The conversation every protocol's request is turned into (OpenAI chat messages), to the model's chat messages.

Each protocol (``agentr1_gateway.protocols``) writes its request as OpenAI chat messages and function tools; this
module turns those into what the model is shown, so the same conversation gives the same prompt whatever protocol
carried it. A request's ``tools`` become the tool format's instructions in the system message, exactly as
``ToolEnv`` writes them, so an agent behind the gateway sees the prompts a native ``tool_env`` agent sees. An
assistant message that the gateway produced earlier in the episode is shown to the model as the text the model
really wrote (looked up by its tool-call ids or its content), never re-written from the parsed form; a tool message
becomes the format's result message. Only an assistant message the gateway never produced (a history the agent
built itself) is written from its parts with ``ToolFormat.format_call``.

The messages come checked (``agentr1_gateway.request`` and the protocols' parsers: every field's type, tool calls'
arguments parsed); the checks left here only keep a direct caller from crashing. This module does no I/O and knows
no engine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agentr1_core.tool_formats import ParsedCall, ToolFormat

ROLES = ("system", "developer", "user", "assistant", "tool")


class BadRequest(ValueError):
    """A request the gateway cannot serve; it goes back to the agent as an OpenAI-style 400 error naming the field
    (``param``, e.g. ``messages[1].content``) with OpenAI's ``code`` (``invalid_type``, ``invalid_value``, ...)."""

    def __init__(self, message: str, param: str | None = None, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def text_of(content: Any) -> str:
    """A message's content as text: a string, None, or a list of ``{"type": "text", "text": ...}`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise BadRequest("only text content parts are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise BadRequest(f"message content must be a string or a list of text parts, got {type(content).__name__}")


@dataclass
class Issued:
    """What the gateway answered in one episode: the model's raw text per tool-call id and per content."""

    by_call_id: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (raw text, tool name)
    by_content: dict[str, str] = field(default_factory=dict)  # returned content -> raw text

    def remember(self, raw: str, content: str | None, calls: list[tuple[str, str]]) -> None:
        """One answer: the model's ``raw`` text, the ``content`` the agent got, and the ``(id, name)`` of each call
        it got."""
        for call_id, name in calls:
            self.by_call_id[call_id] = (raw, name)
        if not calls and content is not None:
            self.by_content[content] = raw


def tool_schemas(tools: Any) -> list[dict[str, Any]]:
    """The tools as the model is shown them, whatever protocol they came in: ``{"type": "function", "function":
    {"name", "description", "parameters"}}`` in that order, the keys a request left out or set to null left out
    (``strict`` and any other key too), the way ``ToolEnv`` writes its tools."""
    if tools is None:
        return []
    if not isinstance(tools, list) or not all(isinstance(t, dict) and t.get("type") == "function" for t in tools):
        raise BadRequest("tools must be a list of {\"type\": \"function\", \"function\": {...}} objects", "tools")
    return [{"type": "function", "function": {key: tool["function"][key] for key in ("name", "description",
                                                                                     "parameters")
                                              if tool["function"].get(key) is not None}} for tool in tools]


def model_messages(messages: Any, tools: Any, fmt: ToolFormat, issued: Issued) -> list[dict[str, str]]:
    """The chat messages the model is shown for an OpenAI ``messages`` list (see the module docstring)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list", "messages")
    schemas = tool_schemas(tools)
    instructions = fmt.instructions(schemas) if schemas else ""
    out: list[dict[str, str]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise BadRequest(f"messages[{i}]: each message needs a role among {', '.join(ROLES)}", f"messages[{i}]")
        role, content = message["role"], text_of(message.get("content"))
        if role in ("system", "developer"):
            if instructions and not any(m["role"] == "system" for m in out):
                content = "\n\n".join(p for p in (content, instructions) if p)
            out.append({"role": "system", "content": content})
        elif role == "user":
            out.append({"role": "user", "content": content})
        elif role == "assistant":
            out.append({"role": "assistant", "content": _assistant_text(message, content, fmt, issued, i)})
        else:
            call_id = str(message.get("tool_call_id") or "")
            name = issued.by_call_id.get(call_id, ("", str(message.get("name") or "")))[1]
            out.append(fmt.result_message(ParsedCall(name=name), content))
    if instructions and not any(m["role"] == "system" for m in out):
        out.insert(0, {"role": "system", "content": instructions})
    return out


def _assistant_text(message: dict[str, Any], content: str, fmt: ToolFormat, issued: Issued, i: int) -> str:
    calls = message.get("tool_calls") or []
    if calls:
        first = calls[0].get("id") if isinstance(calls[0], dict) else None
        if first in issued.by_call_id:
            return issued.by_call_id[first][0]
        parts = [content] if content else []
        for j, call in enumerate(calls):
            try:
                fn = call["function"]
                args = fn.get("arguments") or {}
                parts.append(fmt.format_call(fn["name"], json.loads(args) if isinstance(args, str) else args))
            except (KeyError, TypeError, AttributeError, ValueError) as exc:
                raise BadRequest(f"messages[{i}].tool_calls[{j}]: not an OpenAI tool call ({exc})",
                                 f"messages[{i}].tool_calls[{j}]") from exc
        return "".join(parts)
    return issued.by_content.get(content, content)
