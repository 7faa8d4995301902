"""Anthropic Messages (``POST /v1/messages``, plain and streamed) and ``POST /v1/messages/count_tokens``.

The request, checked field by field (``BadRequest`` naming the field, as ``messages[1].content[0].tool_use_id``):

* ``model`` (a string) and ``max_tokens`` (a positive integer; only lowers the run's cap) are required;
  ``count_tokens`` needs no ``max_tokens``.
* ``system``: a string or an array of ``{"type": "text", "text": ...}`` blocks; it becomes the system message.
* ``messages``: a non-empty array of ``{"role": "user" | "assistant", "content": STRING | BLOCKS}``. Blocks:
  ``text``; ``tool_use`` ``{id, name, input: OBJECT}`` (assistant); ``tool_result`` ``{tool_use_id, content:
  STRING | text blocks, is_error}`` (user). A user message's tool results become tool messages, its text a user
  message after them (in the order they came); an assistant message's text and tool uses become one assistant
  message with tool calls. A result with ``is_error: true`` is shown as ``Error: ...`` (as ``tool_env`` writes a
  failed call) unless its text already starts with ``Error``. Extra keys of a block (``cache_control``,
  ``citations``) are ignored.
* ``tools``: ``[{"name", "description", "input_schema": OBJECT}]``, shown as the function tools they are (a
  server tool, one with a ``type`` other than ``custom``, is refused); ``tool_choice`` ``{"type": "auto" | "any" |
  "tool" | "none", "name", "disable_parallel_tool_use"}`` (``none`` leaves the reply unparsed; ``any`` and
  ``tool`` are accepted, not enforced); ``stop_sequences`` (up to ``MAX_STOP`` non-empty strings); ``stream``.
* ``temperature``, ``top_p``, ``top_k``, ``metadata``, ``service_tier``, ``cache_control`` and the rest are ignored
  (the run samples its way); ``thinking`` other than ``{"type": "disabled"}``, ``output_config.format``,
  ``output_format``, ``mcp_servers`` and ``container`` are refused by name.

The answer is a ``message`` whose content is a text block (the text outside the calls, when there is any) and a
``tool_use`` block per well-formed call, with ``toolu_...`` ids the gateway remembers: an assistant message that
sends them back is shown to the model as the exact text it wrote. ``stop_reason``: ``tool_use``, ``max_tokens``
(the cap), ``stop_sequence`` (one of the request's, named in ``stop_sequence``) or ``end_turn``. ``stream: true``
sends the same reply as ``message_start``, ``content_block_start`` / ``content_block_delta`` (``text_delta``,
``input_json_delta``) / ``content_block_stop`` per block, ``message_delta`` (stop reason, output tokens) and
``message_stop``; the engine does not stream, so the whole reply is generated first.

Errors have Anthropic's shape, ``{"type": "error", "error": {"type", "message"}}``, the type following the status
(``invalid_request_error``, ``authentication_error``, ``permission_error``, ``not_found_error``,
``request_too_large``, ``rate_limit_error``, ``api_error``); a prompt over the context is an
``invalid_request_error`` saying ``prompt is too long``.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from agentr1_gateway.protocols.core import EventStream, Protocol, Reply, Turn, new_id, pieces
from agentr1_gateway.request import (MAX_MODEL_NAME, check_name, check_nesting, invalid, is_int, load_body,
                                     missing, optional_bool, tool_objects, wrong_type)

MAX_STOP = 16  # stop sequences per request
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error"}
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}


class AnthropicMessages(Protocol):
    name = "anthropic_messages"
    call_prefix = "toolu_"

    def __init__(self, counting: bool = False) -> None:
        self.counting = counting  # count_tokens: the same request without max_tokens

    def parse(self, raw: bytes) -> Turn:
        body = load_body(raw)
        model = body.get("model")
        if model is None:
            raise missing("model")
        if not isinstance(model, str):
            raise wrong_type("model", "model", "a string", model)
        if len(model) > MAX_MODEL_NAME:
            raise invalid("model", f"at most {MAX_MODEL_NAME} characters, got {len(model)}")
        max_tokens = None if self.counting else _max_tokens(body.get("max_tokens"))
        _unsupported(body)
        tools = _tools(body.get("tools"))
        choice = _tool_choice(body.get("tool_choice"), tools)
        messages = _system(body.get("system")) + _messages(body.get("messages"))
        return Turn(messages, tools, max_tokens, _stop(body.get("stop_sequences")), model,
                    optional_bool(body, "stream"), parse_calls=choice != "none")

    def error(self, status: int, code: str, message: str, kind: str, param: str | None) -> dict[str, Any]:
        return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error" if status >= 500 else
                                                                  "invalid_request_error"), "message": message}}

    def context_message(self, prompt_tokens: int | None, characters: int, limit: int) -> str:
        if prompt_tokens is None:
            return (f"prompt is too long: {characters} characters, more than {limit} tokens of this tokenizer can "
                    "hold (rollout.max_prompt_tokens)")
        return f"prompt is too long: {prompt_tokens} tokens > {limit} maximum (rollout.max_prompt_tokens)"

    async def answer(self, request: web.Request, turn: Turn, reply: Reply, model: str) -> web.StreamResponse:
        message = _message(reply, model)
        if not turn.stream:
            return web.json_response(message)
        async with EventStream(request) as stream:
            for event in _events(message):
                await stream.send(event, event["type"])
        return stream.response


# -- the request --------------------------------------------------------------------------------------------------
def _max_tokens(value: Any) -> int:
    if value is None:
        raise missing("max_tokens")
    if not is_int(value):
        raise wrong_type("max_tokens", "max_tokens", "an integer", value)
    if value < 1:
        raise invalid("max_tokens", f"it must be a positive integer, got {value}")
    return value


def _unsupported(body: dict[str, Any]) -> None:
    thinking = body.get("thinking")
    if thinking is not None and (not isinstance(thinking, dict) or thinking.get("type") != "disabled"):
        raise invalid("thinking", "extended thinking is not supported by the agentr1 gateway")
    for key in ("mcp_servers", "container", "output_format"):
        if body.get(key) is not None:
            raise invalid(key, "not supported by the agentr1 gateway")
    config = body.get("output_config")
    if isinstance(config, dict) and config.get("format") is not None:
        raise invalid("output_config.format", "the agentr1 gateway cannot constrain the model's output to a format")


def _text_blocks(value: Any, where: str) -> str:
    """A string, or an array of text blocks joined."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise wrong_type(where, where, "a string or an array of text blocks", value)
    texts = []
    for j, block in enumerate(value):
        texts.append(_text_block(block, f"{where}[{j}]"))
    return "".join(texts)


def _text_block(block: Any, where: str) -> str:
    if not isinstance(block, dict):
        raise wrong_type(where, where, "an object", block)
    if block.get("type") != "text":
        raise invalid(f"{where}.type", "only text blocks are supported here")
    text = block.get("text")
    if not isinstance(text, str):
        raise missing(f"{where}.text") if text is None else wrong_type(f"{where}.text", f"{where}.text", "a string",
                                                                        text)
    return text


def _system(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    return [{"role": "system", "content": _text_blocks(value, "system")}]


def _messages(value: Any) -> list[dict[str, Any]]:
    if value is None:
        raise missing("messages")
    if not isinstance(value, list):
        raise wrong_type("messages", "messages", "an array of messages", value)
    if not value:
        raise invalid("messages", "it must hold at least one message")
    out: list[dict[str, Any]] = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise wrong_type(where, where, "an object", message)
        role = message.get("role")
        if role is None:
            raise missing(f"{where}.role")
        if role not in ("user", "assistant"):
            raise invalid(f"{where}.role", f"{str(role)[:40]!r} is not one of user, assistant")
        content = message.get("content")
        if content is None:
            raise missing(f"{where}.content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
        elif not isinstance(content, list):
            raise wrong_type(f"{where}.content", f"{where}.content", "a string or an array of blocks", content)
        elif role == "assistant":
            out.append(_assistant(content, f"{where}.content"))
        else:
            out += _user(content, f"{where}.content")
    return out


def _assistant(blocks: list[Any], where: str) -> dict[str, Any]:
    texts, calls = [], []
    for j, block in enumerate(blocks):
        at = f"{where}[{j}]"
        if isinstance(block, dict) and block.get("type") == "tool_use":
            for key in ("id", "name"):
                check_name(block.get(key), f"{at}.{key}")
            arguments = block.get("input", {})
            if not isinstance(arguments, dict):
                raise wrong_type(f"{at}.input", f"{at}.input", "an object", arguments)
            check_nesting(arguments, f"{at}.input")
            calls.append({"id": block["id"], "type": "function",
                          "function": {"name": block["name"], "arguments": arguments}})
        else:
            texts.append(_text_block(block, at))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return message


def _user(blocks: list[Any], where: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for j, block in enumerate(blocks):
        at = f"{where}[{j}]"
        if isinstance(block, dict) and block.get("type") == "tool_result":
            if texts:
                out.append({"role": "user", "content": "".join(texts)})
                texts = []
            check_name(block.get("tool_use_id"), f"{at}.tool_use_id")
            result = block.get("content")
            text = "" if result is None else _text_blocks(result, f"{at}.content")
            if optional_bool(block, "is_error", f"{at}.is_error") and not text.startswith("Error"):
                text = f"Error: {text}" if text else "Error"
            out.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
        else:
            texts.append(_text_block(block, at))
    if texts or not out:
        out.append({"role": "user", "content": "".join(texts)})
    return out


def _tools(value: Any) -> list[dict[str, Any]]:
    out = []
    for at, tool in tool_objects(value):
        if tool.get("type") not in (None, "custom"):
            raise invalid(f"{at}.type", f"server tools ({str(tool['type'])[:40]}) are not supported; send client "
                          "tools ({\"name\", \"description\", \"input_schema\"})")
        check_name(tool.get("name"), f"{at}.name")
        if tool.get("description") is not None and not isinstance(tool["description"], str):
            raise wrong_type(f"{at}.description", f"{at}.description", "a string", tool["description"])
        schema = tool.get("input_schema")
        if schema is None:
            raise missing(f"{at}.input_schema")
        if not isinstance(schema, dict):
            raise wrong_type(f"{at}.input_schema", f"{at}.input_schema", "an object", schema)
        check_nesting(tool, at)
        out.append({"type": "function", "function": {"name": tool["name"], "description": tool.get("description"),
                                                     "parameters": schema}})
    return out


def _tool_choice(value: Any, tools: list[dict[str, Any]]) -> str:
    if value is None:
        return "auto"
    if not isinstance(value, dict):
        raise wrong_type("tool_choice", "tool_choice", "an object", value)
    kind = value.get("type")
    if kind not in ("auto", "any", "tool", "none"):
        raise invalid("tool_choice.type", f"{str(kind)[:40]!r} is not one of auto, any, tool, none")
    optional_bool(value, "disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use")
    if kind == "tool":
        check_name(value.get("name"), "tool_choice.name")
        if value["name"] not in {tool["function"]["name"] for tool in tools}:
            raise invalid("tool_choice.name", f"no tool named {value['name'][:60]!r} in tools")
    return kind


def _stop(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise wrong_type("stop_sequences", "stop_sequences", "an array of strings", value)
    if len(value) > MAX_STOP:
        raise invalid("stop_sequences", f"at most {MAX_STOP} stop sequences are allowed, got {len(value)}")
    for j, stop in enumerate(value):
        if not isinstance(stop, str):
            raise wrong_type(f"stop_sequences[{j}]", f"stop_sequences[{j}]", "a string", stop)
        if not stop:
            raise invalid(f"stop_sequences[{j}]", "a stop sequence cannot be empty")
    return list(value)


# -- the answer ---------------------------------------------------------------------------------------------------
def _message(reply: Reply, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.content}] if reply.content else []
    content += [{"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                for call in reply.calls]
    stop_reason = "stop_sequence" if reply.stop_sequence else STOP_REASONS[reply.finish]
    return {"id": new_id("msg_"), "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason, "stop_sequence": reply.stop_sequence,
            "usage": {"input_tokens": reply.prompt_tokens, "output_tokens": reply.completion_tokens}}


def _events(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream of ``message``: its start, each block's start, deltas and stop, the stop reason, the end."""
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": message["usage"]["input_tokens"], "output_tokens": 0}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append({"type": "content_block_start", "index": index, "content_block": {"type": "text",
                                                                                           "text": ""}})
            events += [{"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}
                       for piece in pieces(block["text"])]
        else:
            events.append({"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}})
            events += [{"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece}}
                       for piece in pieces(json.dumps(block["input"], ensure_ascii=False))]
        events.append({"type": "content_block_stop", "index": index})
    events.append({"type": "message_delta", "delta": {"stop_reason": message["stop_reason"],
                                                      "stop_sequence": message["stop_sequence"]},
                   "usage": {"output_tokens": message["usage"]["output_tokens"]}})
    events.append({"type": "message_stop"})
    return events
