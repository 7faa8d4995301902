"""``agentr1-core new-plugin NAME --kind tool|env|reward|flow`` writes a package that pip installs, that shows in
``plugins`` (its component and its named config), whose named config uses the new component and reads the rows
shipped in the package, and whose own tests pass as written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentr1_core.scaffold import KIND_MODULES, write_plugin

# kind -> (the registry's kind, how the named config uses the component, passing tests of the generated package)
KINDS = {
    "tool": ("tool", lambda cfg: "weather_now" in [t if isinstance(t, str) else t["name"] for t in cfg["env"]["tools"]],
             13),
    "env": ("env", lambda cfg: cfg["env"]["name"] == "weather_now" and cfg["reward"] is None, 13),
    "reward": ("reward", lambda cfg: cfg["reward"]["name"] == "weather_now", 13),
    "flow": ("agent_flow", lambda cfg: cfg["agent_flow"]["name"] == "weather_now", 8),
}
FILES = {"pyproject.toml", "README.md", "tests/conftest.py", "tests/test_package.py", "agentr1_weather_now/__init__.py",
         "agentr1_weather_now/plugin.py", "agentr1_weather_now/configs/weather-now.yaml",
         "agentr1_weather_now/data/train.jsonl", "agentr1_weather_now/data/val.jsonl"}


def cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "agentr1_core.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def test_the_cli_offers_every_kind():
    assert set(KINDS) == set(KIND_MODULES)
    bad = cli("new-plugin", "x", "--kind", "widget", "--dir", "/nonexistent")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr and "flow" in bad.stderr


SLOW = pytest.mark.slow


@pytest.mark.parametrize("kind", ["tool", "env", pytest.param("reward", marks=SLOW), pytest.param("flow", marks=SLOW)])
def test_generated_plugin_installs_lists_trains_on_its_rows_and_passes_its_tests(tmp_path, kind):
    """About 20 s a kind; reward and flow (both on the calculator task) are marked slow."""
    component, uses, passing = KINDS[kind]
    made = cli("new-plugin", "weather-now", "--kind", kind, "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    root = tmp_path / "agentr1-weather-now"
    written = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert written == FILES | {f"agentr1_weather_now/{kind}.py", f"tests/test_{kind}.py"}
    plugin_doc = (root / "agentr1_weather_now" / "plugin.py").read_text().splitlines()[0]
    assert plugin_doc.startswith(f'"""Registers the weather-now {kind} with agentr1')
    rows = {split: [json.loads(line) for line in (root / "agentr1_weather_now" / "data" / f"{split}.jsonl").open()]
            for split in ("train", "val")}
    assert (len(rows["train"]), len(rows["val"])) == (200, 32)
    assert all(r["expert_actions"] and "ground_truth" in r["reward_model"] for r in rows["train"] + rows["val"])

    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(site), str(root)], check=True, timeout=300)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    listed = cli("plugins", "--json", env=env)
    plugin = {p["plugin"]: p for p in json.loads(listed.stdout)["plugins"]}["weather_now"]
    assert plugin["distribution"] == "agentr1-weather-now" and plugin["status"] == "ok"
    assert plugin["components"] == {component: ["weather_now"], "config": ["weather-now"]}
    configs = cli("config", "list", "--json", env=env, cwd=tmp_path)
    shipped = {r["name"]: r for r in json.loads(configs.stdout)}["weather-now"]
    assert shipped["distribution"] == "agentr1-weather-now" and str(site) in shipped["path"]
    shown = cli("config", "show", "weather-now", env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    cfg = yaml.safe_load(shown.stdout)
    assert cfg["run_dir"] == "runs/weather-now" and cfg["stages"] == ["sft", "rl"] and uses(cfg)
    for split in ("train", "val"):
        assert cfg["data"][split] == {"name": "jsonl",
                                      "path": str(site / "agentr1_weather_now" / "data" / f"{split}.jsonl")}

    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests")],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert f"{passing} passed" in tests.stdout, tests.stdout


def test_the_rows_are_seeded_and_the_package_names_follow_the_plugin_name(tmp_path):
    first = write_plugin("unit-conv", "tool", tmp_path / "a")
    second = write_plugin("unit-conv", "tool", tmp_path / "b")
    for split in ("train", "val"):
        relative = Path("agentr1_unit_conv") / "data" / f"{split}.jsonl"
        assert (first / relative).read_bytes() == (second / relative).read_bytes()
    pyproject = (first / "pyproject.toml").read_text()
    assert 'name = "agentr1-unit-conv"' in pyproject and 'unit_conv = "agentr1_unit_conv.plugin"' in pyproject
    assert '"configs/*.yaml", "data/*.jsonl"' in pyproject
    tool = (first / "agentr1_unit_conv" / "tool.py").read_text()
    assert "class UnitConvTool(BaseTool)" in tool and 'name = "unit_conv"' in tool
    config = (first / "agentr1_unit_conv" / "configs" / "unit-conv.yaml").read_text()
    assert "${package_data:agentr1_unit_conv,data/train.jsonl}" in config and "tools: [unit_conv]" in config


def test_new_plugin_refuses_bad_names_and_existing_folders(tmp_path):
    def run(*args):
        return cli("new-plugin", *args, "--dir", str(tmp_path))

    bad = run("Bad Name")
    assert bad.returncode == 2 and "must be lower-case" in bad.stderr
    assert run("dup").returncode == 0
    again = run("dup", "--kind", "env")
    assert again.returncode == 2 and "already exists" in again.stderr
