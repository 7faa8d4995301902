"""``RolloutPool``: rollout workers as Ray actors, episodes fanned out to them, weights published to them.

``run(rows, n, sampling, ...)`` splits the ``len(rows) * n`` episodes (plus one greedy episode per row with
``greedy_baseline``, as in the local driver) into one contiguous chunk per live worker and
waits for the chunks with ``ray.wait``. Trajectories come back in (row, sample) order with the same ``group_id`` /
``uid`` scheme as the local driver, so advantages and metrics do not depend on the backend.

Failures. Workers are created with ``max_restarts``: Ray restarts a worker whose process died. The chunk it held is
either re-run on another live worker (``on_worker_failure: rerun``, the default; a chunk is re-run at most twice) or
dropped (``drop``), and counted either way. A chunk held longer than ``rollout_timeout_s`` (when > 0) counts as a
failure too: its worker is killed so that Ray restarts it. A restarted worker starts from the base weights and
catches up from the latest published snapshot on its next call.

Weights. ``publish(state)`` puts one CPU snapshot (``weights.engine_state``) in the object store and bumps the
version; every later call carries ``(version, [ref])`` and a worker applies it once. Only the newest snapshot is kept.

Engine failures. A worker that cannot start (its engine failed to load, e.g. vLLM's memory check) or whose engine
can no longer generate raises ``RolloutEngineError`` here with the worker's own message, and so does an iteration in
which every episode ended with an engine error: the run stops (the CLI prints one line, exit code 2) instead of
training on empty episodes. Single engine errors are counted (``engine_error_episodes``).

Memory. ``sleep(level)`` / ``wake_up()`` call the workers' engines (sleep mode, for engines that share a GPU with
the trainer) and return how many engines acted; ``sleep_enabled`` says whether any engine has a sleep mode.

``stats`` accumulates counters (failures, re-runs, drops, seconds) that the trainer reports as ``dist/*`` metrics.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from agentr1_core.distributed.settings import ClusterSettings
from agentr1_core.errors import RolloutEngineError
from agentr1_core.mdp import Trajectory
from agentr1_core.rollout.base import SamplingParams

MAX_RERUNS = 2


def error_cause(exc: BaseException) -> BaseException | None:
    """The ``RolloutEngineError`` behind a Ray error (a task's exception, or an actor's failed constructor)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        cause = getattr(exc, "cause", None)  # Ray's task errors carry the remote exception here
        if isinstance(exc, RolloutEngineError) and cause is None:
            return exc
        exc = cause or exc.__cause__
    return None


def last_line(exc: BaseException) -> str:
    """The last informative line of an error (Ray's errors embed whole remote tracebacks)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for line in reversed(lines):
        if not line.startswith(("File ", "^", "~")):
            return line[:500]
    return type(exc).__name__


def split_even(items: Sequence[Any], parts: int) -> list[list[Any]]:
    """``parts`` contiguous chunks whose sizes differ by at most one (empty chunks dropped)."""
    parts = max(1, min(parts, len(items)))
    base, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        out.append(list(items[start:start + size]))
        start += size
    return [c for c in out if c]


class RolloutPool:
    def __init__(self, config: dict[str, Any], settings: ClusterSettings, run_name: str = "run") -> None:
        import ray

        from agentr1_core.distributed.settings import cluster_gpus, memory_plan, plan_engine_config
        from agentr1_core.distributed.worker import RolloutWorker

        trainer = str((config.get("trainer") or {}).get("name", "ray"))
        self.plan = memory_plan(cluster_gpus(), trainer, settings.placement)
        settings = settings.resolved(self.plan)
        config = plan_engine_config(config, self.plan)
        self.settings = settings
        self.run_name = run_name
        actor_cls = ray.remote(RolloutWorker)
        self.workers = []
        for i in range(int(settings.rollout_workers)):
            env = self.plan.worker_env(i) if float(settings.worker_gpus) == 0 else {}
            self.workers.append(actor_cls.options(
                name=f"{run_name}-rollout-{i}", namespace=settings.namespace, lifetime=None,
                num_cpus=float(settings.worker_cpus), num_gpus=float(settings.worker_gpus),
                max_restarts=int(settings.max_restarts), max_task_retries=0, max_concurrency=8,
                runtime_env={"env_vars": env} if env else None,
            ).remote(config, i, int(settings.worker_threads)))
        t0 = time.perf_counter()
        self.worker_info = []
        for i, w in enumerate(self.workers):
            try:
                self.worker_info.append(ray.get(w.info.remote()))
            except Exception as exc:  # the constructor failed: the engine could not load
                self.close()
                engine = (config.get("engine") or {}).get("name", "?")
                raise RolloutEngineError(f"rollout worker {i} could not start engine {engine!r}: "
                                         f"{last_line(exc)}") from exc
        self.startup_seconds = time.perf_counter() - t0
        if self.plan.placement != "cpu":
            print(f"[ray] memory plan: {self.plan.describe()}", flush=True)
        self.version = 0
        self._weights_ref: Any = None
        self.stats: dict[str, float] = {}
        self.totals: dict[str, float] = {}
        self.suspect: set[int] = set()  # workers that failed: skipped until they answer again (restarting)

    # -- weights ------------------------------------------------------------------------------------------------
    def publish(self, state: dict[str, Any]) -> None:
        import ray

        from agentr1_core.distributed.weights import state_nbytes

        t0 = time.perf_counter()
        self._weights_ref = ray.put(state)
        self.version += 1
        self._add("publish_seconds", time.perf_counter() - t0)
        self._add("weights_mb", state_nbytes(state) / 2 ** 20)

    # -- memory -------------------------------------------------------------------------------------------------
    @property
    def sleep_enabled(self) -> bool:
        return any(info.get("sleep_enabled") for info in self.worker_info)

    def sleep(self, level: int | None = None) -> int:
        """Put every worker's engine to sleep; returns how many did (0 when no engine has a sleep mode)."""
        return self._all_engines("sleep", level)

    def wake_up(self) -> int:
        return self._all_engines("wake_up")

    def _all_engines(self, method: str, *args: Any) -> int:
        import ray

        if not self.sleep_enabled:
            return 0
        t0 = time.perf_counter()
        refs = [getattr(w, method).remote(*args) for w in self.workers]
        done = 0
        for ref in refs:
            try:
                done += int(bool(ray.get(ref)))
            except Exception as exc:  # a dead worker wakes up fresh when Ray restarts it
                print(f"[ray] {method} failed on a rollout worker: {last_line(exc)}", flush=True)
        self._add(f"{method}_seconds", time.perf_counter() - t0)
        return done

    def _weights(self) -> tuple[int, list[Any]] | None:
        return (self.version, [self._weights_ref]) if self._weights_ref is not None else None

    # -- stats --------------------------------------------------------------------------------------------------
    def _add(self, key: str, value: float) -> None:
        self.stats[key] = self.stats.get(key, 0.0) + float(value)
        self.totals[key] = self.totals.get(key, 0.0) + float(value)

    def take_stats(self) -> dict[str, float]:
        """Counters since the last call (prefixed ``dist/``), plus running totals of failures."""
        out = {f"dist/{k}": v for k, v in self.stats.items()}
        for key in ("worker_failures", "rerun_episodes", "dropped_episodes"):
            out.setdefault(f"dist/{key}", 0.0)
            out[f"dist/{key}_total"] = self.totals.get(key, 0.0)
        out["dist/rollout_workers"] = float(len(self.workers))
        out["dist/rollout_nodes"] = float(len({info.get("node_id") for info in self.worker_info}))
        self.stats = {}
        return out

    # -- rollouts -----------------------------------------------------------------------------------------------
    def run(self, rows: Sequence[dict[str, Any]], n: int, sampling: SamplingParams, policy: str = "model",
            prefix: str = "", desc: str = "rollout", progress: bool = True,
            greedy_baseline: bool = False) -> list[Trajectory]:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        from agentr1_core.rollout.driver import greedy_uid

        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        episodes = [(row, f"{prefix}{r}", f"{prefix}{r}/{k}") for r, row in enumerate(rows) for k in range(n)]
        if greedy_baseline:  # one greedy episode per row (ReMax's baseline), run greedily by the worker's driver
            episodes = [e for r, row in enumerate(rows)
                        for e in episodes[r * n:(r + 1) * n] + [(row, f"{prefix}{r}", greedy_uid(f"{prefix}{r}"))]]
        order = {uid: i for i, (_, _, uid) in enumerate(episodes)}
        live = self._live_workers()
        chunks = split_even(episodes, len(live))
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(episodes), desc=desc, unit="ep", leave=False, dynamic_ncols=True)
        t0 = time.perf_counter()
        pending: dict[Any, tuple[int, list[Any], int, float]] = {}  # ref -> (worker, chunk, attempt, t_submit)

        def submit(worker: int, chunk: list[Any], attempt: int) -> None:
            ref = self.workers[worker].run_episodes.remote(chunk, sampling, policy, self._weights())
            pending[ref] = (worker, chunk, attempt, time.perf_counter())

        for i, chunk in enumerate(chunks):
            submit(live[i], chunk, 0)
        results: list[Trajectory] = []
        versions: list[int] = []
        busiest = busiest_gen = 0.0
        failed_workers: set[int] = set()
        timeout = float(self.settings.rollout_timeout_s)
        killed: set[Any] = set()
        last_error = None
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0 if timeout > 0 else None)
                if not ready:
                    now = time.perf_counter()
                    for ref, (worker, chunk, attempt, t_sub) in list(pending.items()):
                        if now - t_sub > timeout and ref not in killed:
                            killed.add(ref)
                            ray.kill(self.workers[worker], no_restart=False)
                            self._add("timeouts", 1)
                    continue
                ref = ready[0]
                worker, chunk, attempt, _ = pending.pop(ref)
                try:
                    out = ray.get(ref)
                except RayTaskError as exc:
                    cause = error_cause(exc)
                    if cause is not None:
                        raise RolloutEngineError(str(cause)) from None
                    raise
                except (RayActorError, GetTimeoutError) as exc:
                    self._add("worker_failures", 1)
                    failed_workers.add(worker)
                    self.suspect.add(worker)
                    self._handle_failure(worker, chunk, attempt, failed_workers, submit, exc)
                    continue
                results.extend(out["trajectories"])
                self._add("engine_error_episodes", out.get("engine_error_episodes", 0))
                last_error = out.get("engine_last_error") or last_error
                busiest = max(busiest, float(out["busy_seconds"]))
                busiest_gen = max(busiest_gen, float(out["episodes_seconds"]))
                self._add("weights_apply_seconds", out["weights_seconds"])
                versions.append(int(out["weights_version"]))
                self._add("worker_generate_seconds", out["episodes_seconds"])
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
        wall = time.perf_counter() - t0
        if versions:  # the weight versions the workers sampled this rollout with (equal: every publish arrived)
            self.stats["weights_versions_min"] = float(min(versions))
            self.stats["weights_versions_max"] = float(max(versions))
        self._add("rollout_wall_seconds", wall)
        self._add("rollout_busiest_worker_seconds", busiest)
        self._add("rollout_busiest_generate_seconds", busiest_gen)
        self._add("dispatch_overhead_seconds", max(0.0, wall - busiest))
        results.sort(key=lambda t: order.get(t.uid, len(order)))
        if results and all(t.termination == "engine_error" and not t.steps for t in results):
            raise RolloutEngineError(f"every one of the {len(results)} episodes of '{desc}' ended with an engine "
                                     f"error before its first step; last error: {last_error or 'unknown'}")
        return results

    def _live_workers(self) -> list[int]:
        """Workers to give chunks to: all but those that failed and have not answered ``info`` since (a restart
        can take as long as loading the model); if none answers, all of them (calls then wait for restarts)."""
        import ray

        for i in sorted(self.suspect):
            ready, _ = ray.wait([self.workers[i].info.remote()], timeout=0.2)
            if ready:
                try:
                    ray.get(ready[0])
                    self.suspect.discard(i)
                except Exception:
                    pass
        live = [i for i in range(len(self.workers)) if i not in self.suspect]
        return live or list(range(len(self.workers)))

    def _handle_failure(self, worker: int, chunk: list[Any], attempt: int, failed: set[int], submit: Any,
                        exc: Exception) -> None:
        if self.settings.on_worker_failure == "drop" or attempt >= MAX_RERUNS:
            self._add("dropped_episodes", len(chunk))
            print(f"[ray] rollout worker {worker} failed ({type(exc).__name__}); dropped {len(chunk)} episodes",
                  flush=True)
            return
        healthy = [i for i in range(len(self.workers)) if i not in failed]
        target = healthy[(attempt + worker) % len(healthy)] if healthy else worker  # else: wait for its restart
        self._add("rerun_episodes", len(chunk))
        print(f"[ray] rollout worker {worker} failed ({type(exc).__name__}); re-running its {len(chunk)} episodes "
              f"on worker {target}", flush=True)
        submit(target, chunk, attempt + 1)

    def close(self) -> None:
        import ray

        for w in self.workers:
            try:
                ray.kill(w, no_restart=True)
            except Exception:
                pass
        self.workers = []
        self._weights_ref = None
