"""The tools dataset rows name and the tool calls their scripted expert makes, checked before the model loads.

A row may choose its own tools (``env_kwargs.tools``, replacing the env's) and carry ``expert_actions``, the action
texts warm-start SFT replays. Both used to be found out only when the row was played: an unknown tool became an
``env_error`` episode, an expert call to a tool that does not exist was trained on with its error observation.
``ToolRowCheck`` is a per-row check for ``rows.row_problems``: it reports a tool name no installed plugin registers,
an expert call the env's tool format cannot read, an expert call to a tool the row's env does not have, and (when
the env's tools were built) expert call arguments the tool would refuse. It applies to envs with ``tools`` and a
tool ``format`` (``ToolEnv`` and its subclasses); other envs' actions are their own business.
"""

from __future__ import annotations

from typing import Any

from agentr1_core.errors import UserError, suggest

Problem = tuple[tuple[str, ...], str]


def _names(entries: Any) -> list[str] | None:
    """The tool names of a tools list (``[calculator, {name: search, top_k: 3}]``), None when it is not one."""
    if not isinstance(entries, list):
        return None
    names = []
    for entry in entries:
        name = entry if isinstance(entry, str) else entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            return None
        names.append(name)
    return names


class ToolRowCheck:
    """``check(row) -> [(problem key, message)]`` for the tools of a row and its expert's calls.

    ``registry``: the run's component registry. ``env_tools``: the tools of the env as configured, by the name the
    model calls them, each with its built tool where one was built (to check an expert call's arguments) or None.
    ``tool_format``: the env's tool format (an object with ``parse``). ``check_expert``: whether the run replays
    expert actions (an SFT stage)."""

    def __init__(self, registry: Any, env_tools: dict[str, Any], tool_format: Any, check_expert: bool) -> None:
        self.registry = registry
        self.env_tools = env_tools
        self.tool_format = tool_format
        self.check_expert = check_expert and tool_format is not None
        self.installed = registry.names("tool")
        self._called_as: dict[str, str] = {}
        self._formats: dict[str, Any] = {}

    def called_as(self, name: str) -> str:
        """The name the model calls the registered tool ``name`` by (its class's ``name``; the registered name
        when the class sets none)."""
        if name not in self._called_as:
            try:
                factory = self.registry.load("tool", name)
            except UserError:
                factory = None
            self._called_as[name] = str(getattr(factory, "name", "") or name)
        return self._called_as[name]

    def row_format(self, row_kwargs: dict[str, Any]) -> Any:
        name = row_kwargs.get("tool_format")
        if not isinstance(name, str):
            return self.tool_format
        if name not in self._formats:
            try:
                self._formats[name] = self.registry.build("tool_format", name, where="env_kwargs.tool_format")
            except UserError:
                self._formats[name] = None
        return self._formats[name]

    def __call__(self, row: dict[str, Any]) -> list[Problem]:
        kwargs = row.get("env_kwargs") if isinstance(row.get("env_kwargs"), dict) else {}
        problems: list[Problem] = []
        tools: dict[str, Any] = self.env_tools
        if "tools" in kwargs:
            names = _names(kwargs["tools"])
            if names is None:
                return [(("env_kwargs.tools",), "env_kwargs.tools must be a list of tool names or {name: ...} "
                                                 "entries")]
            for name in names:
                if name not in self.installed:
                    problems.append((("tool", name), f"env_kwargs.tools names unknown tool {name!r}"
                                                     f"{suggest(name, self.installed)}; installed tools: "
                                                     f"{', '.join(self.installed) or 'none'}"))
            tools = {self.called_as(n): None for n in names if n in self.installed}
        if self.check_expert and "expert_actions" in row:
            problems += self.expert_problems(row["expert_actions"], tools, self.row_format(kwargs))
        return problems

    def expert_problems(self, actions: Any, tools: dict[str, Any], tool_format: Any) -> list[Problem]:
        if actions is None:
            return []
        if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
            return [(("expert_actions",), "expert_actions must be a list of action texts")]
        if tool_format is None:
            return []
        problems: list[Problem] = []
        valid = ", ".join(sorted(tools)) or "none"
        for i, text in enumerate(actions):
            for call in tool_format.parse(text).calls:
                if call.error:
                    problems.append((("expert_unreadable",), f"expert_actions[{i}]: the tool call cannot be read: "
                                                             f"{call.error}"))
                elif call.name not in tools:
                    problems.append((("expert_tool", call.name), f"expert_actions[{i}] calls unknown tool "
                                                                 f"{call.name!r}{suggest(call.name, tools)}; the "
                                                                 f"row's tools: {valid}"))
                elif tools[call.name] is not None:
                    problem = tools[call.name].validate_arguments(call.arguments)
                    if problem:
                        problems.append((("expert_arguments", call.name),
                                         f"expert_actions[{i}]: the call of {call.name!r} would be refused: {problem}"))
        return problems


def tool_row_check(registry: Any, env: Any, config_tools: Any, row_tools: bool,
                   check_expert: bool) -> ToolRowCheck | None:
    """A ``ToolRowCheck`` for an env built once (``env``), or None when it has no tools dict and no tool format
    (its actions are not tool calls). ``config_tools``: ``env.tools`` of the config; ``row_tools``: whether the row
    the env was built for set its own tools (then the built tools are that row's, not the config's)."""
    tools = getattr(env, "tools", None)
    fmt = getattr(env, "format", None)
    if not isinstance(tools, dict) or not hasattr(fmt, "parse"):
        return None
    check = ToolRowCheck(registry, dict(tools), fmt, check_expert)
    if row_tools:
        check.env_tools = {check.called_as(n): None for n in _names(config_tools) or [] if n in check.installed}
    return check
