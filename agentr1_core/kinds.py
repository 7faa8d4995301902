"""The component kinds, declared once.

Each kind has its name, the hook that plugins implement to add components of it, the spec class (in
``agentr1_core.specs``) their hooks return, the run-config keys that select one, and the parameters the framework
passes to its factory itself (never from the config). ``specs.SPEC_TYPES``, ``hookspecs.HOOK_KINDS``,
``config.COMPONENT_KEYS`` and the component checks before a run (``components.check_components``) are derived from
``KINDS``; adding a kind is a row here, its spec class and its hookspec.

A config key is written in one of three forms:

* ``"engine"``: a node ``{name: ..., **params}``;
* ``"env.tools[]"``: a list of such nodes (or bare names);
* ``"trainer.name"``: the name alone (the rest of ``trainer:`` is the framework's own settings).

This module imports nothing from the project.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    name: str
    hook: str
    spec: str
    keys: tuple[str, ...] = ()
    reserved: frozenset[str] = frozenset()
    declared: bool = True  # plugin distributions list each component of this kind in their metadata


KINDS: tuple[Kind, ...] = (
    Kind("tool", "agentr1_tools", "ToolSpec", ("env.tools[]",)),
    # tools outside agentr1 (an MCP server's): env.tools entries SOURCE:REFERENCE, configured at the top-level key
    # named after the source (agentr1_core.tool_sources)
    Kind("tool_source", "agentr1_tool_sources", "ToolSourceSpec"),
    Kind("tool_format", "agentr1_tool_formats", "ToolFormatSpec"),  # a parameter of tool_env: env.tool_format
    Kind("env", "agentr1_envs", "EnvSpec", ("env",)),
    # where an episode's commands run: a parameter of the envs that run code (env.sandbox: local)
    Kind("sandbox", "agentr1_sandboxes", "SandboxSpec"),
    Kind("agent_flow", "agentr1_agent_flows", "AgentFlowSpec", ("agent_flow",), frozenset({"ctx"})),
    # a function-style reward gets these per call
    Kind("reward", "agentr1_rewards", "RewardSpec", ("reward",), frozenset({"trajectory", "traj", "row"})),
    Kind("algorithm", "agentr1_algorithms", "AlgorithmSpec", ("algorithm",)),
    Kind("engine", "agentr1_rollout_engines", "EngineSpec", ("engine",), frozenset({"model", "tokenizer"})),
    Kind("trainer", "agentr1_trainers", "TrainerSpec", ("trainer.name",), frozenset({"config", "registry"})),
    Kind("dataset", "agentr1_datasets", "DatasetSpec", ("data.train", "data.val")),
    Kind("command", "agentr1_cli_commands", "CommandSpec"),
    # one per <package>/configs/*.yaml, found when the plugin loads (a new file needs no metadata change)
    Kind("config", "agentr1_configs", "ConfigSpec", declared=False),
)

BY_NAME: dict[str, Kind] = {kind.name: kind for kind in KINDS}
RESERVED: dict[str, frozenset[str]] = {kind.name: kind.reserved for kind in KINDS}


def key_form(key: str) -> str:
    """``"node"``, ``"list"`` or ``"name"``: how the config key ``key`` selects its component(s)."""
    if key.endswith("[]"):
        return "list"
    return "name" if key.endswith(".name") else "node"


def config_keys(form: str | None = None) -> dict[str, str]:
    """``{config key: kind name}`` of every key (of one ``form`` when given), in table order."""
    return {key: kind.name for kind in KINDS for key in kind.keys if form is None or key_form(key) == form}
