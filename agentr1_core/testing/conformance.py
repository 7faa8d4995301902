"""Conformance checkers for tools and environments. Each raises ``AssertionError`` naming the broken rule.

What they check is what the framework relies on: a tool has a valid OpenAI schema, survives bad arguments without
raising, and returns text; an env's ``reset`` gives a valid ``Observation``, ``step`` gives a ``StepResult`` with finite
reward, survives a malformed action, and ends within its step cap.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any, Awaitable, TypeVar

from agentr1_core.envs import AgentEnv
from agentr1_core.mdp import Action, Observation, StepResult
from agentr1_core.tools import BaseTool, ToolResult, call_tool

T = TypeVar("T")


def run_async(coro: Awaitable[T]) -> T:
    """Run a coroutine to completion from synchronous test code."""
    return asyncio.run(coro)  # type: ignore[arg-type]


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise AssertionError(message)


def check_tool(tool: BaseTool, valid_arguments: dict[str, Any] | None = None) -> ToolResult | None:
    """Check the tool contract; with ``valid_arguments``, also run one good call and return its result."""
    _check(isinstance(tool, BaseTool), f"{tool!r} is not a BaseTool")
    _check(bool(tool.name) and tool.name.replace("_", "").replace("-", "").isalnum(),
           f"tool name {tool.name!r} must be a non-empty identifier")
    _check(bool(tool.description), f"tool {tool.name!r} needs a description")
    schema = tool.openai_schema()
    json.dumps(schema)  # must be JSON-serialisable
    params = schema["function"]["parameters"]
    _check(params.get("type") == "object", f"tool {tool.name!r}: parameters must be a JSON-schema object")
    for req in params.get("required", []):
        _check(req in params.get("properties", {}), f"tool {tool.name!r}: required {req!r} is not a property")
    _check(tool.timeout > 0, f"tool {tool.name!r}: timeout must be positive")

    bad = run_async(call_tool(tool, {"__not_an_argument__": 1}))
    _check(isinstance(bad, ToolResult) and bad.error is not None,
           f"tool {tool.name!r}: an unknown argument must give an error result")
    bad = run_async(call_tool(tool, "not an object"))
    _check(bad.error == "bad_arguments", f"tool {tool.name!r}: non-object arguments must be rejected")
    if valid_arguments is None:
        return None
    good = run_async(call_tool(tool, valid_arguments))
    _check(isinstance(good.text, str), f"tool {tool.name!r} must return text")
    _check(good.error is None, f"tool {tool.name!r} failed on valid arguments: {good.text}")
    _check(math.isfinite(good.reward), f"tool {tool.name!r} returned a non-finite reward")
    return good


def _check_observation(obs: Any, where: str) -> None:
    _check(isinstance(obs, Observation), f"{where} must return an Observation, got {type(obs).__name__}")
    if obs.messages is not None:
        _check(all(isinstance(m, dict) and "role" in m and "content" in m for m in obs.messages),
               f"{where}: every message needs 'role' and 'content'")
        _check(len(obs.messages) > 0, f"{where}: messages must not be empty")


def _check_result(result: Any, where: str) -> None:
    _check(isinstance(result, StepResult), f"{where} must return a StepResult, got {type(result).__name__}")
    _check(math.isfinite(float(result.reward)), f"{where}: reward must be finite")
    if not (result.done or result.truncated):
        _check_observation(result.observation, where)


def check_env(env: AgentEnv, row: dict[str, Any], actions: list[str] | None = None, max_steps: int = 200) -> int:
    """Check the env contract on ``row``: reset, a malformed action, then ``actions`` (default: a repeated
    nonsense action) until the episode ends. Returns the number of steps taken; fails if it never ends."""

    async def go() -> int:
        obs = await env.reset(row)
        _check_observation(obs, "reset()")
        result = await env.step(Action("\x00<<garbage>> {not json", [0], [0.0]))
        _check_result(result, "step(malformed action)")
        obs = await env.reset(row)
        _check_observation(obs, "reset() after an episode")
        steps, queue = 0, list(actions or [])
        while steps < max_steps:
            text = queue.pop(0) if queue else "look"
            result = await env.step(Action(text, [0], [0.0]))
            steps += 1
            _check_result(result, f"step {steps}")
            if result.done or result.truncated:
                await env.close()
                return steps
        raise AssertionError(f"episode did not end within {max_steps} steps: the env needs a step cap")

    return run_async(go())
