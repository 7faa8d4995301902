"""The language-model head over response positions: the log-prob of each target token and the entropy, in chunks.

``chunked_head`` takes the final hidden states of the positions that predict response tokens ([N, H]) and returns
``log_softmax(logits / temperature)`` at the targets and, when asked, the entropy ``logsumexp - sum(softmax *
logits)``. It works in chunks of ``HEAD_CHUNK_TOKENS`` positions, so at most one chunk's ``[chunk, vocab]`` logits
exist at a time, and with gradients on it keeps only the hidden states and recomputes the logits in the backward pass
(the head runs twice: a few percent of the model's FLOPs).

Two ways to compute it, with the same values and gradients:

* ``HeadChunk`` (a plain ``nn.Linear`` head and no logit transform, the usual case): one autograd function whose
  forward and backward work in place in two ``[chunk, vocab]`` buffers that every chunk reuses (``Workspace``). The
  backward writes the gradient of the logits directly, ``softmax * -(g_lp + g_entropy * (log_softmax + entropy))``
  plus ``g_lp`` at the target, instead of autograd's chain of ``[chunk, vocab]`` temporaries for the log-softmax,
  the gather and the entropy, each freshly allocated (and, at this size, freshly page-faulted), and faster for it
  (``docs/benchmarks.md``, section 11, ``bench/bench_head.py``).
* the generic path (any head module, and the final soft-capping / logit scale some architectures apply, see
  ``LogitTransform``): the same formulas through autograd, each chunk checkpointed.

What this module does not do: pick the response positions (``forward.response_forward`` does), or compute a loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

HEAD_CHUNK_TOKENS = 512  # response positions per chunk of the head: bounds the [tokens, vocab] buffers


@dataclass(frozen=True)
class LogitTransform:
    """What the model's forward does to the head's output before returning logits (read from its config)."""

    softcap: float | None = None  # Gemma 2/3: final_logit_softcapping
    scale: float | None = None  # Cohere: logit_scale (multiplies)
    divide: float | None = None  # Granite: logits_scaling (divides)

    @classmethod
    def of(cls, model: Any) -> "LogitTransform":
        config = getattr(model, "config", None)
        return cls(*(getattr(config, key, None) for key in ("final_logit_softcapping", "logit_scale",
                                                             "logits_scaling")))

    @property
    def identity(self) -> bool:
        return not (self.softcap or self.scale or self.divide)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        if self.scale:
            logits = logits * self.scale
        if self.divide:
            logits = logits / self.divide
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


class Workspace:
    """Two reusable ``[chunk, vocab]`` float32 buffers shared by the chunks of one ``chunked_head`` call, so that
    the forward and backward passes of every chunk write into memory already mapped instead of fresh allocations."""

    def __init__(self) -> None:
        self._buffers: dict[int, torch.Tensor] = {}

    def buffer(self, slot: int, rows: int, vocab: int, like: torch.Tensor) -> torch.Tensor | None:
        """Rows ``:rows`` of buffer ``slot`` (grown as needed); None unless ``like`` is float32 (other dtypes
        compute in their own precision first and are cast, so they get fresh tensors)."""
        if like.dtype != torch.float32:
            return None
        buf = self._buffers.get(slot)
        if buf is None or buf.shape[0] < rows or buf.shape[1] != vocab or buf.device != like.device:
            buf = self._buffers[slot] = torch.empty((rows, vocab), dtype=torch.float32, device=like.device)
        return buf[:rows]

    def release(self) -> None:
        """Drop the buffers (the backward pass allocates them again on first use)."""
        self._buffers.clear()


def _scaled_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """``linear(hidden) / temperature`` as a float32 ``[C, V]`` tensor, written into ``out`` when given."""
    if out is not None and hidden.dtype == weight.dtype == torch.float32:
        logits = torch.mm(hidden, weight.t(), out=out)
        if bias is not None:
            logits.add_(bias)
    else:
        logits = F.linear(hidden, weight, bias).float()
    if temperature != 1.0:
        logits.div_(temperature)
    return logits


class HeadChunk(torch.autograd.Function):
    """Target log-probs and entropy of ``linear(hidden, weight, bias) / temperature`` for one chunk of positions,
    with a hand-written backward that recomputes the logits (see the module docstring)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature: float, with_entropy: bool, workspace: Workspace):
        rows, vocab = hidden.shape[0], weight.shape[0]
        z = _scaled_logits(hidden, weight, bias, temperature, workspace.buffer(0, rows, vocab, weight))
        target_logit = z.gather(1, targets.unsqueeze(1)).squeeze(1)
        top = z.amax(dim=1, keepdim=True)
        z.sub_(top)  # z - max: exp cannot overflow
        if with_entropy:
            spare = workspace.buffer(1, rows, vocab, weight)
            e = torch.exp(z, out=spare) if spare is not None else torch.exp(z)
            total = e.sum(dim=1)
            weighted = torch.bmm(e.unsqueeze(1), z.unsqueeze(2)).view(-1)  # sum(exp(z') * z') per row, no buffer
            log_total = total.log()
            entropy = log_total - weighted / total
        else:
            log_total = z.exp_().sum(dim=1).log()
            entropy = None
        lse = top.squeeze(1) + log_total
        ctx.temperature = float(temperature)
        ctx.workspace = workspace
        ctx.save_for_backward(hidden, weight, bias, targets, lse, entropy)
        ctx.set_materialize_grads(False)
        return target_logit - lse, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_lp, g_entropy):
        hidden, weight, bias, targets, lse, entropy = ctx.saved_tensors
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        if g_lp is None and g_entropy is None:
            return None, None, None, None, None, None, None
        rows, vocab, ws = hidden.shape[0], weight.shape[0], ctx.workspace
        z = _scaled_logits(hidden, weight, bias, ctx.temperature, ws.buffer(0, rows, vocab, weight))
        log_p = z.sub_(lse.unsqueeze(1))
        if g_entropy is not None:
            # d entropy / d z = -p * (log p + entropy); d logp_target / d z = onehot - p
            spare = ws.buffer(1, rows, vocab, weight)
            grad = torch.exp(log_p, out=spare) if spare is not None else torch.exp(log_p)
            coef = log_p.add_(entropy.unsqueeze(1)).mul_(g_entropy.unsqueeze(1))
            if g_lp is not None:
                coef.add_(g_lp.unsqueeze(1))
            grad.mul_(coef).neg_()
        else:
            grad = log_p.exp_().mul_(-g_lp.unsqueeze(1))
        if g_lp is not None:
            grad.scatter_add_(1, targets.unsqueeze(1), g_lp.unsqueeze(1).to(grad.dtype))
        if ctx.temperature != 1.0:
            grad.div_(ctx.temperature)
        grad = grad.to(weight.dtype)
        grad_hidden = grad @ weight if need_hidden else None
        grad_weight = grad.t() @ hidden.to(weight.dtype) if need_weight else None
        grad_bias = grad.sum(0) if need_bias else None
        return grad_hidden, grad_weight, grad_bias, None, None, None, None


def fused_head_applies(head: torch.nn.Module, transform: LogitTransform) -> bool:
    """Whether ``HeadChunk`` computes this head: a plain ``nn.Linear`` on ordinary tensors, without hooks (it reads
    the weight directly, so the module itself is not called), and no logit transform."""
    if type(head) is not torch.nn.Linear or not transform.identity:
        return False
    if head._forward_hooks or head._forward_pre_hooks:
        return False
    plain = (torch.Tensor, torch.nn.Parameter)
    return type(head.weight) in plain and (head.bias is None or type(head.bias) in plain)


def _head_chunk(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                with_entropy: bool, transform: LogitTransform) -> tuple[torch.Tensor, ...]:
    """The generic path: log-probs of ``targets`` (and the entropy) under ``head(hidden)`` through autograd."""
    logits = transform(head(hidden).float())  # [C, V]
    if temperature != 1.0:  # chunked_head passes 1.0 for greedy (temperature <= 0)
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    token_lp = logits.gather(1, targets.unsqueeze(1)).squeeze(1) - lse
    if not with_entropy:
        return (token_lp,)
    entropy = lse - (torch.exp(logits - lse.unsqueeze(1)) * logits).sum(-1)
    return token_lp, entropy


def chunked_head(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                 with_entropy: bool = False, transform: LogitTransform = LogitTransform(),
                 chunk: int | None = None, fused: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Target log-probs (and the entropy) of ``hidden`` [N, H] under ``head``, in chunks of ``chunk`` positions.

    ``HeadChunk`` computes it where it applies (``fused_head_applies``); ``fused=False`` forces the generic,
    checkpointed autograd path (the reference the tests compare with)."""
    from torch.utils.checkpoint import checkpoint

    chunk = max(1, int(chunk or HEAD_CHUNK_TOKENS))
    temperature = float(temperature) if temperature and temperature > 0 else 1.0
    use_fused = fused and fused_head_applies(head, transform)
    grad = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in head.parameters()))
    workspace = Workspace()
    lps: list[torch.Tensor] = []
    ents: list[torch.Tensor] = []
    for start in range(0, max(1, hidden.shape[0]), chunk):
        part, tgt = hidden[start:start + chunk], targets[start:start + chunk]
        if use_fused:
            parts = HeadChunk.apply(part, head.weight, head.bias, tgt, temperature, with_entropy, workspace)
        else:
            args = (head, part, tgt, temperature, with_entropy, transform)
            parts = checkpoint(_head_chunk, *args, use_reentrant=False) if grad else _head_chunk(*args)
        lps.append(parts[0])
        if with_entropy:
            ents.append(parts[1])
    workspace.release()  # not held between the forward and the backward pass
    return torch.cat(lps), (torch.cat(ents) if with_entropy else None)
