"""Shared fixtures: an isolated index cache, the shipped sample paths, the dev-only context corpus, the real
SmolLM2 tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentr1_core import models
from agentr1_tools_search.corpus import SAMPLE_CORPUS

DATA = Path(__file__).parent / "data"
MODEL_CACHE = models.cache_root()  # read before the tests point AGENTR1_CACHE at a temporary folder


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    """Indexes built automatically go to a temporary cache, not the user's."""
    mp = pytest.MonkeyPatch()
    cache = tmp_path_factory.mktemp("agentr1-cache")
    mp.setenv("AGENTR1_CACHE", str(cache))
    yield cache
    mp.undo()


@pytest.fixture(autouse=True)
def cache_of_this_plugins_tests(isolated_cache, monkeypatch):
    """Each test of this folder sees its own folder's cache, also when the suite runs in several processes and
    another plugin's tests, which point ``AGENTR1_CACHE`` elsewhere, ran in this process in between."""
    monkeypatch.setenv("AGENTR1_CACHE", str(isolated_cache))


@pytest.fixture(scope="session")
def dev_corpus(tmp_path_factory) -> Path:
    """The 1,000 context paragraphs of the HotpotQA dev sample (the ``hotpot-dev-*`` lines of the shipped corpus)."""
    path = tmp_path_factory.mktemp("dev") / "hotpot_dev_context_corpus.jsonl"
    with SAMPLE_CORPUS.open(encoding="utf-8") as src, path.open("w", encoding="utf-8") as out:
        out.writelines(line for line in src if '"id": "hotpot-dev-' in line)
    return path


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The real SmolLM2-135M-Instruct tokenizer: from the converted-model cache if present, else from the GGUF."""
    from transformers import AutoTokenizer

    cached = MODEL_CACHE / models.SMOLLM2_CACHE_NAME
    if models._is_complete_cache(cached):
        return AutoTokenizer.from_pretrained(str(cached))
    gguf = models.smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
