"""agentr1: train multi-turn, tool-using LLM agents with reinforcement learning, one agent turn per MDP step.

The core defines the step-level data model, the five extension layers (``AgentFlowBase``, ``AgentEnvLoop``,
``AgentEnv``, ``ToolEnv``, ``BaseTool``), the plugin hooks and the config; everything else is a plugin.
Importing this package is cheap: torch is only imported by the components that need it.
"""

from agentr1_core.hookspecs import hookimpl
from agentr1_core.specs import (
    AgentFlowSpec, AlgorithmSpec, CommandSpec, ConfigSpec, DatasetSpec, EngineSpec, EnvSpec, RewardSpec,
    SandboxSpec, ToolFormatSpec, ToolSourceSpec, ToolSpec, TrainerSpec,
)

__version__ = "0.1.0"

__all__ = [
    "hookimpl", "AgentFlowSpec", "AlgorithmSpec", "CommandSpec", "ConfigSpec", "DatasetSpec", "EngineSpec", "EnvSpec",
    "RewardSpec", "SandboxSpec", "ToolFormatSpec", "ToolSourceSpec", "ToolSpec", "TrainerSpec", "__version__",
]
