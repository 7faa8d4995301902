"""A growable, row-editable KV cache for the continuous-batching loop of the transformers engine.

Rows of the running batch are left-padded and aligned on a common cache length, so that one decode step feeds one
token per row. ``BufferLayer`` is a ``DynamicLayer`` that writes new keys/values into a preallocated buffer (with
headroom) instead of concatenating, which makes a decode step O(new tokens) in copies rather than O(cache length).
``BatchKV`` holds one such layer per decoder layer plus the 2D attention mask and can

* ``select`` rows (finished sequences leave) and drop left columns that no remaining row uses, and
* ``merge`` a freshly prefilled batch into the running one (both right-aligned on the longer length).

Only full-attention decoder layers are handled (sliding windows are still respected through the model's own mask,
but nothing is evicted). This module does not run the model.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

HEADROOM = 64  # extra cache columns allocated on every (re)build, so most decode steps never reallocate


class BufferLayer(DynamicLayer):
    """Keys/values live in ``kbuf``/``vbuf`` [B, H, capacity, D]; the first ``length`` columns are valid."""

    def __init__(self) -> None:
        super().__init__()
        self.kbuf: torch.Tensor | None = None
        self.vbuf: torch.Tensor | None = None
        self.length = 0

    def _expose(self) -> None:
        self.keys = self.kbuf[:, :, : self.length]
        self.values = self.vbuf[:, :, : self.length]
        self.is_initialized = True

    def set_buffers(self, kbuf: torch.Tensor, vbuf: torch.Tensor, length: int) -> None:
        self.kbuf, self.vbuf, self.length = kbuf, vbuf, length
        self.device = kbuf.device
        self._expose()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        need = self.length + n
        if self.kbuf is None or need > self.kbuf.shape[2]:
            cap = need + max(HEADROOM, need // 2)
            b, h, _, d = key_states.shape
            kbuf = key_states.new_zeros((b, h, cap, d))
            vbuf = value_states.new_zeros((b, h, cap, value_states.shape[-1]))
            if self.kbuf is not None and self.length:
                kbuf[:, :, : self.length] = self.kbuf[:, :, : self.length]
                vbuf[:, :, : self.length] = self.vbuf[:, :, : self.length]
            self.kbuf, self.vbuf = kbuf, vbuf
            self.device = key_states.device
        self.kbuf[:, :, self.length: need] = key_states
        self.vbuf[:, :, self.length: need] = value_states
        self.length = need
        self._expose()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length


class BatchKV:
    """The cache + attention mask of a left-padded batch. ``mask``: [B, L] long (1 = real token)."""

    def __init__(self, num_layers: int) -> None:
        self.layers = [BufferLayer() for _ in range(num_layers)]
        self.cache = Cache(layers=self.layers)
        self.mask: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        return 0 if self.mask is None else self.mask.shape[0]

    @property
    def length(self) -> int:
        return 0 if self.mask is None else self.mask.shape[1]

    def append_mask_column(self) -> None:
        """Grow the mask by one real-token column for every row (done before each decode step)."""
        self.mask = torch.cat([self.mask, self.mask.new_ones((self.mask.shape[0], 1))], dim=1)

    def clear(self) -> None:
        for layer in self.layers:
            layer.kbuf = layer.vbuf = None
            layer.length = 0
            layer.keys = layer.values = None
            layer.is_initialized = False
        self.mask = None

    def select(self, rows: list[int]) -> None:
        """Keep only ``rows`` (in that order) and trim left columns that are padding in every kept row."""
        if not rows:
            self.clear()
            return
        idx = torch.tensor(rows, dtype=torch.long)
        mask = self.mask[idx]
        used = mask.any(dim=0).nonzero()
        start = int(used[0]) if used.numel() else mask.shape[1]
        _rebuild(self, [(self, idx, start)], mask.shape[1] - start)

    def merge(self, other: "BatchKV") -> None:
        """Append the rows of ``other`` (a freshly prefilled batch) after this batch's rows."""
        if self.batch_size == 0:
            _rebuild(self, [(other, None, 0)], other.length)
            return
        target = max(self.length, other.length)
        _rebuild(self, [(self, None, 0), (other, None, 0)], target)


def _rebuild(dest: BatchKV, parts: list[tuple[BatchKV, torch.Tensor | None, int]], target_len: int) -> None:
    """Copy each part's rows (columns ``start:``) right-aligned into fresh buffers of ``target_len`` + headroom."""
    sizes = [src.batch_size if rows is None else len(rows) for src, rows, _ in parts]
    total = sum(sizes)
    masks = []
    for (src, rows, start), size in zip(parts, sizes):
        m = src.mask if rows is None else src.mask[rows]
        m = m[:, start:]
        pad = target_len - m.shape[1]
        masks.append(torch.cat([m.new_zeros((size, pad)), m], dim=1) if pad else m)
    new_mask = torch.cat(masks, dim=0)
    cap = target_len + HEADROOM
    for li, layer in enumerate(dest.layers):
        ref = parts[0][0].layers[li].kbuf
        _, h, _, d = ref.shape
        kbuf = ref.new_zeros((total, h, cap, d))
        vbuf = ref.new_zeros((total, h, cap, parts[0][0].layers[li].vbuf.shape[-1]))
        row0 = 0
        for (src, rows, start), size in zip(parts, sizes):
            sl = src.layers[li]
            k = sl.kbuf[:, :, start: sl.length]
            v = sl.vbuf[:, :, start: sl.length]
            if rows is not None:
                k, v = k[rows], v[rows]
            n = k.shape[2]
            kbuf[row0: row0 + size, :, target_len - n: target_len] = k
            vbuf[row0: row0 + size, :, target_len - n: target_len] = v
            row0 += size
        layer.set_buffers(kbuf, vbuf, target_len)
    dest.mask = new_mask
