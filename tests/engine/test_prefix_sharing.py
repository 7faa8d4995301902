"""Prefix sharing and in-place KV slots of the transformers engine against the real SmolLM2-135M model.

The same requests go to an engine with the prefix store and to one without it: tokens must be equal and log-probs
within 1e-5 (absolute, plus 1e-5 relative: the batches differ, so fp32 sums differ in order), for a shared system prompt, the ``n`` samples of one prompt, and a second turn that extends the first
turn's prompt + response; and a weight change must drop every stored prefix.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from agentr1_core.rollout.base import SamplingParams
from agentr1_core.rollout.transformers_engine import TransformersEngine

pytestmark = pytest.mark.slow

SYSTEM = ("You are a careful assistant with a calculator tool. Call it as <tool>expression</tool> and wait for the "
          "result before you answer. Give the final answer as <answer>number</answer>. Think step by step, check "
          "every intermediate result, and never guess a number you could compute.")
QUESTIONS = ["What is 17 times 23?", "How much is 1024 divided by 8, plus 3?", "Add 45, 12 and 99."]


def _chat(tokenizer, messages) -> list[int]:
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return list(out if isinstance(out, list) else out["input_ids"])


def _first_turn(tokenizer, question) -> list[int]:
    return _chat(tokenizer, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])


def _observation(tokenizer) -> list[int]:
    return tokenizer.encode("<|im_end|>\n<|im_start|>user\n<result>391</result><|im_end|>\n<|im_start|>assistant\n",
                            add_special_tokens=False)


async def _episodes(engine, tokenizer, n: int, sampling: SamplingParams):
    """Two turns per episode (``n`` episodes per question, all at once); the second prompt appends the first
    turn's prompt and response. Returns ``[(turn1, turn2)]`` and the hit-rate stats of each turn."""

    async def episode(question, k):
        params = SamplingParams(**{**sampling.__dict__, "seed": None if sampling.seed is None else sampling.seed + k})
        prompt = _first_turn(tokenizer, question)
        first = await engine.generate(prompt, params)
        second = await engine.generate(prompt + first.token_ids + _observation(tokenizer), params)
        return first, second

    return await asyncio.gather(*[episode(q, k) for q in QUESTIONS for k in range(n)])


def _run(engine, tokenizer, n, sampling):
    engine.take_prefix_stats()
    out = asyncio.run(_episodes(engine, tokenizer, n, sampling))
    return out, engine.take_prefix_stats()


@pytest.fixture(scope="module")
def engines(smol_model_and_tokenizer):
    model, tokenizer = smol_model_and_tokenizer
    shared = TransformersEngine(model, tokenizer, max_batch_size=4, max_context=1024)
    plain = TransformersEngine(model, tokenizer, max_batch_size=4, max_context=1024, prefix_cache_mb=0)
    yield shared, plain
    shared.close()
    plain.close()


def _assert_same(a, b):
    for (a1, a2), (b1, b2) in zip(a, b):
        for x, y in ((a1, b1), (a2, b2)):
            assert x.finish_reason != "error" and x.token_ids == y.token_ids
            torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5, rtol=1e-5)


def test_shared_prefixes_give_the_same_tokens_and_logprobs(engines, smol_tokenizer):
    shared, plain = engines
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8, seed=11)  # seeded: both engines draw alike
    reference, none = _run(plain, smol_tokenizer, 2, sampling)
    assert none["prefix_reused_tokens"] == 0
    out, stats = _run(shared, smol_tokenizer, 2, sampling)
    _assert_same(out, reference)
    firsts = [_first_turn(smol_tokenizer, q) for q in QUESTIONS]
    common = min(next(i for i, (x, y) in enumerate(zip(a, b)) if x != y) for a in firsts for b in firsts if a != b)
    assert common > 40  # the system prompt
    # at least: the common prefix for all but the first episode, and every first turn's prompt + response
    # (but its last token) inside its second turn
    at_least = 5 * common + sum(first.info["prompt_tokens"] + len(first.token_ids) - 1 for first, _ in out)
    assert stats["prefix_reused_tokens"] >= at_least
    assert stats["prompt_tokens"] == sum(x.info["prompt_tokens"] for pair in out for x in pair)
    assert stats["prefix_hit_rate"] == pytest.approx(stats["prefix_reused_tokens"] / stats["prompt_tokens"])
    # rows joined and left a batch of 4 many times without rebuilding it
    assert shared.stats["max_running"] == 4


def test_weight_change_drops_stored_prefixes(engines, smol_model_and_tokenizer):
    model, tokenizer = smol_model_and_tokenizer
    shared, plain = engines
    sampling = SamplingParams(temperature=0, max_new_tokens=8)
    prompt = _first_turn(tokenizer, QUESTIONS[0])
    asyncio.run(shared.generate(prompt, sampling))
    weight = model.model.layers[-1].mlp.down_proj.weight
    saved = weight.detach().clone()
    try:
        with torch.no_grad():  # an in-place change without sync_weights(), as an optimizer step makes
            weight.add_(torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)) * 0.5)
        shared.take_prefix_stats()
        changed = asyncio.run(shared.generate(prompt, sampling))
        assert shared.take_prefix_stats()["prefix_reused_tokens"] == 0
        expected = asyncio.run(plain.generate(prompt, sampling))
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    assert changed.token_ids == expected.token_ids
    torch.testing.assert_close(torch.tensor(changed.logprobs), torch.tensor(expected.logprobs), atol=1e-5,
                               rtol=1e-5)
