"""Linear layers of small decode batches computed weight-major: ``(W @ x^T)^T`` instead of ``x @ W^T``.

Why. A decode step feeds one token per running row, so every linear layer multiplies a handful of rows by a large
weight. ``F.linear`` computes ``x @ W^T``, and on CPU (MKL sgemm, fp32) that shape is slow: SmolLM2-135M's 211
linear layers took 81.9 ms for 2 rows, against 45.7 ms for one row (a matrix-vector product); written as ``W @ x^T``
the same 2-row products took 21.5 ms (``bench/bench_decode_linears.py``, 2 cores). Whole decode steps with 300
tokens of context: 2 rows 94.6 -> 39.4 ms, 4 rows 89.1 -> 50.9 ms, 8 rows 100.9 -> 77.6 ms; at 16 and 32 rows the
gain is 3-15%, too small for the rollout benchmarks to tell from noise, and one row already takes a matrix-vector
path (the mode's own cost then makes it 14% slower). The result is the same product summed in another order:
log-probs agree to about 1e-4.

How. ``WeightMajorLinear`` is a ``TorchFunctionMode``: entered around a forward, it reroutes the ``F.linear`` calls
whose input has ``2..max_rows`` rows on the CPU and passes every other call through unchanged. Torch-function modes
are thread-local, so the engine's worker thread uses it without touching the module or any other thread (the
trainer's forward and backward never see it). The mode costs a Python call per torch function inside the forward
(about 2,300 per SmolLM2 decode step, about 8 ms on 2 cores: one-row steps 58.4 -> 66.7 ms), which is why the
engine enters it only for batches it helps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

DEFAULT_MAX_ROWS = 8  # the largest decode batch that goes weight-major (0 turns it off)
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # tensor subclasses (quantised weights, DTensors) keep their own path


def weight_major_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` computed as ``(weight @ x^T)^T`` (contiguous, same shape and dtype)."""
    rows = x.numel() // x.shape[-1]
    out = torch.mm(weight, x.reshape(rows, x.shape[-1]).T).T.contiguous()
    if bias is not None:
        out += bias
    return out.view(*x.shape[:-1], weight.shape[0])


class WeightMajorLinear(TorchFunctionMode):
    """Within this mode (this thread only), ``F.linear`` on ``2..max_rows`` CPU rows runs weight-major."""

    def __init__(self, max_rows: int = DEFAULT_MAX_ROWS) -> None:
        super().__init__()
        self.max_rows = max_rows
        self.calls = 0  # linear calls rerouted (for tests and stats)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear and self._applies(*args, **kwargs):
            self.calls += 1
            return weight_major_linear(*args, **kwargs)
        return func(*args, **kwargs)

    def _applies(self, x=None, weight=None, bias=None, **_unused) -> bool:
        if type(x) not in _PLAIN or type(weight) not in _PLAIN or x.device.type != "cpu":
            return False
        if x.dim() < 2 or weight.dim() != 2 or x.dtype != weight.dtype or x.shape[-1] != weight.shape[1]:
            return False
        if bias is not None and (type(bias) not in _PLAIN or bias.dtype != weight.dtype):
            return False
        return 2 <= x.numel() // max(x.shape[-1], 1) <= self.max_rows
