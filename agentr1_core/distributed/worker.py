"""The rollout worker: one Ray actor with its own engine, running AgentFlows over the episodes it is handed.

A worker is built from the run's config alone. It re-discovers plugins from entry points in its own process
(``configure_registry`` with the run's allow/block lists): registrations made in the driver never reach it. It loads
the model named by ``model.path``, builds the configured engine, reward function and agent flow, and then serves
``run_episodes`` calls: a list of ``(row, group_id, uid)`` episodes, all run concurrently so that every ``generate``
reaches the engine at once. Each call carries the trainer's latest weights as ``(version, [object ref])``; a worker
whose version differs (a fresh one, or one restarted after a crash) applies them first with the engine's
``sync_weights``. Sampled generations are seeded per (run seed, episode uid, call), as on the local backend
(``trainers.seeding``): the tokens an episode samples do not depend on which worker runs it, with which others, or
whether the worker was restarted.

Engine failures. After each call the worker asks its engine whether it can still generate (an engine's
``failure``, e.g. vLLM's core process died): if not, the call raises ``RolloutEngineError`` naming the engine and the
cause, so the run stops instead of training on empty episodes. Episodes that ended with an engine error are counted
(``engine_error_episodes``) and the engine's last error message is returned with them.

Memory. ``sleep(level)`` / ``wake_up()`` pass through to engines that have them (the vLLM engine in sleep mode) and
return False otherwise; ``run_episodes`` wakes a sleeping engine before it loads weights or generates.

The class is plain Python; ``RolloutPool`` turns it into an async Ray actor, so ``progress`` answers while episodes
run. ``crash_after(k)`` exists for failure drills: the process exits once ``k`` more episodes have finished.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from typing import Any

from agentr1_core import tool_sources
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.trainers.seeding import EpisodeSeededEngine


class _ErrorRecordingEngine:
    """The worker's engine as flows see it: every call passes through; the last generation error is remembered."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.last_error: str | None = None

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Any:
        gen = await self._inner.generate(prompt_ids, sampling)
        if gen.finish_reason == "error":
            self.last_error = str((gen.info or {}).get("error") or "the engine returned an error")
        return gen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class RolloutWorker:
    def __init__(self, config: dict[str, Any], worker_index: int, threads: int = 1) -> None:
        from omegaconf import OmegaConf

        from agentr1_core.config import component, run_config_tree
        from agentr1_core.memory import set_mmap_threshold
        from agentr1_core.plugins import configure_registry

        import torch

        if threads > 0:
            torch.set_num_threads(int(threads))
        self.index = int(worker_index)
        self.cfg = OmegaConf.merge(run_config_tree(), config)
        set_mmap_threshold(int(self.cfg.trainer.mmap_threshold_kb))
        self.registry = configure_registry(list(self.cfg.plugins.allow), list(self.cfg.plugins.block))
        self.weights_version = 0
        self.calls = 0
        self._crash_after: int | None = None
        self.finished_total = 0
        self.progress_state = {"call": 0, "total": 0, "finished": 0}
        t0 = time.perf_counter()
        self._build(component)
        tool_sources.start_referenced(self.cfg, self.registry)  # this worker's own servers, before its first episode
        self.load_seconds = time.perf_counter() - t0

    def _build(self, component: Any) -> None:
        from omegaconf import OmegaConf

        from agentr1_core.components import build_reward_fn

        cfg = self.cfg
        name, params = component(cfg, "engine")
        spec = self.registry.get("engine", name)
        accepted = spec.parameters()
        seed = int(cfg.seed) + 7919 * (self.index + 1) + (os.getpid() % 1000)  # distinct per worker and restart
        if "seed" in accepted and "seed" not in params:
            params["seed"] = seed
        if "model_path" in accepted:
            # engines that load their own weights (vLLM) get the model path instead of a torch module
            self.engine = self.registry.build("engine", name, params, where="engine", model=None, tokenizer=None,
                                              model_path=str(cfg.model.path))
            self.tokenizer = self.engine.tokenizer
        else:
            from agentr1_core.models import load_model_and_tokenizer

            device = str(cfg.model.device)
            if device == "auto":
                import torch

                device = "cuda" if torch.cuda.is_available() else "cpu"
            model, tokenizer = load_model_and_tokenizer(str(cfg.model.path), dtype=str(cfg.model.dtype),
                                                        device=device)
            model.eval()
            for p in model.parameters():
                p.requires_grad_(False)
            if "device" in accepted and "device" not in params:
                params["device"] = device
            self.engine = self.registry.build("engine", name, params, where="engine", model=model,
                                              tokenizer=tokenizer)
            self.tokenizer = tokenizer
        self.env_config = OmegaConf.to_container(cfg.env, resolve=True)
        self.flow_name, self.flow_params = component(cfg, "agent_flow")
        self.reward_fn = build_reward_fn(cfg, self.registry)

    # -- calls -------------------------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        import ray

        return {"index": self.index, "pid": os.getpid(), "weights_version": self.weights_version,
                "node_id": ray.get_runtime_context().get_node_id(), "load_seconds": self.load_seconds, "calls": self.calls,
                "sleep_enabled": bool(getattr(self.engine, "sleep_enabled", False))}

    def sleep(self, level: int | None = None) -> bool:
        """Put the engine to sleep (frees its accelerator memory); False when the engine has no sleep mode."""
        fn = getattr(self.engine, "sleep", None)
        return bool(fn(level)) if fn is not None else False

    def wake_up(self) -> bool:
        fn = getattr(self.engine, "wake_up", None)
        return bool(fn()) if fn is not None else False

    def _check_engine(self) -> None:
        from agentr1_core.errors import RolloutEngineError

        failure = getattr(self.engine, "failure", None)
        if failure:
            raise RolloutEngineError(f"rollout worker {self.index}: engine {str(self.cfg.engine.name)!r} cannot "
                                     f"generate any more: {failure}")

    def progress(self) -> dict[str, Any]:
        return dict(self.progress_state, pid=os.getpid())

    def crash_after(self, episodes: int) -> None:
        """Failure drill: exit the process once ``episodes`` more episodes have finished (in any call)."""
        self._crash_after = self.finished_total + int(episodes)

    async def score(self, prompt_ids: list[int], continuation_ids: list[int],
                    weights: tuple[int, list[Any]] | None = None) -> list[float]:
        """The engine's log-probs of ``continuation_ids`` after ``prompt_ids`` (with the given weights applied)."""
        if weights is not None:
            await self.load_weights(*weights)
        return list(await self.engine.score(list(prompt_ids), list(continuation_ids)))

    async def load_weights(self, version: int, refs: list[Any]) -> float:
        """Apply the trainer's weights ``refs[0]`` (an object ref or the dict itself); returns seconds spent."""
        if version == self.weights_version or not refs:
            return 0.0
        from agentr1_core.distributed.weights import to_torch_state

        t0 = time.perf_counter()
        state = refs[0]
        if not isinstance(state, dict):
            state = await state  # an ObjectRef: fetched without blocking the actor's event loop
        self.engine.sync_weights(to_torch_state(state))
        self.weights_version = int(version)
        return time.perf_counter() - t0

    async def run_episodes(self, episodes: list[tuple[dict[str, Any], str, str]], sampling: SamplingParams,
                           policy: str = "model", weights: tuple[int, list[Any]] | None = None) -> dict[str, Any]:
        from agentr1_core.flows import FlowContext
        from agentr1_core.memory import trim
        from agentr1_core.rollout.driver import current_episode_uid, run_episode

        t_start = time.perf_counter()
        trim()  # the last chunk's KV buffers, freed while the engine idled, go back to the OS
        self._check_engine()
        if getattr(self.engine, "asleep", False):
            self.wake_up()
        weight_seconds = await self.load_weights(*weights) if weights is not None else 0.0
        self.calls += 1
        self.progress_state = {"call": self.calls, "total": len(episodes), "finished": 0}
        engine = _ErrorRecordingEngine(self.engine)
        ctx = FlowContext(engine=engine, tokenizer=self.tokenizer, sampling=sampling,
                          env_config=dict(self.env_config), reward_fn=self.reward_fn,
                          max_turns=int(self.cfg.rollout.max_turns),
                          max_prompt_tokens=int(self.cfg.rollout.max_prompt_tokens), policy=policy)

        def make_flow() -> Any:  # built inside the episode's task: its uid seeds its sampled generations
            seeded = EpisodeSeededEngine(engine, f"{int(self.cfg.seed)}/{current_episode_uid()}")
            return self.registry.build("agent_flow", self.flow_name, self.flow_params, where="agent_flow",
                                       ctx=dataclasses.replace(ctx, engine=seeded))

        async def one(row: dict[str, Any], group: str, uid: str) -> Any:
            traj = await run_episode(make_flow, row, group, uid)
            self.progress_state["finished"] += 1
            self.finished_total += 1
            if self._crash_after is not None and self.finished_total >= self._crash_after:
                os._exit(17)  # a hard death, as an OOM kill or a lost node would look to Ray
            return traj

        t_gen = time.perf_counter()
        trajs = await asyncio.gather(*(one(row, group, uid) for row, group, uid in episodes))
        now = time.perf_counter()
        self._check_engine()
        return {"trajectories": list(trajs), "worker": self.index, "pid": os.getpid(),
                "weights_seconds": weight_seconds, "episodes_seconds": now - t_gen,
                "busy_seconds": now - t_start, "weights_version": self.weights_version,
                "engine_error_episodes": sum(1 for t in trajs if t.termination == "engine_error"),
                "engine_last_error": engine.last_error}

    def close(self) -> None:
        tool_sources.close_all()
        self.engine.close()
