"""The ``verl`` trainer: rollouts on Ray rollout workers, the updates on verl's FSDP engine workers.

Per iteration: rollouts through ``RolloutPool`` -> step rows -> (critic algorithms: the critic's value per step) ->
this project's algorithm computes step-level advantages on the driver -> ``verl_data.step_rows_to_verl`` ->
``DataProto`` -> verl's actor update (and the critic's value update) -> the actor's full weights are gathered in
memory and published to the rollout workers through the object store. Around the update the rollout engines are
put to sleep and woken up when they offer it (the vLLM engine with sleep mode; duck-typed).

Also runs the configured ``stages``: ``sft`` (expert episodes, cross-entropy on response tokens through the actor's
own optimizer at ``sft.lr``) and ``rl``; validation before, after SFT, every ``validation.every`` iterations and at
the end; metric records with the local trainer's keys plus ``verl/*`` (the actor's and critic's own metrics) and
``dist/*``. Checkpoints: verl's actor (and critic) checkpoint plus this trainer's state (iteration, data position,
history, metrics offset) in ``run_dir/checkpoints/verl_iter_NNNNNN``, renamed into place when complete; every
``trainer.checkpoint_every`` iterations and at the end; ``trainer.resume=auto`` continues from the newest.

Every registered algorithm runs here: critic-free ones (GRPO, Dr.GRPO, RLOO, REINFORCE, REINFORCE++, GiGPO) and the
critic ones (PPO, StepPO), whose critic is verl's value-model worker with its own optimizer. ``trainer.train_layers``
freezes all but the actor's top blocks, as in the local trainer (the critic trains fully). Not supported: publishing
un-merged LoRA adapters. ``device``: CUDA when torch sees a GPU, else the CPU platform of ``verl_cpu_platform`` (FSDP2 over gloo).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from agentr1_core.config import ConfigError
from agentr1_core.distributed.settings import ClusterSettings
from agentr1_core.lifecycle.run_dir import VERL_STATE_FILE, verl_checkpoint_dirs

# verl's metric names -> the local trainer's (both are written: the local name and ``verl/<name>``)
LOCAL_NAMES = {"loss": "loss", "grad_norm": "grad_norm", "actor/pg_loss": "pg_loss", "actor/pg_clipfrac":
               "clip_fraction", "actor/ppo_kl": "approx_kl", "actor/entropy_loss": "entropy", "kl_loss": "kl",
               "critic/vf_loss": "value_loss", "critic/vf_clipfrac": "value_clip_fraction", "sft_nll": "sft_nll"}
WEIGHT_CHANGE_MAX_MB = 2048  # the driver keeps the previous weights to report ``weight_change`` up to this size


def verl_default_config() -> Any:
    """verl's packaged ``ppo_trainer`` config (Hydra compose of its YAML tree)."""
    import verl
    from hydra import compose, initialize_config_dir

    folder = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        return compose(config_name="ppo_trainer")


def resolve_model_folder(path: str) -> str:
    """A local Hugging Face folder verl can load: the offline alias becomes its cached fp32 folder (written on
    first use); any other value (hub id, folder) is passed through."""
    from agentr1_core.models import SMOLLM2_ALIASES, SMOLLM2_CACHE_NAME, cache_root, load_model_and_tokenizer

    if path.lower() in SMOLLM2_ALIASES:
        folder = cache_root() / SMOLLM2_CACHE_NAME
        if not (folder / "config.json").is_file():
            load_model_and_tokenizer(path)  # converts the GGUF once and writes the cache
        return str(folder)
    return path


def pick_device(n_gpus: int) -> str:
    import torch

    return "cuda" if torch.cuda.is_available() and n_gpus > 0 else "cpu"


class VerlTrainer:
    def __init__(self, config: Any, registry: Any, callbacks: list[Any] | None = None) -> None:
        self.cfg = config
        self.registry = registry
        self.callbacks = list(callbacks or [])
        params = dict(OmegaConf.to_container(config.trainer.params, resolve=True) or {})
        params.pop("verl", None)
        self.n_gpus = int(params.pop("n_gpus", 1))
        self.settings = ClusterSettings.from_params(params)
        stages = [str(s) for s in config.stages]
        unknown = [s for s in stages if s not in ("sft", "rl")]
        if unknown:
            raise ConfigError(f"config error at stages: unknown stage {unknown[0]!r}; valid: sft, rl")
        self.stages = stages
        self.history: dict[str, Any] = {}
        self.iteration = 0
        self.data_cursor = 0

    # -- setup --------------------------------------------------------------------------------------------------
    def _setup(self) -> None:
        from agentr1_core.config import component
        from agentr1_core.distributed.pool import RolloutPool
        from agentr1_core.distributed.ray_trainer import run_name_for
        from agentr1_core.distributed.settings import init_ray
        from agentr1_core.distributed.verl_data import merge_into_verl_config, verl_config
        from agentr1_core.lifecycle.checkpoint import check_run_dir
        from agentr1_core.lifecycle.metrics import MetricsLogger
        from agentr1_core.models import load_model_and_tokenizer
        from agentr1_core.rollout.base import SamplingParams

        cfg = self.cfg
        self.run_dir = Path(str(cfg.run_dir))
        check_run_dir(self.run_dir, int(float(cfg.trainer.min_free_gb) * 1024 ** 3))
        self.device = pick_device(self.n_gpus)
        from agentr1_core.distributed import verl_compat

        os.environ.update(verl_compat.compat_environment())  # inherited by the Ray workers started below
        verl_compat.apply()
        if self.device == "cpu":
            from agentr1_core.distributed import verl_cpu_platform

            os.environ.update(verl_cpu_platform.cpu_environment())  # inherited by the Ray workers started below
            verl_cpu_platform.register()
        name, aparams = component(cfg, "algorithm")
        self.algorithm = self.registry.build("algorithm", name, aparams, where="algorithm")
        self.model_path = resolve_model_folder(str(cfg.model.path))
        _, self.tokenizer = load_model_and_tokenizer(self.model_path, dtype="float32", device="cpu")
        self.pad_id = (self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None
                       else self.tokenizer.eos_token_id)
        dname, dparams = component(cfg, "data.train")
        self.train_rows = list(self.registry.build("dataset", dname, dparams, where="data.train"))
        if not self.train_rows:
            raise ValueError("data.train produced no rows")
        self.val_rows: list[dict[str, Any]] = []
        if OmegaConf.select(cfg, "data.val") is not None:
            vname, vparams = component(cfg, "data.val")
            self.val_rows = list(self.registry.build("dataset", vname, vparams, where="data.val"))
            if int(cfg.validation.max_rows) > 0:
                self.val_rows = self.val_rows[: int(cfg.validation.max_rows)]
        self.order = list(range(len(self.train_rows)))
        random.Random(int(cfg.seed)).shuffle(self.order)
        ro = cfg.rollout
        self.sampling = SamplingParams(temperature=float(ro.temperature), top_p=float(ro.top_p), top_k=int(ro.top_k),
                                       max_new_tokens=int(ro.max_new_tokens), stop=list(ro.stop))
        self.val_sampling = SamplingParams(temperature=float(cfg.validation.temperature), top_p=1.0, top_k=0,
                                           max_new_tokens=int(ro.max_new_tokens), stop=list(ro.stop))
        self.owns_ray = init_ray(self.settings)
        container = OmegaConf.to_container(cfg, resolve=True)
        container["model"]["path"] = self.model_path
        self.pool = RolloutPool(container, self.settings, run_name_for(str(cfg.run_dir)))
        settings = verl_config(cfg, self.algorithm, n_gpus=self.n_gpus, model_path=self.model_path,
                               device=self.device)
        self.merged = merge_into_verl_config(verl_default_config(), settings)
        from agentr1_core.distributed.verl_workers import VerlGroups

        t0 = time.perf_counter()
        self.groups = VerlGroups(self.merged, self.n_gpus, self.device,
                                 need_ref=bool(self.merged.actor_rollout_ref.actor.use_kl_loss),
                                 need_critic=bool(getattr(self.algorithm, "needs_critic", False)),
                                 train_layers=int(cfg.trainer.train_layers))
        self.workers_start_seconds = time.perf_counter() - t0
        self.resumed_from = self._maybe_resume()
        if self.resumed_from is None:  # the starting weights, for the first ``weight_change``
            start = self.groups.export_weights()
            if sum(v.nbytes for v in start.values()) <= WEIGHT_CHANGE_MAX_MB * 2 ** 20:
                self._last_weights = start
        self.writer = MetricsLogger(self.run_dir, purge_step=self.iteration + 1 if self.resumed_from else None)

    # -- data ---------------------------------------------------------------------------------------------------
    def next_rows(self, count: int) -> list[dict[str, Any]]:
        rows = []
        for _ in range(count):
            rows.append(self.train_rows[self.order[self.data_cursor % len(self.order)]])
            self.data_cursor += 1
        return rows

    # -- engines around the update ------------------------------------------------------------------------------
    def _engines(self, method: str) -> float:
        """Calls ``sleep`` / ``wake_up`` on the rollout pool when it offers them; returns the seconds it took."""
        fn = getattr(self.pool, method, None)
        if fn is None:
            return 0.0
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def _publish(self, metrics: dict[str, Any]) -> None:
        """Gathers the actor's weights in memory and publishes them to the rollout workers."""
        import numpy as np

        t0 = time.perf_counter()
        state = self.groups.export_weights()
        metrics["dist/weights_gather_seconds"] = time.perf_counter() - t0
        prev = getattr(self, "_last_weights", None)
        if prev is not None:
            metrics["weight_change"] = float(np.sqrt(sum(float(((state[k] - prev[k]) ** 2).sum())
                                                         for k in state if k in prev)))
        small = sum(v.nbytes for v in state.values()) <= WEIGHT_CHANGE_MAX_MB * 2 ** 20
        self._last_weights = state if small else None
        self.pool.publish(state)

    @staticmethod
    def _named(got: dict[str, Any], critic: bool = False) -> dict[str, Any]:
        """``verl/<name>`` for every worker metric (``verl/critic/<name>`` for the critic's), plus the local
        trainer's names for the ones it has."""
        if critic:
            out = {f"verl/critic/{k.removeprefix('critic/')}": v for k, v in got.items()}
            out.update({LOCAL_NAMES[k]: v for k, v in got.items() if k.startswith("critic/") and k in LOCAL_NAMES})
            return out
        out = {f"verl/{k}": v for k, v in got.items()}
        out.update({LOCAL_NAMES[k]: v for k, v in got.items() if k in LOCAL_NAMES})
        return out

    # -- stages -------------------------------------------------------------------------------------------------
    def validate(self, label: str) -> dict[str, Any] | None:
        from agentr1_core.lifecycle.metrics import write_episodes
        from agentr1_core.trainers.metrics import validation_metrics

        if not self.val_rows:
            return None
        t0 = time.perf_counter()
        trajs = self.pool.run(self.val_rows, int(self.cfg.validation.n), self.val_sampling,
                              prefix=f"val-{label}-", desc=f"validate ({label})")
        result = validation_metrics(trajs)
        result.update(label=label, seconds=time.perf_counter() - t0, iteration=self.iteration)
        self.history.setdefault("validation", {})[label] = result
        self.writer.write({"event": "validation", **result})
        write_episodes(self.run_dir / "episodes" / f"{label}.jsonl", trajs)
        print(f"[validation {label}] success {result['success_rate']:.3f} reward {result['reward_mean']:.3f} "
              f"on {result['cases']} cases", flush=True)
        return result

    def run_sft(self) -> dict[str, Any]:
        from agentr1_core.distributed.verl_data import step_rows_to_verl, to_dataproto
        from agentr1_core.lifecycle.episode_errors import check_expert_steps
        from agentr1_core.trainers.batching import trajectories_to_rows
        from agentr1_core.trainers.metrics import expert_problems, rollout_metrics

        import torch

        sft = self.cfg.sft
        t0 = time.perf_counter()
        rows = self.next_rows(min(int(sft.rows), len(self.train_rows)))
        trajs = self.pool.run(rows, 1, self.sampling, policy="expert", prefix="sft-", desc="expert rollouts")
        seconds = time.perf_counter() - t0
        steps = trajectories_to_rows(trajs)
        check_expert_steps(trajs, len(steps.rows))
        expert = rollout_metrics(trajs, seconds)
        record: dict[str, Any] = {"event": "sft", "expert_episodes": len(trajs), "sft_steps": len(steps.rows),
                                  "expert_success_rate": expert["success_rate"],
                                  "expert_reward_mean": expert["reward_mean"],
                                  "expert_terminations": expert["terminations"],
                                  "expert_tool_errors": expert["tool_errors"]}
        if steps.rows:
            width = max(len(r.response_ids) for r in steps.rows) or 1
            layout = step_rows_to_verl(steps.rows, torch.zeros(len(steps.rows), width), None, self.pad_id,
                                       steps.group_keys, steps.traj_uids, meta={"temperature": 1.0})
            self._engines("sleep")
            got = self.groups.sft_update(to_dataproto(layout), float(sft.lr), int(sft.epochs), int(sft.batch_size),
                                         int(self.cfg.seed))
            record.update(self._named(got))
            self._publish(record)
            self._engines("wake_up")
        self.writer.write(record)
        print(f"[sft] {len(trajs)} expert episodes (success {expert['success_rate']:.2f}{expert_problems(expert)}), "
              f"{len(steps.rows)} steps", flush=True)
        self.history["sft"] = record
        return record

    def train_iteration(self) -> dict[str, Any]:
        from agentr1_core.trainers.batching import trajectories_to_rows
        from agentr1_core.trainers.metrics import end_iteration, rollout_metrics

        cfg = self.cfg
        t0 = time.perf_counter()
        self.iteration += 1
        rows = self.next_rows(int(cfg.rollout.batch_size))
        trajs = self.pool.run(rows, int(cfg.rollout.n), self.sampling, prefix=f"it{self.iteration}-",
                              desc=f"rollout {self.iteration}")
        metrics: dict[str, Any] = {"iteration": self.iteration,
                                   **rollout_metrics(trajs, time.perf_counter() - t0)}
        steps = trajectories_to_rows(trajs)
        metrics.update(train_steps=len(steps.rows), nonfinite_logprob_steps=steps.nonfinite_logprob_steps)
        if steps.rows:
            metrics["dist/sleep_seconds"] = self._engines("sleep")
            metrics.update(self._update(steps, trajs))
            self._publish(metrics)
            metrics["dist/wake_seconds"] = self._engines("wake_up")
        metrics.update(self.pool.take_stats())
        return end_iteration(self, metrics, t0)

    def _update(self, steps: Any, trajs: list[Any]) -> dict[str, Any]:
        """Scores, advantages and the verl updates of one rollout batch; returns metrics."""
        from agentr1_core.distributed.verl_data import step_rows_to_verl, to_dataproto
        from agentr1_core.trainers.batching import build_step_batch

        cfg, tr = self.cfg, self.cfg.trainer
        out: dict[str, Any] = {}
        batch = build_step_batch(steps.rows)
        width = batch.action_mask.shape[1]
        meta = {"temperature": float(cfg.rollout.temperature)}

        def proto(advantages: Any = None, returns: Any = None, **extra: Any) -> Any:
            import torch

            adv = advantages if advantages is not None else torch.zeros(len(steps.rows), width)
            return to_dataproto(step_rows_to_verl(steps.rows, adv, returns, self.pad_id, steps.group_keys,
                                                  steps.traj_uids, meta=meta, **extra))

        t_score = time.perf_counter()
        scoring = proto()
        recompute = int(tr.update_epochs) > 1 or int(tr.mini_batches) > 1
        if recompute:  # several optimizer steps per rollout: the current weights' log-probs are "old"
            batch.old_logprobs = self.groups.log_probs(scoring)[:, :width] * batch.action_mask
        if self.groups.ref is not None:
            batch.ref_logprobs = self.groups.ref_log_probs(scoring)[:, :width] * batch.action_mask
        if self.groups.critic is not None:
            batch.values = self.groups.values(scoring)
        out["score_seconds"] = time.perf_counter() - t_score
        out.update(self.algorithm.prepare_batch(batch, steps.rows, trajs) or {})
        adv = self.algorithm.compute_advantages(batch)
        out.update({f"adv/{k}": v for k, v in adv.metrics.items()})
        t_upd = time.perf_counter()
        update = proto(adv.advantages, adv.returns, old_logprobs=batch.old_logprobs if recompute else None,
                       ref_logprobs=batch.ref_logprobs)
        got = self.groups.update_actor(update, int(tr.mini_batches), int(tr.update_epochs),
                                       int(cfg.seed) * 100003 + self.iteration)
        out.update(self._named(got))
        if self.groups.critic is not None:
            got = self.groups.update_critic(proto(), batch.values, adv.returns, int(tr.update_epochs),
                                            int(cfg.seed) * 100003 + self.iteration)
            out.update(self._named(got, critic=True))
        out["update_seconds"] = time.perf_counter() - t_upd
        tokens = sum(len(r.prompt_ids) + len(r.response_ids) for r in steps.rows) * int(tr.update_epochs)
        out["update_tok_s"] = tokens / max(out["update_seconds"], 1e-9)
        return out

    # -- checkpoints --------------------------------------------------------------------------------------------
    def _checkpoint_due(self) -> bool:
        every, total = int(self.cfg.trainer.checkpoint_every), int(self.cfg.trainer.total_steps)
        return every >= 0 and (self.iteration >= total or (every > 0 and self.iteration % every == 0))

    def save_checkpoint(self) -> Path:
        """verl's actor/critic checkpoint plus this trainer's state, written to ``*.tmp`` and renamed into place."""
        t0 = time.perf_counter()
        root = self.run_dir / "checkpoints"
        final = root / f"verl_iter_{self.iteration:06d}"
        tmp = root / f"{final.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.groups.save(tmp, self.iteration)
        state = {"iteration": self.iteration, "data_cursor": self.data_cursor, "history": self.history,
                 "metrics_offset": self.writer.offset(), "seed": int(self.cfg.seed)}
        (tmp / VERL_STATE_FILE).write_text(json.dumps(state, default=str), encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        keep = int(self.cfg.trainer.keep_checkpoints)
        for old in verl_checkpoint_dirs(self.run_dir)[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
        print(f"[checkpoint] {final} in {time.perf_counter() - t0:.1f}s", flush=True)
        return final

    def _maybe_resume(self) -> Path | None:
        from agentr1_core.lifecycle.metrics import truncate_metrics

        mode = str(self.cfg.trainer.resume)
        if mode not in ("never", "auto"):
            raise ConfigError(f"config error at trainer.resume: must be 'never' or 'auto', got {mode!r}")
        found = verl_checkpoint_dirs(self.run_dir) if mode == "auto" else []
        if not found:
            return None
        last = found[-1]
        state = json.loads((last / VERL_STATE_FILE).read_text(encoding="utf-8"))
        self.groups.load(last)
        self.iteration, self.data_cursor = int(state["iteration"]), int(state["data_cursor"])
        self.history = dict(state.get("history") or {})
        truncate_metrics(self.run_dir, int(state.get("metrics_offset", 0)))
        self._publish({})
        print(f"[resume] from {last} (iteration {self.iteration})", flush=True)
        return last

    # -- run ----------------------------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        import ray

        start = time.perf_counter()
        try:
            self._setup()
            trained = (f", {self.groups.trainable_params / 1e6:.2f}M trainable params"
                       if self.groups.trainable_params is not None else "")
            print(f"[setup] verl on {self.device} (workers started in {self.workers_start_seconds:.1f}s"
                  f"{trained}); model {self.model_path}; {len(self.train_rows)} train rows, {len(self.val_rows)} validation rows; "
                  f"stages {self.stages}", flush=True)
            if self.iteration == 0 and self.resumed_from is None and self.cfg.validation.before:
                self.validate("before_sft" if "sft" in self.stages else "before_rl")
            if "sft" in self.stages and "sft" not in self.history:
                self.run_sft()
                self.validate("after_sft")
            if "rl" in self.stages:
                while self.iteration < int(self.cfg.trainer.total_steps):
                    self.train_iteration()
                self.validate("after_rl")
            self.history.update(wall_seconds=time.perf_counter() - start, iterations=self.iteration,
                                seed=int(self.cfg.seed))
            (self.run_dir / "summary.json").write_text(json.dumps(self.history, indent=2, default=str),
                                                       encoding="utf-8")
            return self.history
        finally:
            writer = getattr(self, "writer", None)
            if writer is not None:
                writer.close()
            pool = getattr(self, "pool", None)
            if pool is not None:
                pool.close()
            if getattr(self, "owns_ray", False):
                ray.shutdown()
