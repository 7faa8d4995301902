"""The shipped recipe resolves its games folder from ALFWORLD_DATA and passes the up-front component checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentr1_core.config import load_config
from agentr1_core.plugins import configure_registry
from agentr1_core.runner import check_components

DATA = Path(__file__).parent / "data" / "alfworld"

RECIPE = Path(__file__).resolve().parents[3] / "configs" / "alfworld.yaml"


@pytest.mark.slow
def test_recipe_validates_and_its_rows_load(monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(DATA))
    cfg = load_config(str(RECIPE), ["data.train.split=valid_seen"])
    assert cfg.env.name == "alfworld" and cfg.data.train.path == str(DATA)
    registry = configure_registry(cfg.plugins.allow, cfg.plugins.block)
    check_components(cfg, registry)
    loader = registry.load("dataset", "alfworld")
    params = {k: v for k, v in dict(cfg.data.train).items() if k != "name"}
    rows = loader(**params)
    assert len(rows) == 6 and {r["data_source"] for r in rows} >= {"pick_two_obj_and_place"}
