"""What every protocol shares: the request as one model call (``Turn``), the model's answer read once (``Reply``),
the ``Protocol`` interface the gateway serves through, and Server-Sent Events.

A protocol's parser turns its request into a ``Turn``: the conversation as OpenAI chat messages and function tools
(what ``agentr1_gateway.chat.model_messages`` reads), plus the few settings the gateway uses (a cap on new tokens,
stop strings, streaming). The gateway renders and tokenises that once, whatever protocol carried it, so the same
conversation is the same prompt. The model's text is parsed once by the tool format into a ``Reply``; each protocol
only writes it in its own shape, with tool-call ids of its own style that the gateway remembers (``Issued``), so a
later request that sends the reply back is shown to the model as the exact text it wrote.

Streaming: the engine does not stream, so a streamed answer is the whole reply, generated first and then sent as
the protocol's events (text in pieces of ``PIECE`` characters). Every refusal comes before the stream starts, with
its status code, as a plain JSON error.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

from aiohttp import web

from agentr1_core.mdp import Action
from agentr1_core.tool_formats import ParsedTurn, ToolFormat

PIECE = 24  # characters of text (or of a call's JSON arguments) per streamed delta


@dataclass
class Turn:
    """One model call, as any protocol asks for it."""

    messages: list[dict[str, Any]]  # OpenAI chat messages, checked; tool-call arguments parsed
    tools: list[dict[str, Any]] = field(default_factory=list)  # OpenAI function tools
    max_tokens: int | None = None  # lowers the run's cap on new tokens, never raises it
    stop: list[str] = field(default_factory=list)  # added to the run's stop strings
    model: str = ""  # what the request asked for (recorded with the step)
    stream: bool = False
    parse_calls: bool = True  # False where the request allows no tool call (tool_choice none): all text
    options: dict[str, Any] = field(default_factory=dict)  # what only the protocol's own answer reads


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: Any  # the parsed arguments (an object, as the model wrote them)

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass
class Reply:
    """The model's answer to one ``Turn``, read once."""

    text: str  # everything the model wrote
    content: str  # the text outside the tool calls when there are calls, else all of it
    calls: list[ToolCall]  # the well-formed calls, with ids issued for this reply
    finish: str  # "stop", "length" (the token cap) or "tool_calls"
    stop_sequence: str | None  # the request's stop string the model ended on, if one
    prompt_tokens: int
    completion_tokens: int


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def read_reply(turn: Turn, action: Action, tool_format: ToolFormat, prompt_tokens: int, call_prefix: str) -> Reply:
    """``action`` (the engine's answer) as a ``Reply``: its calls parsed by the tool format (none when the request
    allows none), each well-formed one with a fresh id ``call_prefix...``."""
    parsed = parse_reply(tool_format, action.text) if turn.parse_calls else ParsedTurn(content=action.text, calls=[])
    calls = [ToolCall(new_id(call_prefix), c.name, c.arguments) for c in parsed.calls if c.error is None]
    finish = "tool_calls" if calls else ("length" if action.finish_reason == "length" else "stop")
    stop_sequence = None
    if finish == "stop" and turn.stop:  # an engine may keep the stop string or drop it: look at the tail
        stop_sequence = next((s for s in turn.stop if s in action.text[-(len(s) + 8):]), None)
    return Reply(action.text, parsed.content if calls else action.text, calls, finish, stop_sequence, prompt_tokens,
                 len(action.token_ids))


def parse_reply(tool_format: ToolFormat, text: str) -> ParsedTurn:
    """The model's text parsed for tool calls; a text the parser cannot walk (JSON nested past Python's recursion
    limit) is plain content."""
    try:
        return tool_format.parse(text)
    except RecursionError:
        return ParsedTurn(content=text, calls=[])


def pieces(text: str, size: int = PIECE) -> Iterator[str]:
    """``text`` in consecutive pieces of at most ``size`` characters (none for an empty text)."""
    for start in range(0, len(text), size):
        yield text[start:start + size]


class Protocol:
    """One API the gateway speaks. ``parse`` runs off the event loop; the rest on it."""

    name = ""
    call_prefix = "call_"  # the style of the tool-call ids it issues

    def parse(self, raw: bytes) -> Turn:
        """The request's ``Turn``; ``BadRequest`` naming the field that is wrong or not supported."""
        raise NotImplementedError

    def error(self, status: int, code: str, message: str, kind: str, param: str | None) -> dict[str, Any]:
        """The protocol's error body for a refusal."""
        raise NotImplementedError

    def context_message(self, prompt_tokens: int | None, characters: int, limit: int) -> str:
        """What a refusal of a prompt over the context says."""
        size = f"{prompt_tokens} tokens" if prompt_tokens is not None else (
            f"{characters} characters, more than {limit} tokens of this tokenizer can hold")
        return f"the prompt has {size}; this model's limit here is {limit} tokens (rollout.max_prompt_tokens)"

    async def answer(self, request: web.Request, turn: Turn, reply: Reply, model: str) -> web.StreamResponse:
        """The protocol's answer (JSON, or its events when ``turn.stream``)."""
        raise NotImplementedError

    def issued(self, reply: Reply) -> list[tuple[str, str]]:
        """The ``(id, name)`` of each call the agent got, for ``Issued.remember``."""
        return [(call.id, call.name) for call in reply.calls]


class EventStream:
    """A Server-Sent Events answer: ``send`` writes one event (``event:`` line when named), ``done`` ends it."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                                    "Cache-Control": "no-cache"})

    async def __aenter__(self) -> "EventStream":
        await self.response.prepare(self.request)
        return self

    async def send(self, data: Any, event: str | None = None) -> None:
        payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        head = f"event: {event}\n" if event else ""
        await self.response.write(f"{head}data: {payload}\n\n".encode())

    async def __aexit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if kind is None:
            await self.response.write_eof()
        return kind is not None and issubclass(kind, ConnectionResetError)  # the client left: the call stays recorded
