"""The transformers engine against the real SmolLM2-135M model: exactness, batching behaviour, stops, errors."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from agentr1_core.rollout.base import RolloutEngine, SamplingParams
from agentr1_core.rollout.transformers_engine import TransformersEngine

pytestmark = pytest.mark.slow

QUESTIONS = ["Hi", "What is the capital of France? Answer in one sentence.",
             "Write a short poem about the sea, then explain each line of it in detail for a child."]


def _chat_ids(tokenizer, text: str) -> list[int]:
    out = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
    return list(out if isinstance(out, list) else out["input_ids"])


@pytest.fixture(scope="module")
def engine(smol_model_and_tokenizer):
    model, tokenizer = smol_model_and_tokenizer
    eng = TransformersEngine(model, tokenizer, max_batch_size=16, max_context=512)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def prompts(smol_tokenizer):
    return [_chat_ids(smol_tokenizer, q) for q in QUESTIONS]


async def _gather(engine, prompts, sampling):
    return await asyncio.gather(*[engine.generate(p, sampling) for p in prompts])


def _full_logprobs(model, prompt, tokens, temperature=1.0):
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float() / temperature
    lp = torch.log_softmax(logits, -1)
    return [lp[len(prompt) - 1 + i, t].item() for i, t in enumerate(tokens)]


def test_engine_satisfies_protocol(engine):
    assert isinstance(engine, RolloutEngine)


def test_greedy_matches_generate_and_logprobs_match_forward(engine, prompts, smol_model_and_tokenizer):
    model, tokenizer = smol_model_and_tokenizer
    assert len({len(p) for p in prompts}) == len(prompts)
    gens = asyncio.run(_gather(engine, prompts, SamplingParams(temperature=0, max_new_tokens=16)))
    for prompt, gen in zip(prompts, gens):
        with torch.inference_mode():
            ref = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 do_sample=False, max_new_tokens=16)[0, len(prompt):].tolist()
        assert gen.token_ids == ref
        assert gen.finish_reason == ("stop" if ref[-1] == tokenizer.eos_token_id else "length")
        assert gen.text == tokenizer.decode(ref, skip_special_tokens=True)
        torch.testing.assert_close(torch.tensor(gen.logprobs), torch.tensor(_full_logprobs(model, prompt, ref)),
                                   atol=1e-4, rtol=0)


def test_sampled_logprobs_use_request_temperature_and_seed_repeats(engine, prompts, smol_model_and_tokenizer):
    model, _ = smol_model_and_tokenizer
    sampling = SamplingParams(temperature=0.8, top_p=0.95, top_k=40, max_new_tokens=10, seed=123)
    first, second = asyncio.run(_gather(engine, [prompts[2], prompts[2]], sampling))
    assert first.token_ids == second.token_ids
    expected = _full_logprobs(model, prompts[2], first.token_ids, temperature=0.8)
    torch.testing.assert_close(torch.tensor(first.logprobs), torch.tensor(expected), atol=1e-4, rtol=0)


def test_score_matches_forward(engine, prompts, smol_model_and_tokenizer):
    model, tokenizer = smol_model_and_tokenizer
    conts = [tokenizer.encode("Paris is lovely.", add_special_tokens=False), [tokenizer.eos_token_id],
             tokenizer.encode(" The sea is blue and deep", add_special_tokens=False)]

    async def run():
        return await asyncio.gather(*[engine.score(p, c) for p, c in zip(prompts, conts)])

    for prompt, cont, got in zip(prompts, conts, asyncio.run(run())):
        assert len(got) == len(cont)
        torch.testing.assert_close(torch.tensor(got), torch.tensor(_full_logprobs(model, prompt, cont)),
                                   atol=1e-4, rtol=0)


def test_late_short_request_finishes_before_earlier_long_one(engine, prompts):
    order: list[str] = []

    async def tagged(name, prompt, sampling):
        gen = await engine.generate(prompt, sampling)
        order.append(name)
        return gen

    async def run():
        long = asyncio.create_task(tagged("long", prompts[2], SamplingParams(temperature=0, max_new_tokens=48)))
        steps_before = engine.stats["decode_steps"]
        while engine.stats["decode_steps"] < steps_before + 3:  # the long request is decoding now
            await asyncio.sleep(0.01)
        short = await tagged("short", prompts[1], SamplingParams(temperature=0, max_new_tokens=3))
        return await long, short

    before = engine.stats["max_running"]
    long_gen, short_gen = asyncio.run(run())
    assert order == ["short", "long"]
    assert len(long_gen.token_ids) == 48 and long_gen.finish_reason == "length"
    assert len(short_gen.token_ids) == 3
    assert engine.stats["max_running"] >= max(before, 2)


def test_stop_string_cuts_at_completing_token(engine, prompts, smol_tokenizer):
    ref = asyncio.run(engine.generate(prompts[2], SamplingParams(temperature=0, max_new_tokens=30)))
    words = ref.text.split()
    stop = words[len(words) // 2]
    gen = asyncio.run(engine.generate(prompts[2], SamplingParams(temperature=0, max_new_tokens=30, stop=[stop])))
    assert gen.finish_reason == "stop"
    assert gen.token_ids == ref.token_ids[: len(gen.token_ids)]
    assert stop in smol_tokenizer.decode(gen.token_ids, skip_special_tokens=True)
    assert stop not in smol_tokenizer.decode(gen.token_ids[:-1], skip_special_tokens=True)
    assert gen.text.endswith(stop) or stop in gen.text
    assert len(gen.token_ids) < len(ref.token_ids)


def test_max_new_tokens_and_bad_prompts(engine, prompts):
    async def run():
        return await asyncio.gather(
            engine.generate(prompts[2], SamplingParams(temperature=0, max_new_tokens=5)),
            engine.generate([], SamplingParams()),
            engine.generate([1] * 600, SamplingParams()),
        )

    ok, empty, too_long = asyncio.run(run())
    assert len(ok.token_ids) == len(ok.logprobs) == 5 and ok.finish_reason == "length"
    assert empty.finish_reason == "error" and empty.token_ids == [] and "empty" in empty.info["error"]
    assert too_long.finish_reason == "error" and "max_context" in too_long.info["error"]


def test_in_place_weight_update_is_seen(engine, prompts, smol_model_and_tokenizer):
    model, _ = smol_model_and_tokenizer
    sampling = SamplingParams(temperature=0, max_new_tokens=8)
    before = asyncio.run(engine.generate(prompts[1], sampling))
    weight = model.model.layers[-1].mlp.down_proj.weight
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            weight.add_(torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)) * 0.5)
        engine.sync_weights()
        after = asyncio.run(engine.generate(prompts[1], sampling))
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    assert after.token_ids != before.token_ids
    restored = asyncio.run(engine.generate(prompts[1], sampling))
    assert restored.token_ids == before.token_ids


def test_idle_engine_frees_its_kv_buffers_and_generates_the_same_after(engine, prompts):
    """Between rollouts (the trainer's update) the batch's key/value buffers go back; the next request reallocates
    them and gets exactly what it got before."""
    from agentr1_core.rollout.transformers_engine import IDLE_RELEASE_SECONDS

    greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
    engine._store.clear()  # nothing reused from earlier tests: both runs prefill the same way
    first = asyncio.run(_gather(engine, prompts, greedy))
    deadline = time.monotonic() + 20 * IDLE_RELEASE_SECONDS
    while engine._kv.allocated_bytes and time.monotonic() < deadline:
        time.sleep(IDLE_RELEASE_SECONDS / 5)
    assert engine._kv.allocated_bytes == 0
    engine._store.clear()
    again = asyncio.run(_gather(engine, prompts, greedy))
    assert [g.token_ids for g in again] == [g.token_ids for g in first]


def test_kv_row_slots_follow_the_requests_in_flight(smol_model_and_tokenizer, prompts):
    """Three requests at once get three row slots, not the engine's ``max_batch_size`` (16)."""
    model, tokenizer = smol_model_and_tokenizer
    eng = TransformersEngine(model, tokenizer, max_batch_size=16, max_context=512)
    try:
        gens = asyncio.run(_gather(eng, prompts, SamplingParams(temperature=0, max_new_tokens=4)))
    finally:
        eng.close()
    assert all(len(g.token_ids) == 4 for g in gens)
    assert eng.stats["max_running"] == 3 and eng.stats["max_row_slots"] == 3
    # the prompts were prefilled (in one or more batches), then decoded: the worker's time is split between the two
    assert eng.stats["prefills"] >= 1 and eng.stats["decode_steps"] >= 3
    assert eng.stats["prefill_seconds"] > 0 and eng.stats["decode_seconds"] > 0


def test_a_failed_admission_fails_its_requests_and_the_engine_goes_on(smol_model_and_tokenizer, prompts, monkeypatch):
    """An error while a batch is admitted (here: building its key/value buffers) answers each of its requests with an
    error generation instead of losing them (the caller would wait forever); the next requests run normally."""
    from agentr1_core.rollout import transformers_engine as te

    model, tokenizer = smol_model_and_tokenizer
    eng = TransformersEngine(model, tokenizer, max_batch_size=16, max_context=512)
    real = te.prefill_batch

    def broken(*args, **kwargs):
        raise MemoryError("no memory for the key/value buffers")

    try:
        monkeypatch.setattr(te, "prefill_batch", broken)
        failed = asyncio.run(asyncio.wait_for(_gather(eng, prompts, SamplingParams(max_new_tokens=4)), 60))
        monkeypatch.setattr(te, "prefill_batch", real)
        fine = asyncio.run(asyncio.wait_for(_gather(eng, prompts, SamplingParams(max_new_tokens=4)), 60))
    finally:
        eng.close()
    assert [g.finish_reason for g in failed] == ["error"] * len(prompts)
    assert all("no memory" in g.info["error"] for g in failed)
    assert all(len(g.token_ids) == 4 for g in fine)


def test_idle_release_s_sets_how_long_an_idle_engine_keeps_its_kv_buffers(smol_model_and_tokenizer, prompts):
    """``engine.idle_release_s``: an engine told to wait an hour still holds its buffers when one told 0.05 s has
    freed its own; zero or negative is refused."""
    model, tokenizer = smol_model_and_tokenizer
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="idle_release_s must be > 0"):
            TransformersEngine(model, tokenizer, idle_release_s=bad)
    keeps = TransformersEngine(model, tokenizer, max_context=512, idle_release_s=3600.0)
    quick = TransformersEngine(model, tokenizer, max_context=512, idle_release_s=0.05)
    try:
        for eng in (keeps, quick):
            asyncio.run(_gather(eng, prompts, SamplingParams(temperature=0, max_new_tokens=4)))
        deadline = time.monotonic() + 60
        while quick._kv.allocated_bytes and time.monotonic() < deadline:
            time.sleep(0.01)
        assert quick._kv.allocated_bytes == 0
        assert keeps._kv.allocated_bytes > 0
    finally:
        keeps.close()
        quick.close()
