"""Fixtures for the fault-injection suite: a tiny random Llama saved to a folder, with the real SmolLM2 tokenizer."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smol_tokenizer) -> str:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny-llama-faults")
    tok = smol_tokenizer
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)
