"""A tiny random Llama with a real tokenizer, for fast tests of orchestration where model quality does not matter."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def tiny_llama(tokenizer: Any, hidden_size: int = 32, num_heads: int = 4, num_kv_heads: int = 2, num_layers: int = 2,
               seed: int = 0) -> Any:
    """A randomly initialised ``LlamaForCausalLM`` (eval mode) sized to ``tokenizer``'s vocabulary, its weights fixed
    by ``seed``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                      num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                      max_position_embeddings=2048, tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval()


def save_tiny_llama(folder: str | Path, tokenizer: Any, hidden_size: int = 32, num_heads: int = 4,
                    num_kv_heads: int = 2, num_layers: int = 2, seed: int = 0) -> str:
    """Save ``tiny_llama(tokenizer, ...)`` (and the tokenizer, so prompts render with its chat template) to
    ``folder``; returns the folder as a string."""
    tiny_llama(tokenizer, hidden_size, num_heads, num_kv_heads, num_layers, seed).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
