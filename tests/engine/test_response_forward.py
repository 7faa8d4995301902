"""The response-only forward (``trainers.forward.response_forward``) against the computation it replaced, which ran
the vocabulary projection and log-softmax over every kept position of every row: same log-probs, entropy, values and
gradients on one batch with very different response lengths, at two temperatures."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from agentr1_core.trainers.batching import ModelInputs, collate, trajectories_to_rows
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.trainers.forward import output_layer, response_forward


@pytest.fixture(scope="module")
def tiny(smol_tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(smol_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         pad_token_id=smol_tokenizer.pad_token_id, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


def _all_positions_forward(model, inputs: ModelInputs, width: int, temperature: float, value_head):
    """The former computation: logits and log-softmax over all ``keep - 1`` kept positions, then re-aligned."""
    captured = []
    hook = output_layer(model).register_forward_pre_hook(lambda _m, args: captured.append(args[0]))
    try:
        out = model(input_ids=inputs.input_ids, attention_mask=inputs.attention_mask,
                    position_ids=inputs.position_ids, logits_to_keep=inputs.keep, use_cache=False)
    finally:
        hook.remove()
    rmax = inputs.keep - 1
    logits = out.logits[:, -inputs.keep:-1, :].float() / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    token_lp = logp_all.gather(-1, inputs.input_ids[:, -rmax:].unsqueeze(-1)).squeeze(-1)
    resp = inputs.response_lens
    cols = torch.arange(width)
    valid = cols.unsqueeze(0) < resp.unsqueeze(1)
    src = ((rmax - resp).unsqueeze(1) + cols.unsqueeze(0)).clamp(0, rmax - 1)
    pad = max(0, width - rmax)
    logprobs = F.pad(token_lp, (0, pad)).gather(1, src) * valid
    entropy = F.pad(-(logp_all.exp() * logp_all).sum(-1), (0, pad)).gather(1, src) * valid
    hidden = captured[-1]
    state = hidden[torch.arange(hidden.shape[0]), (rmax - resp).clamp(min=0)]
    return logprobs, entropy, value_head(state.float()).squeeze(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_response_positions_only_equal_all_positions(tiny, smol_tokenizer, temperature):
    g = torch.Generator().manual_seed(1)
    vocab = len(smol_tokenizer)
    trajs = []
    for i, (p, r) in enumerate([(30, 1), (5, 40), (60, 17), (12, 3)]):
        prompt = torch.randint(10, vocab, (p,), generator=g).tolist()
        resp = torch.randint(10, vocab, (r,), generator=g).tolist()
        trajs.append(Trajectory(steps=[Step(prompt_ids=prompt, response_ids=resp, response_logprobs=[0.0] * r)],
                                uid=str(i), group_id="g"))
    rows = trajectories_to_rows(trajs).rows
    inputs = collate(rows, smol_tokenizer.pad_token_id)
    width = 44  # wider than the longest response, like a StepBatch padded to a larger batch
    torch.manual_seed(2)
    head = torch.nn.Linear(32, 1)
    weights = torch.randn(len(rows), width)

    def run(fn):
        tiny.zero_grad(set_to_none=True)
        head.zero_grad(set_to_none=True)
        lp, ent, values = fn()
        ((lp * weights).sum() + ent.sum() * 0.1 + values.sum()).backward()
        grads = [p.grad.clone() for p in list(tiny.parameters()) + list(head.parameters())]
        return lp.detach(), ent.detach(), values.detach(), grads

    new = run(lambda: tuple(response_forward(tiny, inputs, width, temperature, with_entropy=True,
                                             value_head=head).__dict__.values()))
    old = run(lambda: _all_positions_forward(tiny, inputs, width, temperature, head))
    tiny.zero_grad(set_to_none=True)
    assert new[0].shape == (4, width) and torch.all(new[0][0, 1:] == 0) and torch.all(new[0][0, :1] != 0)
    for a, b in zip(new[:3], old[:3]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for a, b in zip(new[3], old[3]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_only_response_positions_reach_the_output_layer(tiny, smol_tokenizer):
    rows = trajectories_to_rows([Trajectory(steps=[Step(prompt_ids=[10, 11, 12, 13], response_ids=[14, 15],
                                                        response_logprobs=[0.0, 0.0])], uid="a", group_id="g"),
                                 Trajectory(steps=[Step(prompt_ids=[10], response_ids=[16, 17, 18, 19, 20],
                                                        response_logprobs=[0.0] * 5)], uid="b", group_id="g")]).rows
    seen = []
    handle = output_layer(tiny).register_forward_hook(lambda _m, _a, out: seen.append(tuple(out.shape)))
    try:
        with torch.no_grad():
            response_forward(tiny, collate(rows, smol_tokenizer.pad_token_id), 5)
    finally:
        handle.remove()
    assert seen == [(1, 2 + 5, len(smol_tokenizer))]
