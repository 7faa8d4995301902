"""The recipe the plugin ships (``agentr1-core run alfworld``) reads its games from ALFWORLD_DATA, else from the sample
games shipped in the package, and passes the up-front component checks; its rows carry what the reward reads."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentr1_env_alfworld
from agentr1_core.components import check_components
from agentr1_core.config import load_config
from agentr1_core.plugins import configure_registry

DATA = Path(agentr1_env_alfworld.__file__).parent / "data" / "alfworld_sample"  # shipped in the wheel


@pytest.mark.slow
def test_recipe_validates_and_its_rows_load(monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(DATA))
    cfg = load_config("alfworld", ["data.train.split=valid_seen"])
    assert cfg.env.name == "alfworld" and cfg.data.train.path == str(DATA)
    registry = configure_registry(cfg.plugins.allow, cfg.plugins.block)
    check_components(cfg, registry)
    loader = registry.load("dataset", "alfworld")
    params = {k: v for k, v in dict(cfg.data.train).items() if k != "name"}
    rows = loader(**params)
    assert len(rows) == 6 and {r["data_source"] for r in rows} >= {"pick_two_obj_and_place"}


def test_recipe_defaults_to_the_shipped_sample_games(monkeypatch, tmp_path):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    cfg = load_config("alfworld")
    assert Path(cfg.data.train.path) == DATA.resolve() and Path(cfg.data.val.path) == DATA.resolve()
    from agentr1_env_alfworld.datasets import load_alfworld

    assert len(load_alfworld(cfg.data.val.path, split=cfg.data.val.split)) == 6


def test_the_sample_rows_carry_what_the_rewards_declare(monkeypatch):
    from agentr1_core.errors import ConfigError
    from agentr1_core.preflight import check_rows, load_rows

    monkeypatch.setenv("ALFWORLD_DATA", str(DATA))
    cfg = load_config("alfworld-cpu")
    assert cfg.reward.name == "alfworld_progress"
    registry = configure_registry(cfg.plugins.allow, cfg.plugins.block)
    rows = {key: load_rows(cfg, registry, key) for key in ("data.train", "data.val")}
    check_rows(cfg, registry, rows)
    bare = {"prompt": "put a clean ladle in a drawer", "env_kwargs": {"gamefile": "/games/1/game.tw-pddl"}}
    with pytest.raises(ConfigError) as raised:
        check_rows(cfg, registry, {"data.train": [*rows["data.train"], bare]})
    n = len(rows["data.train"]) + 1
    assert str(raised.value).splitlines() == [
        f"data.train row {n}: missing {field}, which dataset 'alfworld_split' reads (1 of {n} rows of data.train)"
        for field in ("gamefile", "extra_info.task_dir")] + [
        f"data.train row {n}: missing extra_info.task_dir (or gamefile), which reward 'alfworld_progress' reads "
        f"(1 of {n} rows of data.train)"]
