"""Tool sources (``agentr1_core.tool_sources``): ``env.tools`` entries ``SOURCE:REFERENCE``, the source's
top-level config section, the checks before a run, one started instance per process shared by every env.

The source is ``tests/core/echo_source_plugin.py`` (loaded through ``AGENTR1_PLUGIN_MODULES``, as an unpackaged
plugin); the MCP plugin's tests run the same paths with real servers through its installed distribution."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentr1_core import tool_sources
from agentr1_core.errors import ConfigError


@pytest.fixture
def registry(monkeypatch):
    from agentr1_core.plugins import get_registry, reset_registry

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    import echo_source_plugin

    monkeypatch.setenv("AGENTR1_PLUGIN_MODULES", "echo_source_plugin")
    reset_registry()
    echo_source_plugin.EVENTS.clear()
    yield get_registry()
    tool_sources.close_all()
    reset_registry()


def _cfg(*overrides: str):
    from agentr1_core.config import load_config

    return load_config("tiny", ["echoes.words=[hi, bye]", *overrides])


def test_a_reference_gives_the_sources_tools_beside_registered_ones(registry):
    from agentr1_core.envs import ToolEnv

    import echo_source_plugin

    tool_sources.configure(_cfg(), registry)
    env = ToolEnv(tools=["calculator", "echoes:all"])
    assert list(env.tools) == ["calculator", "echo_hi", "echo_bye"]
    assert list(ToolEnv(tools=["echoes:bye"]).tools) == ["echo_bye"]
    assert echo_source_plugin.EVENTS == ["start"]  # one instance per process, shared by every env
    assert "echo_hi" in env.system_message()  # shown to the model like any tool
    tool_sources.close_all()
    assert echo_source_plugin.EVENTS == ["start", "close"]


def test_the_checks_list_the_tools_and_report_every_problem_at_once(registry, capsys):
    from agentr1_core.preflight import preflight

    import echo_source_plugin

    preflight(_cfg("env.tools=[calculator, echoes:all]", "stages=[rl]"), registry)
    checked = capsys.readouterr().out
    assert "[tools] env.tools[1] = echoes:all: echo_hi, echo_bye" in checked
    assert echo_source_plugin.EVENTS[-1] == "close"  # the checks leave nothing running
    with pytest.raises(ConfigError) as err:
        preflight(_cfg("env.tools=[calculator, echoes:hello, echos:all]", "echoes.wrds=3", "rollout.n=0"), registry)
    lines = str(err.value).splitlines()
    assert any("echoes.wrds" in ln and "unknown parameter for tool_source 'echoes'" in ln for ln in lines), lines
    assert any("env.tools[2]" in ln and "unknown tool_source 'echos'" in ln and "did you mean 'echoes'" in ln
               for ln in lines), lines
    assert any("rollout.n" in ln for ln in lines), lines


def test_an_unknown_reference_a_source_that_does_not_start_and_two_tools_of_one_name(registry):
    from agentr1_core.preflight import preflight

    cases = [(["env.tools=[echoes:hii]"],
              "no word 'hii' (did you mean 'hi'?); words: hi, bye (env.tools[0] = echoes:hii)"),
             (["env.tools=[echoes:all]", "echoes.fail_to_start=true"], "the echo server did not start"),
             (["env.tools=[calculator, echoes:all]", "echoes.name_as=calculator"],
              "config error at env.tools[1]: a tool named 'calculator' comes from echoes:all and from env.tools[0]")]
    for overrides, expected in cases:
        with pytest.raises(ConfigError) as err:
            preflight(_cfg(*overrides, "stages=[rl]"), registry)
        assert expected in str(err.value), (overrides, str(err.value))


def test_a_section_without_an_installed_source_is_an_unknown_key():
    from agentr1_core.config import load_config

    with pytest.raises(ConfigError, match="config error at echoes: Key 'echoes' not in 'RunConfig'"):
        load_config("tiny", ["echoes.words=[hi]"])
