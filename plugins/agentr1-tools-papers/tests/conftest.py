"""Shared fixtures: an isolated index cache (indexes built during tests never land in the user's cache), the
small hand-written corpus with citation lists, and the installed ``agentr1-core`` command."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    """Paper indexes go to a temporary cache; converted models stay shared (``models`` links to the usual folder,
    so the real SmolLM2 is converted at most once, as in any run)."""
    from agentr1_core import models

    model_cache = models.cache_root()
    model_cache.mkdir(parents=True, exist_ok=True)
    mp = pytest.MonkeyPatch()
    cache = tmp_path_factory.mktemp("agentr1-cache")
    (cache / "models").symlink_to(model_cache, target_is_directory=True)
    mp.setenv("AGENTR1_CACHE", str(cache))
    yield cache
    mp.undo()


@pytest.fixture(autouse=True)
def cache_of_this_plugins_tests(isolated_cache, monkeypatch):
    """Each test of this folder sees its own folder's cache, also when the suite runs in several processes and
    another plugin's tests, which point ``AGENTR1_CACHE`` elsewhere, ran in this process in between."""
    monkeypatch.setenv("AGENTR1_CACHE", str(isolated_cache))


@pytest.fixture
def small_corpus() -> Path:
    return DATA / "papers_small.jsonl"


@pytest.fixture(scope="session")
def cli():
    """``cli(*args, cwd=...)`` runs the installed ``agentr1-core`` (the entry point of this environment)."""
    exe = shutil.which("agentr1-core", path=str(Path(sys.executable).parent)) or "agentr1-core"

    def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})

    return run
