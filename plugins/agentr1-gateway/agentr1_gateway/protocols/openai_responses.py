"""OpenAI Responses (``POST /v1/responses``), plain and streamed, with the episode's earlier responses kept for
``previous_response_id``.

The request, checked field by field (``BadRequest`` naming the field, as ``input[2].call_id``):

* ``input``: a string (one user message) or an array of items: ``message`` items (``{"role": "user" | "system" |
  "developer" | "assistant", "content": STRING | parts}``, ``type`` may be left out; parts ``input_text`` or
  ``output_text``), ``function_call`` (``{call_id, name, arguments: JSON STRING}``) and ``function_call_output``
  (``{call_id, output: STRING | input_text parts}``). Output items sent back as they came (with ``id``, ``status``,
  ``annotations``) are accepted. An assistant message and the function calls right after it are one assistant turn
  (a response's output); the gateway's own calls are shown to the model as the exact text it wrote.
* ``instructions``: the system message, first. ``previous_response_id``: the conversation of an earlier response
  of this episode (its input and output, each response's own input prepended in turn) goes before ``input``; as
  with OpenAI, the earlier ``instructions`` are not carried over. ``store: false`` keeps a response out of that.
* ``tools``: ``[{"type": "function", "name", "description", "parameters", "strict"}]`` (other tool types are
  refused); ``tool_choice`` ``auto``, ``none`` (the reply is left unparsed), ``required`` or ``{"type":
  "function", "name"}`` (accepted, not enforced); ``max_output_tokens`` (lowers the run's cap); ``stream``;
  ``parallel_tool_calls``; ``text.format`` ``{"type": "text"}``.
* ``reasoning``, ``temperature``, ``top_p``, ``metadata``, ``user``, ``include``, ``truncation`` and the rest are
  ignored (the run samples its way); ``background``, ``conversation``, ``prompt``, a ``text.format`` other than
  text and ``top_logprobs`` are refused by name.

The answer is a ``response`` whose ``output`` is a ``message`` item (``output_text``: the text outside the calls,
or all of it) when there is text or no call, then a ``function_call`` item per well-formed call (``call_...``
ids). A reply cut by the token cap is ``incomplete`` (``incomplete_details.reason: max_output_tokens``).
``stream: true`` sends the same response as events: ``response.created``, ``response.in_progress``, per item
``response.output_item.added``, its content (``response.content_part.added``, ``response.output_text.delta`` ...
``.done``, ``response.content_part.done``; or ``response.function_call_arguments.delta`` ... ``.done``) and
``response.output_item.done``, then ``response.completed`` (``response.incomplete`` when cut). The engine does
not stream: the whole reply is generated first. Errors have OpenAI's shape.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from agentr1_gateway.chat import BadRequest
from agentr1_gateway.protocols.core import EventStream, Protocol, Reply, Turn, new_id, pieces
from agentr1_gateway.protocols.openai_chat import error_body
from agentr1_gateway.request import (MAX_MODEL_NAME, check_name, check_nesting, invalid, is_int, load_body,
                                     missing, optional_bool, parse_arguments, tool_objects, wrong_type)

ROLES = ("user", "system", "developer", "assistant")
ECHOED = ("instructions", "previous_response_id", "max_output_tokens", "metadata", "temperature", "top_p", "user")


class OpenAIResponses(Protocol):
    name = "openai_responses"

    def __init__(self) -> None:
        self.conversations: dict[str, list[dict[str, Any]]] = {}  # stored response id -> its input and output items

    def parse(self, raw: bytes) -> Turn:
        body = load_body(raw)
        _unsupported(body)
        model = body.get("model")
        if model is not None and (not isinstance(model, str) or len(model) > MAX_MODEL_NAME):
            raise wrong_type("model", "model", "a string", model) if not isinstance(model, str) else invalid(
                "model", f"at most {MAX_MODEL_NAME} characters, got {len(model)}")
        earlier: list[dict[str, Any]] = []
        previous = body.get("previous_response_id")
        if previous is not None:
            if not isinstance(previous, str):
                raise wrong_type("previous_response_id", "previous_response_id", "a string", previous)
            if previous not in self.conversations:
                raise BadRequest(f"Previous response with id '{previous[:80]}' not found (this episode's responses "
                                 "stored with store: true are kept).", "previous_response_id",
                                 "previous_response_not_found")
            earlier = self.conversations[previous]
        items = _input(body.get("input"), allow_empty=bool(earlier))
        instructions = body.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise wrong_type("instructions", "instructions", "a string", instructions)
        tools = _tools(body.get("tools"))
        choice = _tool_choice(body.get("tool_choice"), tools)
        cap = body.get("max_output_tokens")
        if cap is not None and (not is_int(cap) or cap < 1):
            raise wrong_type("max_output_tokens", "max_output_tokens", "an integer", cap) if not is_int(cap) else \
                invalid("max_output_tokens", f"it must be a positive integer, got {cap}")
        stream, parallel = optional_bool(body, "stream"), body.get("parallel_tool_calls", True)
        optional_bool(body, "parallel_tool_calls")
        store = body.get("store", True)
        optional_bool(body, "store")
        messages = ([{"role": "system", "content": instructions}] if instructions else []) + _messages(
            earlier + items)
        echo = {key: body.get(key) for key in ECHOED}
        echo.update(tools=body.get("tools") or [], tool_choice=body.get("tool_choice") or "auto",
                    parallel_tool_calls=parallel is not False, store=store is not False)
        return Turn(messages, tools, cap, [], model or "", stream, parse_calls=choice != "none",
                    options={"items": earlier + items, "echo": echo})

    def error(self, status: int, code: str, message: str, kind: str, param: str | None) -> dict[str, Any]:
        return error_body(message, kind, code, param)

    async def answer(self, request: web.Request, turn: Turn, reply: Reply, model: str) -> web.StreamResponse:
        response = _response(reply, model, turn.options["echo"])
        if turn.options["echo"]["store"]:
            self.conversations[response["id"]] = turn.options["items"] + response["output"]
        if not turn.stream:
            return web.json_response(response)
        async with EventStream(request) as stream:
            for number, event in enumerate(_events(response)):
                await stream.send({**event, "sequence_number": number}, event["type"])
        return stream.response


# -- the request --------------------------------------------------------------------------------------------------
def _unsupported(body: dict[str, Any]) -> None:
    for key in ("background", "conversation", "prompt"):
        if body.get(key) not in (None, False):
            raise invalid(key, "not supported by the agentr1 gateway" + (
                "; send previous_response_id or the whole input" if key == "conversation" else ""))
    if body.get("top_logprobs") not in (None, 0):
        raise invalid("top_logprobs", "log-probabilities are not returned by the agentr1 gateway")
    text = body.get("text")
    if text is not None:
        if not isinstance(text, dict):
            raise wrong_type("text", "text", "an object", text)
        fmt = text.get("format")
        if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
            raise invalid("text.format", "only {\"type\": \"text\"} is supported: the gateway cannot constrain the "
                          "model's output to JSON")


def _input(value: Any, allow_empty: bool) -> list[dict[str, Any]]:
    """The request's items, checked (a string is one user message)."""
    if value is None:
        if allow_empty:
            return []
        raise missing("input")
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list):
        raise wrong_type("input", "input", "a string or an array of items", value)
    if not value and not allow_empty:
        raise invalid("input", "it must hold at least one item")
    for i, item in enumerate(value):
        _check_item(item, f"input[{i}]")
    return value


def _check_item(item: Any, where: str) -> None:
    if not isinstance(item, dict):
        raise wrong_type(where, where, "an object", item)
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        role = item.get("role")
        if role not in ROLES:
            raise missing(f"{where}.role") if role is None else invalid(
                f"{where}.role", f"{str(role)[:40]!r} is not one of {', '.join(ROLES)}")
        _text(item.get("content"), f"{where}.content", ("input_text", "output_text"))
    elif kind == "function_call":
        for key in ("call_id", "name"):
            check_name(item.get(key), f"{where}.{key}")
        parse_arguments(item.get("arguments"), f"{where}.arguments")
    elif kind == "function_call_output":
        check_name(item.get("call_id"), f"{where}.call_id")
        _text(item.get("output"), f"{where}.output", ("input_text", "output_text"))
    elif kind is None:
        raise missing(f"{where}.type")
    else:
        raise invalid(f"{where}.type", f"{str(kind)[:40]!r} items are not supported; send message, function_call "
                      "and function_call_output items")


def _text(value: Any, where: str, kinds: tuple[str, ...]) -> str:
    """A string, or the text of an array of text parts joined."""
    if value is None:
        raise missing(where)
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise wrong_type(where, where, "a string or an array of content parts", value)
    texts = []
    for j, part in enumerate(value):
        at = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise wrong_type(at, at, "an object", part)
        if part.get("type") not in kinds:
            raise invalid(f"{at}.type", f"only text parts ({', '.join(kinds)}) are supported")
        if not isinstance(part.get("text"), str):
            raise missing(f"{at}.text") if part.get("text") is None else wrong_type(f"{at}.text", f"{at}.text",
                                                                                    "a string", part["text"])
        texts.append(part["text"])
    return "".join(texts)


def _messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Checked items as chat messages: an assistant message and the calls right after it are one turn."""
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            out.append({"role": role, "content": _text(item["content"], "", ("input_text", "output_text"))})
        elif kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": parse_arguments(item.get("arguments"), "")}}
            if not out or out[-1]["role"] != "assistant":
                out.append({"role": "assistant", "content": ""})
            out[-1].setdefault("tool_calls", []).append(call)
        else:
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": _text(item["output"], "", ("input_text", "output_text"))})
    return out


def _tools(value: Any) -> list[dict[str, Any]]:
    out = []
    for at, tool in tool_objects(value):
        if tool.get("type") != "function":
            raise missing(f"{at}.type") if tool.get("type") is None else invalid(
                f"{at}.type", f"{str(tool['type'])[:40]!r} tools are not supported; send function tools")
        check_name(tool.get("name"), f"{at}.name")
        if tool.get("description") is not None and not isinstance(tool["description"], str):
            raise wrong_type(f"{at}.description", f"{at}.description", "a string", tool["description"])
        if tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
            raise wrong_type(f"{at}.parameters", f"{at}.parameters", "an object", tool["parameters"])
        optional_bool(tool, "strict", f"{at}.strict")
        check_nesting(tool, at)
        out.append({"type": "function", "function": {key: tool.get(key) for key in ("name", "description",
                                                                                    "parameters")}})
    return out


def _tool_choice(value: Any, tools: list[dict[str, Any]]) -> str:
    if value is None:
        return "auto"
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise invalid("tool_choice", f"{value[:40]!r} is not one of auto, none, required")
        return value
    if not isinstance(value, dict):
        raise wrong_type("tool_choice", "tool_choice", "a string or an object", value)
    if value.get("type") != "function":
        raise invalid("tool_choice.type", "only \"function\" is supported")
    check_name(value.get("name"), "tool_choice.name")
    if value["name"] not in {tool["function"]["name"] for tool in tools}:
        raise invalid("tool_choice.name", f"no tool named {value['name'][:60]!r} in tools")
    return "function"


# -- the answer ---------------------------------------------------------------------------------------------------
def _response(reply: Reply, model: str, echo: dict[str, Any]) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if reply.content or not reply.calls:
        output.append({"type": "message", "id": new_id("msg_"), "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": reply.content, "annotations": [],
                                    "logprobs": []}]})
    output += [{"type": "function_call", "id": new_id("fc_"), "call_id": call.id, "name": call.name,
                "arguments": call.arguments_json, "status": "completed"} for call in reply.calls]
    cut = reply.finish == "length"
    return {"id": new_id("resp_"), "object": "response", "created_at": int(time.time()),
            "status": "incomplete" if cut else "completed", "model": model, "output": output,
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None, "error": None,
            "text": {"format": {"type": "text"}}, "truncation": "disabled", "reasoning": None, **echo,
            "usage": {"input_tokens": reply.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": reply.completion_tokens,
                      "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": reply.prompt_tokens + reply.completion_tokens}}


def _events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream of ``response`` (without sequence numbers)."""
    started = {**response, "status": "in_progress", "output": [], "incomplete_details": None, "usage": None}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": started},
                                    {"type": "response.in_progress", "response": started}]
    for index, item in enumerate(response["output"]):
        at = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            part = item["content"][0]
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": {**item, "status": "in_progress", "content": []}})
            events.append({"type": "response.content_part.added", **at, "content_index": 0,
                           "part": {**part, "text": ""}})
            events += [{"type": "response.output_text.delta", **at, "content_index": 0, "delta": piece,
                        "logprobs": []} for piece in pieces(part["text"])]
            events.append({"type": "response.output_text.done", **at, "content_index": 0, "text": part["text"],
                           "logprobs": []})
            events.append({"type": "response.content_part.done", **at, "content_index": 0, "part": part})
        else:
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": {**item, "status": "in_progress", "arguments": ""}})
            events += [{"type": "response.function_call_arguments.delta", **at, "delta": piece}
                       for piece in pieces(item["arguments"])]
            events.append({"type": "response.function_call_arguments.done", **at, "name": item["name"],
                           "arguments": item["arguments"]})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    events.append({"type": final, "response": response})
    return events

