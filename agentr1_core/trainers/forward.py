"""One forward pass over left-padded step rows: response-token log-probs, entropy, and a critic value per step.

Only the positions that predict a response token go through the language-model head: ``logits_to_keep`` first
cuts the hidden states to the last ``max_response_len + 1`` positions, then a forward pre-hook on the output layer
takes, row by row, just the positions predicting that row's own response tokens (N in the batch) and hands the model's
own head call an empty sequence. The head then runs here, over those N positions in chunks (``head.chunked_head``:
only one chunk's ``[chunk, vocab]`` logits exist at a time, and they are recomputed in the backward pass). So
neither the vocabulary projection nor the log-softmax/entropy ever runs over prompt or padding positions. Log-probs
are ``log_softmax(logits / temperature)`` at the target (the sampling temperature, so that they match the engine's);
the entropy is ``logsumexp - sum(softmax * logits)``. What some architectures do to the logits after the head
(Gemma's final soft-capping, Cohere's ``logit_scale``, Granite's ``logits_scaling``) is applied here from the model
config (``head.LogitTransform``); the trainer-vs-engine log-prob gap metric would show an architecture missed here.
The critic reads the final hidden state at the position that predicts the step's first action token (the state the
action was taken in), captured from the input of the output-embedding layer, so it works the same with or without
a LoRA wrapper.

With a shared prefix (``ModelInputs.prefix_ids``, see ``batching.collate``) the prefix runs once, its keys and
values are repeated for every row, and the rows' own tokens run on top of them: the same log-probs and gradients as
running every row whole (the prefix's gradient is the sum over the rows), with the prefix computed once.

Outputs are left-aligned ``[B, T]`` like ``StepBatch.action_mask`` (response token ``j`` at column ``j``, zero
beyond each row's response).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from agentr1_core.rollout.transformers_engine import cache_keyword
from agentr1_core.trainers.batching import ModelInputs
from agentr1_core.trainers.head import LogitTransform, chunked_head


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


def prefix_cache(model: Any, prefix_ids: torch.Tensor, rows: int) -> Any:
    """Keys and values of ``prefix_ids`` ([1, P]) under ``model``, repeated for ``rows`` rows (a model cache object).

    Gradients flow through them when enabled. The head runs on one position only (its output is unused)."""
    length = prefix_ids.shape[1]
    positions = torch.arange(length, device=prefix_ids.device).unsqueeze(0)
    out = model(input_ids=prefix_ids, attention_mask=torch.ones_like(prefix_ids), position_ids=positions,
                use_cache=True, logits_to_keep=1)
    cache = getattr(out, cache_keyword(model), None)
    if cache is None:
        raise ValueError("the model returned no key/value cache; set trainer.share_prefix: 0")
    cache.batch_repeat_interleave(rows)
    return cache


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
    flat: list[torch.Tensor] = []

    def response_positions_only(_module, args):
        hidden = args[0]  # [B, keep, H]
        captured.append(hidden)
        flat.append(hidden[:, :rmax][predicts.to(hidden.device)])  # [N, H]
        return (hidden[:, :0],) + tuple(args[1:])  # the head itself runs below, in chunks

    head = output_layer(model)
    past = None
    if inputs.prefix_ids is not None:
        past = prefix_cache(model, inputs.prefix_ids, rows=inputs.input_ids.shape[0])
    hook = head.register_forward_pre_hook(response_positions_only)
    try:
        cache = {cache_keyword(model): past} if past is not None else {}
        model(input_ids=inputs.input_ids, attention_mask=inputs.attention_mask, position_ids=inputs.position_ids,
              logits_to_keep=keep, use_cache=past is not None, **cache)
    finally:
        hook.remove()
    targets = inputs.input_ids[:, -rmax:][predicts] if rmax > 0 else inputs.input_ids.new_zeros((0,))
    token_lp, ent = chunked_head(head, flat[-1], targets.to(flat[-1].device), temperature, with_entropy,
                                 LogitTransform.of(model))
    valid = torch.arange(width, device=resp.device).unsqueeze(0) < counted.unsqueeze(1)  # [B, width]
    shape = (resp.shape[0], width)
    logprobs = token_lp.new_zeros(shape).masked_scatter(valid.to(token_lp.device), token_lp)
    entropy = None
    if with_entropy:
        entropy = ent.new_zeros(shape).masked_scatter(valid.to(ent.device), ent)
    values = None
    if value_head is not None:
        hidden = captured[-1]  # [B, keep, H]
        pos = (rmax - resp).clamp(min=0).to(hidden.device)  # the last prompt token inside the kept slice
        state = hidden[torch.arange(hidden.shape[0], device=hidden.device), pos]
        values = value_head(state.float()).squeeze(-1)
    return ForwardOutput(logprobs=logprobs, entropy=entropy, values=values)
