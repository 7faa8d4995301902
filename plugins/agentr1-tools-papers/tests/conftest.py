"""Shared fixtures: an isolated index cache (indexes built during tests never land in the user's cache) and the
small hand-written corpus with citation lists."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    cache = tmp_path_factory.mktemp("agentr1-cache")
    mp.setenv("AGENTR1_CACHE", str(cache))
    yield cache
    mp.undo()


@pytest.fixture
def small_corpus() -> Path:
    return DATA / "papers_small.jsonl"
