"""``agentr1-core new-plugin NAME --kind tool|env``: write a complete, installable third-party plugin package.

The package has a pyproject with the ``agentr1`` entry point, the component, a named run config shipped as package data
(``agentr1_NAME/configs/NAME-tiny.yaml``), a README and tests (the conformance checker, the config); ``pip install
./agentr1-NAME`` makes it show in ``agentr1-core plugins`` and ``agentr1-core config list``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from agentr1_core import __version__

PYPROJECT = '''[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "{title} for agentr1"
readme = "README.md"
requires-python = ">=3.10"
license = "Apache-2.0"
dependencies = ["agentr1-core>={core_version}"]

[project.optional-dependencies]
test = ["pytest>=8"]

[project.entry-points.agentr1]
{ident} = "{package}.plugin"

[tool.setuptools]
packages = ["{package}"]
include-package-data = false  # exactly the package-data below

[tool.setuptools.package-data]
{package} = ["configs/*.yaml"]
'''

PLUGIN = '''"""Registers {title} with agentr1, and the run configs in ``{package}/configs/``."""

from agentr1_core import {spec_cls}, hookimpl
from agentr1_core.named_configs import package_configs


@hookimpl
def {hook}():
    return [{spec_cls}("{ident}", "{package}.{module}:{cls}", "{title}")]


@hookimpl
def agentr1_configs():
    return package_configs("{package}")  # every configs/*.yaml: agentr1-core run {config}
'''

TOOL_CONFIG = '''# The default calculator task with the {ident} tool offered as well (a starting point for a recipe).
base: tiny
run_dir: runs/{config}
env:
  tools: [calculator, {ident}]
'''

ENV_CONFIG = '''# The {ident} env trained with GRPO on tiny sizes (a starting point for a recipe).
run_dir: runs/{config}
stages: [rl]
model: {{path: smollm2-135m-instruct}}
env: {{name: {ident}, max_turns: 3}}
reward: null  # the env pays the reward
algorithm: {{name: grpo}}
data:
  train: {{name: arithmetic, split: train, train_size: 16, val_size: 4}}
  val: {{name: arithmetic, split: val, train_size: 16, val_size: 4}}
rollout: {{batch_size: 2, n: 2, max_new_tokens: 16, max_turns: 3}}
validation: {{every: 0, max_rows: 2}}
trainer: {{total_steps: 2}}
'''

TOOL = '''"""{title}: an example tool. Replace ``execute`` with the real work."""

from agentr1_core.tools import BaseTool


class {cls}(BaseTool):
    name = "{ident}"
    description = "Echo the given text back, reversed."
    parameters = {{
        "type": "object",
        "properties": {{"text": {{"type": "string", "description": "text to reverse"}}}},
        "required": ["text"],
    }}

    def __init__(self, timeout: float = 5.0) -> None:
        self.timeout = timeout

    async def execute(self, text: str) -> str:
        return text[::-1]
'''

TOOL_TEST = '''from agentr1_core.config import load_config
from agentr1_core.plugins import get_registry
from agentr1_core.runner import check_components
from agentr1_core.testing import check_tool

from {package}.{module} import {cls}


def test_tool_contract_and_result():
    result = check_tool({cls}(), {{"text": "abc"}})
    assert result.text == "cba"


def test_registered_through_entry_point():
    assert "{ident}" in get_registry().names("tool")


def test_shipped_config_resolves_by_name():
    cfg = load_config("{config}")
    check_components(cfg, get_registry())
    assert "{ident}" in cfg.env.tools
'''

ENV = '''"""{title}: an example environment (guess a number). Replace with the real task."""

from agentr1_core.envs import AgentEnv
from agentr1_core.mdp import Observation, StepResult


class {cls}(AgentEnv):
    def __init__(self, target: int = 7, max_turns: int = 5) -> None:
        self.target, self.max_turns, self.turn = target, max_turns, 0

    async def reset(self, row):
        self.turn = 0
        return Observation(messages=[{{"role": "user", "content": "Guess my number between 1 and 10."}}])

    async def step(self, action):
        self.turn += 1
        won = action.text.strip() == str(self.target)
        hint = "correct" if won else "wrong, try again"
        obs = Observation(messages=[{{"role": "user", "content": f"{{action.text.strip()!r}} is {{hint}}."}}])
        return StepResult(observation=obs, reward=float(won), done=won, truncated=self.turn >= self.max_turns,
                          feedback=hint)
'''

ENV_TEST = '''from agentr1_core.config import load_config
from agentr1_core.plugins import get_registry
from agentr1_core.runner import check_components
from agentr1_core.testing import check_env

from {package}.{module} import {cls}


def test_env_contract():
    assert check_env({cls}(), {{"prompt": "play"}}, actions=["3", "7"]) == 2


def test_registered_through_entry_point():
    assert "{ident}" in get_registry().names("env")


def test_shipped_config_resolves_by_name():
    cfg = load_config("{config}")
    check_components(cfg, get_registry())
    assert cfg.env.name == "{ident}"
'''

KINDS = {
    "tool": dict(module="tool", hook="agentr1_tools", spec_cls="ToolSpec", body=TOOL, test=TOOL_TEST,
                 config_body=TOOL_CONFIG),
    "env": dict(module="env", hook="agentr1_envs", spec_cls="EnvSpec", body=ENV, test=ENV_TEST,
                config_body=ENV_CONFIG),
}

README = '''# {dist}

{title} for agentr1.

    pip install .               # then: agentr1-core plugins; agentr1-core config list
    pip install -e '.[test]' && pytest

Use it in a config as `{usage}`. The distribution also ships a run config, `{package}/configs/{config}.yaml`:
`agentr1-core run {config}` runs it from any directory; every YAML file added to that folder becomes a named config.
'''


def write_plugin(name: str, kind: str, directory: Path) -> Path:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; valid: {', '.join(KINDS)}")
    if not re.fullmatch(r"[a-z][a-z0-9_-]*", name):
        raise ValueError(f"plugin name {name!r} must be lower-case letters, digits, '-' or '_'")
    ident = name.replace("-", "_")
    fields = dict(
        dist=f"agentr1-{name}", package=f"agentr1_{ident}", ident=ident, core_version=__version__,
        title=f"The {name} {kind}", cls="".join(p.title() for p in ident.split("_")) + kind.title(),
        usage=f"env: {{tools: [{{name: {ident}}}]}}" if kind == "tool" else f"env: {{name: {ident}}}",
        config=f"{name}-tiny",
        **{k: v for k, v in KINDS[kind].items() if k not in ("body", "test", "config_body")},
    )
    root = directory / fields["dist"]
    if root.exists():
        raise FileExistsError(f"{root} already exists")
    pkg = root / fields["package"]
    (root / "tests").mkdir(parents=True)
    (pkg / "configs").mkdir(parents=True)
    files = {
        root / "pyproject.toml": PYPROJECT, root / "README.md": README,
        pkg / "__init__.py": '"""{title} for agentr1."""\n', pkg / "plugin.py": PLUGIN,
        pkg / f"{fields['module']}.py": KINDS[kind]["body"],
        root / "tests" / f"test_{fields['module']}.py": KINDS[kind]["test"],
        pkg / "configs" / f"{fields['config']}.yaml": KINDS[kind]["config_body"],
    }
    for path, template in files.items():
        path.write_text(template.format(**fields), encoding="utf-8")
    return root


def _cmd(args: argparse.Namespace) -> int:
    from agentr1_core.plugins import PluginError

    try:
        root = write_plugin(args.name, args.kind, Path(args.dir))
    except (ValueError, FileExistsError) as exc:
        raise PluginError(str(exc)) from exc
    print(f"wrote {root}\nnext: pip install -e {root} && agentr1-core plugins && agentr1-core config list && "
          f"pytest {root}/tests")
    return 0


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="plugin name, e.g. weather (the distribution is agentr1-NAME)")
    parser.add_argument("--kind", choices=sorted(KINDS), default="tool")
    parser.add_argument("--dir", default=".", help="where to create the package folder")
    parser.set_defaults(func=_cmd)
