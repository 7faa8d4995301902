"""Registers the ``alfworld`` env, the ``alfworld`` and ``alfworld_split`` dataset loaders, the ``alfworld_won`` and
``alfworld_progress`` rewards, the ``alfworld prepare`` command and the recipe's named configs.

Factories are lazy ``"module:attr"`` strings: listing plugins imports neither textworld nor alfworld. ``row_fields``
says what each component reads from every dataset row (checked on every row before a run).
"""

from __future__ import annotations

from agentr1_core.hookspecs import hookimpl
from agentr1_core.named_configs import package_configs
from agentr1_core.specs import CommandSpec, DatasetSpec, EnvSpec, RewardSpec

PKG = "agentr1_env_alfworld"
GAME_ROW = ("prompt", "gamefile", "env_kwargs.gamefile", "extra_info.task_dir")  # what the loaders' rows carry


@hookimpl
def agentr1_envs():
    return [EnvSpec("alfworld", f"{PKG}.env:AlfworldEnv",
                    "ALFWorld text games (TextWorld PDDL) in a pool of game processes; plain-command actions")]


@hookimpl
def agentr1_datasets():
    return [DatasetSpec("alfworld", f"{PKG}.datasets:load_alfworld",
                        "ALFWorld game files under $ALFWORLD_DATA/json_2.1.1/<split>; task type as data_source",
                        row_fields=GAME_ROW),
            DatasetSpec("alfworld_split", f"{PKG}.game_split:load_alfworld_split",
                        "one ALFWorld games folder split by game into disjoint train / heldout parts",
                        row_fields=GAME_ROW)]


@hookimpl
def agentr1_rewards():
    return [RewardSpec("alfworld_won", f"{PKG}.rewards:AlfworldWon", "1 if the ALFWorld goal was reached"),
            RewardSpec("alfworld_progress", f"{PKG}.progress:AlfworldProgress",
                       "1 for a win, else partial credit for the task's subgoals the game confirmed",
                       row_fields=("extra_info.task_dir|gamefile",))]


@hookimpl
def agentr1_cli_commands():
    return [CommandSpec("alfworld", f"{PKG}.prepare:register", "ALFWorld data: prepare (fetch the full games)",
                        help="alfworld data: prepare")]


@hookimpl
def agentr1_configs():
    return package_configs(PKG)  # every agentr1_env_alfworld/configs/*.yaml, e.g. agentr1-core run alfworld
