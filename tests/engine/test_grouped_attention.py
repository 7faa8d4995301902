"""Grouped-query attention on the CPU (``attention.GROUPED_SDPA``): models loaded for the CPU with grouped key/value
heads use it; logits and gradients are those of transformers' ``sdpa`` (masked rows, a cached prefix, no mask), the
backward pass keeps fewer bytes (keys/values at their own head count), and a saved model still says ``sdpa``."""

from __future__ import annotations

import copy
import json

import pytest
import torch

import agentr1_core.attention as attention
from agentr1_core.models import load_model_and_tokenizer
from agentr1_core.rollout.transformers_engine import cache_keyword
from agentr1_core.trainers.update import Policy, SavedActivations


@pytest.fixture()
def pair(tiny_model_dir):
    """The tiny model (4 query heads, 2 key/value heads) as loaded, and a copy switched back to ``sdpa``."""
    model, _ = load_model_and_tokenizer(tiny_model_dir)
    reference = copy.deepcopy(model)
    reference.set_attn_implementation("sdpa")
    return model, reference


@pytest.fixture()
def covered_calls(monkeypatch):
    calls = []
    real = attention.F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs.get("enable_gqa", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", spy)
    return calls


def _inputs():
    ids = torch.randint(100, 2000, (3, 40), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :9] = 0  # a left-padded row
    return ids, mask


def test_models_on_the_cpu_with_grouped_heads_get_it(pair):
    model, reference = pair
    assert model.config._attn_implementation == attention.GROUPED_SDPA
    assert reference.config._attn_implementation == "sdpa"
    assert attention.use_grouped_cpu_attention(reference.to(torch.float64)) is True  # any dtype on the CPU
    same_heads = copy.deepcopy(model)
    same_heads.config.num_key_value_heads = same_heads.config.num_attention_heads
    same_heads.set_attn_implementation("sdpa")
    assert attention.use_grouped_cpu_attention(same_heads) is False  # nothing to gain
    eager = copy.deepcopy(reference)
    eager.set_attn_implementation("eager")
    assert attention.use_grouped_cpu_attention(eager) is False  # another implementation is left alone


def test_logits_and_gradients_are_those_of_sdpa(pair, covered_calls):
    model, reference = pair
    ids, mask = _inputs()
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids, attention_mask=mask).logits,
                              reference(input_ids=ids, attention_mask=mask).logits, atol=1e-5)
        assert torch.allclose(model(input_ids=ids[1:]).logits, reference(input_ids=ids[1:]).logits, atol=1e-5)
        key = cache_keyword(model)
        cached = [getattr(m(input_ids=ids[:, :25], attention_mask=mask[:, :25], use_cache=True), key)
                  for m in (model, reference)]
        rest = [m(input_ids=ids[:, 25:], attention_mask=mask, **{key: c}).logits
                for m, c in zip((model, reference), cached)]
        assert torch.allclose(rest[0], rest[1], atol=1e-5)
    assert sum(covered_calls) >= 3 * model.config.num_hidden_layers  # the three passes above ran grouped
    for m in (model, reference):
        m.train()
        m(input_ids=ids, attention_mask=mask).logits.square().mean().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-6)


def test_the_backward_pass_keeps_fewer_bytes(pair):
    model, reference = pair
    ids, mask = _inputs()
    saved = []
    for m in (model, reference):
        m.train()
        with SavedActivations(Policy(model=m, pad_id=0)) as measured:
            m(input_ids=ids, attention_mask=mask).logits.sum()
        saved.append(measured.mb)
    assert 0 < saved[0] < saved[1]


def test_a_saved_model_says_sdpa(pair, tiny_model_dir, tmp_path):
    model, _ = pair
    model.save_pretrained(tmp_path)
    load_model_and_tokenizer(tiny_model_dir)[1].save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config.get("_attn_implementation") in (None, "sdpa")
    loaded, _ = load_model_and_tokenizer(str(tmp_path))
    assert loaded.config._attn_implementation == attention.GROUPED_SDPA
