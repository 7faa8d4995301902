"""The engine's CPU linears (weight-major ``W @ x^T`` for small decode batches, oneDNN for the rest): same values as
``F.linear``, in-place weight updates seen, rerouted only where they apply and only in the thread that entered the
mode, and the engine's tokens unchanged by them."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
import torch.nn.functional as F

from agentr1_core.cpu_linears import CpuLinears, onednn_available, onednn_linear, weight_major_linear
from agentr1_core.rollout.base import SamplingParams


@pytest.mark.parametrize("shape", [(3, 24), (2, 1, 24), (4, 5, 24)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_weight_major_linear_equals_f_linear(shape, with_bias):
    torch.manual_seed(0)
    x, weight = torch.randn(*shape), torch.randn(40, 24)
    bias = torch.randn(40) if with_bias else None
    out = weight_major_linear(x, weight, bias)
    assert out.shape == (*shape[:-1], 40) and out.is_contiguous()
    torch.testing.assert_close(out, F.linear(x, weight, bias), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", [(1, 24), (3, 24), (2, 1, 24), (4, 5, 24)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_onednn_linear_equals_f_linear_and_sees_in_place_weight_updates(shape, with_bias):
    assert onednn_available()  # the x86 CPU wheels this project pins have it
    torch.manual_seed(0)
    x, weight = torch.randn(*shape), torch.randn(40, 24)
    bias = torch.randn(40) if with_bias else None
    torch.testing.assert_close(onednn_linear(x, weight, bias), F.linear(x, weight, bias), atol=1e-5, rtol=1e-5)
    weight.mul_(-3.0).add_(0.5)  # an optimizer step: the next call must use the new values, not a cached copy
    if bias is not None:
        bias.add_(1.0)
    out = onednn_linear(x, weight, bias)
    assert out.shape == (*shape[:-1], 40)
    torch.testing.assert_close(out, F.linear(x, weight, bias), atol=1e-5, rtol=1e-5)


def test_mode_routes_by_row_count_and_leaves_other_calls_alone():
    layer = torch.nn.Linear(24, 40)  # an nn.Parameter weight and bias: the case of every real model
    with torch.inference_mode(), CpuLinears(weight_major_rows=8) as mode:
        for rows, way in ((1, "onednn"), (2, "weight_major"), (8, "weight_major"), (9, "onednn"), (300, "onednn")):
            before = (mode.weight_major_calls, mode.onednn_calls)
            out = layer(torch.randn(rows, 1, 24))
            after = (mode.weight_major_calls, mode.onednn_calls)
            assert (after[0] - before[0], after[1] - before[1]) == ((1, 0) if way == "weight_major" else (0, 1)), rows
            assert out.shape == (rows, 1, 40)
        before = (mode.weight_major_calls, mode.onednn_calls)
        F.linear(torch.randn(4, 24, dtype=torch.float64), layer.weight.double())  # weight-major takes any dtype
        F.linear(torch.randn(9, 24, dtype=torch.float64), layer.weight.double())  # oneDNN only float32: F.linear
        with pytest.raises(RuntimeError):  # a dtype mismatch keeps F.linear's own error
            F.linear(torch.randn(4, 24), layer.weight.double())
    assert (mode.weight_major_calls - before[0], mode.onednn_calls - before[1]) == (1, 0)
    with CpuLinears(weight_major_rows=0, onednn=False) as mode:
        layer(torch.randn(3, 24))
    assert mode.weight_major_calls == mode.onednn_calls == 0


def test_mode_leaves_calls_that_need_gradients_to_autograd():
    layer = torch.nn.Linear(24, 40)
    x = torch.randn(9, 24)
    with CpuLinears() as mode:
        layer(x).square().sum().backward()  # the weight needs a gradient: F.linear
        frozen = torch.nn.Linear(24, 40).requires_grad_(False)
        frozen(x.clone().requires_grad_()).sum().backward()  # the input needs one: F.linear too
        with torch.no_grad():
            layer(x)
    assert layer.weight.grad is not None and mode.onednn_calls == 1  # only the no_grad call was rerouted


def test_mode_is_local_to_the_thread_that_entered_it():
    layer = torch.nn.Linear(24, 40)
    seen: dict[str, int] = {}
    entered, done = threading.Event(), threading.Event()

    def engine_thread():
        with CpuLinears() as mode:
            entered.set()
            done.wait(timeout=30)
            seen["engine"] = mode.weight_major_calls + mode.onednn_calls

    worker = threading.Thread(target=engine_thread)
    worker.start()
    entered.wait(timeout=30)
    try:
        with torch.no_grad():
            for rows in (3, 9):  # the "trainer" thread: batches that the mode would reroute in its own thread
                layer(torch.randn(rows, 24))
    finally:
        done.set()
        worker.join(timeout=30)
    assert seen["engine"] == 0


@pytest.fixture(scope="module")
def tiny_model(tiny_model_dir):
    from agentr1_core.models import load_model_and_tokenizer

    return load_model_and_tokenizer(tiny_model_dir)


def test_engine_reroutes_every_linear_of_every_forward_with_the_same_tokens(tiny_model):
    from agentr1_core.rollout.transformers_engine import TransformersEngine

    model, tokenizer = tiny_model
    prompts = [tokenizer.encode(text) for text in ("Hello there", "What is two plus two?", "Name a colour")]
    sampling = SamplingParams(temperature=0, max_new_tokens=8)
    linears_per_forward = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    results = {}
    for rows, onednn in ((4, True), (0, True), (0, False)):
        engine = TransformersEngine(model, tokenizer, weight_major_rows=rows, onednn_linears=onednn,
                                    prefix_cache_mb=0)
        try:
            gens = asyncio.run(_gather(engine, prompts, sampling))
            scores = asyncio.run(engine.score(prompts[0], gens[0].token_ids))
            results[rows, onednn] = (gens, scores, dict(engine.stats))
        finally:
            engine.close()
    for gens, scores, _ in results.values():
        for a, b in zip(gens, results[0, False][0]):
            assert a.token_ids == b.token_ids and len(a.token_ids) == 8
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.tensor(scores), torch.tensor(gens[0].logprobs), atol=1e-4, rtol=0)
    both, onednn_only, plain = (results[k][2] for k in ((4, True), (0, True), (0, False)))
    forwards = both["prefills"] + both["decode_steps"] + 1  # the score request is one more forward
    assert both["decode_steps"] >= 7 and both["weight_major_linears"] >= 7 * linears_per_forward  # 3-row steps
    assert both["weight_major_linears"] + both["onednn_linears"] == forwards * linears_per_forward  # the head too
    assert onednn_only["weight_major_linears"] == 0 and onednn_only["onednn_linears"] == forwards * linears_per_forward
    assert plain["weight_major_linears"] == plain["onednn_linears"] == 0


async def _gather(engine, prompts, sampling):
    return await asyncio.gather(*[engine.generate(p, sampling) for p in prompts])
