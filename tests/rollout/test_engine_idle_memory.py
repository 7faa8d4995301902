"""What the transformers engine gives back while it idles (between rollouts, while the trainer updates): the KV
buffers always, the prefix store only once the module is being trained or its weights changed (announced by the
trainer or seen in the parameters' version counters), and the pages freed go back to the OS (``trim``), as do a
prefill's temporaries right after it. A tiny random Llama with the real tokenizer, so these run in seconds."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from agentr1_core.rollout import transformers_engine as te
from agentr1_core.rollout.base import SamplingParams


@pytest.fixture()
def tiny(tiny_model_dir):
    from agentr1_core.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    return model.eval(), tokenizer


@pytest.fixture()
def trims(monkeypatch):
    calls: list[float] = []
    monkeypatch.setattr(te, "trim", lambda: calls.append(time.monotonic()) or True)
    return calls


def _run(engine, n_tokens: int = 40) -> None:
    prompt = list(range(100, 100 + n_tokens))  # two full blocks of the store and more
    asyncio.run(engine.generate(prompt, SamplingParams(temperature=0.0, max_new_tokens=4)))


def _wait_idle(engine, done, seconds: float = 20 * te.IDLE_RELEASE_SECONDS) -> bool:
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(te.IDLE_RELEASE_SECONDS / 5)
    return done()


def test_an_idle_engine_keeps_the_store_for_unchanged_weights_and_frees_the_kv(tiny, trims):
    model, tokenizer = tiny
    engine = te.TransformersEngine(model, tokenizer, max_batch_size=4, max_context=256)
    try:
        _run(engine)
        after_run = len(trims)
        assert after_run == 1  # the prefill's temporaries went back before the decode steps
        assert _wait_idle(engine, lambda: engine._kv.allocated_bytes == 0 and len(trims) > after_run)
        time.sleep(3 * te.IDLE_RELEASE_SECONDS)  # several idle turns: the store stays (the next rollout reuses it)
        assert len(engine._store) > 0
        assert len(trims) == after_run + 1  # once per release, not on every idle turn
    finally:
        engine.close()


@pytest.mark.parametrize("change", ["train mode", "weight change", "announced change"])
def test_an_idle_engine_drops_the_store_once_the_weights_are_trained(tiny, trims, change):
    model, tokenizer = tiny
    engine = te.TransformersEngine(model, tokenizer, max_batch_size=4, max_context=256)
    try:
        _run(engine)
        after_run = len(trims)
        assert _wait_idle(engine, lambda: engine._kv.allocated_bytes == 0 and len(trims) > after_run)
        stored = engine._store.bytes
        assert stored > 0
        if change == "train mode":
            model.train()
        elif change == "announced change":
            engine.sync_weights()  # what the trainer says after an update its version counters may not show
        else:
            with torch.no_grad():
                next(model.parameters()).add_(0.0)  # an in-place update bumps the version counter
        # the worker clears the store, then trims: wait for both
        assert _wait_idle(engine, lambda: len(engine._store) == 0 and len(trims) > after_run + 1)
        assert len(trims) == after_run + 2  # the store's pages went back too, once
        stats = engine.take_memory_stats()  # the store's peak since the last call, although it is empty now
        assert stats["prefix_cache"] == pytest.approx(stored / 2 ** 20)
        assert engine.take_memory_stats()["prefix_cache"] == 0.0
        model.eval()
        _run(engine)  # the engine goes on: the next request fills the store again
        assert len(engine._store) > 0
    finally:
        model.eval()
        engine.close()
