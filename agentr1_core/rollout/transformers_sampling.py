"""Batched next-token sampling with per-row settings, used by the local transformers engine.

``sample_rows`` takes the last-position logits of every running sequence (one row each) and that row's
temperature / top-k / top-p / generator, and returns the chosen token ids plus their log-probs in one pass over the
batch. Log-probs are taken from the untruncated model distribution at the row's temperature,
``log_softmax(logits / T)`` (``T = 1`` for greedy rows): top-k / top-p only decide which tokens may be drawn, they do
not renormalise the reported log-prob. A trainer that wants matching numbers recomputes ``log_softmax(logits / T)``
with the same temperature.

Sampling inverts each row's cumulative distribution at one uniform draw ``U ~ Uniform[0, 1)``: the token is the first
whose cumulative probability (over the tokens top-k / top-p leave, at the row's temperature) exceeds ``U``. Rows with
their own seeded ``torch.Generator`` draw their ``U`` from it (reproducible per request); the others share one
generator. One number per row instead of one per vocabulary entry: much cheaper than the exponential race
``argmax(p / E)`` it replaced (``Tensor.exponential_`` over the whole vocabulary; ``docs/benchmarks.md``, section 11,
``bench/bench_sampling.py``).
This module knows nothing about caches, requests or stop strings.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RowSampling:
    """Sampling settings of one running row; ``generator`` is set only for requests that gave a seed."""

    temperature: float
    top_k: int
    top_p: float
    generator: torch.Generator | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def _filter_top_k_top_p(scaled: torch.Tensor, top_k: list[int], top_p: list[float]) -> torch.Tensor:
    """Set to -inf the logits each row may not draw (scaled: [n, V] already divided by temperature)."""
    vocab = scaled.size(-1)
    ks = [k if 0 < k < vocab else vocab for k in top_k]
    if any(k < vocab for k in ks):
        kmax = max(ks)
        top_vals = torch.topk(scaled, kmax, dim=-1).values  # [n, kmax] sorted descending
        kth = top_vals.gather(1, torch.tensor(ks, device=scaled.device).unsqueeze(1) - 1)
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if any(p < 1.0 for p in top_p):
        rows = [i for i, p in enumerate(top_p) if p < 1.0]
        sub = scaled[rows]
        sorted_vals, order = torch.sort(sub, dim=-1, descending=True)
        cum = torch.softmax(sorted_vals, dim=-1).cumsum(-1)
        ps = torch.tensor([top_p[i] for i in rows], device=scaled.device, dtype=cum.dtype).unsqueeze(1)
        drop_sorted = (cum - torch.softmax(sorted_vals, dim=-1)) >= ps  # mass before this token already >= p
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        scaled = scaled.clone()
        scaled[rows] = sub.masked_fill(drop, float("-inf"))
    return scaled


def sample_rows(logits: torch.Tensor, rows: list[RowSampling],
                shared_generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row. ``logits``: [B, V] float. Returns ``(token_ids [B] long, logprobs [B] float32)``."""
    logits = logits.float()
    temps = torch.tensor([r.temperature if not r.greedy else 1.0 for r in rows], dtype=logits.dtype,
                         device=logits.device).unsqueeze(1)
    scaled = logits / temps
    logprobs_all = torch.log_softmax(scaled, dim=-1)
    tokens = logits.argmax(dim=-1)
    sample_idx = [i for i, r in enumerate(rows) if not r.greedy]
    if sample_idx:
        sub = scaled[sample_idx]
        sub = _filter_top_k_top_p(sub, [rows[i].top_k for i in sample_idx], [rows[i].top_p for i in sample_idx])
        cdf = torch.softmax(sub, dim=-1).double().cumsum_(dim=-1)  # float64: tokens of tiny mass keep their share
        # The draws are made on the CPU, where the (CPU) generators live: the same seeds give the same tokens on
        # any device.
        uniform = torch.empty(len(sample_idx), 1, dtype=torch.float64)
        shared = [j for j, i in enumerate(sample_idx) if rows[i].generator is None]
        if shared:
            uniform[shared] = torch.rand(len(shared), 1, generator=shared_generator, dtype=torch.float64)
        for j, i in enumerate(sample_idx):
            if rows[i].generator is not None:
                torch.rand(1, generator=rows[i].generator, dtype=torch.float64, out=uniform[j])
        target = uniform.to(cdf.device) * cdf[:, -1:]  # the total is 1 up to rounding
        drawn = torch.searchsorted(cdf, target, right=True).squeeze(1).clamp_(max=cdf.size(1) - 1)
        tokens[sample_idx] = drawn
    logprobs = logprobs_all.gather(1, tokens.unsqueeze(1)).squeeze(1)
    return tokens, logprobs
