"""OpenAI chat completions (``POST /v1/chat/completions``), plain and streamed.

The request is checked by ``agentr1_gateway.request``; its messages and tools are the shared conversation as they
are. The answer is a ``chat.completion``: with well-formed calls, ``content`` is the text outside them (or null),
``tool_calls`` carries them with ``call_...`` ids, and the finish reason is ``tool_calls``; otherwise ``content`` is
the whole text and the finish reason ``stop`` or ``length``. ``tool_choice: "none"`` leaves the reply unparsed (the
whole text is content); ``required`` and a named function are accepted but cannot be enforced (the engine samples
freely): the model's reply comes back as it is.

``stream: true`` sends the same reply as ``chat.completion.chunk`` events (``data: {chunk}`` lines, then
``data: [DONE]``): a chunk with the role, the content in pieces, each tool call as a chunk with its index, id, type
and name and then chunks of its arguments, a last chunk with the finish reason, and with
``stream_options.include_usage`` a chunk with no choices and the usage (every chunk before it has ``usage: null``).
The engine does not stream: the whole reply is generated first, then streamed.

Errors have OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from agentr1_gateway.protocols.core import EventStream, Protocol, Reply, Turn, new_id, pieces
from agentr1_gateway.request import parse_request


def error_body(message: str, kind: str = "invalid_request_error", code: str | None = None,
               param: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class OpenAIChat(Protocol):
    name = "openai_chat"

    def parse(self, raw: bytes) -> Turn:
        chat = parse_request(raw)
        return Turn(chat.messages, chat.tools, chat.max_tokens, chat.stop, chat.model, chat.stream,
                    parse_calls=chat.tool_choice != "none", options={"include_usage": chat.include_usage})

    def error(self, status: int, code: str, message: str, kind: str, param: str | None) -> dict[str, Any]:
        return error_body(message, kind, code, param)

    async def answer(self, request: web.Request, turn: Turn, reply: Reply, model: str) -> web.StreamResponse:
        result = completion(reply, model)
        if not turn.stream:
            return web.json_response(result)
        async with EventStream(request) as stream:
            for chunk in chunks(result, turn.options.get("include_usage", False)):
                await stream.send(chunk)
            await stream.send("[DONE]")
        return stream.response


def completion(reply: Reply, model: str) -> dict[str, Any]:
    """An OpenAI ``chat.completion`` object for ``reply``."""
    message: dict[str, Any] = {"role": "assistant", "content": (reply.content or None) if reply.calls else reply.text}
    if reply.calls:
        message["tool_calls"] = [{"id": call.id, "type": "function",
                                  "function": {"name": call.name, "arguments": call.arguments_json}}
                                 for call in reply.calls]
    return {
        "id": new_id("chatcmpl-"), "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish, "logprobs": None}],
        "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                  "total_tokens": reply.prompt_tokens + reply.completion_tokens},
    }


def chunks(result: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects that stream ``result`` (a ``completion``)."""
    head = {"id": result["id"], "object": "chat.completion.chunk", "created": result["created"],
            "model": result["model"]}
    if include_usage:
        head["usage"] = None

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}

    message, choice = result["choices"][0]["message"], result["choices"][0]
    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": piece}) for piece in pieces(message["content"] or "")]
    for index, call in enumerate(message.get("tool_calls", [])):
        out.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        out += [chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in pieces(call["function"]["arguments"])]
    out.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        out.append({**head, "choices": [], "usage": result["usage"]})
    return out
