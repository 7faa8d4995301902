"""The KV cache of the running batch of the transformers engine, with rows that join and leave in place.

Rows are left-padded and share one cache length ``L``, so that a decode step feeds one token per row and writes
column ``L`` of every row. The keys/values of each decoder layer live in one preallocated buffer
``[row capacity, heads, column capacity, head dim]`` (``BufferLayer``); the model sees the view
``[:rows, :, :L]``. What moves when the batch changes:

* a row leaves (``remove``): the last row is copied into its slot (one row, not the batch) and the row count
  shrinks; the caller reorders its request list with the returned order;
* rows join (``add``): their columns are written into free row slots. When they are longer than ``L`` the running
  rows are not shifted: ``L`` grows and the new columns are masked out for them (a hole between their last token and
  the next one). Holes are harmless: attention masks them, positions come from the mask, and column order is still
  token order;
* ``repack`` (called when holes or left padding waste more than a quarter of the width) right-aligns every row's
  real tokens again in a fresh buffer; it is the only whole-cache copy besides capacity growth (amortised).

``prefill_batch`` builds the cache of a batch about to be prefilled whose rows start from cached prefixes (see
``prefix_cache``): each row's prefix keys/values are placed right-aligned in a prefix region, the uncached suffixes
follow in a second, left-padded region. ``BatchKV.prefill_slots`` builds the same cache as views of the running
batch's next free row slots, so the prefill writes the new rows where ``add`` leaves them: no second copy of the new
rows exists next to the running batch (the default run's validation peak fell by 335 MiB, docs/benchmarks.md
section 12). Only full-attention decoder layers are handled (sliding windows are still
respected through the model's own mask, but nothing is evicted). This module does not run the model.
"""

from __future__ import annotations

import math
import mmap

import torch
from transformers.cache_utils import Cache, DynamicLayer

HEADROOM = 64  # extra cache columns allocated on every (re)build, so most decode steps never reallocate
OWN_MAPPING_BYTES = 1 << 20  # CPU key/value buffers from this size up get their own anonymous mapping


def zeros_like_kv(like: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """A zeroed buffer of ``shape`` with ``like``'s dtype and device. On the CPU a large one is an anonymous mapping
    of its own (zeroed by the kernel) rather than a block of the malloc heap: glibc keeps freed heap blocks
    resident, and buffers that grow by half leave holes the next, larger buffer cannot reuse, so the old buffers'
    bytes stayed in the phase's peak. A mapping goes back to the OS as soon as the tensor is freed."""
    nbytes = math.prod(shape) * like.element_size()
    if like.device.type != "cpu" or nbytes < OWN_MAPPING_BYTES:
        return like.new_zeros(shape)
    return torch.frombuffer(mmap.mmap(-1, nbytes), dtype=like.dtype).view(shape)


def kv_bytes_per_token(model) -> int:
    """Bytes of keys and values one token takes in every decoder layer of ``model`` (in its parameters' dtype)."""
    cfg = model.config.get_text_config()
    heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    element = next(model.parameters()).element_size()
    return 2 * int(cfg.num_hidden_layers) * kv_heads * head_dim * element


class BufferLayer(DynamicLayer):
    """Keys/values of the first ``rows`` rows and ``length`` columns of ``kbuf``/``vbuf`` are the cache."""

    def __init__(self) -> None:
        super().__init__()
        self.kbuf: torch.Tensor | None = None
        self.vbuf: torch.Tensor | None = None
        self.rows = 0
        self.length = 0

    def expose(self) -> None:
        if self.kbuf is None:
            self.keys = self.values = None
            self.is_initialized = False
            return
        self.keys = self.kbuf[: self.rows, :, : self.length]
        self.values = self.vbuf[: self.rows, :, : self.length]
        self.is_initialized = True

    def set_buffers(self, kbuf: torch.Tensor, vbuf: torch.Tensor, rows: int, length: int) -> None:
        self.kbuf, self.vbuf, self.rows, self.length = kbuf, vbuf, rows, length
        self.device = kbuf.device
        self.expose()

    def reserve(self, rows: int, columns: int, row_capacity: int = 0) -> None:
        """Make room for ``rows`` x ``columns`` (keeping the current content); columns grow by 1.5x plus headroom,
        rows to ``row_capacity`` slots (at least ``rows``)."""
        if self.kbuf is None or (rows <= self.kbuf.shape[0] and columns <= self.kbuf.shape[2]):
            return
        b_cap = max(rows, row_capacity, self.kbuf.shape[0])
        c_cap = self.kbuf.shape[2] if columns <= self.kbuf.shape[2] else columns + max(HEADROOM, columns // 2)
        _, h, _, d = self.kbuf.shape
        kbuf = zeros_like_kv(self.kbuf, (b_cap, h, c_cap, d))
        vbuf = zeros_like_kv(self.vbuf, (b_cap, h, c_cap, self.vbuf.shape[-1]))
        kbuf[: self.rows, :, : self.length] = self.kbuf[: self.rows, :, : self.length]
        vbuf[: self.rows, :, : self.length] = self.vbuf[: self.rows, :, : self.length]
        self.set_buffers(kbuf, vbuf, self.rows, self.length)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        b, h, n, d = key_states.shape
        need = self.length + n
        if self.kbuf is None:
            self.kbuf = zeros_like_kv(key_states, (b, h, need + HEADROOM, d))
            self.vbuf = zeros_like_kv(value_states, (b, h, need + HEADROOM, value_states.shape[-1]))
            self.rows = b
            self.device = key_states.device
        elif b != self.rows:
            raise ValueError(f"cache has {self.rows} rows, the forward passed {b}")
        self.reserve(b, need)
        self.kbuf[:b, :, self.length: need] = key_states
        self.vbuf[:b, :, self.length: need] = value_states
        self.length = need
        self.expose()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length


class BatchKV:
    """The cache + 2D attention mask (``mask``: [rows, columns] long, 1 = real token) of a left-padded batch."""

    def __init__(self, num_layers: int, row_capacity: int = 0) -> None:
        self.layers = [BufferLayer() for _ in range(num_layers)]
        self.row_capacity = row_capacity  # the most rows the batch will hold (0: no limit)
        self.expected_rows = 0  # rows the caller expects soon (running + waiting requests): allocated in one go
        self.cache = Cache(layers=self.layers)
        self._mask: torch.Tensor | None = None  # [row capacity, column capacity]
        self._slots_of: tuple | None = None  # (batch, first row, columns) when built by that batch's prefill_slots
        self.rows = 0
        self.columns = 0

    # -- views ------------------------------------------------------------------------------------------------------
    @property
    def mask(self) -> torch.Tensor | None:
        return None if self._mask is None else self._mask[: self.rows, : self.columns]

    @mask.setter
    def mask(self, value: torch.Tensor) -> None:
        self._mask = value
        self.rows, self.columns = value.shape

    @property
    def batch_size(self) -> int:
        return self.rows

    @property
    def length(self) -> int:
        return self.columns

    def rows_to_allocate(self, rows: int, current: int = 0) -> int:
        """Row slots for a buffer that must hold ``rows``: at least ``rows``, else the expected rows or twice the
        current slots (so that rows joining one by one regrow rarely), never past ``row_capacity``."""
        if rows <= current:
            return current
        want = max(self.expected_rows, 2 * current)
        if self.row_capacity:
            want = min(want, self.row_capacity)
        return max(rows, want)

    def _reserve_mask(self, rows: int, columns: int) -> None:
        m = self._mask
        if m is not None and rows <= m.shape[0] and columns <= m.shape[1]:
            return
        r_cap = self.rows_to_allocate(rows, 0 if m is None else m.shape[0])
        c_cap = columns + max(HEADROOM, columns // 2)
        new = torch.zeros((r_cap, c_cap), dtype=torch.long)
        if m is not None:
            new[: self.rows, : self.columns] = m[: self.rows, : self.columns]
        self._mask = new

    # -- decode -----------------------------------------------------------------------------------------------------
    def append_mask_column(self) -> None:
        """Grow the mask by one real-token column for every row (done before each decode step)."""
        self._reserve_mask(self.rows, self.columns + 1)
        self._mask[: self.rows, self.columns] = 1
        self.columns += 1

    def clear(self) -> None:
        for layer in self.layers:
            layer.rows = layer.length = 0
            layer.expose()
        self.rows = self.columns = 0

    def release(self) -> bool:
        """Empty the batch and free the buffers (the next prefill allocates them again); True if there were any."""
        held = self._mask is not None or any(layer.kbuf is not None for layer in self.layers)
        self.clear()
        for layer in self.layers:
            layer.kbuf = layer.vbuf = None
            layer.expose()
        self._mask = None
        return held

    def reserved_bytes(self) -> int:
        """Bytes of the key/value buffers and the mask as allocated now (rows and columns of headroom included)."""
        total = sum(t.nbytes for layer in self.layers for t in (layer.kbuf, layer.vbuf) if t is not None)
        return total + (self._mask.nbytes if self._mask is not None else 0)

    @property
    def row_slots(self) -> int:
        """Rows the key/value buffers have room for now (0 when released)."""
        buf = self.layers[0].kbuf if self.layers else None
        return 0 if buf is None else int(buf.shape[0])

    @property
    def allocated_bytes(self) -> int:
        """Bytes held by the key/value buffers of every layer."""
        return sum(b.numel() * b.element_size() for layer in self.layers for b in (layer.kbuf, layer.vbuf)
                   if b is not None)

    # -- rows leave / join ------------------------------------------------------------------------------------------
    def remove(self, drop: list[int]) -> list[int]:
        """Drop rows ``drop``; returns ``order``: new row ``j`` is old row ``order[j]``. Copies one row per drop."""
        order = list(range(self.rows))
        for i in sorted(set(drop), reverse=True):
            last = len(order) - 1
            if i != last:
                for layer in self.layers:
                    layer.kbuf[i, :, : layer.length] = layer.kbuf[last, :, : layer.length]
                    layer.vbuf[i, :, : layer.length] = layer.vbuf[last, :, : layer.length]
                self._mask[i, : self.columns] = self._mask[last, : self.columns]
                order[i] = order[last]
            order.pop()
        self.rows = len(order)
        for layer in self.layers:
            layer.rows = self.rows
            layer.expose()
        if self.rows == 0:
            self.clear()
        return order

    def select(self, rows: list[int]) -> None:
        """Keep only ``rows`` (in that order, into a fresh buffer) and trim left columns that every kept row pads."""
        if not rows:
            self.clear()
            return
        idx = torch.tensor(rows, dtype=torch.long)
        mask = self.mask[idx]
        used = mask.any(dim=0).nonzero()
        start = int(used[0]) if used.numel() else mask.shape[1]
        width = mask.shape[1] - start
        for layer in self.layers:
            k = layer.kbuf[idx, :, start: layer.length]
            v = layer.vbuf[idx, :, start: layer.length]
            kbuf = zeros_like_kv(k, (len(rows), k.shape[1], width + HEADROOM, k.shape[3]))
            vbuf = zeros_like_kv(v, (len(rows), v.shape[1], width + HEADROOM, v.shape[3]))
            kbuf[:, :, :width], vbuf[:, :, :width] = k, v
            layer.set_buffers(kbuf, vbuf, len(rows), width)
        self.mask = mask[:, start:].clone()

    def prefill_slots(self, prefixes: list[tuple[list[torch.Tensor], list[torch.Tensor]] | None],
                      prefix_lens: list[int], suffix_lens: list[int]) -> "BatchKV | None":
        """``prefill_batch``'s cache, but with buffers that are views of this batch's next free row slots, at the
        columns ``add`` will place them in: the prefill writes the new rows' keys/values where they stay, and ``add``
        only joins them (no second copy of the new rows alongside the running batch). None while this batch has no
        buffers (the first prefill allocates them). Call ``add`` with the result before changing this batch."""
        ref = self.layers[0].kbuf if self.layers else None
        if ref is None:
            return None
        n, m = self.rows, len(prefix_lens)
        width_p, width_s = max(prefix_lens), max(suffix_lens)
        width = width_p + width_s
        target = max(self.columns if n else 0, width)
        kv = BatchKV(len(self.layers))
        kv.mask = prefill_mask(prefix_lens, suffix_lens)
        kv._slots_of = (self, n, target)
        for li, (mine, theirs) in enumerate(zip(self.layers, kv.layers)):
            mine.reserve(n + m, target, self.rows_to_allocate(n + m, mine.kbuf.shape[0]))
            kbuf = mine.kbuf[n: n + m, :, target - width: target]
            vbuf = mine.vbuf[n: n + m, :, target - width: target]
            kbuf[:, :, :width_p] = 0  # left padding of the prefix region, as prefill_batch's fresh buffers
            vbuf[:, :, :width_p] = 0
            place_prefixes(kbuf, vbuf, li, prefixes, prefix_lens, width_p)
            theirs.set_buffers(kbuf, vbuf, m, width_p)
        return kv

    def add(self, other: "BatchKV") -> None:
        """Append the rows of ``other`` (a freshly prefilled batch) after this batch's rows, in place."""
        if other.rows == 0:
            return
        if self.rows == 0:
            self.columns = 0
        n, m = self.rows, other.rows
        target = max(self.columns, other.columns)
        in_place = other._slots_of == (self, n, target)  # the prefill wrote the rows where they belong
        self._reserve_mask(n + m, target)
        if target > self.columns:  # running rows get a masked hole up to the new length
            self._mask[:n, self.columns: target] = 0
        offset = target - other.columns
        self._mask[n: n + m, :offset] = 0
        self._mask[n: n + m, offset: target] = other.mask
        for mine, theirs in zip(self.layers, other.layers):
            if mine.kbuf is None:
                _, h, _, d = theirs.kbuf.shape
                shape = (self.rows_to_allocate(m), h, target + HEADROOM)
                mine.kbuf = zeros_like_kv(theirs.kbuf, shape + (d,))
                mine.vbuf = zeros_like_kv(theirs.vbuf, shape + (theirs.vbuf.shape[-1],))
            if not in_place:
                mine.reserve(n + m, target, self.rows_to_allocate(n + m, mine.kbuf.shape[0]))
                mine.kbuf[n: n + m, :, offset: target] = theirs.kbuf[:, :, : theirs.length]
                mine.vbuf[n: n + m, :, offset: target] = theirs.vbuf[:, :, : theirs.length]
            mine.rows, mine.length = n + m, target
            mine.expose()
        self.rows, self.columns = n + m, target

    merge = add

    # -- compaction -------------------------------------------------------------------------------------------------
    def wasted_columns(self) -> int:
        """Columns beyond the longest row's real tokens (holes + shared left padding)."""
        if self.rows == 0:
            return 0
        return self.columns - int(self.mask.sum(1).max())

    def maybe_repack(self) -> bool:
        """Repack when more than a quarter of the width (and at least ``HEADROOM`` columns) is wasted."""
        waste = self.wasted_columns()
        if waste > max(HEADROOM, self.columns // 4):
            self.repack()
            return True
        return False

    def repack(self) -> None:
        """Right-align every row's real tokens (dropping holes) in fresh buffers of the same row capacity."""
        if self.rows == 0:
            return
        mask = self.mask
        n, width = mask.shape
        real = mask.sum(1)
        new_width = int(real.max())
        cols = torch.arange(width).expand(n, width)
        # real columns first, in their order: sort by (is padding, column)
        real_cols = torch.sort((1 - mask) * width + cols, dim=1).values % width
        j = torch.arange(new_width).expand(n, new_width)
        shift = j - (new_width - real.unsqueeze(1))
        gather = real_cols.gather(1, shift.clamp(min=0))
        new_mask = (shift >= 0).long()
        for layer in self.layers:
            _, h, _, d = layer.kbuf.shape
            idx = gather[:, None, :, None].expand(n, h, new_width, d).to(layer.kbuf.device)
            kbuf = zeros_like_kv(layer.kbuf, (layer.kbuf.shape[0], h, new_width + HEADROOM, d))
            vbuf = zeros_like_kv(layer.vbuf, (layer.vbuf.shape[0], h, new_width + HEADROOM, layer.vbuf.shape[-1]))
            kbuf[:n, :, :new_width] = layer.kbuf[:n].gather(2, idx)
            vbuf[:n, :, :new_width] = layer.vbuf[:n].gather(2, idx)
            layer.set_buffers(kbuf, vbuf, n, new_width)
        self._mask = None
        self.rows, self.columns = 0, 0
        self._reserve_mask(max(n, 1), new_width)
        self._mask[:n, :new_width] = new_mask
        self.rows, self.columns = n, new_width

    # -- row contents -----------------------------------------------------------------------------------------------
    def row_kv(self, row: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Copies of row ``row``'s keys and values at its real columns, per layer ([heads, tokens, head dim])."""
        cols = self.mask[row].nonzero().squeeze(1)
        keys = [layer.kbuf[row][:, cols] for layer in self.layers]
        values = [layer.vbuf[row][:, cols] for layer in self.layers]
        return keys, values


def prefill_batch(num_layers: int, prefixes: list[tuple[list[torch.Tensor], list[torch.Tensor]] | None],
                  prefix_lens: list[int], suffix_lens: list[int]) -> BatchKV:
    """The cache of a batch to prefill: row ``i`` holds ``prefix_lens[i]`` cached tokens (keys/values in
    ``prefixes[i]``, possibly longer: only the first ``prefix_lens[i]`` are used) right-aligned in a prefix region,
    then ``suffix_lens[i]`` tokens to compute, right-aligned in a suffix region. The layers hold the prefix region;
    the mask covers both regions (the forward then writes the suffix region)."""
    b = len(prefix_lens)
    width_p, width_s = max(prefix_lens), max(suffix_lens)
    kv = BatchKV(num_layers)
    kv.mask = prefill_mask(prefix_lens, suffix_lens)
    if width_p == 0:
        return kv
    ref_k, ref_v = next(p for p in prefixes if p is not None)
    for li, layer in enumerate(kv.layers):
        h, _, d = ref_k[li].shape
        kbuf = zeros_like_kv(ref_k[li], (b, h, width_p + width_s, d))
        vbuf = zeros_like_kv(ref_v[li], (b, h, width_p + width_s, ref_v[li].shape[-1]))
        place_prefixes(kbuf, vbuf, li, prefixes, prefix_lens, width_p)
        layer.set_buffers(kbuf, vbuf, b, width_p)
    return kv


def place_prefixes(kbuf: torch.Tensor, vbuf: torch.Tensor, layer: int,
                   prefixes: list[tuple[list[torch.Tensor], list[torch.Tensor]] | None], prefix_lens: list[int],
                   width_p: int) -> None:
    """Copy each row's cached prefix keys/values of decoder ``layer`` right-aligned into the prefix region
    (columns ``[0, width_p)``) of ``kbuf`` / ``vbuf``."""
    for i, (prefix, p) in enumerate(zip(prefixes, prefix_lens)):
        if p:
            kbuf[i, :, width_p - p: width_p] = prefix[0][layer][:, :p]
            vbuf[i, :, width_p - p: width_p] = prefix[1][layer][:, :p]


def prefill_mask(prefix_lens: list[int], suffix_lens: list[int]) -> torch.Tensor:
    """The mask of a batch to prefill: each row's cached prefix right-aligned in the prefix region, its suffix
    right-aligned in the suffix region."""
    width_p, width_s = max(prefix_lens), max(suffix_lens)
    mask = torch.zeros((len(prefix_lens), width_p + width_s), dtype=torch.long)
    for i, (p, s) in enumerate(zip(prefix_lens, suffix_lens)):
        mask[i, width_p - p: width_p] = 1
        mask[i, width_p + width_s - s:] = 1
    return mask
