"""Weight-major linears (``W @ x^T``) for small decode batches: same values as ``F.linear``, rerouted only where
they apply and only in the thread that entered the mode, and the engine's tokens unchanged by them."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
import torch.nn.functional as F

from agentr1_core.rollout.base import SamplingParams
from agentr1_core.rollout.weight_major import WeightMajorLinear, weight_major_linear


@pytest.mark.parametrize("shape", [(3, 24), (2, 1, 24), (4, 5, 24)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_weight_major_linear_equals_f_linear(shape, with_bias):
    torch.manual_seed(0)
    x, weight = torch.randn(*shape), torch.randn(40, 24)
    bias = torch.randn(40) if with_bias else None
    out = weight_major_linear(x, weight, bias)
    assert out.shape == (*shape[:-1], 40) and out.is_contiguous()
    torch.testing.assert_close(out, F.linear(x, weight, bias), atol=1e-5, rtol=1e-5)


def test_mode_reroutes_only_small_cpu_batches_of_plain_tensors():
    layer = torch.nn.Linear(24, 40)  # an nn.Parameter weight and bias: the case of every real model
    with torch.inference_mode(), WeightMajorLinear(max_rows=8) as mode:
        for rows, rerouted in ((1, 0), (2, 1), (8, 1), (9, 0)):
            before = mode.calls
            out = layer(torch.randn(rows, 1, 24))
            assert mode.calls - before == rerouted, rows
            assert out.shape == (rows, 1, 40)
        before = mode.calls
        F.linear(torch.randn(4, 24, dtype=torch.float64), layer.weight.double())  # other dtypes are fine too
        with pytest.raises(RuntimeError):  # a dtype mismatch keeps F.linear's own error
            F.linear(torch.randn(4, 24), layer.weight.double())
    assert mode.calls - before == 1


def test_mode_is_local_to_the_thread_that_entered_it():
    layer = torch.nn.Linear(24, 40)
    seen: dict[str, int] = {}
    entered, done = threading.Event(), threading.Event()

    def engine_thread():
        with WeightMajorLinear() as mode:
            entered.set()
            done.wait(timeout=30)
            seen["engine"] = mode.calls

    worker = threading.Thread(target=engine_thread)
    worker.start()
    entered.wait(timeout=30)
    try:
        for _ in range(3):  # the "trainer" thread: a small batch that the mode would reroute in its own thread
            layer(torch.randn(3, 24))
    finally:
        done.set()
        worker.join(timeout=30)
    assert seen["engine"] == 0


@pytest.fixture(scope="module")
def tiny_model(tiny_model_dir):
    from agentr1_core.models import load_model_and_tokenizer

    return load_model_and_tokenizer(tiny_model_dir)


def test_engine_decodes_small_batches_weight_major_with_the_same_tokens(tiny_model):
    from agentr1_core.rollout.transformers_engine import TransformersEngine

    model, tokenizer = tiny_model
    prompts = [tokenizer.encode(text) for text in ("Hello there", "What is two plus two?", "Name a colour")]
    sampling = SamplingParams(temperature=0, max_new_tokens=8)
    results = {}
    for rows in (16, 0):
        engine = TransformersEngine(model, tokenizer, weight_major_rows=rows, prefix_cache_mb=0)
        try:
            gens = asyncio.run(_gather(engine, prompts, sampling))
            stats = engine.stats
            results[rows] = (gens, stats["weight_major_steps"], stats["weight_major_linears"], stats["decode_steps"])
        finally:
            engine.close()
    (on, on_steps, on_linears, decode_steps), (off, off_steps, off_linears, _) = results[16], results[0]
    linears_per_step = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert decode_steps >= 3 and on_steps >= 3 and off_steps == off_linears == 0
    assert on_linears == on_steps * linears_per_step  # every linear layer of every such step, the head included
    for a, b in zip(on, off):
        assert a.token_ids == b.token_ids and len(a.token_ids) == 8
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)


async def _gather(engine, prompts, sampling):
    return await asyncio.gather(*[engine.generate(p, sampling) for p in prompts])
