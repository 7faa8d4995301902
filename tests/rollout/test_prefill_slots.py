"""``BatchKV.prefill_slots``: a prefill written straight into the running batch's free row slots ends where the
copying path (``prefill_batch`` then ``add``) puts it, with no second buffer for the new rows; and the key/value
buffers' own mappings (``zeros_like_kv``). No model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from agentr1_core.rollout.transformers_kv import BatchKV, prefill_batch, zeros_like_kv


def _running(lengths: list[int], row_capacity: int = 8) -> BatchKV:
    """A running batch whose row ``i`` holds keys ``100 * i + t`` at its real tokens (values: their negatives)."""
    total = max(lengths)
    fresh = BatchKV(num_layers=2)
    mask = torch.zeros(len(lengths), total, dtype=torch.long)
    k = torch.zeros(len(lengths), 1, total, 1)
    for i, n in enumerate(lengths):
        mask[i, total - n:] = 1
        k[i, 0, total - n:, 0] = 100 * i + torch.arange(n, dtype=torch.float32)
    fresh.mask = mask
    for layer in fresh.layers:
        layer.update(k.clone(), -k.clone())
    running = BatchKV(num_layers=2, row_capacity=row_capacity)
    running.expected_rows = row_capacity
    running.add(fresh)
    return running


def _prefill(kv: BatchKV, suffix_lens: list[int]) -> None:
    """What the model's forward does: write each row's suffix keys (``1000 + 10 * row + t``) after its prefix."""
    width_s = max(suffix_lens)
    k = torch.zeros(len(suffix_lens), 1, width_s, 1)
    for i, s in enumerate(suffix_lens):
        k[i, 0, width_s - s:, 0] = 1000 + 10 * i + torch.arange(s, dtype=torch.float32)
    for layer in kv.layers:
        layer.update(k.clone(), -k.clone())


def _rows(kv: BatchKV) -> list[list[float]]:
    out = []
    for row in range(kv.batch_size):
        keys, values = kv.row_kv(row)
        assert all(torch.equal(v, -k) for k, v in zip(keys, values))
        out.append(keys[1][0, :, 0].tolist())
    return out


def _prefix(n: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    keys = [500 + torch.arange(n, dtype=torch.float32).view(1, n, 1) for _ in range(2)]
    return keys, [-k for k in keys]


def test_prefill_into_the_slots_gives_the_rows_of_prefill_then_add_without_a_new_buffer():
    prefixes, prefix_lens, suffix_lens = [_prefix(6), None], [6, 0], [2, 4]
    copied = _running([3, 5])
    fresh = prefill_batch(2, prefixes, prefix_lens, suffix_lens)
    _prefill(fresh, suffix_lens)
    copied.add(fresh)

    direct = _running([3, 5])
    buffer = direct.layers[0].kbuf
    view = direct.prefill_slots(prefixes, prefix_lens, suffix_lens)
    assert view.layers[0].kbuf.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()
    _prefill(view, suffix_lens)
    assert _rows(view) == _rows(fresh)  # what the engine stores in its prefix cache
    direct.add(view)
    assert direct.layers[0].kbuf is buffer  # joined in place: no new buffer, no copy
    assert direct.mask.tolist() == copied.mask.tolist()
    assert _rows(direct) == _rows(copied)
    assert _rows(direct)[2] == [500.0 + t for t in range(6)] + [1000.0, 1001.0]


def test_prefill_slots_grow_the_buffer_first_and_need_one():
    assert BatchKV(num_layers=2).prefill_slots([None], [0], [3]) is None  # no buffers yet: the copying path
    direct = _running([2], row_capacity=2)
    view = direct.prefill_slots([None, None], [0, 0], [9, 4])  # more rows and columns than the buffer holds
    _prefill(view, [9, 4])
    direct.add(view)
    assert direct.batch_size == 3 and direct.length == 9
    assert _rows(direct) == [[0.0, 1.0], [1000.0 + t for t in range(9)], [1010.0 + t for t in range(4)]]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_large_cpu_buffers_are_zeroed_mappings_of_their_own():
    """Large key/value buffers are not malloc blocks (which glibc keeps resident after free) but mappings that start
    at the tensor's first byte; small ones stay ordinary tensors."""
    like = torch.zeros(1)
    big = zeros_like_kv(like, (8, 3, 1024, 64))  # 6 MiB
    assert big.shape == (8, 3, 1024, 64) and big.dtype == like.dtype and not big.any()
    starts = {int(line.split("-")[0], 16) for line in Path("/proc/self/maps").read_text().splitlines()}
    assert big.data_ptr() in starts
    small = zeros_like_kv(like, (1, 3, 8, 64))
    assert small.data_ptr() not in starts and not small.any()
