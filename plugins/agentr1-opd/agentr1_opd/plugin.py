"""Registers the ``opd`` algorithm and the ``opd-student`` CLI command.

Factories are lazy ``"module:attr"`` strings: listing plugins imports neither torch nor transformers.
"""

from __future__ import annotations

from agentr1_core.hookspecs import hookimpl
from agentr1_core.named_configs import package_configs
from agentr1_core.specs import AlgorithmSpec, CommandSpec

PKG = "agentr1_opd"


@hookimpl
def agentr1_algorithms():
    return [AlgorithmSpec("opd", f"{PKG}.algorithm:OnPolicyDistillation",
                          "Online policy distillation: per-token advantage log p_teacher - log p_student "
                          "(optionally mixed with an env-reward estimator)", needs_critic=False)]


@hookimpl
def agentr1_cli_commands():
    return [CommandSpec("opd-student", f"{PKG}.student:register",
                        "Write a small student model that shares a teacher's tokenizer",
                        help="write a truncated copy of a teacher model (a distillation student) to a folder")]


@hookimpl
def agentr1_configs():
    return package_configs(PKG)  # every agentr1_opd/configs/*.yaml, e.g. agentr1-core run opd
