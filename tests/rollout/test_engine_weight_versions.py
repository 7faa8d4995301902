"""The transformers engine's prefix store follows the weight versions the trainer announces (``sync_weights``),
not only what it can infer from the module.

The case that matters: AdamW's fused kernel updates parameters without bumping their in-place version counters, so an
engine that only watched those counters (and the module's training mode, when its idle worker happens to wake during
an update) reused keys and values computed with the old weights. Here the idle worker never wakes and the module
stays in eval mode, so nothing but the announcement can tell the engine. A tiny random Llama with the real
tokenizer, so these run in seconds.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from agentr1_core.rollout import transformers_engine as te
from agentr1_core.rollout.base import SamplingParams

QUESTION = "What is 17 times 23? Call the calculator first, then give the answer as <answer>N</answer>."


@pytest.fixture()
def tiny(tiny_model_dir, monkeypatch):
    """A fresh tiny model (the tests change its weights) and an engine whose idle worker never wakes."""
    from agentr1_core.models import load_model_and_tokenizer

    monkeypatch.setattr(te, "IDLE_RELEASE_SECONDS", 3600.0)
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    model.eval()
    engine = te.TransformersEngine(model, tokenizer, max_batch_size=4, max_context=512)
    yield model, tokenizer, engine
    engine.close()


def _prompt(tokenizer) -> list[int]:
    out = tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True)
    ids = list(out if isinstance(out, list) else out["input_ids"])
    assert len(ids) > 2 * te.BLOCK  # at least two full blocks of the store
    return ids


def _generate(engine, prompt: list[int]):
    gen = asyncio.run(engine.generate(prompt, SamplingParams(temperature=0.0, max_new_tokens=6)))
    assert gen.finish_reason != "error", gen.info
    return gen


def _forward_logprobs(model, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """The log-probs of ``tokens`` after ``prompt`` from one fresh forward of the whole sequence."""
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    return torch.tensor([lp[len(prompt) - 1 + i, t].item() for i, t in enumerate(tokens)])


def _version_sum(model) -> int:
    return sum(p._version for p in model.parameters())


def test_a_fused_adamw_step_without_a_training_window_leaves_no_stale_prefix(tiny):
    model, tokenizer, engine = tiny
    prompt = _prompt(tokenizer)
    _generate(engine, prompt)  # the prompt's keys and values are in the store now
    assert len(engine._store) > 0

    # one fused AdamW step, the module in eval mode throughout: no version bump, no training mode to see
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=5e-2, fused=True)
    before = _version_sum(model)
    model(torch.tensor([prompt])).logits.float().logsumexp(-1).mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    assert _version_sum(model) == before  # what made the in-place guard blind
    assert not model.training

    engine.sync_weights()  # what the trainer does after every change of the weights
    engine.take_prefix_stats()
    after = _generate(engine, prompt)
    expected = _forward_logprobs(model, prompt, after.token_ids)
    torch.testing.assert_close(torch.tensor(after.logprobs), expected, atol=1e-5, rtol=1e-5)
    assert engine.take_prefix_stats()["prefix_reused_tokens"] == 0  # nothing computed with the old weights


def test_unannounced_unchanged_weights_keep_the_store_and_an_announcement_drops_it(tiny):
    model, tokenizer, engine = tiny
    prompt = _prompt(tokenizer)
    first = _generate(engine, prompt)
    engine.take_prefix_stats()
    again = _generate(engine, prompt)  # same weights, nothing announced: the prompt's blocks are reused
    reused = engine.take_prefix_stats()["prefix_reused_tokens"]
    assert reused >= 2 * te.BLOCK
    assert again.token_ids == first.token_ids

    version = engine.weights_version
    engine.sync_weights()  # an announcement alone (the weights did not change) is enough
    assert engine.weights_version == version + 1
    announced = _generate(engine, prompt)
    assert engine.take_prefix_stats()["prefix_reused_tokens"] == 0
    assert announced.token_ids == first.token_ids
    torch.testing.assert_close(torch.tensor(announced.logprobs), torch.tensor(first.logprobs), atol=1e-5, rtol=1e-5)


def test_a_state_given_to_sync_weights_is_loaded_and_announced(tiny):
    model, tokenizer, engine = tiny
    prompt = _prompt(tokenizer)
    _generate(engine, prompt)
    name, weight = next((n, p) for n, p in model.named_parameters() if n.endswith("mlp.down_proj.weight"))
    new = weight.detach() + torch.randn(weight.shape, generator=torch.Generator().manual_seed(0))
    version = engine.weights_version
    engine.sync_weights({name: new})
    assert engine.weights_version == version + 1
    assert torch.equal(weight.detach(), new)
    engine.take_prefix_stats()
    after = _generate(engine, prompt)
    assert engine.take_prefix_stats()["prefix_reused_tokens"] == 0
    torch.testing.assert_close(torch.tensor(after.logprobs), _forward_logprobs(model, prompt, after.token_ids),
                               atol=1e-5, rtol=1e-5)
