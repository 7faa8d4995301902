"""Registers the WebShop env, goal dataset, the ``webshop prepare`` command and the named configs with agentr1 (lazy
factories: listing plugins imports nothing heavy). ``row_fields``: every row carries its goal (checked before a run).
"""

from __future__ import annotations

from agentr1_core.hookspecs import hookimpl
from agentr1_core.named_configs import package_configs
from agentr1_core.specs import CommandSpec, DatasetSpec, EnvSpec

PKG = "agentr1_env_webshop"


@hookimpl
def agentr1_envs():
    return [EnvSpec("webshop", "agentr1_env_webshop.env:WebShopEnv",
                    "WebShop text-mode shopping (search, results, item pages) with the benchmark's reward",
                    row_fields=("goal.asin",))]


@hookimpl
def agentr1_datasets():
    return [DatasetSpec("webshop", "agentr1_env_webshop.data:load_goals",
                        "WebShop goals (synthetic or human) as rows, split by index ranges like the original",
                        row_fields=("prompt", "goal.asin"))]


@hookimpl
def agentr1_cli_commands():
    return [CommandSpec("webshop", f"{PKG}.prepare:register", "WebShop data: prepare (fetch the 1000-product files)",
                        help="webshop data: prepare")]


@hookimpl
def agentr1_configs():
    return package_configs(PKG)  # every agentr1_env_webshop/configs/*.yaml, e.g. agentr1-core run webshop
