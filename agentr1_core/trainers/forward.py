"""One forward pass over left-padded step rows: response-token log-probs, entropy, and a critic value per step.

Only the last ``max_response_len + 1`` positions go through the language-model head (``logits_to_keep``), so the
vocabulary projection is never computed over prompt tokens. Log-probs use ``logits / temperature`` (the sampling
temperature, so that they match the engine's). The critic reads the final hidden state at the position that
predicts the step's first action token (the state the action was taken in), captured from the input of the
output-embedding layer, so it works the same with or without a LoRA wrapper.

Outputs are left-aligned ``[B, T]`` like ``StepBatch.action_mask`` (response token ``j`` at column ``j``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from agentr1_core.trainers.batching import ModelInputs


@dataclass
class ForwardOutput:
    logprobs: torch.Tensor  # [B, T]
    entropy: torch.Tensor | None  # [B, T]
    values: torch.Tensor | None  # [B]


def output_layer(model: Any) -> torch.nn.Module:
    layer = model.get_output_embeddings()
    if layer is None:
        raise ValueError("the model has no output embedding layer (lm_head)")
    return layer


def response_forward(model: Any, inputs: ModelInputs, width: int, temperature: float = 1.0,
                     with_entropy: bool = False, value_head: torch.nn.Module | None = None) -> ForwardOutput:
    """Run ``model`` on ``inputs`` and return per-token log-probs of the response tokens, left-aligned to
    ``width`` columns (zero beyond each row's response)."""
    captured: list[torch.Tensor] = []
    hook = None
    if value_head is not None:
        hook = output_layer(model).register_forward_pre_hook(lambda _m, args: captured.append(args[0]))
    try:
        out = model(input_ids=inputs.input_ids, attention_mask=inputs.attention_mask,
                    position_ids=inputs.position_ids, logits_to_keep=inputs.keep, use_cache=False)
    finally:
        if hook is not None:
            hook.remove()
    keep = inputs.keep
    rmax = keep - 1
    logits = out.logits[:, -keep:-1, :].float()  # [B, rmax, V]: predicts the last rmax tokens
    if temperature and temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    targets = inputs.input_ids[:, -rmax:]
    logp_all = F.log_softmax(logits, dim=-1)
    token_lp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # [B, rmax], right-aligned
    resp = inputs.response_lens
    cols = torch.arange(width, device=resp.device)
    valid = cols.unsqueeze(0) < resp.unsqueeze(1)  # [B, width]
    src = (rmax - resp).unsqueeze(1) + cols.unsqueeze(0)
    src = src.clamp(0, rmax - 1)
    if width > rmax:
        pad = width - rmax
        token_lp = F.pad(token_lp, (0, pad))
    logprobs = token_lp.gather(1, src) * valid
    entropy = None
    if with_entropy:
        ent = -(logp_all.exp() * logp_all).sum(-1)  # [B, rmax]
        if width > rmax:
            ent = F.pad(ent, (0, width - rmax))
        entropy = ent.gather(1, src) * valid
    values = None
    if value_head is not None:
        hidden = captured[-1]  # [B, keep, H]
        pos = (rmax - resp).clamp(min=0)  # index of the last prompt token inside the kept slice
        state = hidden[torch.arange(hidden.shape[0], device=hidden.device), pos]
        values = value_head(state.float()).squeeze(-1)
    return ForwardOutput(logprobs=logprobs, entropy=entropy, values=values)
