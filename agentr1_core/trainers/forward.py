"""One forward pass over left-padded step rows: response-token log-probs, entropy, and a critic value per step.

Only the positions that predict a response token go through the language-model head: ``logits_to_keep`` first
cuts the hidden states to the last ``max_response_len + 1`` positions, then a forward pre-hook on the output layer
keeps, row by row, just the positions predicting that row's own response tokens and hands the head one flat
``[1, N, hidden]`` sequence (N = response tokens in the batch). So neither the vocabulary projection nor the
log-softmax/entropy ever runs over prompt or padding positions. Log-probs are ``logit[target] - logsumexp(logits)``
with ``logits / temperature`` (the sampling temperature, so that they match the engine's); the entropy reuses the
same ``logsumexp``. The critic reads the final hidden state at the position that predicts the step's first action
token (the state the action was taken in), captured from the input of the output-embedding layer, so it works the
same with or without a LoRA wrapper.

Outputs are left-aligned ``[B, T]`` like ``StepBatch.action_mask`` (response token ``j`` at column ``j``, zero
beyond each row's response).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

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
    ``width`` columns (zero beyond each row's response; responses longer than ``width`` are cut)."""
    keep = inputs.keep
    rmax = keep - 1
    resp = inputs.response_lens.to(inputs.input_ids.device)
    counted = resp.clamp(max=width)
    cols = torch.arange(rmax, device=resp.device).unsqueeze(0)
    first = (rmax - resp).unsqueeze(1)  # kept position predicting each row's first response token
    predicts = (cols >= first) & (cols < first + counted.unsqueeze(1))  # [B, rmax]
    captured: list[torch.Tensor] = []

    def response_positions_only(_module, args):
        hidden = args[0]  # [B, keep, H]
        captured.append(hidden)
        return (hidden[:, :rmax][predicts.to(hidden.device)].unsqueeze(0),) + tuple(args[1:])

    hook = output_layer(model).register_forward_pre_hook(response_positions_only)
    try:
        out = model(input_ids=inputs.input_ids, attention_mask=inputs.attention_mask,
                    position_ids=inputs.position_ids, logits_to_keep=keep, use_cache=False)
    finally:
        hook.remove()
    logits = out.logits[0].float()  # [N, V]
    if temperature and temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    targets = inputs.input_ids[:, -rmax:][predicts].to(logits.device) if rmax > 0 else \
        inputs.input_ids.new_zeros((0,))
    lse = torch.logsumexp(logits, dim=-1)  # [N]
    token_lp = logits.gather(1, targets.unsqueeze(1)).squeeze(1) - lse
    valid = torch.arange(width, device=resp.device).unsqueeze(0) < counted.unsqueeze(1)  # [B, width]
    shape = (resp.shape[0], width)
    logprobs = token_lp.new_zeros(shape).masked_scatter(valid.to(token_lp.device), token_lp)
    entropy = None
    if with_entropy:
        ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
        entropy = ent.new_zeros(shape).masked_scatter(valid.to(ent.device), ent)
    values = None
    if value_head is not None:
        hidden = captured[-1]  # [B, keep, H]
        pos = (rmax - resp).clamp(min=0).to(hidden.device)  # the last prompt token inside the kept slice
        state = hidden[torch.arange(hidden.shape[0], device=hidden.device), pos]
        values = value_head(state.float()).squeeze(-1)
    return ForwardOutput(logprobs=logprobs, entropy=entropy, values=values)
