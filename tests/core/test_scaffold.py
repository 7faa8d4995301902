"""``agentr1-core new-plugin`` writes a package that pip installs, that shows in ``plugins`` (its component and its
named config), whose tests pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("kind,component", [("tool", "tool"), ("env", "env")])
def test_generated_plugin_installs_lists_and_passes_its_test(tmp_path, kind, component):
    made = subprocess.run([sys.executable, "-m", "agentr1_core.cli", "new-plugin", "weather-now", "--kind", kind,
                           "--dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    root = tmp_path / "agentr1-weather-now"
    assert {p.name for p in root.iterdir()} == {"pyproject.toml", "README.md", "agentr1_weather_now", "tests"}

    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(site), str(root)], check=True, timeout=300)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    listed = subprocess.run([sys.executable, "-m", "agentr1_core.cli", "plugins", "--json"], capture_output=True,
                            text=True, env=env, timeout=120)
    plugin = {p["plugin"]: p for p in json.loads(listed.stdout)["plugins"]}["weather_now"]
    assert plugin["distribution"] == "agentr1-weather-now" and plugin["status"] == "ok"
    assert plugin["components"] == {component: ["weather_now"], "config": ["weather-now-tiny"]}
    configs = subprocess.run([sys.executable, "-m", "agentr1_core.cli", "config", "list", "--json"],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    shipped = {r["name"]: r for r in json.loads(configs.stdout)}["weather-now-tiny"]
    assert shipped["distribution"] == "agentr1-weather-now" and str(site) in shipped["path"]
    shown = subprocess.run([sys.executable, "-m", "agentr1_core.cli", "config", "show", "weather-now-tiny"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert shown.returncode == 0 and "run_dir: runs/weather-now-tiny" in shown.stdout

    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests")],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "3 passed" in tests.stdout


def test_new_plugin_refuses_bad_names_and_existing_folders(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "agentr1_core.cli", "new-plugin", *args, "--dir",
                               str(tmp_path)], capture_output=True, text=True, timeout=120)

    bad = run("Bad Name")
    assert bad.returncode == 2 and "must be lower-case" in bad.stderr
    assert run("dup").returncode == 0
    again = run("dup")
    assert again.returncode == 2 and "already exists" in again.stderr
