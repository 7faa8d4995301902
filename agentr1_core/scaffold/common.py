"""What every scaffolded package shares: the ``Kind`` description, the file templates common to all kinds and
``render_package``, which turns a name and a kind into the package's files (path -> text).

The package speaks of the component in the user's own words (``the inventory tool``); what it needs of a task to
install, train and pass its tests from the start is a working example, which each file holds in one marked block,
``# EXAMPLE: ...`` to ``# END EXAMPLE`` (``<!-- EXAMPLE: ... -->`` to ``<!-- END EXAMPLE -->`` in the README), so a
user replaces those blocks and the rows in ``data/`` and keeps the rest. The tests the package ships read the row
counts and caps they check from its run config. A kind whose config reads another plugin's data (``sandbox``) ships
no rows (``rows=None``): no ``data/`` files, and its own README, conftest and package tests in place of the common
ones, which speak of rows.

A package holds one component, named after the plugin, except a tool package, which may hold several tools (each in
its module ``<tool>.py`` with its tests ``tests/test_<tool>.py``; a single tool's module is ``tool.py``). Templates
are ``string.Template`` text. The component's own files (its module and its tests) see ``$ident`` (the component
name, ``unit_conv``), ``$cls``, ``$obj`` (what its spec registers), ``$module``, ``$title`` (``the unit-conv tool``)
and ``$Title`` (capitalised); the package's files see ``$name`` (the plugin and config name, e.g. ``unit-conv``),
``$plugin_ident`` (``unit_conv``, the entry point's name), ``$package`` (``agentr1_unit_conv``), ``$dist``
(``agentr1-unit-conv``), ``$kind``, its ``$title`` and ``$Title``, the lines that list every component
(``$specs``, ``$component_entries``, ``$registered``, ``$component_rows``, ``$test_rows``), the one component's
fields when there is one, and whatever a kind adds; ``$$`` is a literal ``$`` (as in the configs'
``$${package_data:...}``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from string import Template
from typing import Any, Callable

from agentr1_core import __version__
from agentr1_core.kinds import BY_NAME

Rows = list[dict[str, Any]]

# The marks around the one example block of a generated file (Python, YAML, TOML; the README uses HTML comments).
EXAMPLE_START, EXAMPLE_END = "EXAMPLE:", "END EXAMPLE"


@dataclass(frozen=True)
class Kind:
    """One scaffold kind: where its component goes, how it is registered, and its templates."""

    kind: str  # tool | env | reward | flow | sandbox
    component: str  # template of <package>/<kind>.py
    config: str  # template of <package>/configs/<name>.yaml
    tests: str  # template of tests/test_<kind>.py
    example: str  # template of the README's section on the example (inside its EXAMPLE block)
    # the example's seeded (train, val) rows (data/train.jsonl, data/val.jsonl); None: the package ships no rows (its
    # config reads another plugin's data) and the kind gives its own README, conftest and package tests
    rows: Callable[[dict[str, str]], tuple[Rows, Rows]] | None = None
    factory_attr: str = ""  # the registered attribute when it is not the class ``$cls``
    registry_kind: str = ""  # the kind in agentr1_core.kinds when it is not ``kind`` (agent_flow): hook, spec class
    row_fields: tuple[str, ...] = ()  # what the example component reads from every row (its spec's ``row_fields``)
    extra_fields: Callable[[dict[str, Any]], dict[str, str]] = field(default=lambda fields: {})  # the package's
    # the fields of one component's files (its module, its tests), given the package's fields and the component's
    component_fields: Callable[[dict[str, Any], dict[str, Any]], dict[str, str]] = field(
        default=lambda fields, component: {})
    requires: tuple[str, ...] = ()  # the package's dependencies besides agentr1-core (``agentr1-env-terminal``)
    # the package's files that speak of rows, when the kind ships none: templates of README.md, tests/conftest.py and
    # tests/test_package.py ("" for the common ones)
    readme: str = ""
    conftest: str = ""
    package_tests: str = ""


def fill(template: str, fields: dict[str, str]) -> str:
    return Template(template).substitute(fields)


def jsonl(rows: Rows) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def camel(ident: str) -> str:
    return "".join(part.title() for part in ident.split("_") if part)


def component(package: dict[str, Any], kind: Kind, ident: str, module: str, word: str) -> dict[str, Any]:
    """The fields of one component of ``package``: registered as ``ident`` from ``<package>/<module>.py``, spoken of
    as ``the <word> <kind>``."""
    cls = camel(ident) + kind.kind.title()
    obj = kind.factory_attr.replace("$ident", ident) or cls  # what the spec registers
    return dict(ident=ident, cls=cls, obj=obj, module=module, factory=f"{package['package']}.{module}:{obj}",
                title=f"the {word} {kind.kind}", Title=f"The {word} {kind.kind}")


def names(name: str, kind: Kind, tools: list[str] | None = None) -> dict[str, Any]:
    """The package's fields, with ``components``: the fields of each component (``tools``: the tools of a tool
    package, default one named after the plugin)."""
    ident = name.replace("-", "_")
    registered = BY_NAME[kind.registry_kind or kind.kind]
    fields: dict[str, Any] = dict(
        name=name, plugin_ident=ident, package=f"agentr1_{ident}", dist=f"agentr1-{name}", kind=kind.kind,
        registry_kind=registered.name, hook=registered.hook, spec_cls=registered.spec, core_version=__version__,
        dependencies=", ".join(f'"{r}"' for r in (f"agentr1-core>={__version__}", *kind.requires)),
        and_data=" and data" if kind.rows is not None else "")
    if not tools:
        components = [component(fields, kind, ident, kind.kind, name)]
    elif len(tools) == 1:
        components = [component(fields, kind, tools[0], kind.kind, tools[0])]
    else:
        components = [component(fields, kind, tool, tool, tool) for tool in tools]
    for index, item in enumerate(components):
        item.update(index=index, count=len(components))
    fields["components"] = components
    if len(components) == 1:  # a package of one component speaks of it as of itself
        fields.update({k: v for k, v in components[0].items() if k not in ("index", "count")})
    else:
        listed = ", ".join(c["ident"] for c in components)
        fields.update(title=f"the {name} {kind.kind}s ({listed})", Title=f"The {name} {kind.kind}s ({listed})")
    fields["spec_args"], fields["row_fields_note"], fields["plugin_edits"] = "", "", "nothing"
    if kind.row_fields:  # declared on the spec: a run checks every row for them before the model loads
        declared = "".join(f'"{f}", ' for f in kind.row_fields).rstrip(" ")
        indent = " " * len(f"    return [{registered.spec}(")
        fields["spec_args"] = f",\n{indent}row_fields=({declared})"
        fields["row_fields_note"] = (f"\n    # row_fields: what the {kind.kind} reads from every row; a run checks "
                                     f"every row for them before the model loads")
        fields["plugin_edits"] = f"its `row_fields`, when your {kind.kind} reads other fields of a row"
    fields.update(listing(fields, components))
    fields.update(kind.extra_fields(fields))
    return fields


def listing(fields: dict[str, Any], components: list[dict[str, Any]]) -> dict[str, str]:
    """The lines of the package's files that list every component: the specs ``plugin.py`` returns, the
    ``agentr1.components`` entries of ``pyproject.toml``, the names the package's tests look up and the README's
    rows."""
    kind, pkg, several = fields["kind"], fields["package"], len(components) > 1
    specs = [f'{fields["spec_cls"]}("{c["ident"]}", "{c["factory"]}", "{c["Title"]}"{fields["spec_args"]})'
             for c in components]
    idents = [c["ident"] for c in components]
    rows, tests = [], []
    for c in components:
        rows.append(f"| `{pkg}/{c['module']}.py` | the {kind} (`{c['obj']}`), registered as `{c['ident']}` | "
                    f"its `EXAMPLE` block |")
        whose = f"the {c['ident']} {kind}'s" if several else f"the {kind}'s"
        tests.append(f"| `tests/test_{c['module']}.py` | {whose} tests | "
                     f"its `EXAMPLE` block: the example's own tests |")
    return {
        "specs": (",\n" + " " * len("    return [")).join(specs),
        "component_entries": "\n".join(f'"{fields["registry_kind"]}.{i}" = "{pkg}.plugin"' for i in idents),
        "registered": "(" + ", ".join(f'"{i}"' for i in idents) + ("," if len(idents) == 1 else "") + ")",
        "them": "them" if several else "it", "does": "do" if several else "does",
        "registered_as": (f"the {kind}s as " if several else f"the {kind} as ") + words([f"`{i}`" for i in idents]),
        "component_rows": "\n".join(rows), "test_rows": "\n".join(tests),
    }


def words(items: list[str], last: str = "and") -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


def render_package(name: str, kind: Kind, tools: list[str] | None = None) -> dict[str, str]:
    """Every file of the package ``agentr1-NAME``, by path relative to its folder (``tools``: the tools of a tool
    package)."""
    fields = names(name, kind, tools)
    for item in fields["components"]:
        item.update(kind.component_fields(fields, item))
    pkg = fields["package"]
    data: dict[str, str] = {}
    if kind.rows is not None:  # without rows the package has no data/ (pyproject.toml ships any file put there)
        train, val = kind.rows(fields)
        fields["train_rows"], fields["val_rows"] = str(len(train)), str(len(val))
        data = {f"{pkg}/data/train.jsonl": jsonl(train), f"{pkg}/data/val.jsonl": jsonl(val)}
    fields["example"] = fill(kind.example, fields)
    files = {
        "pyproject.toml": fill(PYPROJECT, fields),
        "README.md": fill(kind.readme or README, fields),
        f"{pkg}/__init__.py": fill('"""$Title for agentr1 (the package of $dist)."""\n', fields),
        f"{pkg}/plugin.py": fill(PLUGIN, fields),
        f"{pkg}/configs/{name}.yaml": fill(kind.config, fields),
        **data,
        "tests/conftest.py": fill(kind.conftest or CONFTEST, fields),
        "tests/test_package.py": fill(kind.package_tests or PACKAGE_TESTS, fields),
    }
    for item in fields["components"]:
        own = {**fields, **item}
        files[f"{pkg}/{item['module']}.py"] = fill(kind.component, own)
        files[f"tests/test_{item['module']}.py"] = fill(kind.tests, own)
    return files


PYPROJECT = '''[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "agentr1 plugin: $title, its run config$and_data"
readme = "README.md"
requires-python = ">=3.10"
license = "Apache-2.0"
dependencies = [$dependencies]

[project.optional-dependencies]
test = ["pytest>=8"]

[project.entry-points.agentr1]
$plugin_ident = "$package.plugin"

[project.entry-points."agentr1.components"]  # every component the plugin registers, configs aside (KIND.NAME)
$component_entries

[tool.setuptools]
packages = ["$package"]
include-package-data = false  # exactly the package-data below

[tool.setuptools.package-data]
$package = ["configs/*.yaml", "data/**/*"]  # the run configs, and every file under data/ (any type, any depth)

[tool.pytest.ini_options]
testpaths = ["tests"]
addopts = ["-p", "no:cacheprovider"]
'''

PLUGIN = '''"""Registers $title with agentr1, and the run configs in ``$package/configs/``."""

from agentr1_core import $spec_cls, hookimpl
from agentr1_core.named_configs import package_configs


@hookimpl
def $hook():$row_fields_note
    return [$specs]


@hookimpl
def agentr1_configs():
    return package_configs("$package")  # every configs/*.yaml runs by its name: agentr1-core run $name
'''

README = '''# $dist

$Title for agentr1, with a run config that trains SmolLM2-135M-Instruct with $them on a CPU,
its rows and its tests.

## Make it yours

The package starts with a working example, so that it installs, trains and passes its tests as written. Each file
that holds a part of the example marks that part with one block, from `# EXAMPLE:` to `# END EXAMPLE` (in this
README, HTML comments): replace those blocks and the rows in `data/`, keep the rest, and run `pytest`.

| file | what it is | what to replace |
|---|---|---|
$component_rows
| `$package/configs/$name.yaml` | the run: SFT on expert episodes, then GRPO | its `EXAMPLE` block |
| `$package/data/` | the rows: `train.jsonl` ($train_rows), `val.jsonl` ($val_rows, held out); all of `data/` ships | the rows |
$test_rows
| `tests/conftest.py`, `tests/test_package.py` | the registration, the config, the rows, the expert's episodes | nothing |
| `$package/plugin.py` | registers $registered_as and every `configs/*.yaml` as a named config | $plugin_edits |
| `pyproject.toml` | the distribution; its `agentr1` entry point names `$package.plugin` | nothing |

<!-- EXAMPLE: what the example does; replace this section with what $title $does -->
## The example

$example<!-- END EXAMPLE -->

## Install, test, run

    pip install -e .              # then: agentr1-core plugins; agentr1-core config list
    pip install -e '.[test]' && pytest
    agentr1-core run $name        # from any folder: writes runs/$name/ (summary.json, episodes/, metrics.jsonl)
    agentr1-core run $name trainer.total_steps=2 sft.rows=8    # any key.path=value overrides

The run prints held-out success before SFT, after SFT and after RL, and writes them to
`runs/$name/summary.json`; `runs/$name/episodes/<label>.jsonl` shows what the model did in each
held-out episode.
The tests read what they check from the config: the training rows cover `sft.rows` and `rollout.batch_size`, the
held-out rows `validation.max_rows`, and each row's `expert_actions` fit in `rollout.max_turns`.

## Rows

One JSON object a line: `prompt` (the task: text, or a list of chat messages), `data_source` (results are also
reported per source), `reward_model.ground_truth` (what a reward function compares with), `expert_actions` (the
action texts of a scripted expert, replayed for the SFT warm start), `env_kwargs` (merged into the env's constructor
arguments for this row) and `extra_info` (free-form, read by nothing in the core). The config loads them with the
core's `jsonl` loader from the installed package:

    data:
      train: {name: jsonl, path: "$${package_data:$package,data/train.jsonl}"}

Every file under `$package/data/` is package data, whatever its type and however deep: a table the $kind
reads ships in the wheel next to the rows. Read it from the installed package, not from a path relative to where a
run starts:

    from importlib import resources
    text = resources.files("$package").joinpath("data/table.csv").read_text(encoding="utf-8")

Every YAML file added to `$package/configs/` becomes a named config (`agentr1-core run FILE_NAME`).
'''

CONFTEST = '''"""Helpers of the tests of $dist: the run config, the rows it reads, and an expert episode through the
configured run."""

import asyncio

import pytest
from omegaconf import OmegaConf

from agentr1_core.components import build_reward_fn
from agentr1_core.config import component, load_config
from agentr1_core.flows import FlowContext
from agentr1_core.plugins import get_registry
from agentr1_core.rollout.base import SamplingParams

CONFIG = "$name"
PACKAGE = "$package"


def read_rows(split):
    """The rows of ``split`` (``train`` or ``val``) as the run reads them: the config's ``data.<split>`` dataset."""
    name, params = component(load_config(CONFIG), f"data.{split}")
    return get_registry().build("dataset", name, params)


class WordTokenizer:
    """Just enough of a tokenizer for an episode in which the scripted expert acts (no model): one id a word."""

    eos_token_id = 0

    def encode(self, text, add_special_tokens=False):
        return [1 + len(word) % 1000 for word in text.split()] or [1]

    def apply_chat_template(self, messages, tools=None, add_generation_prompt=True, tokenize=True, **kwargs):
        return self.encode(" ".join(str(m["content"]) for m in messages))


def run_expert(row, cfg=None):
    """One episode of ``row`` through the configured flow, env and reward, the scripted expert acting (what the SFT
    stage records). The trajectory's ``final_reward`` is the episode reward; success is ``final_reward >= 1``."""
    cfg = cfg if cfg is not None else load_config(CONFIG)
    registry = get_registry()
    ctx = FlowContext(engine=None, tokenizer=WordTokenizer(), sampling=SamplingParams(),
                      env_config=OmegaConf.to_container(cfg.env, resolve=True),
                      reward_fn=build_reward_fn(cfg, registry), max_turns=int(cfg.rollout.max_turns),
                      max_prompt_tokens=int(cfg.rollout.max_prompt_tokens), policy="expert")
    name, params = component(cfg, "agent_flow")
    flow = registry.build("agent_flow", name, params, where="agent_flow", ctx=ctx)
    return asyncio.run(flow.run(row))


@pytest.fixture
def config():
    """The run config ``$name``, resolved as ``agentr1-core run $name`` resolves it."""
    return load_config(CONFIG)


@pytest.fixture
def load_rows():
    """``load_rows(split)``: the rows the config reads for ``train`` or ``val``."""
    return read_rows


@pytest.fixture
def expert_episode():
    """``expert_episode(row, cfg=None)``: one episode with the scripted expert acting."""
    return run_expert
'''

PACKAGE_TESTS = '''"""The package as agentr1 sees it: the entry point, the named config, and the rows against what the
config takes."""

import json
from importlib import resources
from pathlib import Path

from agentr1_core.config import component
from agentr1_core.plugins import get_registry
from agentr1_core.preflight import preflight

PACKAGE = "$package"
ROW_KEYS = {"prompt", "data_source", "reward_model", "expert_actions", "env_kwargs", "extra_info"}


def test_registered_through_the_entry_point():
    registry = get_registry()
    assert "$name" in registry.names("config")
    for name in $registered:
        assert name in registry.names("$registry_kind")
        assert registry.components["$registry_kind"][name].distribution == "$dist"


def test_the_config_passes_the_checks_a_run_makes_and_reads_rows_shipped_in_the_package(config, load_rows):
    preflight(config, get_registry())  # values, model path, names, params, rows; builds data, reward, env
    installed = Path(str(resources.files(PACKAGE))).resolve()
    for split in ("train", "val"):
        assert load_rows(split), f"data.{split} reads no rows"
        path = component(config, f"data.{split}")[1].get("path")
        if path:  # a file the run reads ships with the package, so the run works from a wheel and from any folder
            assert installed in Path(path).resolve().parents, f"data.{split}.path {path} is outside {installed}"


def test_rows_are_well_formed_and_the_splits_disjoint(load_rows):
    train, val = load_rows("train"), load_rows("val")
    for row in train + val:
        assert set(row) <= ROW_KEYS, f"unexpected keys {set(row) - ROW_KEYS}"
        assert isinstance(row["prompt"], str) and row["prompt"].strip()
        assert isinstance(row["data_source"], str) and row["data_source"]
        assert "ground_truth" in row["reward_model"]
        assert all(isinstance(a, str) and a.strip() for a in row.get("expert_actions", []))
        assert isinstance(row.get("env_kwargs", {}), dict)

    def key(row):
        return json.dumps([row["prompt"], row.get("env_kwargs")], sort_keys=True)

    assert len({key(r) for r in train}) == len(train), "a training row is repeated"
    assert not {key(r) for r in train} & {key(r) for r in val}, "a held-out row is also a training row"


def test_the_rows_cover_what_the_config_takes(config, load_rows):
    """With fewer rows a run would not fail, it would quietly take fewer: SFT plays min(sft.rows, training rows)
    expert episodes, a validation min(validation.max_rows, held-out rows) episodes (max_rows 0: all), and an RL
    iteration with fewer training rows than rollout.batch_size repeats some of them in its batch."""
    train, val = load_rows("train"), load_rows("val")
    if "sft" in config.stages:
        assert len(train) >= config.sft.rows, f"sft.rows is {config.sft.rows}; there are {len(train)} training rows"
    if "rl" in config.stages:
        batch = config.rollout.batch_size
        assert len(train) >= batch, f"rollout.batch_size is {batch}; there are {len(train)} training rows"
    max_rows = int(config.validation.max_rows)  # 0: every held-out row
    assert len(val) >= max(max_rows, 1), f"validation.max_rows is {max_rows}; there are {len(val)} held-out rows"
    for row in train + val:  # the expert acts once a turn: more actions than turns would be cut
        assert len(row.get("expert_actions", [])) <= config.rollout.max_turns, (row["prompt"], "rollout.max_turns")


def test_the_expert_solves_every_held_out_row(config, load_rows, expert_episode):
    for row in load_rows("val"):
        traj = expert_episode(row, config)
        assert traj.termination == "done", (row["prompt"], traj.termination, traj.info.get("error"))
        assert traj.success() and traj.final_reward >= 1.0, (row["prompt"], [s.action_text for s in traj.steps])
'''


def calculator_rows(fields: dict[str, str]) -> tuple[Rows, Rows]:
    """200 training and 32 held-out problems of the default run's calculator task (one seeded stream, disjoint
    splits), the example of the kinds that train on it (reward, flow)."""
    from agentr1_core.builtin.datasets import arithmetic_rows

    return (arithmetic_rows("train", train_size=200, val_size=32, seed=0),
            arithmetic_rows("val", train_size=200, val_size=32, seed=0))


CALCULATOR_README = '''The rows are the default run's calculator task ("What is 876 * 61 - 786?" and the same
arithmetic as a short word problem), written when the package was made: each row's `expert_actions` are one
hermes call of the core's `calculator` tool and the answer:

    <tool_call>{"name": "calculator", "arguments": {"expression": "876 * 61 - 786"}}</tool_call>
    <answer>52650</answer>
'''
