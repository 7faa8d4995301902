"""``EpisodeGateway``: one episode's OpenAI-compatible endpoint on 127.0.0.1, recording every completion call.

The server runs on the rollout's event loop (aiohttp), so a request awaits the same engine the other episodes use
and is batched with them. It serves ``POST /v1/chat/completions`` and ``GET /v1/models``, binds the loopback
address only, refuses requests from any other address (403) and requests without the episode's key (401), and
answers what it cannot serve with an OpenAI-style error body: a malformed request (400), a prompt longer than
``max_prompt_tokens`` (400, code ``context_length_exceeded``), a call beyond ``max_calls`` (429, code
``max_turns``). ``stream: true`` is not supported (400).

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

from agentr1_core.flows import render_prompt
from agentr1_core.mdp import Action, Observation
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.tool_formats import ToolFormat
from agentr1_gateway.chat import BadRequest, Issued, completion, error_body, model_messages, openai_tool_calls

Respond = Callable[[list[int], SamplingParams], Awaitable[Action]]


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

    async def start(self) -> str:
        """Serve on an ephemeral port of 127.0.0.1; returns the base URL (``http://127.0.0.1:PORT/v1``)."""
        app = web.Application(middlewares=[self._guard], client_max_size=16 * 1024 ** 2)
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
        return await handler(request)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.model_name, "object": "model", "created": 0, "owned_by": "agentr1"}]})

    def _refuse(self, index: int, status: int, code: str, message: str, kind: str) -> web.Response:
        self.refusals.append(Refusal(index, status, code, message))
        return web.json_response(error_body(message, kind, code), status=status)

    async def _chat(self, request: web.Request) -> web.Response:
        index = self._arrived
        self._arrived += 1
        try:
            body = await request.json()
        except ValueError:
            return self._refuse(index, 400, "invalid_json", "the request body is not JSON", "invalid_request_error")
        try:
            if not isinstance(body, dict):
                raise BadRequest("the request body must be a JSON object")
            if body.get("stream"):
                raise BadRequest("stream: true is not supported by the agentr1 gateway")
            if body.get("n", 1) != 1:
                raise BadRequest("only n = 1 is supported")
            messages = model_messages(body.get("messages"), body.get("tools"), self.tool_format, self.issued)
            sampling = self._sampling(body)
        except BadRequest as exc:
            return self._refuse(index, 400, "invalid_request", str(exc), "invalid_request_error")
        if self._accepted >= self.max_calls:
            return self._refuse(index, 429, "max_turns", f"this episode reached its limit of {self.max_calls} "
                                "model calls (rollout.max_turns)", "rate_limit_error")
        observation = Observation(messages=messages)
        prompt_ids = render_prompt(self.tokenizer, observation)
        if len(prompt_ids) > self.max_prompt_tokens:
            return self._refuse(index, 400, "context_length_exceeded",
                                f"the prompt has {len(prompt_ids)} tokens; this model's limit here is "
                                f"{self.max_prompt_tokens} (rollout.max_prompt_tokens)", "invalid_request_error")
        self._accepted += 1
        self._enter_model()
        try:
            action = await self.respond(prompt_ids, sampling)
        finally:
            self._leave_model()
        if action.finish_reason == "error" or not action.token_ids:
            return self._refuse(index, 500, "generation_failed", "the model produced no tokens", "server_error")
        self.calls.append(Call(index, observation, prompt_ids, action, str(body.get("model", ""))))
        turn = self.tool_format.parse(action.text)
        calls = openai_tool_calls(turn)
        result = completion(action.text, turn, calls, action.finish_reason, self.model_name, len(prompt_ids),
                            len(action.token_ids))
        self.issued.remember(action.text, result["choices"][0]["message"]["content"], calls)
        return web.json_response(result)

    def _enter_model(self) -> None:
        if self._in_flight == 0:
            self._busy_since = time.monotonic()
        self._in_flight += 1

    def _leave_model(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._busy_seconds += time.monotonic() - self._busy_since

    def model_seconds(self) -> float:
        """Wall seconds during which at least one of the episode's calls was waiting for the model."""
        busy = self._busy_seconds
        if self._in_flight:
            busy += time.monotonic() - self._busy_since
        return busy

    def _sampling(self, body: dict[str, Any]) -> SamplingParams:
        sampling = self.sampling
        cap = body.get("max_completion_tokens", body.get("max_tokens"))
        if cap is not None:
            if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
                raise BadRequest("max_tokens must be a positive integer")
            sampling = dataclasses.replace(sampling, max_new_tokens=min(cap, sampling.max_new_tokens))
        stop = body.get("stop")
        if stop:
            extra = [stop] if isinstance(stop, str) else list(stop)
            if not all(isinstance(s, str) for s in extra):
                raise BadRequest("stop must be a string or a list of strings")
            sampling = dataclasses.replace(sampling, stop=list(sampling.stop) + extra)
        return sampling
