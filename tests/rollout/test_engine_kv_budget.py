"""``max_kv_mb``: the transformers engine admits a request only while every row slot of the key/value buffers, at
the width the rows in flight will reach (longest prompt plus ``max_new_tokens``), fits the budget; the rest wait,
and the outputs are those of the engine without a budget. A tiny random Llama with the real tokenizer, so these run
in seconds."""

from __future__ import annotations

import asyncio

import pytest
import torch

from agentr1_core.rollout import transformers_engine as te
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.rollout.transformers_engine import TransformersEngine
from agentr1_core.rollout.transformers_kv import kv_bytes_per_token


@pytest.fixture()
def tiny(tiny_model_dir):
    from agentr1_core.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    return model.eval(), tokenizer


def _generate(engine, prompts, max_new_tokens=24):
    async def run():
        return await asyncio.gather(*(engine.generate(p, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))
                                      for p in prompts))

    try:
        return asyncio.run(run()), engine.take_memory_stats()["kv_peak"], engine.stats["max_running"]
    finally:
        engine.close()


def test_kv_bytes_per_token_is_what_the_model_caches(tiny):
    model, _ = tiny
    with torch.inference_mode():
        out = model(input_ids=torch.arange(100, 113).unsqueeze(0), use_cache=True)
    cache = getattr(out, te.cache_keyword(model))
    cached = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    assert kv_bytes_per_token(model) * 13 == cached


def test_a_kv_budget_holds_rows_back_and_changes_no_output(tiny):
    model, tokenizer = tiny
    prompts = [list(range(100 + i, 160 + i)) for i in range(12)]  # 12 prompts of 60 tokens
    free, free_peak, free_running = _generate(TransformersEngine(model, tokenizer, max_batch_size=16,
                                                                 prefix_cache_mb=0), prompts)
    row_mb = (60 + 24 + 64) * kv_bytes_per_token(model) / 2 ** 20  # one row grown to its end, with headroom
    budget = 4.5 * row_mb
    capped, capped_peak, capped_running = _generate(TransformersEngine(model, tokenizer, max_batch_size=16,
                                                                       prefix_cache_mb=0, max_kv_mb=budget), prompts)
    assert free_running == 12 and free_peak > budget
    assert 1 < capped_running <= 4
    assert capped_peak <= budget
    assert [g.token_ids for g in capped] == [g.token_ids for g in free]
    for a, b in zip(capped, free):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_one_row_runs_even_when_it_alone_exceeds_the_budget(tiny):
    model, tokenizer = tiny
    gens, peak, running = _generate(TransformersEngine(model, tokenizer, prefix_cache_mb=0, max_kv_mb=0.001),
                                    [list(range(100, 140)), list(range(200, 240))], max_new_tokens=4)
    assert running == 1 and peak > 0.001
    assert all(len(g.token_ids) == 4 for g in gens)


def test_a_negative_budget_is_refused(tiny):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match="max_kv_mb"):
        TransformersEngine(model, tokenizer, max_kv_mb=-1)


def test_the_budget_holds_when_longer_rows_follow_shorter_ones(tiny, monkeypatch):
    """The second turn of an episode is a longer prompt: the row slots allocated for many short rows get the long
    rows' columns too (slots x columns is what the buffers hold), so long rows wait while short ones hold them."""
    monkeypatch.setattr(te, "IDLE_RELEASE_SECONDS", 60.0)  # no idle release between the turns: they follow at once
    model, tokenizer = tiny
    short = [list(range(100 + i, 130 + i)) for i in range(12)]
    long = [list(range(300 + i, 500 + i)) for i in range(12)]
    row_mb = (200 + 24 + 100) * kv_bytes_per_token(model) / 2 ** 20  # one long row grown to its end, with headroom
    budget = 4.5 * row_mb
    engine = TransformersEngine(model, tokenizer, max_batch_size=16, prefix_cache_mb=0, max_kv_mb=budget)

    def sampling(tokens):
        return SamplingParams(temperature=0.0, max_new_tokens=tokens)

    async def turns():
        quick = [asyncio.ensure_future(engine.generate(p, sampling(4))) for p in short[:6]]
        slow = [asyncio.ensure_future(engine.generate(p, sampling(60))) for p in short[6:]]
        await asyncio.gather(*quick)  # the slow short rows still run in the 12 slots
        return await asyncio.gather(*slow, *(engine.generate(p, sampling(24)) for p in long))

    try:
        outs = asyncio.run(turns())
        peak = engine.take_memory_stats()["kv_peak"]
    finally:
        engine.close()
    assert [len(o.token_ids) for o in outs] == [60] * 6 + [24] * 12
    assert peak <= budget
