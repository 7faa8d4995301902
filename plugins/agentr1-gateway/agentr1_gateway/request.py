"""A chat-completions request body, parsed and checked field by field before the gateway uses any of it.

``parse_request(raw)`` turns the body's bytes into a ``ChatRequest`` or raises ``BadRequest`` naming the field in
OpenAI's form (``param``: ``messages[2].tool_calls[0].function.name``), with OpenAI's codes (``invalid_type``,
``missing_required_parameter``, ``invalid_value``; ``invalid_json`` for a body that is not JSON). Every field the
gateway reads is checked here:

* ``messages``: a non-empty array of objects; ``role`` one of ``ROLES``; ``content`` a string, null, or an array of
  ``{"type": "text", "text": STRING}`` parts; an assistant's ``tool_calls`` an array of
  ``{"id": STRING, "type": "function", "function": {"name": NON-EMPTY STRING, "arguments": JSON STRING}}`` (``id``
  and ``type`` may be left out, ``arguments`` may be an object); a tool message's ``tool_call_id`` and ``name``
  strings.
* ``tools``: an array of ``{"type": "function", "function": {"name": ..., "description": STRING,
  "parameters": OBJECT, "strict": BOOLEAN}}``.
* ``stream`` and ``parallel_tool_calls`` (booleans), ``stream_options`` (``{"include_usage": BOOLEAN}``), ``n``
  (only 1), ``max_tokens`` and ``max_completion_tokens`` (positive integers; the smaller one counts), ``stop`` (a
  string or up to ``MAX_STOP`` non-empty strings), ``model`` (a string of at most ``MAX_MODEL_NAME`` characters),
  ``tool_choice`` (``auto``, ``none``, ``required``, or ``{"type": "function", "function": {"name": ...}}`` naming
  one of the tools).

Fields whose meaning the gateway cannot give are refused by name: a ``response_format`` other than
``{"type": "text"}``, ``logprobs: true``, ``top_logprobs``, ``functions``/``function_call`` (the legacy form of
tools), ``audio``, ``modalities`` other than text, ``prediction``, ``web_search_options``. The other fields
(``temperature``, ``top_p``, ``seed``, ``user``, ``metadata``, ``store``, ...) are sampling or bookkeeping settings
that the run decides, and are ignored whatever they hold.

The helpers at the end (``wrong_type``, ``missing``, ``invalid``, ``check_nesting``, ...) build the same errors for
the other protocols' parsers.

A body nested deeper than Python's JSON parser allows is refused as ``invalid_json``; a tool or tool-call arguments
nested more than ``MAX_NESTING`` levels (they are written into the prompt with ``json.dumps``, which recurses) is
refused too. A tool call's ``arguments`` string is replaced by its parsed value in the returned messages.

Pure: no I/O. The gateway runs it off the event loop (a body may be megabytes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agentr1_gateway.chat import ROLES, BadRequest

MAX_NESTING = 64  # levels of a tool's schema or a call's arguments
MAX_STOP = 4  # stop strings per request, as OpenAI's API
MAX_MODEL_NAME = 256  # characters of the request's model (recorded with every step)


@dataclass
class ChatRequest:
    """A request that passed every check: the fields the gateway reads, and nothing else."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    model: str = ""
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage
    tool_choice: Any = "auto"  # "auto", "none", "required" or {"type": "function", "function": {"name": ...}}


def load_body(raw: bytes) -> dict[str, Any]:
    """The JSON object in ``raw``; ``BadRequest`` (``invalid_json``, or ``invalid_type`` for a non-object)."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise BadRequest("the request body is not usable JSON: it nests arrays or objects too deeply",
                         code="invalid_json") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a number too long to convert
        raise BadRequest(f"the request body is not JSON ({exc})", code="invalid_json") from None
    if not isinstance(body, dict):
        raise wrong_type(None, "the request body", "a JSON object", body)
    return body


def parse_request(raw: bytes) -> ChatRequest:
    """The checked request in ``raw`` (a JSON body); ``BadRequest`` naming the first field that is wrong."""
    body = load_body(raw)
    stream = optional_bool(body, "stream")
    n = body.get("n")
    if n is not None:
        if not is_int(n):
            raise wrong_type("n", "n", "an integer", n)
        if n != 1:
            raise invalid("n", f"only n = 1 is supported, got {n}")
    _unsupported(body)
    include_usage = False
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise wrong_type("stream_options", "stream_options", "an object", options)
        include_usage = optional_bool(options, "include_usage", "stream_options.include_usage")
    optional_bool(body, "parallel_tool_calls")
    tools = _tools(body.get("tools"))
    return ChatRequest(messages=_messages(body.get("messages")), tools=tools, max_tokens=_max_tokens(body),
                       stop=_stop(body.get("stop")), model=_model(body.get("model")), stream=stream,
                       include_usage=include_usage, tool_choice=_tool_choice(body.get("tool_choice"), tools))


def _unsupported(body: dict[str, Any]) -> None:
    """``BadRequest`` for a field whose meaning the gateway cannot give (it samples the run's way, text only)."""
    response_format = body.get("response_format")
    if response_format is not None:
        if not isinstance(response_format, dict):
            raise wrong_type("response_format", "response_format", "an object", response_format)
        if response_format.get("type") != "text":
            raise invalid("response_format", "only {\"type\": \"text\"} is supported: the gateway cannot constrain "
                          "the model's output to JSON")
    if body.get("logprobs") not in (None, False):
        raise invalid("logprobs", "log-probabilities are not returned by the agentr1 gateway; leave logprobs unset")
    if body.get("top_logprobs") not in (None, 0):
        raise invalid("top_logprobs", "log-probabilities are not returned by the agentr1 gateway")
    for key in ("functions", "function_call", "audio", "prediction", "web_search_options"):
        if body.get(key) is not None:
            raise invalid(key, "not supported by the agentr1 gateway" + (
                "; send tools and tool_choice instead" if key.startswith("function") else ""))
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise invalid("modalities", "only [\"text\"] is supported")


def _tool_choice(value: Any, tools: list[dict[str, Any]]) -> Any:
    if value is None:
        return "auto"
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise invalid("tool_choice", f"{value[:40]!r} is not one of auto, none, required")
        if value == "required" and not tools:
            raise invalid("tool_choice", "required needs tools")
        return value
    if not isinstance(value, dict):
        raise wrong_type("tool_choice", "tool_choice", "a string or an object", value)
    if value.get("type") != "function":
        raise invalid("tool_choice.type", "only \"function\" is supported")
    function = value.get("function")
    if not isinstance(function, dict):
        raise missing("tool_choice.function") if function is None else wrong_type(
            "tool_choice.function", "tool_choice.function", "an object", function)
    check_name(function.get("name"), "tool_choice.function.name")
    if function["name"] not in {tool["function"]["name"] for tool in tools}:
        raise invalid("tool_choice.function.name", f"no tool named {function['name'][:60]!r} in tools")
    return value


def optional_bool(body: dict[str, Any], key: str, param: str | None = None) -> bool:
    """``body[key]`` as a boolean (False when absent or null); ``BadRequest`` naming ``param`` otherwise."""
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise wrong_type(param or key, param or key, "a boolean", value)
    return value


# -- messages -----------------------------------------------------------------------------------------------------
def _messages(value: Any) -> list[dict[str, Any]]:
    if value is None:
        raise missing("messages")
    if not isinstance(value, list):
        raise wrong_type("messages", "messages", "an array of messages", value)
    if not value:
        raise invalid("messages", "it must hold at least one message")
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise wrong_type(where, where, "an object", message)
        role = message.get("role")
        if role is None:
            raise missing(f"{where}.role")
        if not isinstance(role, str):
            raise wrong_type(f"{where}.role", f"{where}.role", "a string", role)
        if role not in ROLES:
            raise invalid(f"{where}.role", f"{role[:40]!r} is not one of {', '.join(ROLES)}")
        _content(message.get("content"), f"{where}.content")
        if role == "assistant":
            _tool_calls(message.get("tool_calls"), f"{where}.tool_calls")
        if role == "tool":
            for key in ("tool_call_id", "name"):
                if message.get(key) is not None and not isinstance(message[key], str):
                    raise wrong_type(f"{where}.{key}", f"{where}.{key}", "a string", message[key])
    return value


def _content(value: Any, where: str) -> None:
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, list):
        raise wrong_type(where, where, "a string or an array of text parts", value)
    for j, part in enumerate(value):
        at = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise wrong_type(at, at, "an object", part)
        if part.get("type") != "text":
            raise invalid(f"{at}.type", "only text content parts ({\"type\": \"text\", \"text\": ...}) are "
                           "supported")
        if not isinstance(part.get("text"), str):
            if part.get("text") is None:
                raise missing(f"{at}.text")
            raise wrong_type(f"{at}.text", f"{at}.text", "a string", part["text"])


def _tool_calls(value: Any, where: str) -> None:
    if value is None:
        return
    if not isinstance(value, list):
        raise wrong_type(where, where, "an array of tool calls", value)
    for j, call in enumerate(value):
        at = f"{where}[{j}]"
        if not isinstance(call, dict):
            raise wrong_type(at, at, "an object", call)
        if call.get("id") is not None and not isinstance(call["id"], str):
            raise wrong_type(f"{at}.id", f"{at}.id", "a string", call["id"])
        if call.get("type") is not None and call["type"] != "function":
            raise invalid(f"{at}.type", "only \"function\" tool calls are supported")
        function = call.get("function")
        if function is None:
            raise missing(f"{at}.function")
        if not isinstance(function, dict):
            raise wrong_type(f"{at}.function", f"{at}.function", "an object", function)
        check_name(function.get("name"), f"{at}.function.name")
        function["arguments"] = parse_arguments(function.get("arguments"), f"{at}.function.arguments")


def parse_arguments(value: Any, where: str) -> Any:
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except RecursionError:
            raise invalid(where, f"it nests more than {MAX_NESTING} levels deep") from None
        except ValueError as exc:
            raise invalid(where, f"it must be a JSON string of the call's arguments ({exc})") from None
    elif not isinstance(value, dict):
        raise wrong_type(where, where, "a JSON string", value)
    check_nesting(value, where)
    return value


# -- tools and scalars --------------------------------------------------------------------------------------------
def tool_objects(value: Any) -> list[tuple[str, dict[str, Any]]]:
    """A request's ``tools`` as ``(where, tool)`` pairs, each checked to be an object (every protocol's tools are an
    array of objects; what an object holds is the protocol's own); none for a missing ``tools``."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise wrong_type("tools", "tools", "an array of tools", value)
    pairs = []
    for i, tool in enumerate(value):
        at = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise wrong_type(at, at, "an object", tool)
        pairs.append((at, tool))
    return pairs


def _tools(value: Any) -> list[dict[str, Any]]:
    for at, tool in tool_objects(value):
        if tool.get("type") != "function":
            if tool.get("type") is None:
                raise missing(f"{at}.type")
            raise invalid(f"{at}.type", "only \"function\" tools are supported")
        function = tool.get("function")
        if function is None:
            raise missing(f"{at}.function")
        if not isinstance(function, dict):
            raise wrong_type(f"{at}.function", f"{at}.function", "an object", function)
        check_name(function.get("name"), f"{at}.function.name")
        if function.get("description") is not None and not isinstance(function["description"], str):
            raise wrong_type(f"{at}.function.description", f"{at}.function.description", "a string",
                              function["description"])
        optional_bool(function, "strict", f"{at}.function.strict")
        if function.get("parameters") is not None and not isinstance(function["parameters"], dict):
            raise wrong_type(f"{at}.function.parameters", f"{at}.function.parameters", "an object",
                              function["parameters"])
        check_nesting(tool, at)
    return value or []


def _max_tokens(body: dict[str, Any]) -> int | None:
    caps = []
    for key in ("max_completion_tokens", "max_tokens"):
        cap = body.get(key)
        if cap is None:
            continue
        if not is_int(cap):
            raise wrong_type(key, key, "an integer", cap)
        if cap < 1:
            raise invalid(key, f"it must be a positive integer, got {cap}")
        caps.append(cap)
    return min(caps) if caps else None


def _stop(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list):
        raise wrong_type("stop", "stop", "a string or an array of strings", value)
    if len(stops) > MAX_STOP:
        raise invalid("stop", f"at most {MAX_STOP} stop strings are allowed, got {len(stops)}")
    for j, stop in enumerate(stops):
        at = "stop" if isinstance(value, str) else f"stop[{j}]"
        if not isinstance(stop, str):
            raise wrong_type(at, at, "a string", stop)
        if not stop:
            raise invalid(at, "a stop string cannot be empty")
    return list(stops)


def _model(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise wrong_type("model", "model", "a string", value)
    if len(value) > MAX_MODEL_NAME:
        raise invalid("model", f"at most {MAX_MODEL_NAME} characters, got {len(value)}")
    return value


def check_name(value: Any, where: str) -> None:
    if value is None:
        raise missing(where)
    if not isinstance(value, str):
        raise wrong_type(where, where, "a string", value)
    if not value:
        raise invalid(where, "a name cannot be empty")


def check_nesting(value: Any, where: str) -> None:
    """``BadRequest`` when ``value`` nests arrays or objects more than ``MAX_NESTING`` levels (walked without
    recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_NESTING:
            raise invalid(where, f"it nests more than {MAX_NESTING} levels deep")
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


# -- errors -------------------------------------------------------------------------------------------------------
def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def wrong_type(param: str | None, name: str, expected: str, value: Any) -> BadRequest:
    return BadRequest(f"Invalid type for '{name}': expected {expected}, but got {json_kind(value)}.", param,
                      "invalid_type")


def missing(param: str) -> BadRequest:
    return BadRequest(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")


def invalid(param: str, why: str) -> BadRequest:
    return BadRequest(f"Invalid value for '{param}': {why}.", param, "invalid_value")
