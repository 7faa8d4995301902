"""Fixtures for the trainer tests: a tiny randomly initialised Llama that shares the real SmolLM2 tokenizer."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model(smol_tokenizer):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(smol_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         pad_token_id=smol_tokenizer.pad_token_id, eos_token_id=smol_tokenizer.eos_token_id,
                         bos_token_id=1, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()
