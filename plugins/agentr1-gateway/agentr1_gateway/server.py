"""``EpisodeGateway``: one episode's OpenAI-compatible endpoint on 127.0.0.1, recording every completion call.

The server runs on the rollout's event loop (aiohttp), so a request awaits the same engine the other episodes use
and is batched with them. It serves ``POST /v1/chat/completions`` and ``GET /v1/models``, binds the loopback
address only, refuses requests from any other address (403) and requests without the episode's key (401), and
answers everything it cannot serve with OpenAI's error body (``{"error": {"message", "type", "param", "code"}}``,
never plain text): a malformed request (400 naming the field, see ``agentr1_gateway.request``; ``stream: true`` and
``n > 1`` included), a prompt longer than ``max_prompt_tokens`` (400, code ``context_length_exceeded``), a body over
``MAX_BODY_BYTES`` (413, code ``request_too_large``), a call beyond ``max_calls`` (429, code ``max_turns``), a call
after the episode ended (410, code ``episode_ended``), an unknown path or method (404 / 405).

Nothing heavy runs on the shared loop: the body's JSON, its checks, the chat template and the tokenisation run in a
daemon thread each (``in_daemon_thread``: the rollout never waits for one at its end), and a prompt whose length
alone proves it too long (``agentr1_gateway.prompts.char_limit``) is refused before it is tokenised. So one
episode's huge prompt delays no other episode's request. The time a call spends in the gateway (its checks, its
tokenisation, the model) is counted by ``model_seconds``, so it never counts against the agent's own timeout.

Each served call is recorded as a ``Call``: the messages the model saw, the prompt ids sent to the engine, and the
engine's ``Action`` (response ids, sampling log-probs, finish reason), numbered in the order the calls arrived.
Nothing is re-tokenised: the ids are what the engine saw and returned. Sampling follows the run (``rollout`` or
``validation`` settings), not the request; a request's ``max_tokens`` can only lower the run's cap, and its ``stop``
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
from agentr1_core.tool_formats import ParsedTurn, ToolFormat
from agentr1_core.tools import in_daemon_thread
from agentr1_gateway.chat import BadRequest, Issued, completion, error_body, model_messages, openai_tool_calls
from agentr1_gateway.prompts import char_limit, encode, render
from agentr1_gateway.request import ChatRequest, parse_request

Respond = Callable[[list[int], SamplingParams], Awaitable[Action]]
MAX_BODY_BYTES = 16 * 1024 ** 2


@dataclass
class Call:
    """One served completion call, in arrival order."""

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
        app.router.add_post("/v1/chat/completions", self._chat)
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
    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            loopback = ipaddress.ip_address(request.remote or "").is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            return web.json_response(error_body("the gateway only serves this machine", "permission_error"),
                                     status=403)
        if request.headers.get("Authorization", "") != f"Bearer {self.key}":
            return web.json_response(error_body("missing or wrong episode key (the API key of this episode)",
                                                "authentication_error", "invalid_api_key"), status=401)
        try:
            return await handler(request)
        except web.HTTPException as exc:  # an unknown path or method: OpenAI's shape, not aiohttp's text
            if exc.status < 400:
                raise
            return web.json_response(error_body(f"{exc.reason}: {request.method} {request.path}"), status=exc.status)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.model_name, "object": "model", "created": 0, "owned_by": "agentr1"}]})

    def _refuse(self, index: int, status: int, code: str, message: str, kind: str = "invalid_request_error",
                param: str | None = None) -> web.Response:
        self.refusals.append(Refusal(index, status, code, message))
        return web.json_response(error_body(message, kind, code, param), status=status)

    async def _chat(self, request: web.Request) -> web.Response:
        index = self._arrived
        self._arrived += 1
        self._enter_model()
        try:
            return await self._serve(index, request)
        except Exception as exc:  # a bug of the gateway or the engine: still an answer the agent's client can read
            return self._refuse(index, 500, "internal_error", f"the gateway failed: {type(exc).__name__}: {exc}",
                                "server_error")
        finally:
            self._leave_model()

    async def _serve(self, index: int, request: web.Request) -> web.Response:
        if self._ended:
            return self._ended_refusal(index)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._refuse(index, 413, "request_too_large", f"the request body is over the gateway's limit of "
                                f"{MAX_BODY_BYTES // 1024 ** 2} MiB")
        try:
            chat, messages, text, limit = await in_daemon_thread(lambda: self._prepare(raw), "agentr1-gateway-prepare")
        except BadRequest as exc:
            return self._refuse(index, 400, exc.code, str(exc), param=exc.param)
        if self._accepted >= self.max_calls:
            return self._max_calls_refusal(index)
        if limit is not None and len(text) > limit:  # too long whatever its tokens: never tokenised
            return self._context_refusal(index, f"the prompt has {len(text)} characters, more than "
                                         f"{self.max_prompt_tokens} tokens of this tokenizer can hold")
        prompt_ids = await in_daemon_thread(lambda: encode(self.tokenizer, text), "agentr1-gateway-tokenize")
        if len(prompt_ids) > self.max_prompt_tokens:
            return self._context_refusal(index, f"the prompt has {len(prompt_ids)} tokens")
        if self._ended:
            return self._ended_refusal(index)
        if self._accepted >= self.max_calls:  # reached while this call was tokenised
            return self._max_calls_refusal(index)
        self._accepted += 1
        try:
            action = await self.respond(prompt_ids, chat_sampling(self.sampling, chat))
        except Exception as exc:  # the engine failed: the episode ends as engine_error, like an empty generation
            return self._refuse(index, 500, "generation_failed", f"generation failed: {type(exc).__name__}: {exc}",
                                "server_error")
        if action.finish_reason == "error" or not action.token_ids:
            return self._refuse(index, 500, "generation_failed", "the model produced no tokens", "server_error")
        observation = Observation(messages=messages)
        self.calls.append(Call(index, observation, prompt_ids, action, chat.model))
        turn = parse_reply(self.tool_format, action.text)
        calls = openai_tool_calls(turn)
        result = completion(action.text, turn, calls, action.finish_reason, self.model_name, len(prompt_ids),
                            len(action.token_ids))
        self.issued.remember(action.text, result["choices"][0]["message"]["content"], calls)
        return web.json_response(result)

    def _prepare(self, raw: bytes) -> tuple[ChatRequest, list[dict[str, str]], str, int | None]:
        """Off the loop: the checked request, the messages the model sees, their prompt text, and the most
        characters a prompt that fits can have."""
        chat = parse_request(raw)
        messages = model_messages(chat.messages, chat.tools, self.tool_format, self.issued)
        return chat, messages, render(self.tokenizer, messages), char_limit(self.tokenizer, self.max_prompt_tokens)

    def _context_refusal(self, index: int, size: str) -> web.Response:
        return self._refuse(index, 400, "context_length_exceeded", f"{size}; this model's limit here is "
                            f"{self.max_prompt_tokens} tokens (rollout.max_prompt_tokens)", param="messages")

    def _max_calls_refusal(self, index: int) -> web.Response:
        return self._refuse(index, 429, "max_turns", f"this episode reached its limit of {self.max_calls} model "
                            "calls (rollout.max_turns)", "rate_limit_error")

    def _ended_refusal(self, index: int) -> web.Response:
        return self._refuse(index, 410, "episode_ended", "this episode has ended; its endpoint takes no more calls")

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


def chat_sampling(sampling: SamplingParams, chat: ChatRequest) -> SamplingParams:
    """The run's sampling with the request's ``max_tokens`` (only ever lowering the cap) and ``stop`` strings."""
    if chat.max_tokens is not None:
        sampling = dataclasses.replace(sampling, max_new_tokens=min(chat.max_tokens, sampling.max_new_tokens))
    if chat.stop:
        sampling = dataclasses.replace(sampling, stop=list(sampling.stop) + chat.stop)
    return sampling


def parse_reply(tool_format: ToolFormat, text: str) -> ParsedTurn:
    """The model's text parsed for tool calls; a text the parser cannot walk (JSON nested past Python's recursion
    limit) is plain content."""
    try:
        return tool_format.parse(text)
    except RecursionError:
        return ParsedTurn(content=text, calls=[])
