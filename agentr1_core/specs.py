"""Typed component specs that plugins yield from their hooks.

A spec names a component and points at the code that builds it with a lazy ``"package.module:attr"`` string, so
that listing plugins imports nothing heavy (no torch, ray or vllm). ``load()`` imports the target on demand.
The parameters a component accepts are the keyword arguments of its factory; ``parameters()`` reads them without
calling it; ``code_params`` names those that point at code to import. A reward, an env and a dataset loader also
declare what they need from every dataset row (``row_fields``: dotted paths such as ``reward_model.ground_truth``,
``a|b`` when either will do), which the run checks on every row before the model loads (``agentr1_core.rows``).
``SPEC_TYPES`` maps each kind of ``agentr1_core.kinds`` to its spec class.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from agentr1_core.kinds import KINDS

def import_object(path: str) -> Any:
    """Import ``"package.module:attr.sub"`` and return the attribute."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"factory {path!r} must look like 'package.module:attribute'")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class ComponentSpec:
    """A named component. ``factory`` is imported lazily; ``description`` shows in ``agentr1-core plugins``.
    ``code_params``: the factory's parameters whose values name code it imports (``agent: my_agent.py:run``), which
    the commands that read a run folder's config show and check before importing (``agentr1_core.trust``);
    ``command_params``: those whose values are programs it runs (``command: [my-agent, --fast]``) or their
    environment variables (a mapping), shown and checked the same way."""

    name: str
    factory: str
    description: str = ""
    code_params: tuple[str, ...] = field(default=(), kw_only=True)
    command_params: tuple[str, ...] = field(default=(), kw_only=True)
    kind: ClassVar[str] = ""

    def load(self) -> Any:
        return import_object(self.factory)

    def parameters(self) -> dict[str, inspect.Parameter]:
        """Keyword parameters the factory accepts (its config schema), without ``self`` and ``*args``."""
        target = self.load()
        sig = inspect.signature(target.__init__ if inspect.isclass(target) else target)
        return {
            n: p for n, p in sig.parameters.items()
            if n != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        }

    def accepts_any_keyword(self) -> bool:
        target = self.load()
        sig = inspect.signature(target.__init__ if inspect.isclass(target) else target)
        return any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())


@dataclass(frozen=True)
class ToolSpec(ComponentSpec):
    """A ``BaseTool`` subclass; params are its constructor's keyword arguments."""

    kind: ClassVar[str] = "tool"


@dataclass(frozen=True)
class ToolSourceSpec(ComponentSpec):
    """A ``ToolSource`` subclass (``agentr1_core.tool_sources``): tools that live outside agentr1, named in
    ``env.tools`` as ``NAME:REFERENCE``; params are its constructor's keyword arguments, given in the run config's
    top-level section ``NAME:``."""

    kind: ClassVar[str] = "tool_source"


@dataclass(frozen=True)
class ToolFormatSpec(ComponentSpec):
    """A tool-call format (how calls are written by the model and results shown back)."""

    kind: ClassVar[str] = "tool_format"


@dataclass(frozen=True)
class EnvSpec(ComponentSpec):
    """An ``AgentEnv`` subclass. ``row_fields``: what ``reset(row)`` reads from every row (``prompt``,
    ``env_kwargs.target``); the keys of a row's ``env_kwargs`` must be keyword parameters of its constructor."""

    row_fields: tuple[str, ...] = ()
    kind: ClassVar[str] = "env"


@dataclass(frozen=True)
class SandboxSpec(ComponentSpec):
    """A ``Sandbox`` subclass (``agentr1_core.sandbox``): where an episode's commands run, under which limits and
    isolation; params are its constructor's keyword arguments (``env.sandbox: {name: local, memory_mb: 512}``)."""

    kind: ClassVar[str] = "sandbox"


@dataclass(frozen=True)
class AgentFlowSpec(ComponentSpec):
    """An ``AgentFlowBase`` subclass."""

    kind: ClassVar[str] = "agent_flow"


@dataclass(frozen=True)
class RewardSpec(ComponentSpec):
    """A reward function ``fn(trajectory, row, **params) -> float`` (or a class whose instances are such).
    ``row_fields``: what it reads from every row, e.g. ``("reward_model.ground_truth",)``."""

    row_fields: tuple[str, ...] = ()
    kind: ClassVar[str] = "reward"


@dataclass(frozen=True)
class AlgorithmSpec(ComponentSpec):
    """An ``Algorithm`` subclass (advantage estimator + policy loss)."""

    needs_critic: bool = False
    kind: ClassVar[str] = "algorithm"


@dataclass(frozen=True)
class EngineSpec(ComponentSpec):
    """A rollout engine builder ``factory(model_config, **params) -> RolloutEngine``."""

    kind: ClassVar[str] = "engine"


@dataclass(frozen=True)
class TrainerSpec(ComponentSpec):
    """A trainer builder ``factory(run_config, registry) -> object with .fit()``."""

    kind: ClassVar[str] = "trainer"


@dataclass(frozen=True)
class DatasetSpec(ComponentSpec):
    """A dataset loader ``factory(**params) -> list[dict]`` of rows (prompt, data_source, reward_model, ...).
    ``row_fields``: what every row it gives carries (``prompt``, ...)."""

    row_fields: tuple[str, ...] = ()
    kind: ClassVar[str] = "dataset"


@dataclass(frozen=True)
class CommandSpec(ComponentSpec):
    """An extra CLI subcommand: ``factory`` is ``register(subparser)`` that adds arguments and sets ``func``."""

    help: str = ""
    kind: ClassVar[str] = "command"


@dataclass(frozen=True)
class ConfigSpec(ComponentSpec):
    """A named run config (``agentr1-core run NAME``, ``base: NAME``): ``factory`` is ``"package:relative/file.yaml"``,
    a YAML file shipped as package data; ``load()`` returns a loader whose call gives the file's path."""

    kind: ClassVar[str] = "config"

    def load(self) -> Any:
        package, _, relative = self.factory.partition(":")
        if not package or not relative:
            raise ValueError(f"config {self.name!r}: {self.factory!r} must look like 'package:relative/file.yaml'")
        from importlib import resources

        path = Path(str(resources.files(package).joinpath(relative)))

        def config_path() -> Path:
            """The YAML file of this config."""
            if not path.is_file():
                raise FileNotFoundError(2, "config file missing from its package", str(path))
            return path

        return config_path

    def path(self) -> Path:
        return self.load()()


SPEC_TYPES: dict[str, type[ComponentSpec]] = {kind.name: globals()[kind.spec] for kind in KINDS}


@dataclass
class Registered:
    """A spec plus the distribution that registered it (for error messages and the plugins table)."""

    spec: ComponentSpec
    plugin: str
    distribution: str
    extra: dict[str, Any] = field(default_factory=dict)
