"""Hook specifications: how plugins add components to agentr1.

A plugin is a module with functions marked ``@agentr1_core.hookimpl``, announced in its distribution's
``pyproject.toml``::

    [project.entry-points.agentr1]
    my_plugin = "my_package.plugin"

Every hook returns a list of specs (see ``agentr1_core.specs``). A spec's ``factory`` is a lazy
``"module:attr"`` string: the target is imported only when a run selects it. Each hook's docstring below is the
reference that ``docs/hooks.md`` reproduces (a test keeps them in sync).
"""

from __future__ import annotations

import pluggy

from agentr1_core.kinds import KINDS

PROJECT = "agentr1"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def agentr1_tools():
    """Executable tools (``BaseTool`` subclasses), selected as ``env.tools: [{name: ...}]``.

    Example::

        @hookimpl
        def agentr1_tools():
            return [ToolSpec("weather", "my_pkg.tools:WeatherTool", "Current weather for a city")]
    """


@hookspec
def agentr1_tool_sources():
    """Tool sources (``ToolSource`` subclasses): tools that live outside agentr1, such as an MCP server's, named in
    ``env.tools`` as ``SOURCE:REFERENCE`` and configured in the run config's top-level section ``SOURCE:``.

    Example::

        @hookimpl
        def agentr1_tool_sources():
            return [ToolSourceSpec("mcp", "my_pkg.source:MCPToolSource", "The tools of MCP servers")]
    """


@hookspec
def agentr1_tool_formats():
    """Tool-call formats: how a model writes calls and how results are shown back, ``env.tool_format: hermes``.

    Example::

        @hookimpl
        def agentr1_tool_formats():
            return [ToolFormatSpec("my_xml", "my_pkg.formats:MyXmlFormat", "<call name=...>")]
    """


@hookspec
def agentr1_envs():
    """Environments (``AgentEnv`` subclasses), selected as ``env: {name: ..., **params}``.

    Example::

        @hookimpl
        def agentr1_envs():
            return [EnvSpec("maze", "my_pkg.env:MazeEnv", "Grid maze, text observations")]
    """


@hookspec
def agentr1_sandboxes():
    """Sandboxes (``Sandbox`` subclasses): where an episode's commands run, ``env.sandbox: {name: ..., **params}``.

    Example::

        @hookimpl
        def agentr1_sandboxes():
            return [SandboxSpec("my_cloud", "my_pkg.sandbox:MyCloudSandbox", "Commands in a cloud VM")]
    """


@hookspec
def agentr1_agent_flows():
    """Agent flows (``AgentFlowBase`` subclasses) that run one episode, ``agent_flow: {name: ...}``.

    Example::

        @hookimpl
        def agentr1_agent_flows():
            return [AgentFlowSpec("plan_act", "my_pkg.flow:PlanActFlow", "Plans, then acts")]
    """


@hookspec
def agentr1_rewards():
    """Reward functions ``fn(trajectory, row, **params) -> float``, ``reward: {name: ...}``.

    Example::

        @hookimpl
        def agentr1_rewards():
            return [RewardSpec("my_em", "my_pkg.rewards:exact_match", "Exact match on <answer>")]
    """


@hookspec
def agentr1_algorithms():
    """RL algorithms (``Algorithm`` subclasses: advantages + policy loss), ``algorithm: {name: ...}``.

    Example::

        @hookimpl
        def agentr1_algorithms():
            return [AlgorithmSpec("my_pg", "my_pkg.algo:MyPG", "Vanilla policy gradient", needs_critic=False)]
    """


@hookspec
def agentr1_rollout_engines():
    """Rollout engines ``factory(model, **params) -> RolloutEngine``, ``engine: {name: ...}``.

    Example::

        @hookimpl
        def agentr1_rollout_engines():
            return [EngineSpec("my_server", "my_pkg.engine:build", "OpenAI-compatible server")]
    """


@hookspec
def agentr1_trainers():
    """Trainer backends ``factory(config, registry) -> trainer`` with ``.fit()``, ``trainer: {name: ...}``.

    Example::

        @hookimpl
        def agentr1_trainers():
            return [TrainerSpec("my_cluster", "my_pkg.trainer:build", "Trains on my cluster")]
    """


@hookspec
def agentr1_datasets():
    """Dataset loaders ``factory(**params) -> list[dict]`` of rows, ``data: {train: {name: ...}}``.

    Example::

        @hookimpl
        def agentr1_datasets():
            return [DatasetSpec("my_qa", "my_pkg.data:load_rows", "My QA pairs from a JSONL file")]
    """


@hookspec
def agentr1_cli_commands():
    """Extra ``agentr1-core`` subcommands; ``factory`` is ``register(parser)`` (argparse), which adds arguments
    and calls ``parser.set_defaults(func=...)``; ``func(args)`` returns the exit code.

    Example::

        @hookimpl
        def agentr1_cli_commands():
            return [CommandSpec("hello", "my_pkg.cli:register", "Say hello", help="say hello")]
    """


@hookspec
def agentr1_configs():
    """Named run configs, ``agentr1-core run NAME`` and ``base: NAME``: YAML files shipped as package data.
    ``package_configs(package)`` registers every ``<package>/configs/*.yaml`` under its file name; its first
    comment line is the description shown by ``agentr1-core config list``.

    Example::

        @hookimpl
        def agentr1_configs():
            return package_configs("my_pkg")  # my_pkg/configs/maze.yaml -> agentr1-core run maze
    """


HOOK_KINDS: dict[str, str] = {kind.hook: kind.name for kind in KINDS}  # one hookspec above for each
