"""Plugin discovery through real installed distributions, and the CLI's one-line errors (exit code 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentr1_core.hookspecs import HOOK_KINDS
from agentr1_core.plugins import get_registry


def _plugins(cli, **kw) -> dict:
    out = cli("plugins", "--json", **kw)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    data["by_name"] = {p["plugin"]: p for p in data["plugins"]}
    return data


def test_core_components_are_registered_through_the_entry_point():
    registry = get_registry()
    builtin = registry.plugins["builtin"]
    assert builtin.distribution == "agentr1-core" and builtin.status == "ok"
    # every hook is used by the core's own plugin, but tool sources and sandboxes: the core has no tools outside the
    # process and runs no commands (the MCP and terminal plugins do, tested through their installed distributions)
    assert set(builtin.hooks) == set(HOOK_KINDS) - {"agentr1_tool_sources", "agentr1_sandboxes"}
    for kind in HOOK_KINDS.values():
        assert registry.names(kind), f"no {kind} registered"
    assert {"grpo", "steppo"} <= set(registry.names("algorithm"))
    assert "calculator" in registry.names("tool") and "local" in registry.names("trainer")


def test_plugins_lists_installed_distributions_with_status(cli):
    data = _plugins(cli)
    good, broken, typo = (data["by_name"][n] for n in ("good", "broken", "typo"))
    assert good["distribution"] == "agentr1-good" and good["version"] == "1.2.3" and good["status"] == "ok"
    assert good["components"] == {"command": ["hello"], "tool": ["echo", "fragile"]}
    assert broken["status"] == "error" and "needs libfoo" in broken["error"] and "Traceback" in broken["error"]
    assert typo["status"] == "error" and "agentr1_toolz" in typo["error"]
    assert data["conflicts"] == ["tool 'calculator' is registered by more than one distribution: agentr1-core "
                                 "(plugin builtin) and agentr1-dupe (plugin dupe); uninstall or block one"]
    table = cli("plugins")
    assert table.returncode == 0 and "agentr1-good" in table.stdout and "needs libfoo" in table.stdout


def test_block_and_allow_lists(cli):
    blocked = _plugins(cli, env={"AGENTR1_PLUGINS_BLOCK": "agentr1-dupe,broken"})
    assert blocked["conflicts"] == []
    assert blocked["by_name"]["dupe"]["status"] == "blocked" and blocked["by_name"]["broken"]["status"] == "blocked"
    allowed = _plugins(cli, env={"AGENTR1_PLUGINS_ALLOW": "good"})
    statuses = {n: p["status"] for n, p in allowed["by_name"].items()}
    assert {n: statuses[n] for n in ("builtin", "good", "broken", "dupe", "typo")} == {
        "builtin": "ok", "good": "ok", "broken": "blocked", "dupe": "blocked", "typo": "blocked"}
    assert {s for n, s in statuses.items() if n not in ("builtin", "good")} == {"blocked"}


def test_listing_plugins_imports_no_heavy_library(plugin_site):
    code = ("import sys, io, contextlib\nfrom agentr1_core.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    rc = main(['plugins', '--json'])\n"
            "heavy = sorted(m for m in ('torch', 'ray', 'vllm', 'transformers') if m in sys.modules)\n"
            "print(rc, heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0 []"


def test_plugin_cli_command(cli):
    out = cli("hello", "world")
    assert out.returncode == 0 and out.stdout.strip() == "hello world"


@pytest.fixture
def config_file(tmp_path):
    rows = tmp_path / "rows.jsonl"  # a good row: the config's one mistake is the override's
    rows.write_text('{"prompt": "What is 2+2?", "reward_model": {"ground_truth": "4"}}\n')
    path = tmp_path / "cfg.yaml"
    path.write_text(f"env:\n  name: tool_env\n  tools: [calculator]\n"
                    f"data:\n  train: {{name: jsonl, path: {rows}}}\n")
    return path


@pytest.mark.parametrize("override,expected", [
    (["env.name=tool_evn"], "unknown env 'tool_evn' (did you mean 'tool_env'?); valid: "),
    (["trainer.total_step=3"], "config error at trainer.total_step: Key 'total_step' not in 'TrainerConfig'"),
    (["trainer.total_steps=abc"], "config error at trainer.total_steps: Value 'abc' of type 'str' could not "
                                  "be converted to Integer"),
    (["env.max_turn=3"], "config error at env.max_turn: unknown parameter for env 'tool_env' "
                         "(did you mean 'max_turns'?); valid: context, max_turns,"),
    (["env.max_turns=many"], "config error at env.max_turns: expected int, got str 'many'"),
    (["algorithm.name=grop"], "unknown algorithm 'grop' (did you mean 'grpo'?); valid: "),
    (["env.tools=[calculatr]"], "unknown tool 'calculatr' (did you mean 'calculator'?); valid: "),
    (["env.tools=[fragile]"], "tool 'fragile' from agentr1-good failed to import "
                              "(agentr1_good_missing_dependency:Tool): ModuleNotFoundError: No module named "
                              "'agentr1_good_missing_dependency' (it needs agentr1-good[fragile])"),
    (["env.tools=[{name: calculator}]", "env.tools.0.timeout=x"],
     "config error at env.tools[0].timeout: expected float, got str 'x'"),
    (["reward.name=nope"], "unknown reward 'nope'; valid: "),
    (["agent_flow.name=null"], "config error at agent_flow: a component needs a 'name'"),
    (["oops"], "override 'oops' must look like key.path=value"),
])
def test_run_rejects_bad_config_with_one_line(cli, config_file, override, expected):
    out = cli("run", str(config_file), *override, env={"AGENTR1_PLUGINS_BLOCK": "agentr1-dupe"})
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert expected in lines[0]


def test_duplicate_name_is_an_error_naming_both_distributions(cli, config_file):
    out = cli("run", str(config_file))
    assert out.returncode == 2
    assert "agentr1-core (plugin builtin) and agentr1-dupe (plugin dupe)" in out.stderr


def test_unknown_name_mentions_broken_plugins(cli, config_file):
    out = cli("run", str(config_file), "env.name=missing", env={"AGENTR1_PLUGINS_BLOCK": "agentr1-dupe"})
    assert out.returncode == 2 and "plugins that failed to load: broken (agentr1-broken)" in out.stderr
    assert "no installed distribution declares it (`agentr1-core plugins` lists what is installed)" in out.stderr


@pytest.mark.parametrize("tool,block,expected", [
    ("echo", "agentr1-dupe,good", "config error at env.tools[0]: unknown tool 'echo'"),
    ("echo", "agentr1-dupe,good", "; agentr1-good declares it but is blocked (plugins.allow / plugins.block"),
    ("libfoo", "agentr1-dupe", "; agentr1-broken declares it but its plugin failed to load: ImportError: "
                               "agentr1-broken needs libfoo, which is not installed (`agentr1-core plugins --verbose`"),
])
def test_a_missing_name_is_explained_by_the_distribution_that_declares_it(cli, config_file, tool, block, expected):
    out = cli("run", str(config_file), f"env.tools=[{tool}]", env={"AGENTR1_PLUGINS_BLOCK": block})
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert expected in out.stderr


def test_missing_config_file_and_bad_yaml(cli, tmp_path):
    out = cli("run", "nope.yaml", site=False)
    assert out.returncode == 2 and "config file 'nope.yaml' not found" in out.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("env: [unclosed\n")
    out = cli("config", "show", str(bad), site=False)
    assert out.returncode == 2 and "cannot parse YAML" in out.stderr


def test_config_show_resolves_base_chain_and_overrides(cli, tmp_path, config_file):
    child = tmp_path / "child.yaml"
    child.write_text(f"base: {config_file.name}\nseed: 7\nrollout: {{n: 3}}\n")
    out = cli("config", "show", str(child), "rollout.n=5", "trainer.lr=0.001", site=False)
    assert out.returncode == 0, out.stderr
    assert "seed: 7" in out.stdout and "'n': 5" in out.stdout and "lr: 0.001" in out.stdout
    assert "- calculator" in out.stdout
