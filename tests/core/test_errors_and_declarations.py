"""User errors live in ``agentr1_core.errors`` (and stay importable where they are raised); the extras and component
declarations of installed distributions are read from their metadata."""

from __future__ import annotations

from importlib import metadata

import pytest

from agentr1_core import errors
from agentr1_core.declared import canonical, declared_by, extra_with

OLD_HOMES = {
    "agentr1_core.plugins": ["PluginError", "UnknownComponentError", "DuplicateComponentError"],
    "agentr1_core.config": ["ConfigError"],
    "agentr1_core.distributed.pool": ["RolloutEngineError"],
    "agentr1_core.models": ["ModelPathError"],
    "agentr1_core.fetch": ["FetchError"],
    "agentr1_core.lifecycle.run_dir": ["RunDirInUseError", "ResumeMismatch"],
    "agentr1_core.lifecycle.episode_errors": ["AllEpisodesFailed", "NoExpertSteps"],
}


@pytest.mark.parametrize("module", sorted(OLD_HOMES))
def test_error_classes_are_the_same_objects_where_they_are_raised(module):
    import importlib

    mod = importlib.import_module(module)
    for name in OLD_HOMES[module]:
        assert getattr(mod, name) is getattr(errors, name)
        assert issubclass(getattr(errors, name), errors.UserError)


def test_a_config_error_is_a_user_error_not_a_plugin_error():
    assert not issubclass(errors.ConfigError, errors.PluginError)
    assert issubclass(errors.CheckpointMismatch, errors.UserError)


def test_the_cli_prints_any_user_error_as_one_line(monkeypatch, capsys):
    from agentr1_core import cli

    def fail(args):
        raise errors.CheckpointMismatch("checkpoint 3 does not fit the model")

    monkeypatch.setattr(cli, "cmd_plugins", fail)
    assert cli.main(["plugins"]) == 2
    assert capsys.readouterr().err == "agentr1-core: error: checkpoint 3 does not fit the model\n"


def test_the_core_extras_come_from_its_own_metadata():
    assert extra_with("agentr1-core", "vllm") == "vllm"
    assert extra_with("agentr1-core", "ray") == "ray"
    assert extra_with("agentr1-core", "ray.util", prefer="verl") == "verl"  # the verl trainer needs ray too
    assert extra_with("agentr1-core", "verl") == "verl"
    assert extra_with("agentr1-core", "numpy") is None  # a dependency, not an extra
    assert extra_with("agentr1-no-such-distribution", "vllm") is None


def test_installed_plugins_declare_their_components():
    try:
        metadata.distribution("agentr1-env-webshop")
    except metadata.PackageNotFoundError:
        pytest.skip("agentr1-env-webshop is not installed")
    [decl] = declared_by("env", "webshop")
    assert canonical(decl.distribution) == "agentr1-env-webshop" and decl.module == "agentr1_env_webshop.plugin"
    assert declared_by("env", "no_such_env") == []
