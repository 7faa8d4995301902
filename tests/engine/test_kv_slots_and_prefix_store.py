"""Fast checks (no model) of the running-batch KV bookkeeping (rows leave and join in place, holes, repack) and of
the prefix store (longest exact prefix, coverage, LRU eviction by bytes)."""

from __future__ import annotations

import torch

from agentr1_core.rollout.prefix_cache import BLOCK, PrefixStore
from agentr1_core.rollout.transformers_kv import BatchKV, prefill_batch


def _prefilled(lengths: list[int], offset: float, row_capacity: int = 0) -> BatchKV:
    """A batch whose row ``i`` holds real tokens with key value ``offset + 100 * i + t`` (t = token index)."""
    total = max(lengths)
    kv = BatchKV(num_layers=2, row_capacity=row_capacity)
    mask = torch.zeros(len(lengths), total, dtype=torch.long)
    k = torch.zeros(len(lengths), 1, total, 1)
    for i, n in enumerate(lengths):
        mask[i, total - n:] = 1
        k[i, 0, total - n:, 0] = offset + 100 * i + torch.arange(n, dtype=torch.float32)
    kv.mask = mask
    for layer in kv.layers:
        layer.update(k.clone(), k.clone() * -1)
    return kv


def _row_tokens(kv: BatchKV, row: int, layer: int = 1) -> list[float]:
    keys, values = kv.row_kv(row)
    assert torch.equal(values[layer], -keys[layer])
    return keys[layer][0, :, 0].tolist()


def test_rows_leave_and_join_in_place_and_keep_their_tokens():
    running = BatchKV(num_layers=2, row_capacity=8)
    running.expected_rows = 4  # the caller has a fourth request waiting: its slot is allocated with the first three
    running.add(_prefilled([2, 5, 3], offset=0.0))
    buffer = running.layers[0].kbuf
    assert buffer.shape[0] == 4 and running.batch_size == 3 and running.length == 5
    order = running.remove([0])  # the last row moves into the freed slot
    assert order == [2, 1]
    assert _row_tokens(running, 0) == [200.0, 201.0, 202.0] and _row_tokens(running, 1) == [100.0 + t for t in range(5)]
    running.add(_prefilled([7], offset=1000.0))  # longer than the running rows: they get a masked hole
    assert running.layers[0].kbuf is buffer  # no reallocation, no copy of the running rows
    assert running.length == 7 and running.mask.tolist()[0] == [0, 0, 1, 1, 1, 0, 0]
    assert _row_tokens(running, 2) == [1000.0 + t for t in range(7)]
    running.append_mask_column()
    new = torch.full((3, 1, 1, 1), -5.0)
    for layer in running.layers:
        layer.update(new, -new)
    assert _row_tokens(running, 0) == [200.0, 201.0, 202.0, -5.0]
    assert running.wasted_columns() == 0  # the longest row has no hole
    running.remove([2])
    assert running.wasted_columns() == 8 - 6
    before = [_row_tokens(running, i) for i in range(running.batch_size)]
    running.repack()
    assert running.length == 6 and running.mask.tolist() == [[0, 0, 1, 1, 1, 1], [1] * 6]
    assert [_row_tokens(running, i) for i in range(running.batch_size)] == before
    running.remove([0, 1])
    assert running.batch_size == 0 and running.length == 0


def test_select_keeps_rows_in_order_and_trims_padding():
    kv = _prefilled([2, 5, 3], offset=0.0)
    kv.select([2, 0])
    assert kv.length == 3 and kv.mask.tolist() == [[1, 1, 1], [0, 1, 1]]
    assert _row_tokens(kv, 0) == [200.0, 201.0, 202.0] and _row_tokens(kv, 1) == [0.0, 1.0]


def test_prefill_batch_places_prefixes_before_left_padded_suffixes():
    prefix = ([torch.arange(6, dtype=torch.float32).view(1, 6, 1)] * 2,
              [-torch.arange(6, dtype=torch.float32).view(1, 6, 1)] * 2)
    kv = prefill_batch(2, [prefix, None], [4, 0], [1, 3])
    assert kv.mask.tolist() == [[1, 1, 1, 1, 0, 0, 1], [0, 0, 0, 0, 1, 1, 1]]
    assert kv.layers[0].length == 4 and kv.layers[0].keys[0, 0, :, 0].tolist() == [0.0, 1.0, 2.0, 3.0]
    positions = (kv.mask.cumsum(1) - 1).clamp(min=0)[:, 4:]
    assert positions.tolist() == [[3, 3, 4], [0, 1, 2]]


def _kv_for(tokens: list[int], layers: int = 2) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    t = torch.tensor(tokens, dtype=torch.float32).view(1, -1, 1)
    return [t.clone() for _ in range(layers)], [-t for _ in range(layers)]


def test_prefix_store_finds_the_longest_exact_prefix_and_evicts_lru():
    a = list(range(100, 100 + 3 * BLOCK + 5))
    b = a[: 2 * BLOCK + 3] + [1, 2, 3] * 10
    per_entry = lambda n: 2 * 2 * n * 4  # keys + values, 2 layers, float32
    store = PrefixStore(max_bytes=per_entry(len(a)) + per_entry(len(b)))
    assert store.lookup(a) == (None, 0)
    assert store.insert(a, *_kv_for(a))
    entry, m = store.lookup(b)
    assert entry.tokens == a and m == 2 * BLOCK + 3
    assert store.lookup(a, limit=len(a) - 1)[1] == len(a) - 1
    assert store.lookup(a[:BLOCK - 1])[1] == 0  # shorter than a block: never reused
    assert store.covered(a[:40]) and not store.covered(b)
    assert not store.insert(a[:40], *_kv_for(a[:40]))  # nothing new
    assert store.insert(b, *_kv_for(b))
    assert store.lookup(b)[0].tokens == b and store.lookup(b)[1] == len(b)
    c = [7] * (2 * BLOCK)
    store.lookup(a)  # a is now more recently used than b
    assert store.insert(c, *_kv_for(c))  # over budget: b (least recently used) goes
    assert len(store) == 2 and store.bytes <= store.max_bytes
    entry, m = store.lookup(b)
    assert entry.tokens == a and m == 2 * BLOCK + 3
    store.clear()
    assert store.lookup(a) == (None, 0)


def test_row_slots_follow_demand_and_stop_at_the_capacity():
    """Slots for the rows expected (not the engine's maximum batch) up front; rows joining past them double the
    slots, never beyond ``row_capacity``; the content survives every regrowth."""
    running = BatchKV(num_layers=2, row_capacity=8)
    running.add(_prefilled([2, 3, 4], offset=0.0))
    assert running.layers[0].kbuf.shape[0] == 3 and running._mask.shape[0] == 3
    running.add(_prefilled([2, 2], offset=1000.0))  # 5 rows: twice the 3 slots
    assert [layer.kbuf.shape[0] for layer in running.layers] == [6, 6] and running._mask.shape[0] == 6
    running.add(_prefilled([1, 1, 1], offset=2000.0))  # 8 rows: 12 would pass the capacity
    assert running.layers[0].kbuf.shape[0] == 8 and running.batch_size == 8
    assert _row_tokens(running, 1) == [100.0, 101.0, 102.0]
    assert _row_tokens(running, 4) == [1100.0, 1101.0] and _row_tokens(running, 7) == [2200.0]
