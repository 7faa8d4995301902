"""Environments: ``AgentEnv`` (a task with async ``reset``/``step``) and ``ToolEnv`` (standard multi-turn tool use).

An env owns the context: ``step`` returns the next ``Observation``, which may append to the history, keep a window,
or rewrite it entirely. Env methods are async so that a slow env (a game, a browser) runs without blocking the other
episodes; a synchronous env can wrap its work in ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from agentr1_core.mdp import Action, Observation, StepResult
from agentr1_core.tool_formats import ParsedCall, ToolFormat
from agentr1_core.tools import BaseTool, ToolResult, call_tool


class AgentEnv:
    """A task. Subclasses implement ``reset`` and ``step``; constructor keyword arguments are the env's config
    (``env: {name: my_env, param: value}`` merged with a dataset row's ``env_kwargs``).

    ``expert_action`` (optional) returns the next action text of a scripted expert, for warm-start SFT; the default
    replays ``row["expert_actions"]``, which the agent loop hands over through ``load_expert(row)`` before each
    ``reset``, so any env replays its rows' demonstrations without code of its own. An env with a scripted expert
    overrides ``expert_action``.
    """

    async def reset(self, row: dict[str, Any]) -> Observation:
        raise NotImplementedError

    async def step(self, action: Action) -> StepResult:
        raise NotImplementedError

    def expert_action(self) -> str | None:
        actions = getattr(self, "_expert_actions", None)
        if actions is None:
            return None
        return actions.pop(0) if actions else None

    def load_expert(self, row: dict[str, Any]) -> None:
        """Keep ``row["expert_actions"]`` (a list of action texts) for ``expert_action`` to replay."""
        demo = row.get("expert_actions")
        self._expert_actions = list(demo) if demo else None

    async def close(self) -> None:
        return None


def _build_tools(specs: list[Any]) -> dict[str, BaseTool]:
    """The tools of ``env.tools``; a tool whose constructor raises is named in the error (``failed_to_start``). An
    entry ``SOURCE:REFERENCE`` gives the tools of a tool source (an MCP server's: ``agentr1_core.tool_sources``),
    started once per process and shared by every env."""
    from agentr1_core.errors import failed_to_start
    from agentr1_core.plugins import PluginError, get_registry
    from agentr1_core.tool_sources import resolve, split_reference

    registry = get_registry()
    tools: dict[str, BaseTool] = {}
    for i, item in enumerate(specs):
        if isinstance(item, BaseTool):
            built = [item]
        else:
            cfg = {"name": item} if isinstance(item, str) else dict(item)
            name = cfg.pop("name", None)
            if not name:
                raise PluginError(f"env.tools[{i}]: each tool needs a name")
            if split_reference(str(name)) is not None:
                if cfg:
                    raise PluginError(f"env.tools[{i}]: {name} takes no parameters here (set them in the source's "
                                      f"section, {str(name).partition(':')[0]}:)")
                built = resolve(str(name), registry)
            else:
                factory = registry.validate("tool", name, cfg, where=f"env.tools[{i}]")  # the name and params
                try:
                    built = [factory(**cfg)]
                except Exception as exc:
                    raise failed_to_start(f"env.tools[{i}]", f"tool {name!r}", exc) from exc
        for tool in built:
            tools[tool.name] = tool
    return tools


def _build_format(fmt: str | ToolFormat) -> ToolFormat:
    if isinstance(fmt, ToolFormat):
        return fmt
    from agentr1_core.errors import failed_to_start
    from agentr1_core.plugins import get_registry

    factory = get_registry().validate("tool_format", fmt, {}, where="env.tool_format")
    try:
        return factory()
    except Exception as exc:
        raise failed_to_start("env.tool_format", f"tool_format {fmt!r}", exc) from exc


class ToolEnv(AgentEnv):
    """Multi-turn tool calling. Each turn the model either calls tools (the calls of one turn run concurrently) or
    answers without a call, which ends the episode. Unknown tools, bad arguments, tool exceptions and timeouts come
    back as error text in the observation; the episode goes on.

    Context: ``append`` keeps the whole conversation; ``window`` keeps the system prompt, the task and the last
    ``window`` turns, so the prompt stays flat as episodes grow.

    A step's ``info`` has ``tool_calls`` (how many), ``tool_errors`` (counts by kind) and ``calls`` (each parsed call's
    name, arguments, output text and error kind), or ``answer`` when the model answered without a call.
    """

    def __init__(self, tools: list[Any] | None = None, tool_format: str = "hermes", system_prompt: str = "",
                 max_turns: int = 5, context: str = "append", window: int = 2,
                 tool_timeout: float | None = None) -> None:
        if context not in ("append", "window"):
            raise ValueError(f"context must be 'append' or 'window', got {context!r}")
        self.tools = _build_tools(list(tools or []))
        self.format = _build_format(tool_format)
        self.system_prompt = system_prompt
        self.max_turns = max_turns
        self.context = context
        self.window = window
        self.tool_timeout = tool_timeout
        self.turn = 0
        self.head: list[dict[str, Any]] = []
        self.turns: list[list[dict[str, Any]]] = []
        self.tool_errors: Counter[str] = Counter()

    def system_message(self) -> str:
        schemas = [t.openai_schema() for t in self.tools.values()]
        parts = [self.system_prompt] if self.system_prompt else []
        if schemas:
            parts.append(self.format.instructions(schemas))
        return "\n\n".join(parts)

    async def reset(self, row: dict[str, Any]) -> Observation:
        self.load_expert(row)
        self.turn, self.turns, self.tool_errors = 0, [], Counter()
        prompt = row.get("prompt", "")
        user = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
        system = self.system_message()
        self.head = ([{"role": "system", "content": system}] if system else []) + user
        return self.observation()

    def observation(self) -> Observation:
        turns = self.turns if self.context == "append" else self.turns[-self.window:] if self.window > 0 else []
        return Observation(messages=self.head + [m for turn in turns for m in turn])

    async def run_call(self, call: ParsedCall) -> ToolResult:
        if call.error:
            return ToolResult(f"Error: {call.error}", error="parse_error")
        tool = self.tools.get(call.name)
        if tool is None:
            valid = ", ".join(sorted(self.tools)) or "none"
            return ToolResult(f"Error: unknown tool {call.name!r}; available tools: {valid}", error="unknown_tool")
        return await call_tool(tool, call.arguments, self.tool_timeout)

    async def step(self, action: Action) -> StepResult:
        self.turn += 1
        parsed = self.format.parse(action.text)
        if not parsed.calls:
            return StepResult(observation=None, done=True, info={"answer": parsed.content})
        results = await asyncio.gather(*(self.run_call(c) for c in parsed.calls))
        messages = [{"role": "assistant", "content": action.text}]
        errors: Counter[str] = Counter()
        for call, res in zip(parsed.calls, results):
            messages.append(self.format.result_message(call, res.text))
            if res.error:
                errors[res.error] += 1
            errors.update(res.info.get("output_problems") or ())  # counted like errors; the output still goes back
        self.tool_errors.update(errors)
        self.turns.append(messages)
        feedback = "\n".join(r.text for r in results)
        truncated = self.turn >= self.max_turns
        calls = [{"name": c.name, "arguments": c.arguments, "output": r.text,
                  **({"error": r.error} if r.error else {}), **({"raw": c.raw} if c.error else {})}
                 for c, r in zip(parsed.calls, results)]
        return StepResult(
            observation=self.observation(), reward=float(sum(r.reward for r in results)), truncated=truncated,
            feedback=feedback, info={"tool_calls": len(results), "tool_errors": dict(errors), "calls": calls})
