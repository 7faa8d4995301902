"""Contract tests: every hook is documented in docs/hooks.md, and every hook yields working components."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from agentr1_core import hookspecs
from agentr1_core.plugins import get_registry
from agentr1_core.specs import SPEC_TYPES

DOC = (Path(__file__).resolve().parents[2] / "docs" / "hooks.md").read_text()


@pytest.mark.parametrize("hook", sorted(hookspecs.HOOK_KINDS))
def test_hook_is_documented_with_its_docstring(hook):
    assert f"## `{hook}` ({hookspecs.HOOK_KINDS[hook]})" in DOC
    doc = inspect.cleandoc(getattr(hookspecs, hook).__doc__)
    assert doc in DOC, f"docs/hooks.md is out of date for {hook}"
    assert "Example::" in doc and "@hookimpl" in doc


def test_every_hookspec_has_a_kind_and_spec_type():
    specs = {n for n in dir(hookspecs) if n.startswith("agentr1_")}
    assert specs == set(hookspecs.HOOK_KINDS)
    assert set(hookspecs.HOOK_KINDS.values()) == set(SPEC_TYPES)


@pytest.mark.parametrize("kind", sorted(SPEC_TYPES))
def test_every_registered_factory_imports_and_has_a_signature(kind):
    registry = get_registry()
    for name in registry.names(kind):
        spec = registry.get(kind, name)
        factory = registry.load(kind, name)
        assert callable(factory), f"{kind} {name}: factory {spec.factory} is not callable"
        spec.parameters()  # readable signature = config schema
        assert spec.description, f"{kind} {name} needs a description"


def test_every_named_config_of_every_installed_distribution_loads_and_resolves(tmp_path, monkeypatch):
    """From a directory that is not the checkout: the YAML chain, the data paths and every component name."""
    from agentr1_core.components import check_components
    from agentr1_core.config import load_config

    monkeypatch.chdir(tmp_path)
    registry = get_registry()
    names = registry.names("config")
    assert {"default", "tiny"} <= set(names)
    for name in names:
        cfg = load_config(name, ["model.device=auto"])  # the GPU recipes ask for cuda; the rest is checked here
        check_components(cfg, registry)
