"""The response-only forward (``trainers.forward.response_forward``) against the computation it replaced, which ran
the vocabulary projection and log-softmax over every kept position of every row: same log-probs, entropy, values and
gradients on one batch with very different response lengths, at two temperatures, with the head in one chunk and in
chunks of a few positions (checkpointed)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from agentr1_core.trainers.batching import ModelInputs, collate, trajectories_to_rows
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.testing.models import tiny_llama
from agentr1_core.trainers import head as head_module
from agentr1_core.trainers.forward import output_layer, response_forward


@pytest.fixture(scope="module")
def tiny(smol_tokenizer):
    return tiny_llama(smol_tokenizer)


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


@pytest.mark.parametrize("temperature,chunk", [(1.0, 512), (0.7, 512), (0.7, 5)])
def test_response_positions_only_equal_all_positions(tiny, smol_tokenizer, temperature, chunk, monkeypatch):
    monkeypatch.setattr(head_module, "HEAD_CHUNK_TOKENS", chunk)
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


@pytest.mark.parametrize("grad", [False, True])
def test_only_response_positions_reach_the_output_layer(tiny, smol_tokenizer, grad, monkeypatch):
    """The model's own head call gets no position; the head then sees the 7 response positions, 3 at a time (and
    again in the backward pass when training: the chunks are checkpointed)."""
    monkeypatch.setattr(head_module, "HEAD_CHUNK_TOKENS", 3)
    rows = trajectories_to_rows([Trajectory(steps=[Step(prompt_ids=[10, 11, 12, 13], response_ids=[14, 15],
                                                        response_logprobs=[0.0, 0.0])], uid="a", group_id="g"),
                                 Trajectory(steps=[Step(prompt_ids=[10], response_ids=[16, 17, 18, 19, 20],
                                                        response_logprobs=[0.0] * 5)], uid="b", group_id="g")]).rows
    seen = []
    handle = output_layer(tiny).register_forward_hook(lambda _m, _a, out: seen.append(tuple(out.shape)))
    try:
        with torch.set_grad_enabled(grad):
            out = response_forward(tiny, collate(rows, smol_tokenizer.pad_token_id), 5)
            if grad:
                out.logprobs.sum().backward()
                tiny.zero_grad(set_to_none=True)
    finally:
        handle.remove()
    vocab = len(smol_tokenizer)
    chunks = [(3, vocab), (3, vocab), (1, vocab)]
    assert seen == [(2, 0, vocab)] + chunks + (chunks[::-1] if grad else [])  # backward recomputes in reverse


def _tiny_with_logit_transform(kind: str, vocab: int):
    torch.manual_seed(0)
    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, head_dim=8)
    if kind == "gemma2-softcap":
        from transformers import Gemma2Config, Gemma2ForCausalLM

        return Gemma2ForCausalLM(Gemma2Config(**common, final_logit_softcapping=2.0)).eval()
    from transformers import CohereConfig, CohereForCausalLM

    return CohereForCausalLM(CohereConfig(**common, logit_scale=0.25)).eval()


@pytest.mark.parametrize("kind", ["gemma2-softcap", "cohere-scale"])
def test_logits_transformed_after_the_head_are_matched(smol_tokenizer, kind):
    """Architectures that change the head's output (soft-capping, scaling) get the log-probs of their own logits."""
    vocab = 512
    model = _tiny_with_logit_transform(kind, vocab)
    g = torch.Generator().manual_seed(3)
    steps = [Step(prompt_ids=torch.randint(1, vocab, (p,), generator=g).tolist(),
                  response_ids=torch.randint(1, vocab, (r,), generator=g).tolist(), response_logprobs=[0.0] * r)
             for p, r in [(7, 3), (4, 6)]]
    rows = trajectories_to_rows([Trajectory(steps=[s], uid=str(i), group_id="g") for i, s in enumerate(steps)]).rows
    seqs = [r.prompt_ids + r.response_ids for r in rows]
    with torch.no_grad():
        got = response_forward(model, collate(rows, 0), 6).logprobs
        for i, (seq, r) in enumerate(zip(seqs, rows)):
            logits = model(input_ids=torch.tensor([seq])).logits[0].float()
            n = len(r.response_ids)
            want = F.log_softmax(logits[-n - 1:-1], dim=-1).gather(1, torch.tensor(r.response_ids)[:, None])[:, 0]
            torch.testing.assert_close(got[i, :n], want, atol=1e-5, rtol=1e-5)
