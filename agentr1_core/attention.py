"""Grouped-query attention on the CPU without a copy of the keys and values per query head.

transformers' ``sdpa`` attention gives every query head its own copy of the keys and values of a grouped-query model
(SmolLM2-135M: 3 key/value heads for 9 query heads) whenever more than one query position runs under a mask: every
pass of the trainer and every prefill of the engine. It does so because on CUDA the masked grouped kernel falls back
to a slow path. On the CPU, torch's SDPA serves the groups itself (``enable_gqa=True``) with the same values and
gradients: the copies are never made, and the backward pass keeps the keys and values at their own head count (a
third of the repeated ones for SmolLM2). ``docs/benchmarks.md`` (section 12) has the measurements.

``use_grouped_cpu_attention(model)`` switches a model on the CPU that uses ``sdpa`` and has grouped heads to
``GROUPED_SDPA``, registered with transformers under that name (with ``sdpa``'s masks). Every call it does not cover
(other devices, single-query decode steps, which transformers already serves without copies, soft-capping, position
biases, attention weights asked for) goes to transformers' own ``sdpa``. Models on other devices or with other
attention implementations are left as they are. Saved checkpoints keep ``sdpa``: the switch is not written to disk.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

GROUPED_SDPA = "agentr1_grouped_sdpa"


def grouped_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                 is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """An attention function for transformers' ``AttentionInterface``: ``[B, H, Q, D]`` query, ``[B, KV, K, D]``
    keys/values, output ``[B, Q, H, D]``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = int(getattr(module, "num_key_value_groups", 1))
    q_len, kv_len = query.shape[2], key.shape[2]
    covered = (query.device.type == "cpu" and groups > 1 and q_len > 1 and key.shape[-1] == value.shape[-1]
               and kwargs.get("softcap") is None and kwargs.get("position_bias") is None
               and not kwargs.get("output_attentions", False)
               and (attention_mask is not None or q_len == kv_len))  # no mask: causal is aligned top-left
    if not covered:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    causal = attention_mask is None and bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, is_causal=causal, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa)
    AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)


def use_grouped_cpu_attention(model: Any) -> bool:
    """Switch ``model`` to ``GROUPED_SDPA`` when it runs ``sdpa`` on the CPU with grouped key/value heads; True if
    it did."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    try:
        device = next(model.parameters()).device
    except StopIteration:
        return False
    text = config.get_text_config()
    heads = int(getattr(text, "num_attention_heads", 0) or 0)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    if device.type != "cpu" or not heads or kv_heads >= heads:
        return False
    _register()
    model.set_attn_implementation(GROUPED_SDPA)
    return True
