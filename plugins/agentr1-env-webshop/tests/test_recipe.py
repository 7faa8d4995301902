"""The ``webshop`` recipe shipped in the package: it reads the sample shipped in the package from any directory,
every split of the sample has goals, and WEBSHOP_DATA switches to another folder (a missing file says so)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import agentr1_env_webshop
from agentr1_core.components import check_components
from agentr1_core.config import load_config
from agentr1_core.plugins import get_registry
from agentr1_env_webshop.catalog import load_catalog
from agentr1_env_webshop.data import load_goals

SAMPLE = Path(agentr1_env_webshop.__file__).parent / "data" / "sample"


def test_recipe_defaults_to_the_shipped_sample_from_any_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    cfg = load_config("webshop")
    check_components(cfg, get_registry())
    assert Path(cfg.env.products) == SAMPLE.resolve() / "products_1k_processed.jsonl"
    assert Path(cfg.data.train.goals).is_file() and Path(cfg.env.prices).is_file()
    catalog = load_catalog(cfg.env.products, cfg.env.prices)
    sizes = {split: len(load_goals(cfg.data.train.goals, split=split)) for split in ("test", "val", "train")}
    assert sizes == {"test": 500, "val": 1000, "train": 304}
    assert {row["goal"]["asin"] for row in load_goals(cfg.data.train.goals)} <= set(catalog.products)


def test_webshop_data_points_elsewhere_and_a_missing_file_names_it(tmp_path):
    env = {**os.environ, "WEBSHOP_DATA": str(tmp_path / "full")}
    shown = subprocess.run([sys.executable, "-m", "agentr1_core.cli", "config", "show", "webshop"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert shown.returncode == 0 and f"products: {tmp_path / 'full'}/products_1k_processed.jsonl" in shown.stdout
    run = subprocess.run([sys.executable, "-m", "agentr1_core.cli", "run", "webshop", "trainer.total_steps=1"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and "Traceback" not in run.stderr and lines
    # one line for each component that reads the missing data: the training rows, the held-out rows, the env
    assert all("WebShop data file not found" in line and "WEBSHOP_DATA" in line for line in lines), lines
    assert any(line.startswith("agentr1-core: error: config error at data.train:") for line in lines), lines
