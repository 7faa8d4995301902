"""The kinds table (``agentr1_core.kinds``) agrees with the hookspecs, the spec classes and the config keys."""

from __future__ import annotations

import inspect

import pluggy
import pytest
from omegaconf import OmegaConf

from agentr1_core import hookspecs, kinds, specs
from agentr1_core.config import COMPONENT_KEYS, RunConfig
from agentr1_core.kinds import KINDS, config_keys, key_form


def test_every_hookspec_is_a_row_of_the_table_and_every_row_has_its_hookspec():
    marker = pluggy.HookspecMarker(hookspecs.PROJECT)
    written = {name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
               if getattr(fn, f"{marker.project_name}_spec", None) is not None}
    assert written == {kind.hook for kind in KINDS}
    assert hookspecs.HOOK_KINDS == {kind.hook: kind.name for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_each_kind_has_its_spec_class(kind):
    cls = specs.SPEC_TYPES[kind.name]
    assert cls.__name__ == kind.spec and issubclass(cls, specs.ComponentSpec)
    assert cls.kind == kind.name


def test_the_config_keys_exist_in_the_run_config():
    defaults = OmegaConf.structured(RunConfig)
    for key in config_keys():
        path = key.removesuffix("[]")
        where = path.rpartition(".")[0] if key_form(key) == "list" else path  # env.tools lives in the env's node
        assert OmegaConf.select(defaults, where, default="missing") != "missing", key
    assert COMPONENT_KEYS == config_keys("node")
    assert config_keys("name") == {"trainer.name": "trainer"}
    assert config_keys("list") == {"env.tools[]": "tool"}
    assert key_form("data.val") == "node"


def test_reserved_parameters_are_the_tables():
    assert kinds.RESERVED["engine"] == {"model", "tokenizer"}
    assert kinds.RESERVED["trainer"] == {"config", "registry"}
    assert set(kinds.RESERVED) == {kind.name for kind in KINDS}
