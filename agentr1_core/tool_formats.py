"""Tool-call formats: parse the calls a model wrote, and show results back to it.

``HermesFormat`` is the ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` convention that Qwen, Hermes and
SmolLM2's chat templates use. A malformed call never raises: it becomes a ``ParsedCall`` with ``error`` set, which
``ToolEnv`` turns into an error observation the model sees.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ParsedCall:
    name: str = ""
    arguments: Any = field(default_factory=dict)
    error: str | None = None  # parse problem, shown to the model
    raw: str = ""


@dataclass
class ParsedTurn:
    """The text outside calls (``content``) and the calls, in order."""

    content: str
    calls: list[ParsedCall]


class ToolFormat:
    """Base class of tool-call formats."""

    def parse(self, text: str) -> ParsedTurn:
        raise NotImplementedError

    def result_message(self, call: ParsedCall, result_text: str) -> dict[str, Any]:
        """The chat message that carries one tool result back to the model."""
        return {"role": "tool", "name": call.name, "content": result_text}

    def instructions(self, tools: list[dict[str, Any]]) -> str:
        """Text for the system prompt telling the model how to call ``tools`` (OpenAI schemas)."""
        raise NotImplementedError

    def format_call(self, name: str, arguments: Any) -> str:
        """The text the model writes for one call (to show a call that the model did not write, e.g. a history an
        OpenAI-client agent built itself)."""
        raise NotImplementedError(f"{type(self).__name__} cannot write calls")


class HermesFormat(ToolFormat):
    """``<tool_call>{json}</tool_call>`` blocks; results go back as ``tool`` messages wrapped in ``<tool_response>``."""

    _block = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)

    def parse(self, text: str) -> ParsedTurn:
        calls: list[ParsedCall] = []
        for match in self._block.finditer(text):
            raw = match.group(1).strip()
            if not match.group(2):
                calls.append(ParsedCall(raw=raw, error="unterminated <tool_call>: close it with </tool_call>"))
                continue
            calls.append(self._parse_one(raw))
        content = self._block.sub("", text).strip()
        return ParsedTurn(content=content, calls=calls)

    @staticmethod
    def _parse_one(raw: str) -> ParsedCall:
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            return ParsedCall(raw=raw, error=f"tool call is not valid JSON ({exc.msg} at char {exc.pos})")
        except RecursionError:
            return ParsedCall(raw=raw[:200], error="tool call is not valid JSON (nested too deeply)")
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return ParsedCall(raw=raw, error='tool call must be {"name": "<tool>", "arguments": {...}}')
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):  # some models double-encode arguments
            try:
                args = json.loads(args)
            except (json.JSONDecodeError, RecursionError):
                return ParsedCall(name=obj["name"], raw=raw, error="arguments must be a JSON object")
        return ParsedCall(name=obj["name"], arguments=args, raw=raw)

    def result_message(self, call: ParsedCall, result_text: str) -> dict[str, Any]:
        return {"role": "tool", "name": call.name or "error",
                "content": f"<tool_response>\n{result_text}\n</tool_response>"}

    def format_call(self, name: str, arguments: Any) -> str:
        return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "</tool_call>"

    def instructions(self, tools: list[dict[str, Any]]) -> str:
        listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        return (
            "You can call these tools:\n<tools>\n" + listing + "\n</tools>\n"
            "To call one, write <tool_call>{\"name\": \"NAME\", \"arguments\": {...}}</tool_call>.")
