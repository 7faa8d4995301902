"""Fixtures for the distributed tests: a tiny random Llama with the real SmolLM2 tokenizer, and a local Ray cluster.

The tiny model (2 layers, hidden 128, head dim 64: the smallest vLLM's CPU attention accepts) is for tests about orchestration, where the model's quality does not matter;
its tokenizer and chat template are SmolLM2's, so prompts are rendered exactly as in a real run.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smol_tokenizer):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny-llama")
    tok = smol_tokenizer
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                      tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="the Ray backend needs the extra agentr1-core[ray]")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024 * 1024, namespace="agentr1-test",
             log_to_driver=False)
    yield ray
    ray.shutdown()
