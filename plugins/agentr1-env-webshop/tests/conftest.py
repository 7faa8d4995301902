"""Fixtures: the shipped catalogue slice and goals, a fresh env, the real SmolLM2 tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
PRODUCTS = str(DATA / "products_slice.jsonl")
PRICES = str(DATA / "prices_slice.json")
SYNTHETIC = str(DATA / "goals_synthetic_slice.json")
HUMAN = str(DATA / "goals_human_slice.json")


@pytest.fixture(scope="session")
def catalog():
    from agentr1_env_webshop.catalog import load_catalog

    return load_catalog(PRODUCTS, PRICES)


@pytest.fixture(scope="session")
def synthetic_goals():
    return json.loads(Path(SYNTHETIC).read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def human_goals():
    return json.loads(Path(HUMAN).read_text(encoding="utf-8"))


@pytest.fixture
def make_env(catalog):
    from agentr1_env_webshop.env import WebShopEnv

    def build(**kwargs):
        return WebShopEnv(catalog=catalog, **kwargs)

    return build


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The real SmolLM2-135M-Instruct tokenizer: the converted-model cache if present, else read from the GGUF."""
    from transformers import AutoTokenizer

    from agentr1_core import models

    cached = models.cache_root() / models.SMOLLM2_CACHE_NAME
    if (cached / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(str(cached))
    gguf = models.smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
