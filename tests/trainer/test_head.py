"""The language-model head over response positions (``trainers.head``): the hand-written ``HeadChunk`` gives the
same log-probs, entropy and gradients (hidden states, weight, bias) as autograd in float64, in chunks of uneven size,
at two temperatures, with and without an entropy term in the loss; it is used only where it applies (a plain
``nn.Linear`` without hooks or logit transform), and in the trainer's forward it sees only response positions."""

from __future__ import annotations

import pytest
import torch

from agentr1_core.mdp import Step, Trajectory
from agentr1_core.trainers import head as head_module
from agentr1_core.trainers.batching import collate, trajectories_to_rows
from agentr1_core.trainers.forward import response_forward
from agentr1_core.trainers.head import HeadChunk, LogitTransform, chunked_head, fused_head_applies

VOCAB, HIDDEN, POSITIONS = 300, 16, 37


def _head(bias: bool, train_weight: bool, dtype=torch.float32) -> torch.nn.Linear:
    torch.manual_seed(0)
    head = torch.nn.Linear(HIDDEN, VOCAB, bias=bias).to(dtype)
    with torch.no_grad():
        head.weight.mul_(8.0)  # peaked distributions, as a trained model's
    head.weight.requires_grad_(train_weight)
    return head


def _loss(lp, ent, entropy_coef):
    weights = torch.linspace(-1.0, 2.0, lp.shape[0], dtype=lp.dtype)
    loss = (lp * weights).sum()
    if ent is not None and entropy_coef:
        loss = loss + entropy_coef * (ent * weights.flip(0)).sum()
    return loss


def _float64_reference(head, hidden, targets, temperature, with_entropy, entropy_coef):
    """The same computation in float64 autograd, over all positions at once."""
    hidden = hidden.detach().double().requires_grad_(True)
    params = [p.detach().double().requires_grad_(p.requires_grad) for p in head.parameters()]
    logits = hidden @ params[0].T + (params[1] if len(params) > 1 else 0.0)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    lp = logp.gather(1, targets[:, None])[:, 0]
    ent = -(logp.exp() * logp).sum(-1) if with_entropy else None
    _loss(lp, ent, entropy_coef).backward()
    grads = [hidden.grad] + [p.grad for p in params if p.requires_grad]
    return lp.detach(), (ent.detach() if ent is not None else None), grads


def _run(head, hidden, targets, temperature, with_entropy, entropy_coef, fused):
    head.zero_grad(set_to_none=True)
    hidden = hidden.detach().clone().requires_grad_(True)
    lp, ent = chunked_head(head, hidden, targets, temperature, with_entropy, chunk=8, fused=fused)
    _loss(lp, ent, entropy_coef).backward()
    grads = [hidden.grad] + [p.grad for p in head.parameters() if p.requires_grad]
    return lp.detach(), (ent.detach() if ent is not None else None), grads


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("with_entropy,entropy_coef", [(False, 0.0), (True, 0.0), (True, 0.3)])
@pytest.mark.parametrize("bias,train_weight", [(False, False), (True, True)])
def test_fused_head_equals_autograd(temperature, with_entropy, entropy_coef, bias, train_weight):
    head = _head(bias, train_weight)
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(POSITIONS, HIDDEN, generator=g)
    targets = torch.randint(0, VOCAB, (POSITIONS,), generator=g)
    fused = _run(head, hidden, targets, temperature, with_entropy, entropy_coef, fused=True)
    ref = _float64_reference(head, hidden, targets, temperature, with_entropy, entropy_coef)
    torch.testing.assert_close(fused[0].double(), ref[0], atol=1e-5, rtol=1e-5)
    if with_entropy:
        torch.testing.assert_close(fused[1].double(), ref[1], atol=1e-5, rtol=1e-5)
    else:
        assert fused[1] is None and ref[1] is None
    assert len(fused[2]) == (3 if train_weight else 1)
    for a, b in zip(fused[2], ref[2]):
        assert a is not None and a.abs().max() > 0
        torch.testing.assert_close(a.double(), b, atol=1e-5, rtol=1e-4)


def test_fused_head_in_bfloat16_follows_autograd():
    """Other dtypes compute the logits in their own precision, then in float32 (no reused buffer)."""
    head = _head(bias=False, train_weight=True, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(2)
    hidden = torch.randn(POSITIONS, HIDDEN, generator=g).to(torch.bfloat16)
    targets = torch.randint(0, VOCAB, (POSITIONS,), generator=g)
    fused = _run(head, hidden, targets, 0.7, True, 0.3, fused=True)
    ref = _run(head, hidden, targets, 0.7, True, 0.3, fused=False)
    torch.testing.assert_close(fused[0], ref[0], atol=1e-4, rtol=1e-4)
    for a, b in zip(fused[2], ref[2]):
        assert a.dtype == torch.bfloat16
        torch.testing.assert_close(a.float(), b.float(), atol=2e-2, rtol=2e-2)


def test_without_gradients_the_fused_head_gives_the_same_numbers():
    head = _head(bias=True, train_weight=False)
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(POSITIONS, HIDDEN, generator=g)
    targets = torch.randint(0, VOCAB, (POSITIONS,), generator=g)
    with torch.no_grad():
        fused = chunked_head(head, hidden, targets, 0.7, True, chunk=8)
        logp = torch.log_softmax((hidden.double() @ head.weight.double().T + head.bias.double()) / 0.7, dim=-1)
    torch.testing.assert_close(fused[0].double(), logp.gather(1, targets[:, None])[:, 0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused[1].double(), -(logp.exp() * logp).sum(-1), atol=1e-5, rtol=1e-5)


def test_the_fused_head_is_used_only_where_it_applies():
    plain = torch.nn.Linear(4, 10)
    assert fused_head_applies(plain, LogitTransform())
    assert not fused_head_applies(plain, LogitTransform(softcap=30.0))
    assert not fused_head_applies(plain, LogitTransform(scale=0.5))

    class Wrapped(torch.nn.Linear):
        pass

    assert not fused_head_applies(Wrapped(4, 10), LogitTransform())
    handle = plain.register_forward_hook(lambda *_: None)
    assert not fused_head_applies(plain, LogitTransform())  # a hook must see the module called
    handle.remove()
    assert fused_head_applies(plain, LogitTransform())


@pytest.mark.parametrize("grad", [False, True])
def test_the_fused_head_sees_only_response_positions(tiny_model, smol_tokenizer, grad, monkeypatch):
    """In the trainer's forward the fused head gets the 7 response positions of two rows, 3 at a time."""
    monkeypatch.setattr(head_module, "HEAD_CHUNK_TOKENS", 3)
    seen: list[tuple[int, ...]] = []

    class Recording(HeadChunk):
        @staticmethod
        def forward(ctx, hidden, *args):
            seen.append(tuple(hidden.shape))
            return HeadChunk.forward(ctx, hidden, *args)

    monkeypatch.setattr(head_module, "HeadChunk", Recording)
    rows = trajectories_to_rows([Trajectory(steps=[Step(prompt_ids=[10, 11, 12, 13], response_ids=[14, 15],
                                                        response_logprobs=[0.0, 0.0])], uid="a", group_id="g"),
                                 Trajectory(steps=[Step(prompt_ids=[10], response_ids=[16, 17, 18, 19, 20],
                                                        response_logprobs=[0.0] * 5)], uid="b", group_id="g")]).rows
    with torch.set_grad_enabled(grad):
        out = response_forward(tiny_model, collate(rows, smol_tokenizer.pad_token_id), 5, temperature=0.7,
                               with_entropy=True)
        if grad:
            out.logprobs.sum().backward()
            tiny_model.zero_grad(set_to_none=True)
    hidden = tiny_model.config.hidden_size
    assert seen == [(3, hidden), (3, hidden), (1, hidden)]
    assert torch.all(out.logprobs[0, :2] < 0) and torch.all(out.logprobs[0, 2:] == 0)
