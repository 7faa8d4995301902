"""``EpisodeGateway``: one episode's model endpoint on 127.0.0.1, recording every model call.

The server runs on the rollout's event loop (aiohttp), so a request awaits the same engine the other episodes use
and is batched with them. It speaks the protocols of ``agentr1_gateway.protocols``: OpenAI chat completions (``POST
/v1/chat/completions``, plain or streamed), Anthropic Messages (``POST /v1/messages``, plain or streamed, and ``POST
/v1/messages/count_tokens``, which counts a prompt without calling the model), OpenAI Responses (``POST
/v1/responses``, plain or streamed, ``previous_response_id`` included) and ``GET /v1/models``. Every protocol
goes through one path (``_serve``): its parser turns the request into a ``Turn`` (the conversation as OpenAI chat
messages), the prompt is rendered and tokenised once from that, the engine answers, and the protocol writes the
answer in its own shape. It binds the loopback address only, refuses requests from any other address (403) and
requests without the episode's key (401; as a bearer token or as ``x-api-key``), and answers everything it cannot
serve with the protocol's error body (OpenAI's ``{"error": {"message", "type", "param", "code"}}``, Anthropic's
``{"type": "error", "error": {"type", "message"}}`` under ``/v1/messages``; never plain text): a malformed or
unsupported field (400 naming it, see ``agentr1_gateway.request``), a prompt longer than ``max_prompt_tokens`` (400,
code ``context_length_exceeded``), a body over ``MAX_BODY_BYTES`` (413, code ``request_too_large``), a call beyond
``max_calls`` (429, code ``max_turns``), a call after the episode ended (410, code ``episode_ended``), an unknown
path or method (404 / 405).

Nothing heavy runs on the shared loop: the body's JSON, its checks, the chat template and the tokenisation run in a
daemon thread each (``in_daemon_thread``: the rollout never waits for one at its end), and a prompt whose length
alone proves it too long (``agentr1_gateway.prompts.char_limit``) is refused before it is tokenised. So one
episode's huge prompt delays no other episode's request. The time a call spends in the gateway (its checks, its
tokenisation, the model) is counted by ``model_seconds``, so it never counts against the agent's own timeout.

Each served call is recorded as a ``Call``: the messages the model saw, the prompt ids sent to the engine, and the
engine's ``Action`` (response ids, sampling log-probs, finish reason), numbered in the order the calls arrived.
Nothing is re-tokenised: the ids are what the engine saw and returned. Sampling follows the run (``rollout`` or
``validation`` settings), not the request; a request's cap on new tokens can only lower the run's, and its stop
strings are added.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from aiohttp import web

from agentr1_core.mdp import Action, Observation
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.tool_formats import ToolFormat
from agentr1_core.tools import in_daemon_thread
from agentr1_gateway.chat import BadRequest, Issued, model_messages
from agentr1_gateway.prompts import char_limit, encode, render
from agentr1_gateway.protocols.anthropic_messages import AnthropicMessages
from agentr1_gateway.protocols.core import Protocol, Turn, parse_reply, read_reply
from agentr1_gateway.protocols.openai_chat import OpenAIChat
from agentr1_gateway.protocols.openai_responses import OpenAIResponses

__all__ = ["Call", "EpisodeGateway", "Refusal", "parse_reply", "turn_sampling"]

Respond = Callable[[list[int], SamplingParams], Awaitable[Action]]
MAX_BODY_BYTES = 16 * 1024 ** 2


class Refused(Exception):
    """A request the gateway answers with an error: ``(status, code, message, kind, param)``."""


@dataclass
class Call:
    """One served model call (of any protocol), in arrival order."""

    index: int
    observation: Observation
    prompt_ids: list[int]
    action: Action
    model: str = ""


@dataclass
class Refusal:
    """A call the gateway refused (what the agent's code saw)."""

    index: int
    status: int
    code: str
    message: str


@dataclass
class EpisodeGateway:
    respond: Respond  # prompt ids + sampling -> the engine's (or the expert's) action
    tokenizer: Any
    tool_format: ToolFormat
    sampling: SamplingParams
    max_prompt_tokens: int = 4096
    max_calls: int = 8
    model_name: str = "agentr1-policy"
    key: str = field(default_factory=lambda: f"agentr1-{secrets.token_hex(16)}")
    calls: list[Call] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    base_url: str = ""

    def __post_init__(self) -> None:
        self.issued = Issued()
        self.chat = OpenAIChat()
        self.anthropic = AnthropicMessages()
        self.responses = OpenAIResponses()  # keeps the episode's stored responses (previous_response_id)
        self._arrived = 0
        self._accepted = 0
        self._in_flight = 0
        self._busy_since = 0.0
        self._busy_seconds = 0.0
        self._runner: web.AppRunner | None = None
        self._ended = False

    async def start(self) -> str:
        """Serve on an ephemeral port of 127.0.0.1; returns the base URL (``http://127.0.0.1:PORT/v1``)."""
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/v1/chat/completions", self._handler(self.chat))
        app.router.add_post("/v1/messages", self._handler(self.anthropic))
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_post("/v1/responses", self._handler(self.responses))
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self.base_url

    async def close(self) -> None:
        """End the episode's endpoint: calls arriving from now on are refused (410), then the server stops."""
        self._ended = True
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- requests -----------------------------------------------------------------------------------------------
    def _protocol_at(self, path: str) -> Protocol:
        """The protocol whose error shape an answer at ``path`` has."""
        return self.anthropic if path.startswith("/v1/messages") else self.chat

    def _error(self, protocol: Protocol, status: int, code: str | None, message: str,
               kind: str = "invalid_request_error", param: str | None = None) -> web.Response:
        return web.json_response(protocol.error(status, code or "", message, kind, param), status=status)

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        protocol = self._protocol_at(request.path)
        try:
            loopback = ipaddress.ip_address(request.remote or "").is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            return self._error(protocol, 403, None, "the gateway only serves this machine", "permission_error")
        # OpenAI's clients send the key as a bearer token, Anthropic's as x-api-key
        headers = request.headers
        if headers.get("Authorization") != f"Bearer {self.key}" and headers.get("x-api-key") != self.key:
            return self._error(protocol, 401, "invalid_api_key", "missing or wrong episode key (the API key of this "
                               "episode)", "authentication_error")
        try:
            return await handler(request)
        except web.HTTPException as exc:  # an unknown path or method: the protocol's shape, not aiohttp's text
            if exc.status < 400:
                raise
            return self._error(protocol, exc.status, None, f"{exc.reason}: {request.method} {request.path}")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.model_name, "object": "model", "created": 0, "owned_by": "agentr1"}]})

    def _refuse(self, protocol: Protocol, index: int, status: int, code: str, message: str,
                kind: str = "invalid_request_error", param: str | None = None) -> web.Response:
        self.refusals.append(Refusal(index, status, code, message))
        return self._error(protocol, status, code, message, kind, param)

    def _handler(self, protocol: Protocol) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            index = self._arrived
            self._arrived += 1
            self._enter_model()
            try:
                return await self._serve(protocol, index, request)
            except Exception as exc:  # a bug of the gateway or the engine: still an answer the client can read
                return self._refuse(protocol, index, 500, "internal_error", f"the gateway failed: "
                                    f"{type(exc).__name__}: {exc}", "server_error")
            finally:
                self._leave_model()

        return handle

    async def _serve(self, protocol: Protocol, index: int, request: web.Request) -> web.StreamResponse:
        if self._ended:
            return self._ended_refusal(protocol, index)
        try:
            turn, messages, prompt_ids = await self._prompt(protocol, request, count_only=False)
        except Refused as refused:
            return self._refuse(protocol, index, *refused.args)
        if self._ended:
            return self._ended_refusal(protocol, index)
        if self._accepted >= self.max_calls:  # reached while this call was tokenised
            return self._max_calls_refusal(protocol, index)
        self._accepted += 1
        try:
            action = await self.respond(prompt_ids, turn_sampling(self.sampling, turn))
        except Exception as exc:  # the engine failed: the episode ends as engine_error, like an empty generation
            return self._refuse(protocol, index, 500, "generation_failed", f"generation failed: "
                                f"{type(exc).__name__}: {exc}", "server_error")
        if action.finish_reason == "error" or not action.token_ids:
            return self._refuse(protocol, index, 500, "generation_failed", "the model produced no tokens",
                                "server_error")
        self.calls.append(Call(index, Observation(messages=messages), prompt_ids, action, turn.model))
        reply = read_reply(turn, action, self.tool_format, len(prompt_ids), protocol.call_prefix)
        self.issued.remember(reply.text, reply.content, protocol.issued(reply))
        return await protocol.answer(request, turn, reply, self.model_name)

    async def _count_tokens(self, request: web.Request) -> web.Response:
        """Anthropic's ``count_tokens``: the prompt the request would be, counted. Not a model call: it is neither
        recorded nor counted against ``max_calls``, and its refusals end nothing."""
        self._enter_model()
        try:
            _, _, prompt_ids = await self._prompt(AnthropicMessages(counting=True), request, count_only=True)
        except Refused as refused:
            return self._error(self.anthropic, *refused.args)
        finally:
            self._leave_model()
        return web.json_response({"input_tokens": len(prompt_ids)})

    async def _prompt(self, protocol: Protocol, request: web.Request, count_only: bool
                      ) -> tuple[Turn, list[dict[str, str]], list[int]]:
        """The request's turn, the messages the model sees and their prompt ids; ``Refused`` with what to answer
        instead. The body's JSON, its checks, the chat template and the tokenisation run off the loop; a prompt
        whose length alone proves it too long is never tokenised. ``count_only``: no call is being made (a token
        count), so ``max_calls`` is not checked."""
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise Refused(413, "request_too_large", f"the request body is over the gateway's limit of "
                          f"{MAX_BODY_BYTES // 1024 ** 2} MiB") from None
        try:
            turn, messages, text, limit = await in_daemon_thread(lambda: self._prepare(protocol, raw),
                                                                 "agentr1-gateway-prepare")
        except BadRequest as exc:
            raise Refused(400, exc.code, str(exc), "invalid_request_error", exc.param) from None
        if not count_only and self._accepted >= self.max_calls:
            raise Refused(*self._max_calls_refusal_args())
        if limit is not None and len(text) > limit:  # too long whatever its tokens: never tokenised
            raise Refused(*self._context_refusal_args(protocol, None, len(text)))
        prompt_ids = await in_daemon_thread(lambda: encode(self.tokenizer, text), "agentr1-gateway-tokenize")
        if len(prompt_ids) > self.max_prompt_tokens:
            raise Refused(*self._context_refusal_args(protocol, len(prompt_ids), len(text)))
        return turn, messages, prompt_ids

    def _prepare(self, protocol: Protocol, raw: bytes) -> tuple[Turn, list[dict[str, str]], str, int | None]:
        """Off the loop: the checked request, the messages the model sees, their prompt text, and the most
        characters a prompt that fits can have."""
        turn = protocol.parse(raw)
        messages = model_messages(turn.messages, turn.tools, self.tool_format, self.issued)
        return turn, messages, render(self.tokenizer, messages), char_limit(self.tokenizer, self.max_prompt_tokens)

    def _context_refusal_args(self, protocol: Protocol, tokens: int | None, characters: int) -> tuple[Any, ...]:
        return (400, "context_length_exceeded", protocol.context_message(tokens, characters, self.max_prompt_tokens),
                "invalid_request_error", "messages")

    def _max_calls_refusal_args(self) -> tuple[Any, ...]:
        return (429, "max_turns", f"this episode reached its limit of {self.max_calls} model calls "
                "(rollout.max_turns)", "rate_limit_error")

    def _max_calls_refusal(self, protocol: Protocol, index: int) -> web.Response:
        return self._refuse(protocol, index, *self._max_calls_refusal_args())

    def _ended_refusal(self, protocol: Protocol, index: int) -> web.Response:
        return self._refuse(protocol, index, 410, "episode_ended", "this episode has ended; its endpoint takes no "
                            "more calls")

    def _enter_model(self) -> None:
        if self._in_flight == 0:
            self._busy_since = time.monotonic()
        self._in_flight += 1

    def _leave_model(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._busy_seconds += time.monotonic() - self._busy_since

    def model_seconds(self) -> float:
        """Wall seconds during which at least one of the episode's calls was in the gateway (its checks, its
        tokenisation, waiting for the model): time the agent's own code did not spend."""
        busy = self._busy_seconds
        if self._in_flight:
            busy += time.monotonic() - self._busy_since
        return busy


def turn_sampling(sampling: SamplingParams, turn: Turn) -> SamplingParams:
    """The run's sampling with the request's cap on new tokens (only ever lowering the run's) and stop strings."""
    if turn.max_tokens is not None:
        sampling = dataclasses.replace(sampling, max_new_tokens=min(turn.max_tokens, sampling.max_new_tokens))
    if turn.stop:
        sampling = dataclasses.replace(sampling, stop=list(sampling.stop) + turn.stop)
    return sampling
