"""Named configs contributed by installed distributions (the ``agentr1_configs`` hook): a real third-party
distribution with YAML files and data as package data, pip-installed (not editable) into a temporary folder, used
by name from a directory that is not the checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentr1_core.config import ConfigError, load_config
from agentr1_core.plugins import DuplicateComponentError, Registry
from agentr1_core.specs import ConfigSpec

MAZE = """\
# Maze levels with the core's calculator env (a third-party recipe)
base: tiny
run_dir: runs/maze
data:
  train: {name: jsonl, path: "${oc.env:MAZE_DATA,${package_data:agentr1_mazes,data}}/levels.jsonl"}
"""
MAZE_BIG = """\
# The maze recipe, more steps
base: maze
trainer: {total_steps: 50}
"""


@pytest.fixture(scope="module")
def maze_site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mazes")
    src = root / "agentr1-mazes"
    pkg = src / "agentr1_mazes"
    (pkg / "configs").mkdir(parents=True)
    (pkg / "data").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "plugin.py").write_text(textwrap.dedent('''
        from agentr1_core import hookimpl
        from agentr1_core.named_configs import package_configs

        @hookimpl
        def agentr1_configs():
            return package_configs("agentr1_mazes")
        '''))
    (pkg / "configs" / "maze.yaml").write_text(MAZE)
    (pkg / "configs" / "maze-big.yaml").write_text(MAZE_BIG)
    (pkg / "data" / "levels.jsonl").write_text('{"prompt": "1+1", "reward_model": {"ground_truth": "2"}}\n')
    (src / "pyproject.toml").write_text(textwrap.dedent('''
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "agentr1-mazes"
        version = "0.3.0"
        [project.entry-points.agentr1]
        mazes = "agentr1_mazes.plugin"
        [tool.setuptools]
        packages = ["agentr1_mazes"]
        [tool.setuptools.package-data]
        agentr1_mazes = ["configs/*.yaml", "data/*"]
        '''))
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(src)], check=True)
    return target


@pytest.fixture
def cli(maze_site, tmp_path):
    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTR1_PLUGINS_")}
        full_env["PYTHONPATH"] = os.pathsep.join([str(maze_site), full_env.get("PYTHONPATH", "")])
        full_env.pop("MAZE_DATA", None)
        full_env.update(env or {})
        return subprocess.run([sys.executable, "-m", "agentr1_core.cli", *args], capture_output=True, text=True,
                              env=full_env, cwd=tmp_path, timeout=120)

    return run


def test_config_list_shows_every_named_config_with_its_distribution(cli):
    out = cli("config", "list", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert {n: rows[n]["distribution"] for n in ("default", "tiny", "maze", "maze-big")} == {
        "default": "agentr1-core", "tiny": "agentr1-core", "maze": "agentr1-mazes", "maze-big": "agentr1-mazes"}
    assert rows["maze"]["description"] == "Maze levels with the core's calculator env (a third-party recipe)"
    assert Path(rows["maze"]["path"]).is_file() and "site" in Path(rows["maze"]["path"]).parts
    table = cli("config", "list")
    assert table.returncode == 0 and any(
        line.split()[:2] == ["maze-big", "agentr1-mazes"] for line in table.stdout.splitlines())


def test_named_config_resolves_bases_and_shipped_data_from_any_directory(cli, maze_site):
    out = cli("config", "show", "maze-big", "seed=3")
    assert out.returncode == 0, out.stderr
    assert "run_dir: runs/maze" in out.stdout and "total_steps: 50" in out.stdout and "seed: 3" in out.stdout
    assert "name: arithmetic" not in out.stdout.split("train:")[1].split("val:")[0]  # maze's data replaced tiny's
    data = maze_site / "agentr1_mazes" / "data"
    assert f"path: {data}/levels.jsonl" in out.stdout
    other = cli("config", "show", "maze", env={"MAZE_DATA": "/srv/full-mazes"})
    assert other.returncode == 0 and "path: /srv/full-mazes/levels.jsonl" in other.stdout


def test_a_yaml_added_to_the_folder_is_available_without_code_changes(cli, maze_site):
    extra = maze_site / "agentr1_mazes" / "configs" / "maze-cpu.yaml"
    extra.write_text("# CPU sizes\nbase: maze\nrollout: {n: 2}\n")
    try:
        listed = {r["name"]: r["distribution"] for r in json.loads(cli("config", "list", "--json").stdout)}
        assert listed["maze-cpu"] == "agentr1-mazes"
        shown = cli("config", "show", "maze-cpu")
        assert shown.returncode == 0 and "run_dir: runs/maze" in shown.stdout
    finally:
        extra.unlink()


def test_unknown_name_and_missing_package_data_are_one_line_errors(cli, maze_site):
    out = cli("run", "mase")
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "config file 'mase' not found" in out.stderr and "maze" in out.stderr
    bad = maze_site / "agentr1_mazes" / "configs" / "broken.yaml"
    bad.write_text("# broken\nbase: maze\ndata:\n  train: {name: jsonl, path: '${package_data:agentr1_mazes,nope}'}\n")
    try:
        out = cli("config", "show", "broken")
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert "'nope' is not shipped in agentr1_mazes" in out.stderr
    finally:
        bad.unlink()


def test_the_core_ships_default_and_tiny_through_the_same_hook():
    from agentr1_core.builtin import plugin as builtin

    names = {spec.name: spec for spec in builtin.agentr1_configs()}
    assert set(names) >= {"default", "tiny"} and all(isinstance(s, ConfigSpec) for s in names.values())
    assert names["tiny"].path().read_text().splitlines()[1] == "base: default"
    assert load_config("tiny").run_dir == "runs/tiny"


def test_two_distributions_with_one_config_name_conflict():
    class Shop:
        from agentr1_core import hookimpl

        @hookimpl
        def agentr1_configs(self):
            return [ConfigSpec("tiny", "agentr1_core:configs/default.yaml", "another tiny")]

    registry = Registry().load_entry_points()
    registry.register_module(Shop(), name="shop", distribution="agentr1-shop")
    with pytest.raises(DuplicateComponentError, match="config 'tiny' is registered by more than one distribution"):
        registry.get("config", "tiny")


def test_a_file_path_wins_over_a_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").write_text("base: default\nrun_dir: runs/mine\n")
    assert load_config("tiny").run_dir == "runs/mine"
    with pytest.raises(ConfigError, match="config file 'nowhere.yaml' not found"):
        load_config("nowhere.yaml")
