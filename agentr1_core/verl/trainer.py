"""The ``verl`` backend: rollouts on Ray rollout workers, the updates on verl's FSDP engine workers; and
``VerlTrainer``, the training loop (``trainers.loop``) running on it (plugin name ``verl``).

Per RL update: step rows -> (critic algorithms: the critic's value per step) -> this project's algorithm computes
step-level advantages on the driver -> ``data.step_rows_to_verl`` -> ``DataProto`` -> verl's actor update (and
the critic's value update); ``publish_weights`` gathers the actor's full weights in memory and publishes them to the
rollout workers through the object store. Around the update the rollout engines are put to sleep and woken up when
they offer it (the vLLM engine with sleep mode; duck-typed). ``sft_update`` is cross-entropy on response tokens
through the actor's own optimizer at ``sft.lr``.

Metric records carry the local backend's keys plus ``verl/*`` (the actor's and critic's own metrics) and ``dist/*``.
Checkpoints: verl's actor (and critic) checkpoint plus the loop's state and the metrics offset in
``run_dir/checkpoints/verl_iter_NNNNNN``, renamed into place when complete.

Every registered algorithm runs here: critic-free ones (GRPO, Dr.GRPO, RLOO, REINFORCE, REINFORCE++, GiGPO) and the
critic ones (PPO, StepPO), whose critic is verl's value-model worker with its own optimizer (with ``critic.prefix``
it reads each step after the row's privileged prefix, ``algorithms.critic_prefix``; the actor never does; an
episode cut before ``done`` is bootstrapped with its value of the next state, as on the local backend), and
ReMax, whose greedy episodes run on the rollout workers beside the sampled ones. ``trainer.train_layers``
freezes all but the actor's top blocks, as in the local trainer (the critic trains fully). Not supported: publishing
un-merged LoRA adapters. ``device``: CUDA when torch sees a GPU, else the CPU platform of ``cpu_platform``
(FSDP2 over gloo).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from agentr1_core.algorithms.base import inert_rows_of
from agentr1_core.algorithms.critic_prefix import critic_prefixes
from agentr1_core.config import ConfigError
from agentr1_core.distributed.settings import ClusterSettings
from agentr1_core.lifecycle.run_dir import VERL_STATE_FILE, verl_checkpoint_dirs
from agentr1_core.trainers.backend import RunInputs
from agentr1_core.trainers.loop import TrainingLoop
from agentr1_core.trainers.roles import check_recompute_mode
from agentr1_core.trainers.update import off_policy_correction
from agentr1_core.trust import check_data_files

# verl's metric names -> the local trainer's (both are written: the local name and ``verl/<name>``)
LOCAL_NAMES = {"loss": "loss", "grad_norm": "grad_norm", "actor/pg_loss": "pg_loss", "actor/pg_clipfrac":
               "clip_fraction", "actor/ppo_kl": "approx_kl", "actor/entropy_loss": "entropy", "kl_loss": "kl",
               "critic/vf_loss": "value_loss", "critic/vf_clipfrac": "value_clip_fraction", "sft_nll": "sft_nll"}
# the first micro-batch's value of verl's per-micro-batch metric lists -> the loop's on-policy keys
ON_POLICY_NAMES = {"actor/ppo_kl": "onpolicy/approx_kl", "actor/pg_clipfrac": "onpolicy/clip_fraction",
                   "kl_loss": "onpolicy/ref_kl"}
WEIGHT_CHANGE_MAX_MB = 2048  # the driver keeps the previous weights to report ``weight_change`` up to this size


def verl_default_config() -> Any:
    """verl's packaged ``ppo_trainer`` config (Hydra compose of its YAML tree)."""
    import verl
    from hydra import compose, initialize_config_dir

    folder = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        return compose(config_name="ppo_trainer")


def write_model_folder(weights: dict[str, Any], like: str, folder: Path) -> None:
    """A Hugging Face model folder with ``weights`` (numpy, by parameter name) and the config and tokenizer files of
    the model folder ``like``; written next to ``folder`` and renamed into place."""
    import numpy as np
    from safetensors.numpy import save_file

    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for item in Path(like).iterdir():
        if item.is_file() and not item.name.endswith((".safetensors", ".bin", ".index.json", ".gguf")):
            shutil.copy2(item, tmp / item.name)
    save_file({k: np.ascontiguousarray(v) for k, v in weights.items()}, str(tmp / "model.safetensors"))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def logprob_gap(engine: Any, trainer: Any, mask: Any) -> dict[str, float]:
    """How far the engine's sampling log-probs are from the trainer's for the same tokens (mean and max |diff|, over
    the action tokens where both are finite)."""
    import torch

    diff = (engine.float() - trainer.float()).abs()
    diff = diff[(mask > 0) & torch.isfinite(diff)]
    if diff.numel() == 0:
        return {}
    return {"logprob_gap_mean": float(diff.mean()), "logprob_gap_max": float(diff.max())}


def pick_device(n_gpus: int) -> str:
    import torch

    return "cuda" if torch.cuda.is_available() and n_gpus > 0 else "cpu"


class VerlBackend:
    """Rollouts on a ``RolloutPool``, updates on verl's worker groups (see the module docstring)."""

    def __init__(self, config: Any, registry: Any) -> None:
        self.cfg = config
        self.registry = registry
        self.device = "cpu"  # picked from the GPUs asked for in build
        params = dict(OmegaConf.to_container(config.trainer.params, resolve=True) or {})
        params.pop("verl", None)
        self.n_gpus = int(params.pop("n_gpus", 1))
        self.settings = ClusterSettings.from_params(params)
        self.pool: Any = None
        self.groups: Any = None
        self.owns_ray = False
        self._last_weights: dict[str, Any] | None = None
        self._snapshot_metrics: dict[str, Any] = {}
        self._asleep = False  # the rollout engines were put to sleep and are woken when weights are published
        self.critic_prefix: Any = None  # algorithms.critic_prefix.CriticPrefixes when critic.prefix is set

    # -- build --------------------------------------------------------------------------------------------------
    def build(self, run: RunInputs) -> str:
        from agentr1_core.verl import compat as verl_compat
        from agentr1_core.distributed.pool import RolloutPool
        from agentr1_core.distributed.ray_trainer import run_name_for
        from agentr1_core.distributed.settings import init_ray
        from agentr1_core.verl.data import merge_into_verl_config, verl_config
        from agentr1_core.verl.workers import VerlGroups
        from agentr1_core.models import load_model_config, load_tokenizer, model_folder

        cfg = self.cfg
        check_recompute_mode(cfg.trainer.recompute_old_logprobs)  # bad input fails before any worker starts
        correction = off_policy_correction(cfg)
        if correction is not None and correction.mode == "tis":
            raise ConfigError("config error at trainer.off_policy_correction: tis is not available on the verl "
                              "backend (verl's loss takes its ratio to the old policy); use decoupled")
        self.algorithm = run.algorithm
        self.device = pick_device(self.n_gpus)
        os.environ.update(verl_compat.compat_environment())  # inherited by the Ray workers started below
        verl_compat.apply()
        if self.device == "cpu":
            from agentr1_core.verl import cpu_platform as verl_cpu_platform

            os.environ.update(verl_cpu_platform.cpu_environment())  # inherited by the Ray workers started below
            verl_cpu_platform.register()
        self.model_path = model_folder(str(cfg.model.path))
        self.tokenizer = load_tokenizer(self.model_path)  # the weights load in verl's workers only
        # the longest state the critic reads when bootstrapping a cut episode (0: no limit known)
        self.max_positions = int(getattr(load_model_config(self.model_path), "max_position_embeddings", 0) or 0)
        self.pad_id = (self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None
                       else self.tokenizer.eos_token_id)
        # critic.prefix: every training row's privileged prefix for the critic, tokenised once (and recorded)
        self.critic_prefix = critic_prefixes(cfg, self.algorithm, run.train_rows, self.tokenizer)
        if self.critic_prefix is not None:
            self.critic_prefix.record(run.run_dir)
        self.owns_ray = init_ray(self.settings)
        container = OmegaConf.to_container(cfg, resolve=True)
        container["model"]["path"] = self.model_path
        self.pool = RolloutPool(container, self.settings, run_name_for(str(cfg.run_dir)))
        settings = verl_config(cfg, self.algorithm, n_gpus=self.n_gpus, model_path=self.model_path,
                               device=self.device)
        self.merged = merge_into_verl_config(verl_default_config(), settings)
        t0 = time.perf_counter()
        need_ref = bool(self.merged.actor_rollout_ref.actor.use_kl_loss)
        self.reference_folder = run.run_dir / "reference_model"
        # after SFT the reference is the policy as RL starts (``start_rl``); a resumed run has its folder already
        self.reference_pending = need_ref and "sft" in [str(s) for s in cfg.stages]
        self.groups = VerlGroups(self.merged, self.n_gpus, self.device,
                                 need_ref=need_ref and not self.reference_pending,
                                 need_critic=bool(getattr(self.algorithm, "needs_critic", False)),
                                 train_layers=int(cfg.trainer.train_layers))
        if self.reference_pending and (self.reference_folder / "config.json").is_file():
            self.groups.start_reference(str(self.reference_folder))
            self.reference_pending = False
        seconds = time.perf_counter() - t0
        start = self.groups.export_weights()  # the starting weights, for the first ``weight_change``
        if sum(v.nbytes for v in start.values()) <= WEIGHT_CHANGE_MAX_MB * 2 ** 20:
            self._last_weights = start
        trained = (f", {self.groups.trainable_params / 1e6:.2f}M trainable params"
                   if self.groups.trainable_params is not None else "")
        prefix_line = f"; {self.critic_prefix.line()}" if self.critic_prefix is not None else ""
        return (f"verl on {self.device} ({self.n_gpus} rank(s), workers started in {seconds:.1f}s{trained}); "
                f"model {self.model_path}{prefix_line}")

    # -- rollouts -----------------------------------------------------------------------------------------------
    def rollout(self, rows: list[dict[str, Any]], n: int, sampling: Any, *, policy: str = "model",
                desc: str = "rollout", prefix: str = "", greedy_baseline: bool = False) -> list[Any]:
        return self.pool.run(rows, n, sampling, policy=policy, prefix=prefix, desc=desc,
                             greedy_baseline=greedy_baseline)

    def take_stats(self) -> dict[str, Any]:
        return self.pool.take_stats() if self.pool is not None else {}

    # -- engines around the update ------------------------------------------------------------------------------
    def _engines(self, method: str) -> float:
        """Calls ``sleep`` / ``wake_up`` on the rollout pool when it offers them; returns the seconds it took."""
        fn = getattr(self.pool, method, None)
        if fn is None:
            return 0.0
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def snapshot_weights(self) -> dict[str, Any]:
        """The actor's full weights, gathered into this process's memory; ``weight_change`` since the previous
        snapshot is measured here (``take_snapshot_metrics``)."""
        import numpy as np

        t0 = time.perf_counter()
        state = self.groups.export_weights()
        self._snapshot_metrics = {"dist/weights_gather_seconds": time.perf_counter() - t0}
        prev = self._last_weights
        if prev is not None:
            self._snapshot_metrics["weight_change"] = float(np.sqrt(sum(float(((state[k] - prev[k]) ** 2).sum())
                                                                        for k in state if k in prev)))
        small = sum(v.nbytes for v in state.values()) <= WEIGHT_CHANGE_MAX_MB * 2 ** 20
        self._last_weights = state if small else None
        return state

    def take_snapshot_metrics(self) -> dict[str, Any]:
        out, self._snapshot_metrics = self._snapshot_metrics, {}
        return out

    def memory_parts(self) -> dict[str, float]:
        return {}  # the models live in verl's worker processes, counted by the loop as child processes

    def release_optimizer_state(self) -> None:
        return None  # verl's workers keep their optimizers; they stop with the run right after the last validation

    @property
    def engines_sleep(self) -> bool:
        """Engines sleep through the update only when rollouts do not run beside it (``max_staleness: 0``)."""
        return int(self.cfg.trainer.max_staleness) == 0

    def publish_weights(self, snapshot: dict[str, Any] | None = None) -> dict[str, Any]:
        """Publishes ``snapshot`` (default: the actor's weights, gathered now) to the rollout workers and wakes
        the engines."""
        metrics: dict[str, Any] = {}
        if snapshot is None:
            snapshot = self.snapshot_weights()
            metrics.update(self.take_snapshot_metrics())
        t0 = time.perf_counter()
        self.pool.publish(snapshot)
        metrics["publish_seconds"] = time.perf_counter() - t0
        metrics["dist/wake_seconds"] = self._engines("wake_up") if self._asleep else 0.0
        self._asleep = False
        return metrics

    @staticmethod
    def _named(got: dict[str, Any], critic: bool = False) -> dict[str, Any]:
        """``verl/<name>`` for every worker metric (``verl/critic/<name>`` for the critic's), plus the local
        backend's names for the ones it has; lists (one value per micro-batch) are averaged, and the first value of
        the on-policy ones is kept as ``onpolicy/*`` (one verl reports once per update stands for the update)."""
        firsts = {ON_POLICY_NAMES[k]: abs(float(v[0] if isinstance(v, list) else v)) for k, v in got.items()
                  if k in ON_POLICY_NAMES and v != []}
        got = {k: (sum(v) / len(v) if isinstance(v, list) else v) for k, v in got.items()
               if not isinstance(v, list) or v}
        if critic:
            out = {f"verl/critic/{k.removeprefix('critic/')}": v for k, v in got.items()}
            out.update({LOCAL_NAMES[k]: v for k, v in got.items() if k.startswith("critic/") and k in LOCAL_NAMES})
            return out
        out = {f"verl/{k}": v for k, v in got.items()}
        out.update({LOCAL_NAMES[k]: v for k, v in got.items() if k in LOCAL_NAMES})
        out.update(firsts)
        return out

    # -- updates ------------------------------------------------------------------------------------------------
    def sft_update(self, steps: Any) -> dict[str, Any]:
        import torch

        from agentr1_core.verl.data import step_rows_to_verl, to_dataproto

        sft = self.cfg.sft
        width = max(len(r.response_ids) for r in steps.rows) or 1
        layout = step_rows_to_verl(steps.rows, torch.zeros(len(steps.rows), width), None, self.pad_id,
                                   steps.group_keys, steps.traj_uids, meta={"temperature": 1.0})
        self._asleep = True  # SFT never overlaps a rollout
        self._engines("sleep")
        t0 = time.perf_counter()
        got = self.groups.sft_update(to_dataproto(layout), float(sft.lr), int(sft.epochs), int(sft.batch_size),
                                     int(self.cfg.seed))
        out = self._named(got)
        out["update_seconds"] = time.perf_counter() - t0
        return out

    def start_rl(self, after_sft: bool) -> None:
        """The KL reference is the policy as RL starts: after SFT, the actor's weights are written once as a model
        folder in the run directory (``reference_model/``, which a resumed run reuses) and the reference starts
        from it; without SFT it already holds the starting weights."""
        if not self.reference_pending:
            return
        write_model_folder(self.groups.export_weights(), self.model_path, self.reference_folder)
        self.groups.start_reference(str(self.reference_folder))
        self.reference_pending = False

    def rl_update(self, steps: Any, trajectories: list[Any], iteration: int) -> dict[str, Any]:
        self._asleep = self.engines_sleep
        metrics = {"dist/sleep_seconds": self._engines("sleep") if self._asleep else 0.0}
        if self.critic_prefix is not None:  # the critic reads each row after its privileged prefix
            metrics.update(self.critic_prefix.attach(steps.rows, trajectories))
        metrics.update(self._update(steps, trajectories, iteration))
        return metrics

    def _update(self, steps: Any, trajs: list[Any], iteration: int) -> dict[str, Any]:
        """Scores, advantages and the verl updates of one rollout batch; returns metrics."""
        from agentr1_core.algorithms.losses import proximal_weights
        from agentr1_core.algorithms.mismatch import mismatch_metrics
        from agentr1_core.trainers.batching import build_step_batch, critic_view
        from agentr1_core.verl.data import loss_tokens, step_rows_to_verl, to_dataproto, update_metrics

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

        def critic_proto(loss_mask: Any = None) -> Any:
            """The rows as the critic reads them: ``critic.prefix``'s token ids before each prompt (the rows
            themselves without one); verl's critic reads its value before the first response token as always.
            ``loss_mask`` keeps rows without action tokens (``loss_masked``) out of the value loss."""
            import torch

            rows = [critic_view(r) for r in steps.rows]
            return to_dataproto(step_rows_to_verl(rows, torch.zeros(len(rows), width), None, self.pad_id,
                                                  steps.group_keys, steps.traj_uids, meta=meta, loss_mask=loss_mask))

        t_score = time.perf_counter()
        scoring = proto()
        correction = off_policy_correction(cfg)
        # the rollout engines sample a copy of the actor's weights (maybe in another precision), so ``auto`` (and
        # ``true``) recompute the old log-probs with the actor and log the engine-vs-actor gap every iteration, as the
        # local trainer does for an engine that does not run its own module; several optimizer steps per rollout,
        # stale rollouts or the decoupled correction need the current weights' log-probs (the proximal policy) even
        # with ``false``
        recompute = (check_recompute_mode(tr.recompute_old_logprobs) != "false" or int(tr.update_epochs) > 1
                     or int(tr.mini_batches) > 1 or int(tr.max_staleness) > 0 or correction is not None)
        is_weights = behaviour = None
        if recompute:
            actor = self.groups.log_probs(scoring)[:, :width] * batch.action_mask
            out.update(logprob_gap(batch.old_logprobs, actor, batch.action_mask))
            out.update(mismatch_metrics(batch.old_logprobs, actor, batch.action_mask))
            if correction is not None:  # the same weights and metrics as the local trainer's (losses.py)
                behaviour = batch.old_logprobs
                is_weights, tally, _ = proximal_weights(actor, behaviour, batch.action_mask, correction)
                out.update(tally.metrics())
            batch.old_logprobs = actor
        if self.groups.ref is not None:
            batch.ref_logprobs = self.groups.ref_log_probs(scoring)[:, :width] * batch.action_mask
        if self.groups.critic is not None:
            batch.values = self.groups.values(critic_proto())
            batch.extras["bootstrap_values"], out["bootstrapped_steps"] = self._bootstrap(steps.rows, trajs,
                                                                                           batch.values, meta)
        out["score_seconds"] = time.perf_counter() - t_score
        out.update(self.algorithm.prepare_batch(batch, steps.rows, trajs) or {})
        adv = self.algorithm.compute_advantages(batch)
        out.update({f"adv/{k}": v for k, v in adv.metrics.items()})
        t_upd = time.perf_counter()
        inert = inert_rows_of(self.algorithm, batch, adv.advantages, adv.returns, self.groups.critic is not None)
        if inert is not None and bool(inert.all()) and not bool(tr.step_without_gradient):
            # no row carries a gradient: no optimizer step (and no momentum moving the weights)
            out.update(update_skipped=1, loss=0.0, pg_loss=0.0, optimizer_steps=0, update_inert_rows=len(steps.rows),
                       update_seconds=time.perf_counter() - t_upd, update_tok_s=0.0)
            return out
        out["update_skipped"] = 0
        keep = loss_tokens(batch.action_mask, batch.old_logprobs, behaviour,
                           batch.ref_logprobs if self.groups.ref is not None else None)
        update = proto(adv.advantages, adv.returns, old_logprobs=batch.old_logprobs if recompute else None,
                       ref_logprobs=batch.ref_logprobs, is_weights=is_weights, loss_mask=keep)
        actor_got = self.groups.update_actor(update, int(tr.mini_batches), int(tr.update_epochs),
                                             int(cfg.seed) * 100003 + iteration)
        out.update(self._named(actor_got))
        critic_got = None
        if self.groups.critic is not None:
            critic_got = self.groups.update_critic(critic_proto(batch.action_mask > 0), batch.values, adv.returns,
                                                   int(tr.update_epochs), int(cfg.seed) * 100003 + iteration)
            out.update(self._named(critic_got, critic=True))
        # the local trainer's names: policy_loss, policy_grad_norm, grad_clip_fraction, the critic's norms, loss
        out.update(update_metrics(actor_got, critic_got, float(tr.max_grad_norm)))
        out["update_seconds"] = time.perf_counter() - t_upd
        tokens = sum(len(r.prompt_ids) + len(r.response_ids) for r in steps.rows) * int(tr.update_epochs)
        out["update_tok_s"] = tokens / max(out["update_seconds"], 1e-9)
        return out

    def _bootstrap(self, rows: list[Any], trajs: list[Any], values: Any, meta: dict[str, Any]) -> tuple[Any, int]:
        """Next-state values of the episodes cut before ``done`` (``roles.bootstrap_states``), read by verl's critic:
        each next state is a row whose prompt is the state's token ids and whose response is one pad token, the
        place verl's critic reads a step's value. Returns ``[S]`` values and how many came from a next state."""
        import torch

        from agentr1_core.trainers.batching import StepRow
        from agentr1_core.trainers.roles import bootstrap_states
        from agentr1_core.verl.data import step_rows_to_verl, to_dataproto

        out, states, targets = bootstrap_states(trajs, rows, values, self.tokenizer, self.max_positions)
        if states:
            state_rows = [StepRow(prompt_ids=ids, response_ids=[self.pad_id], old_logprobs=[0.0], traj=k, group=0,
                                  step_index=0, reward=0.0, done=False, truncated=False)
                          for k, ids in enumerate(states)]
            proto = to_dataproto(step_rows_to_verl(state_rows, torch.zeros(len(states), 1), None, self.pad_id,
                                                   meta=meta))
            out[torch.tensor(targets, dtype=torch.long)] = self.groups.values(proto).float().cpu()
        return out, len(states)

    # -- checkpoints --------------------------------------------------------------------------------------------
    def save_checkpoint(self, run_dir: Path, iteration: int, loop_state: dict[str, Any], metrics_offset: int) -> Path:
        """verl's actor/critic checkpoint plus the loop's state, written to ``*.tmp`` and renamed into place."""
        root = run_dir / "checkpoints"
        final = root / f"verl_iter_{iteration:06d}"
        tmp = root / f"{final.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.groups.save(tmp, iteration)
        state = {"loop": loop_state, "metrics_offset": int(metrics_offset), "seed": int(self.cfg.seed)}
        (tmp / VERL_STATE_FILE).write_text(json.dumps(state, default=str), encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        keep = int(self.cfg.trainer.keep_checkpoints)
        for old in verl_checkpoint_dirs(run_dir)[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def load_latest_checkpoint(self, run_dir: Path) -> tuple[Path, dict[str, Any], int] | None:
        found = verl_checkpoint_dirs(run_dir)
        if not found:
            return None
        last = found[-1]
        state = json.loads((last / VERL_STATE_FILE).read_text(encoding="utf-8"))
        check_data_files(last)  # verl unpickles its shards in full: each is first read as data only
        self.groups.load(last)
        self.publish_weights()  # the rollout workers sample from the restored weights
        return last, state["loop"], int(state.get("metrics_offset", 0))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self.owns_ray:
            import ray

            ray.shutdown()
            self.owns_ray = False


class VerlTrainer(TrainingLoop):
    """The training loop on the ``verl`` backend (the plugin ``trainer.name: verl``)."""

    def __init__(self, config: Any, registry: Any, callbacks: list[Any] | None = None,
                 rows: dict[str, list[dict[str, Any]]] | None = None) -> None:
        super().__init__(config, registry, VerlBackend(config, registry), callbacks, rows)
