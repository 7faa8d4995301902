"""Exact prefix reuse for the transformers engine: keys/values of token sequences already run, found by prefix.

An entry holds the token ids of one sequence the engine has run (a prompt after its prefill, or a prompt plus its
response when the request finishes) and, per decoder layer, the keys/values of those tokens ([heads, tokens, head
dim]). Because attention is causal, the keys/values of the first ``m`` tokens of an entry are those of any sequence
that starts with the same ``m`` tokens, so a new prompt only needs its tokens past the longest common prefix with
some entry computed. That covers the system prompt and tool schema every episode shares, the ``n`` samples of one
prompt, and a next turn that extends the previous turn's prompt + response.

Lookup walks a chain of hashes over 16-token blocks (``hash(previous chain hash, block)``) to the deepest block some
entry contains, checks the tokens for equality (a hash collision can never reuse wrong keys), then extends token by
token within the next block. Entries are evicted least-recently-used beyond a byte budget; the whole store is
dropped when the model's weights change (the engine checks the parameters' version counters).

This module does not run the model and knows nothing about batches.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import torch

BLOCK = 16


def chain_hashes(tokens: list[int], blocks: int | None = None) -> list[int]:
    """``out[k]`` identifies ``tokens[: (k + 1) * BLOCK]``; one value per complete block (``blocks`` at most)."""
    out: list[int] = []
    h = 0
    count = len(tokens) // BLOCK if blocks is None else min(blocks, len(tokens) // BLOCK)
    for k in range(count):
        h = hash((h, tuple(tokens[k * BLOCK: (k + 1) * BLOCK])))
        out.append(h)
    return out


@dataclass
class PrefixEntry:
    tokens: list[int]
    keys: list[torch.Tensor]  # per layer [heads, tokens, head dim]
    values: list[torch.Tensor]
    hashes: list[int] = field(default_factory=list)
    nbytes: int = 0


class PrefixStore:
    """Entries by block-hash chain, LRU-evicted beyond ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self.entries: OrderedDict[int, PrefixEntry] = OrderedDict()
        self.index: dict[int, int] = {}  # chain hash -> entry id
        self.bytes = 0
        self._next_id = 0

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        self.entries.clear()
        self.index.clear()
        self.bytes = 0

    def lookup(self, tokens: list[int], limit: int | None = None) -> tuple[PrefixEntry | None, int]:
        """The entry sharing the longest prefix with ``tokens`` and that length (at most ``limit``), or (None, 0)."""
        limit = len(tokens) if limit is None else min(limit, len(tokens))
        if limit < BLOCK or not self.entries:
            return None, 0
        h, found, blocks = 0, None, 0
        for k in range(limit // BLOCK):
            h = hash((h, tuple(tokens[k * BLOCK: (k + 1) * BLOCK])))
            entry_id = self.index.get(h)
            if entry_id is None:
                break
            found, blocks = entry_id, k + 1
        if found is None:
            return None, 0
        entry = self.entries[found]
        m = blocks * BLOCK
        if entry.tokens[:m] != tokens[:m]:  # hash collision
            return None, 0
        end = min(limit, len(entry.tokens))
        while m < end and entry.tokens[m] == tokens[m]:
            m += 1
        self.entries.move_to_end(found)
        return entry, m

    def covered(self, tokens: list[int]) -> bool:
        """Whether some entry already starts with all of ``tokens``."""
        return self.lookup(tokens)[1] == len(tokens)

    def insert(self, tokens: list[int], keys: list[torch.Tensor], values: list[torch.Tensor]) -> bool:
        """Store ``tokens`` with their keys/values unless too short, too big or already covered."""
        if len(tokens) < BLOCK or self.covered(tokens):
            return False
        nbytes = sum(t.numel() * t.element_size() for t in keys + values)
        if nbytes > self.max_bytes:
            return False
        entry = PrefixEntry(list(tokens), keys, values, chain_hashes(tokens), nbytes)
        entry_id = self._next_id
        self._next_id += 1
        self.entries[entry_id] = entry
        self.bytes += nbytes
        for h in entry.hashes:
            self.index[h] = entry_id
        evicted = False
        while self.bytes > self.max_bytes:
            _, old = self.entries.popitem(last=False)
            self.bytes -= old.nbytes
            evicted = True
        if evicted:  # other entries may share hashes that pointed at an evicted one
            self.index = {h: eid for eid, e in self.entries.items() for h in e.hashes}
        return True
