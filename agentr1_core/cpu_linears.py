"""Linear layers without gradients on the CPU through faster kernels than ``F.linear``: weight-major for small
decode batches, oneDNN for the rest. Same products, summed in another order; a thread-local mode, so nothing here
changes a module or what any other thread computes.

Why. ``F.linear`` on the CPU is MKL's sgemm (``x @ W^T``), which leaves much of the CPU unused on the shapes of a
small model's layers. Two other ways to compute the same product do better: weight-major, ``(W @ x^T)^T``, for 2 to
4 rows, and oneDNN's matmul (``torch.ops.mkldnn._linear_pointwise``, the kernel torch's own compiler emits for CPU
linears) for everything else, from 1 row through decode batches to a prefill. oneDNN reads the weight as it is at
each call, so in-place optimizer steps are seen by the next forward. The measurements, with and without AVX-512,
are in ``docs/benchmarks.md`` (section 10 and "Figures behind the code's design choices";
``bench/bench_decode_linears.py``).

Who uses it: the rollout engine for every forward, and the trainer for its passes without gradients (old and
reference log-probs, critic values). Calls that need gradients stay on ``F.linear``: an autograd version (oneDNN
for the forward, ``torch.mm`` for the gradients) made the RL update no faster, so it was not kept.

How. ``CpuLinears`` is a ``TorchFunctionMode``: entered around a forward, it reroutes the ``F.linear`` calls on
plain CPU tensors that need no gradient and passes every other call through unchanged (other devices, tensor
subclasses such as quantised weights, dtype mismatches, autograd). Rows ``2..weight_major_rows`` go weight-major
and the others to oneDNN (float32, when ``onednn`` is on and torch has it). Torch-function modes are thread-local, so
the engine's worker thread and the trainer's thread each choose their own. The mode costs a Python call per torch
function inside the forward.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

DEFAULT_WEIGHT_MAJOR_ROWS = 4  # the largest decode batch that goes weight-major (0 turns it off)
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # tensor subclasses (quantised weights, DTensors) keep their own path


@functools.lru_cache(maxsize=None)
def onednn_available() -> bool:
    """Whether this torch build has oneDNN's linear kernel (looked up once: the engine asks at every forward)."""
    try:
        return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    except (AttributeError, RuntimeError):
        return False


def weight_major_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` computed as ``(weight @ x^T)^T`` (contiguous, same shape and dtype)."""
    rows = x.numel() // x.shape[-1]
    out = torch.mm(weight, x.reshape(rows, x.shape[-1]).T).T.contiguous()
    if bias is not None:
        out += bias
    return out.view(*x.shape[:-1], weight.shape[0])


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` through oneDNN's matmul (no autograd: inference only)."""
    out = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.shape[-1]), weight, bias, "none", [], "")
    return out.view(*x.shape[:-1], weight.shape[0])


def _linear_args(input=None, weight=None, bias=None, *_unused, **_also_unused) -> tuple[Any, Any, Any]:  # noqa: A002
    return input, weight, bias  # F.linear's own parameter names


class CpuLinears(TorchFunctionMode):
    """Within this mode (this thread only), CPU ``F.linear`` calls that need no gradient run weight-major (2 to
    ``weight_major_rows`` rows) or through oneDNN (float32, any other row count, when ``onednn``)."""

    def __init__(self, weight_major_rows: int = DEFAULT_WEIGHT_MAJOR_ROWS, onednn: bool = True) -> None:
        super().__init__()
        self.weight_major_rows = weight_major_rows
        self.onednn = onednn and onednn_available()
        self.weight_major_calls = 0  # linear calls rerouted, per way (for tests and stats)
        self.onednn_calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x, weight, bias = _linear_args(*args, **kwargs)
            route = self._route(x, weight, bias)
            if route == "weight_major":
                self.weight_major_calls += 1
                return weight_major_linear(x, weight, bias)
            if route == "onednn":
                self.onednn_calls += 1
                return onednn_linear(x, weight, bias)
        return func(*args, **kwargs)

    def _route(self, x: Any, weight: Any, bias: Any) -> str | None:
        if type(x) not in _PLAIN or type(weight) not in _PLAIN or x.device.type != "cpu":
            return None
        if x.dim() < 2 or weight.dim() != 2 or x.dtype != weight.dtype or x.shape[-1] != weight.shape[1]:
            return None
        if bias is not None and (type(bias) not in _PLAIN or bias.dtype != weight.dtype):
            return None
        if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
            return None  # autograd's own F.linear (see the module docstring)
        rows = x.numel() // max(x.shape[-1], 1)
        if 2 <= rows <= self.weight_major_rows:
            return "weight_major"
        return "onednn" if self.onednn and rows >= 1 and x.dtype == torch.float32 else None

