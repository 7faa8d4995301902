"""User errors: mistakes the user can fix, reported as one line (the CLI prints it and exits with code 2).

Every class here derives from ``UserError``; anything else that escapes a run is a bug and keeps its traceback.
The classes are also importable from the modules that raise them (``agentr1_core.config.ConfigError``, ...).
This module imports nothing from the project.
"""

from __future__ import annotations

import difflib
from typing import Iterable


class UserError(Exception):
    """A one-line problem the user can fix (exit code 2 in the CLI, no traceback)."""


class PluginError(UserError):
    """A problem with a plugin or a component name (a plugin that fails to import, a bad hook result)."""


class UnknownComponentError(PluginError):
    """A component name that no loaded plugin registers."""


class DuplicateComponentError(PluginError):
    """A component name that two distributions register."""


class ConfigError(UserError):
    """A configuration problem, with the key path (``config error at env.tools[0]: ...``)."""


class ModelPathError(UserError):
    """A model path that cannot be loaded."""


class FetchError(UserError):
    """A download or check that failed."""


class RolloutEngineError(UserError):
    """The rollout engines cannot generate."""


class RunDirInUseError(UserError):
    """A run directory that already holds another run."""


class ResumeMismatch(UserError):
    """``--resume`` with a config that differs from the run's saved one."""


class CheckpointMismatch(UserError):
    """A checkpoint that cannot be loaded into the run's model or optimizer."""


class AllEpisodesFailed(UserError):
    """Every episode of a rollout ended in an env error."""


class NoExpertSteps(UserError):
    """An SFT stage whose expert episodes produced no step to learn from."""


def one_line(exc: BaseException) -> str:
    """The first non-empty line of ``exc``: the text alone for a user error, a ``ValueError`` or an ``OSError``
    (their messages are written for the user), else with the exception's type."""
    text = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
    if isinstance(exc, (UserError, ValueError, OSError)) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def failed_to_start(key: str, component: str, exc: BaseException) -> ConfigError:
    """``config error at KEY: COMPONENT failed to start: ERROR`` for a component (``"tool 'inventory'"``) whose
    constructor raised; a config error that already names its key path (a bad parameter) is kept as it is."""
    message = one_line(exc)
    if isinstance(exc, ConfigError) and message.startswith("config error"):
        return ConfigError(message)
    return ConfigError(f"config error at {key}: {component} failed to start: {message}")


def suggest(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or an empty string."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
