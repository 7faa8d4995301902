"""The local rollout engine (plugin name ``transformers``): continuous batching over a Hugging Face causal LM.

Design. A background thread owns one running batch (left-padded, rows aligned on a common KV length, see
``transformers_kv``). Every loop iteration it (1) scores any pending ``score`` requests in one padded forward,
(2) prefills newly arrived ``generate`` requests as a small batch and adds them to the running batch in place, and
(3) runs one decode step for all running rows at once, sampling the whole batch in one call. Rows that hit EOS, a
stop string, ``max_new_tokens`` or the context limit leave the batch right away (their slot is refilled by the last
row, nothing else moves) and their coroutine is resumed; a request that arrives mid-decode joins at the next step.

Prefix sharing (``prefix_cache_mb`` > 0, see ``prefix_cache``). A prompt is prefilled only past the longest prefix
whose keys/values the engine already holds: each prefilled prompt is stored, and so is every finished request's
prompt + response, so a shared system prompt, the ``n`` samples of one prompt and a next turn that extends the last
one are not computed again. Requests of one admission that share an uncached block wait one step for the first of
them. Reuse is exact up to floating-point summation order (the keys/values of a prefix do not depend on what
follows it) as long as the weights are the ones the prefix was computed with: the store belongs to one weight
version (see Weights) and is dropped when the version changes. ``take_prefix_stats()`` reports the hit rate (prefix
tokens reused / prompt tokens) since its last call.

Why not transformers' own continuous batching (``generate_batch`` / ``init_continuous_batching``)? It exists in
transformers 5.24 and can return log-probs, but on a CPU in fp32 it was slower than a padded static ``generate``
(paged attention path; ``docs/benchmarks.md``), it fixes greedy-vs-sampling and seeds for the whole manager, reports
log-probs after top-k/top-p truncation, has no stop strings, and switches the shared model's attention
implementation. The trainer shares the ``nn.Module`` with this engine, so the engine must leave it untouched.

Weights. The engine holds the very module the trainer optimises and runs it under ``torch.inference_mode()``; it
keeps no copy, so in-place optimizer updates are used by the next forward. The trainer announces every change of
the weights with ``sync_weights()`` (a given state dict is first copied in place): each call starts a new weight
version (``weights_version`` counts them), and the prefix store holds the keys and values of one version only. The
announcement is what the store relies on; two inferences stay as extra guards: the sum of the parameters'
in-place version counters (AdamW's fused kernel does not bump them, so this alone misses fused updates) and, while
the engine idles, the module's training mode. Sequences already decoding keep their KV cache from the old
weights and are not stored under the new version. Generate only while no optimizer step is running, and keep the
model free of gradient checkpointing in train mode during generation (transformers then disables the KV cache).

Linear layers on the CPU (see ``cpu_linears``): every forward of the worker runs inside ``CpuLinears``, which
computes decode batches of 2 to ``weight_major_rows`` rows (default 4) as ``W @ x^T`` and every other float32 linear
through oneDNN (``onednn_linears``, default on) instead of MKL's ``x @ W^T``: the same products, faster
(``docs/benchmarks.md``, section 10), in this thread only. ``weight_major_rows=0, onednn_linears=False``
gives plain ``F.linear``.

Memory. The running batch's key/value buffers have row slots for the requests in flight when they are allocated
(running + waiting, at most ``max_batch_size``; doubled when more join) and columns for the longest row; after
``idle_release_s`` without work (``IDLE_RELEASE_SECONDS`` by default; between rollouts, while the trainer updates)
they are freed, and the next prefill allocates them again. The prefix store keeps at most ``prefix_cache_mb``; the
idle engine drops it as soon as the module is in training mode or its weights changed (it would be dropped at the
next admission anyway), so it is usually not held through the update. What the idle engine frees goes back to the
OS at once (``memory.trim``): this thread's malloc arena is not reused by the trainer's thread. So do the
temporaries of each prefill (the decode steps after it allocate far less). ``max_kv_mb`` (0: no limit) caps the
buffers: a request joins only while every row slot of the buffers, at the width the rows in flight will reach (the
longest prompt plus its ``max_new_tokens``, and the buffers' growth headroom), fits in that many MiB; the others
wait for rows to finish, and the buffers are sized afresh when no row runs. A row is never evicted, and one row
always runs, so a single row longer than the cap exceeds it.

Log-probs are ``log_softmax(logits / T)`` of the untruncated model at the request's temperature (``T = 1`` for
greedy); the trainer must recompute with the same temperature. ``score`` uses ``T = 1``. ``Generation.text`` is
``tokenizer.decode(token_ids, skip_special_tokens=True)``; ids are never re-encoded. A stop string is kept at the
end of ``token_ids``/``text`` (up to the token that completed it), as is EOS.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from agentr1_core.cpu_linears import DEFAULT_WEIGHT_MAJOR_ROWS, CpuLinears
from agentr1_core.memory import trim

from .base import Generation, SamplingParams
from .prefix_cache import BLOCK, PrefixStore, chain_hashes
from .transformers_kv import HEADROOM, BatchKV, kv_bytes_per_token, prefill_batch
from .transformers_sampling import RowSampling, sample_rows

IDLE_RELEASE_SECONDS = 0.5  # the worker frees the batch's KV buffers after this long without work


@dataclass
class _Request:
    prompt: list[int]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    sampling: SamplingParams | None = None
    continuation: list[int] | None = None  # set for score requests
    row: RowSampling | None = None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_window: int = 0
    t_submit: float = 0.0
    weights: tuple[int, int] | None = None  # the weight version the request was admitted under (``_weights_key``)


def _resolve(req: _Request, value: Any, error: BaseException | None = None) -> None:
    def _set() -> None:
        if req.future.done():
            return
        if error is not None:
            req.future.set_exception(error)
        else:
            req.future.set_result(value)

    try:
        req.loop.call_soon_threadsafe(_set)
    except RuntimeError:  # the caller's event loop is closed: nobody is waiting any more
        pass


def cache_keyword(model: Any) -> str:
    """The forward keyword of the KV cache: ``cache`` in recent transformers, ``past_key_values`` in the releases
    before the rename (e.g. the 5.9 that verl 0.9 pins)."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


class TransformersEngine:
    """Continuous-batching engine over a causal LM; see the module docstring."""

    def __init__(self, model, tokenizer, max_batch_size: int = 64, max_context: int | None = None,
                 device: str = "cpu", prefill_tokens: int = 8192, seed: int | None = None,
                 prefix_cache_mb: float = 512.0, prefix_cache_responses: bool = True,
                 weight_major_rows: int = DEFAULT_WEIGHT_MAJOR_ROWS, onednn_linears: bool = True,
                 max_kv_mb: float = 0.0, idle_release_s: float | None = None) -> None:
        if max_kv_mb < 0:
            raise ValueError(f"max_kv_mb must be >= 0 (0: no limit), got {max_kv_mb}")
        if idle_release_s is not None and not idle_release_s > 0:
            raise ValueError(f"idle_release_s must be > 0 seconds, got {idle_release_s}")
        self.idle_release_s = idle_release_s  # None: IDLE_RELEASE_SECONDS
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.max_context = max_context or getattr(model.config, "max_position_embeddings", None) or 4096
        self.device = torch.device(device)
        self.prefill_tokens = prefill_tokens
        self.eos_ids = self._eos_ids(model, tokenizer)
        self._cache_kw = cache_keyword(model)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids, default=0)
        self.num_layers = model.config.get_text_config().num_hidden_layers
        self._generator = torch.Generator(device="cpu")
        self._generator.manual_seed(seed if seed is not None else torch.seed() % (2**63))
        self._inbox: queue.Queue[_Request | None] = queue.Queue()
        self._pending: list[_Request] = []
        self._running: list[_Request] = []
        self._kv = BatchKV(self.num_layers, row_capacity=max_batch_size)
        self.max_kv_bytes = int(max_kv_mb * 2**20)
        self._kv_token_bytes = kv_bytes_per_token(model) if self.max_kv_bytes else 0
        self._kv_peak_bytes = 0
        self._store_peak_bytes = 0
        self._store = PrefixStore(int(prefix_cache_mb * 2**20)) if prefix_cache_mb > 0 else None
        self.prefix_cache_responses = bool(prefix_cache_responses)
        self.weight_major_rows = int(weight_major_rows) if self.device.type == "cpu" else 0
        self.onednn_linears = bool(onednn_linears) and self.device.type == "cpu"
        self.weights_version = 0  # weight changes announced by the trainer (``sync_weights`` calls)
        self._store_weights: tuple[int, int] | None = None  # the version the store's keys and values belong to
        self._window = {"prompt_tokens": 0, "prefix_reused_tokens": 0}
        self._closed = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.stats = {"decode_steps": 0, "prefills": 0, "generated_tokens": 0, "max_running": 0,
                      "prompt_tokens": 0, "prefix_reused_tokens": 0, "repacks": 0, "max_row_slots": 0,
                      "prefill_seconds": 0.0, "decode_seconds": 0.0,  # worker time in admission+prefill / decode
                      "weight_major_linears": 0, "onednn_linears": 0}  # linear calls rerouted (``cpu_linears``)

    @classmethod
    def from_config(cls, path: str, dtype: str = "float32", device: str = "cpu", cache_dir: str | None = None,
                    **engine_params) -> "TransformersEngine":
        """Load ``path`` with ``agentr1_core.models.load_model_and_tokenizer`` and wrap it."""
        from agentr1_core.models import load_model_and_tokenizer

        model, tokenizer = load_model_and_tokenizer(path, dtype=dtype, device=device, cache_dir=cache_dir)
        return cls(model, tokenizer, device=device, **engine_params)

    @staticmethod
    def _eos_ids(model, tokenizer) -> set[int]:
        ids: set[int] = set()
        for value in (tokenizer.eos_token_id, getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        return ids

    # ------------------------------------------------------------------ public API
    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        prompt = list(prompt_ids)
        problem = self._check_prompt(prompt)
        if problem:
            return Generation([], [], "", finish_reason="error", info={"error": problem})
        if sampling.max_new_tokens <= 0:
            return Generation([], [], "", finish_reason="length")
        loop = asyncio.get_running_loop()
        req = _Request(prompt, loop, loop.create_future(), sampling=sampling, t_submit=time.perf_counter())
        self._submit(req)
        return await req.future

    async def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> list[float]:
        prompt, cont = list(prompt_ids), list(continuation_ids)
        if not cont:
            return []
        if not prompt:
            raise ValueError("score needs a non-empty prompt (the first continuation token has no context)")
        if len(prompt) + len(cont) > self.max_context:
            raise ValueError(f"prompt + continuation ({len(prompt) + len(cont)} tokens) exceed max_context "
                             f"{self.max_context}")
        loop = asyncio.get_running_loop()
        req = _Request(prompt, loop, loop.create_future(), continuation=cont)
        self._submit(req)
        return await req.future

    def sync_weights(self, state: Any = None) -> None:
        """The trainer's announcement that the weights changed (the shared module was updated in place, or ``state``,
        a ``{name: tensor}`` dict, is copied into the model's tensors now): a new weight version starts, and no prefix
        computed with an earlier one is reused. Call it after every change, never while a rollout runs."""
        if state is not None:
            with torch.no_grad():
                params = dict(self.model.named_parameters())
                params.update(dict(self.model.named_buffers()))
                for name, value in state.items():
                    if name in params:
                        params[name].copy_(value)
        self.weights_version += 1  # the worker drops the store at its next admission or idle turn

    def take_memory_stats(self) -> dict[str, float]:
        """MiB of the KV buffers and of the prefix cache at their peaks since the last call (the buffers grow with the
        rows and tokens in flight; both are freed while the engine idles, the store once the weights change)."""
        store = self._store.bytes if self._store is not None else 0
        peak, self._kv_peak_bytes = self._kv_peak_bytes, 0
        store_peak, self._store_peak_bytes = max(self._store_peak_bytes, store), store
        return {"kv_peak": peak / 2 ** 20, "prefix_cache": store_peak / 2 ** 20}

    def take_prefix_stats(self) -> dict[str, float]:
        """Prompt tokens admitted and prefix tokens reused since the last call, and their ratio (the hit rate)."""
        window = dict(self._window)
        self._window["prompt_tokens"] -= window["prompt_tokens"]
        self._window["prefix_reused_tokens"] -= window["prefix_reused_tokens"]
        prompt = window["prompt_tokens"]
        return {"prefix_hit_rate": window["prefix_reused_tokens"] / prompt if prompt else 0.0,
                "prefix_reused_tokens": float(window["prefix_reused_tokens"]), "prompt_tokens": float(prompt)}

    def close(self) -> None:
        self._closed = True
        if self._thread is not None:
            self._inbox.put(None)
            self._thread.join(timeout=60)
            self._thread = None

    # ------------------------------------------------------------------ submission
    def _check_prompt(self, prompt: list[int]) -> str | None:
        if self._closed:
            return "engine is closed"
        if not prompt:
            return "empty prompt"
        if len(prompt) >= self.max_context:
            return f"prompt has {len(prompt)} tokens, max_context is {self.max_context}"
        return None

    def _submit(self, req: _Request) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._worker, name="transformers-engine", daemon=True)
                self._thread.start()
        self._inbox.put(req)

    # ------------------------------------------------------------------ worker thread
    def _worker(self) -> None:
        with torch.inference_mode():
            while True:
                block = not (self._running or self._pending)
                items: list[_Request | None] = []
                try:
                    wait = self.idle_release_s if self.idle_release_s is not None else IDLE_RELEASE_SECONDS
                    items.append(self._inbox.get(timeout=wait) if block else self._inbox.get_nowait())
                    while True:
                        items.append(self._inbox.get_nowait())
                except queue.Empty:
                    if block:  # idle: between rollouts (the update runs then), the cache memory goes back
                        self._idle()
                if None in items or self._closed:
                    self._shutdown([r for r in items if r is not None])
                    return
                self._pending.extend(items)
                try:
                    self._iteration()
                except Exception as exc:  # a failed step fails its requests, never the worker
                    self._fail_all(exc)

    def _idle(self) -> None:
        """Free the KV buffers, and the prefix store once the trainer is training the module (or has changed its
        weights: the store would be dropped at the next admission anyway); then hand the freed pages back to the OS
        at once. They were allocated in this thread's malloc arena, which the trainer's thread does not reuse, and
        glibc keeps freed heap memory resident: without the trim both would stay in the update's peak."""
        freed = self._kv.release()
        if self._store is not None and len(self._store) and self._weights_stale():
            self._note_store()
            self._store.clear()
            freed = True
        if freed:
            trim()

    def _note_store(self) -> None:
        self._store_peak_bytes = max(self._store_peak_bytes, self._store.bytes)

    def _weights_key(self) -> tuple[int, int]:
        """The weight version as the engine sees it: the announced version, and the sum of the parameters' in-place
        version counters (a guard for a change nobody announced; fused optimizer kernels leave it unchanged)."""
        return self.weights_version, sum(p._version for p in self.model.parameters())

    def _weights_stale(self) -> bool:
        """Whether the module is in training mode or the weights changed since the store was last checked."""
        return bool(self.model.training) or self._weights_key() != self._store_weights

    def _iteration(self) -> None:
        scores = [r for r in self._pending if r.continuation is not None]
        if scores:
            self._pending = [r for r in self._pending if r.continuation is None]
            self._run_scores(scores)
        self._drop_cancelled()
        if self._pending and len(self._running) < self.max_batch_size:
            t0 = time.perf_counter()
            self._admit()
            self.stats["prefill_seconds"] += time.perf_counter() - t0
        if self._running:
            t0 = time.perf_counter()
            self._decode_step()
            self.stats["decode_seconds"] += time.perf_counter() - t0

    def _drop_cancelled(self) -> None:
        self._pending = [r for r in self._pending if not r.future.cancelled()]
        drop = [i for i, r in enumerate(self._running) if r.future.cancelled()]
        if drop:
            order = self._kv.remove(drop)
            self._running = [self._running[i] for i in order]

    def _check_weights(self) -> None:
        """Drop the prefix store when the weights changed (announced, or a parameter modified in place) since the
        last admission."""
        key = self._weights_key()
        if key != self._store_weights:
            self._store_weights = key
            self._note_store()
            self._store.clear()

    def _admit(self) -> None:
        """Prefill a batch of pending requests (each from its longest cached prefix) and add it to the running
        batch. A request whose next uncached block is also in an earlier request of this batch waits one step, so
        that it reuses that request's prompt instead of computing it again (the ``n`` samples of one prompt)."""
        room = self.max_batch_size - len(self._running)
        if self._store is not None:
            self._check_weights()
        batch: list[_Request] = []
        hits: list[tuple[Any, int]] = []
        waiting: list[_Request] = []
        claimed: set[int] = set()
        longest = 0
        taken = 0
        if self.max_kv_bytes and not self._running and self._kv.row_slots:
            self._kv.release()  # row slots sized for earlier (shorter) rows would hold the longer ones' columns
        span = self._running_span() if self.max_kv_bytes else 0
        for req in self._pending:
            if len(batch) >= room:
                break
            if self.max_kv_bytes:
                wanted = min(self.max_context, max(span, len(req.prompt) + int(req.sampling.max_new_tokens or 0)))
                rows = len(self._running) + len(batch) + 1
                slots = max(rows, self._kv.row_slots)  # every slot gets the columns, occupied or not
                if rows > 1 and slots * self._kv_columns_bytes(wanted) > self.max_kv_bytes:
                    break
                span = wanted
            entry, reused = (self._store.lookup(req.prompt, len(req.prompt) - 1) if self._store is not None
                             else (None, 0))
            hashes = chain_hashes(req.prompt) if self._store is not None else []
            block = reused // BLOCK
            if block < len(hashes) and hashes[block] in claimed:
                waiting.append(req)
                taken += 1
                continue
            new_longest = max(longest, len(req.prompt) - reused)
            if batch and new_longest * (len(batch) + 1) > self.prefill_tokens:
                break
            batch.append(req)
            hits.append((entry, reused))
            claimed.update(hashes)
            longest = new_longest
            taken += 1
        self._pending = waiting + self._pending[taken:]
        if not batch:
            return
        if self.max_kv_bytes:  # no row slots for requests the budget will not admit yet
            fit = self.max_kv_bytes // max(1, self._kv_columns_bytes(span))
            self._kv.row_capacity = min(self.max_batch_size, max(len(self._running) + len(batch), int(fit)))
        try:
            self._prefill(batch, hits, longest)
            trim()  # the prefill's temporaries: the decode steps that follow would not reuse them
        except Exception as exc:  # the batch is neither pending nor running yet: fail it here, never lose it
            running = {id(r) for r in self._running}
            for req in batch:
                if id(req) not in running:
                    self._finish(req, "error", error=exc)
            if any(id(req) in running for req in batch):
                raise  # the running batch may be inconsistent: the worker fails every request

    def _running_span(self) -> int:
        """The columns the running rows will reach: the batch's length plus the most tokens any row may still add."""
        left = max((int(r.sampling.max_new_tokens or 0) - len(r.tokens) for r in self._running), default=0)
        return self._kv.length + max(0, left)

    def _kv_columns_bytes(self, columns: int) -> int:
        """Bytes of one row slot of the key/value buffers once they hold ``columns`` (with the growth headroom)."""
        return (columns + max(HEADROOM, columns // 2)) * self._kv_token_bytes

    def _prefill(self, batch: list[_Request], hits: list[tuple[Any, int]], longest: int) -> None:
        """Prefill ``batch`` (taken off the pending list) on top of the reused prefixes in ``hits``; join the rows
        to the running batch and sample their first tokens."""
        for req in batch:
            self._init_row(req)
            req.weights = self._store_weights
        reused = [m for _, m in hits]
        suffix = [len(req.prompt) - m for req, m in zip(batch, reused)]
        prefixes = [(e.keys, e.values) if e is not None else None for e, _ in hits]
        self._kv.expected_rows = len(self._running) + len(batch) + len(self._pending)
        new_kv = self._kv.prefill_slots(prefixes, reused, suffix)  # in the running batch's free row slots
        if new_kv is None:
            new_kv = prefill_batch(self.num_layers, prefixes, reused, suffix)
        ids = torch.full((len(batch), longest), self.pad_id, dtype=torch.long)
        for i, (req, m) in enumerate(zip(batch, reused)):
            ids[i, longest - len(req.prompt) + m:] = torch.tensor(req.prompt[m:], dtype=torch.long)
        mask = new_kv.mask
        positions = (mask.cumsum(1) - 1).clamp(min=0)[:, mask.shape[1] - longest:]
        try:
            logits = self._forward(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                   position_ids=positions.to(self.device), **{self._cache_kw: new_kv.cache},
                                   use_cache=True, logits_to_keep=1).logits[:, -1]
        except Exception as exc:
            for req in batch:
                self._finish(req, "error", error=exc)
            return
        self.stats["prefills"] += 1
        for key, value in (("prompt_tokens", sum(len(r.prompt) for r in batch)), ("prefix_reused_tokens", sum(reused))):
            self.stats[key] += value
            self._window[key] += value
        if self._store is not None:
            for i, req in enumerate(batch):
                if not self._store.covered(req.prompt):
                    self._store.insert(req.prompt, *new_kv.row_kv(i))
            self._note_store()
        start = len(self._running)
        self._running.extend(batch)
        self._kv.expected_rows = len(self._running) + len(self._pending)
        self._kv.add(new_kv)
        self.stats["max_row_slots"] = max(self.stats["max_row_slots"], self._kv.row_slots)
        self._sample_and_retire(logits, start)

    def _init_row(self, req: _Request) -> None:
        s = req.sampling
        gen = None
        if s.seed is not None and s.temperature > 0:
            gen = torch.Generator(device="cpu")
            gen.manual_seed(int(s.seed))
        req.row = RowSampling(float(s.temperature), int(s.top_k or 0), float(s.top_p if s.top_p else 1.0), gen)
        if s.stop:
            req.stop_window = max(len(x) for x in s.stop) + 4

    def _forward(self, **inputs) -> Any:
        """One forward of the model, its CPU linear layers rerouted as configured (``cpu_linears``)."""
        if not (self.weight_major_rows or self.onednn_linears):
            return self.model(**inputs)
        mode = CpuLinears(self.weight_major_rows, self.onednn_linears)
        with mode:
            out = self.model(**inputs)
        self.stats["weight_major_linears"] += mode.weight_major_calls
        self.stats["onednn_linears"] += mode.onednn_calls
        return out

    def _decode_step(self) -> None:
        if self._kv.maybe_repack():
            self.stats["repacks"] += 1
        last = torch.tensor([[r.tokens[-1]] for r in self._running], dtype=torch.long)
        positions = self._kv.mask.sum(1, keepdim=True)
        self._kv.append_mask_column()
        logits = self._forward(input_ids=last.to(self.device), attention_mask=self._kv.mask.to(self.device),
                               position_ids=positions.to(self.device), **{self._cache_kw: self._kv.cache},
                               use_cache=True).logits[:, -1]
        self.stats["decode_steps"] += 1
        self.stats["max_running"] = max(self.stats["max_running"], len(self._running))
        self._kv_peak_bytes = max(self._kv_peak_bytes, self._kv.reserved_bytes())
        self._sample_and_retire(logits)

    def _sample_and_retire(self, logits: torch.Tensor, start: int = 0) -> None:
        """Sample one token for running rows ``start:`` (``logits`` has one row each) and retire finished rows."""
        rows = self._running[start:]
        tokens, logprobs = sample_rows(logits, [r.row for r in rows], self._generator)
        drop: list[int] = []
        for i, (req, tok, lp) in enumerate(zip(rows, tokens.tolist(), logprobs.tolist()), start):
            req.tokens.append(tok)
            req.logprobs.append(lp)
            reason = self._finish_reason(req, tok)
            if reason is not None:
                drop.append(i)
                self._remember(i, req)
                self._finish(req, reason)
        self.stats["generated_tokens"] += len(rows)
        if drop:
            order = self._kv.remove(drop)
            self._running = [self._running[i] for i in order]

    def _remember(self, row: int, req: _Request) -> None:
        """Store a finished row's prompt + response (all but the last token, which was never fed) for a next turn
        that extends it."""
        if self._store is None or not self.prefix_cache_responses or len(req.tokens) < 2:
            return
        if req.weights != self._store_weights:  # admitted under weights the store no longer holds
            return
        seq = req.prompt + req.tokens[:-1]
        if not self._store.covered(seq):
            self._store.insert(seq, *self._kv.row_kv(row))
            self._note_store()

    def _finish_reason(self, req: _Request, tok: int) -> str | None:
        if tok in self.eos_ids:
            return "stop"
        if req.stop_window:
            tail = self.tokenizer.decode(req.tokens[-req.stop_window:], skip_special_tokens=True)
            if any(s and s in tail for s in req.sampling.stop):
                return "stop"
        if len(req.tokens) >= req.sampling.max_new_tokens:
            return "length"
        if len(req.prompt) + len(req.tokens) >= self.max_context:
            return "length"
        return None

    def _finish(self, req: _Request, reason: str, error: BaseException | None = None) -> None:
        info: dict[str, Any] = {"prompt_tokens": len(req.prompt),
                                "latency_s": time.perf_counter() - req.t_submit}
        if error is not None:
            info["error"] = repr(error)
            gen = Generation([], [], "", finish_reason="error", info=info)
        else:
            text = self.tokenizer.decode(req.tokens, skip_special_tokens=True)
            gen = Generation(list(req.tokens), list(req.logprobs), text, finish_reason=reason, info=info)
        _resolve(req, gen)

    def _fail_all(self, exc: Exception) -> None:
        for req in self._running + [r for r in self._pending if r.continuation is None]:
            self._finish(req, "error", error=exc)
        for req in self._pending:
            if req.continuation is not None:
                _resolve(req, None, error=exc)
        self._running, self._pending = [], []
        self._kv.clear()

    def _shutdown(self, extra: list[_Request]) -> None:
        self._pending.extend(extra)
        self._fail_all(RuntimeError("engine closed"))

    # ------------------------------------------------------------------ scoring
    def _run_scores(self, reqs: list[_Request]) -> None:
        chunk: list[_Request] = []
        longest = 0
        for req in reqs:
            n = len(req.prompt) + len(req.continuation)
            kept = max([len(r.continuation) for r in chunk] + [len(req.continuation)]) + 1
            too_big = max(longest, n) * (len(chunk) + 1) > self.prefill_tokens or kept * (len(chunk) + 1) > 2048
            if chunk and too_big:
                self._score_chunk(chunk, longest)
                chunk, longest = [], 0
            chunk.append(req)
            longest = max(longest, n)
        if chunk:
            self._score_chunk(chunk, longest)

    def _score_chunk(self, reqs: list[_Request], longest: int) -> None:
        ids = torch.full((len(reqs), longest), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(reqs), longest), dtype=torch.long)
        for i, req in enumerate(reqs):
            seq = req.prompt + req.continuation
            ids[i, longest - len(seq):] = torch.tensor(seq, dtype=torch.long)
            mask[i, longest - len(seq):] = 1
        keep = max(len(r.continuation) for r in reqs) + 1
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        try:
            logits = self._forward(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                   position_ids=positions.to(self.device), use_cache=False,
                                   logits_to_keep=keep).logits.float()
            logprobs = torch.log_softmax(logits[:, :-1], dim=-1)  # position j predicts token at j + 1
            targets = ids[:, longest - keep + 1:].to(logprobs.device)
            picked = logprobs.gather(2, targets.unsqueeze(-1)).squeeze(-1).cpu()
        except Exception as exc:
            for req in reqs:
                _resolve(req, None, error=exc)
            return
        for i, req in enumerate(reqs):
            c = len(req.continuation)
            _resolve(req, picked[i, keep - 1 - c:].tolist())
