"""The ``verl`` trainer: rollouts on Ray rollout workers (usually the ``vllm`` engine), the policy update on verl's
FSDP actor workers (``verl.workers.engine_workers.ActorRolloutRefWorker`` with role ``actor``).

Per iteration: rollouts through ``RolloutPool`` -> step rows -> this project's algorithm computes the step-level
advantages on the driver (CPU) -> ``verl_data.step_rows_to_verl`` -> ``DataProto`` -> ``update_actor`` on the worker
group -> the actor's weights are saved as a Hugging Face folder and published to the rollout workers through the
object store. Validation and metrics follow the local trainer's record format (``iteration``, rollout metrics,
``adv/*``, the actor's own metrics prefixed ``verl/``).

Scope and status: the GPU path has a one-command smoke test (``bench/gpu_smoke.sh``) but was not run on the machine
this was written on (no GPU, and verl 0.9 pins transformers < 5.11 while the core runs 5.24). The weight path goes
through a Hugging Face checkpoint on local disk (simple, correct, slower than verl's NCCL checkpoint engine); critics
(StepPO/PPO) are mapped in ``verl_config`` but the critic worker group is not wired here: algorithms that need a
critic are refused with a clear error. Needs ``agentr1-core[verl]`` and at least one GPU.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from agentr1_core.distributed.settings import ClusterSettings


def verl_default_config() -> Any:
    """verl's packaged ``ppo_trainer`` config (Hydra compose of its YAML tree)."""
    import verl
    from hydra import compose, initialize_config_dir

    folder = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        return compose(config_name="ppo_trainer")


class VerlTrainer:
    def __init__(self, config: Any, registry: Any, callbacks: list[Any] | None = None) -> None:
        self.cfg = config
        self.registry = registry
        params = dict(OmegaConf.to_container(config.trainer.params, resolve=True) or {})
        self.verl_overrides = params.pop("verl", {}) or {}
        self.n_gpus = int(params.pop("n_gpus", 1))
        self.settings = ClusterSettings.from_params(params)
        spec = registry.get("algorithm", str(config.algorithm.name))
        if getattr(spec, "needs_critic", False):
            raise ValueError(f"trainer 'verl' does not run a critic yet; algorithm {config.algorithm.name!r} needs one "
                             "(use grpo, rloo, reinforce_pp, drgrpo or gigpo, or trainer 'ray')")

    def _build_actor(self, vcfg: dict[str, Any]) -> Any:
        import ray
        from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
        from verl.workers.engine_workers import ActorRolloutRefWorker

        full = verl_default_config()
        merged = OmegaConf.merge(full, OmegaConf.create(vcfg), OmegaConf.create(self.verl_overrides))
        pool = RayResourcePool([self.n_gpus], use_gpu=True, max_colocate_count=1)
        cls = RayClassWithInitArgs(cls=ray.remote(ActorRolloutRefWorker), config=merged.actor_rollout_ref,
                                   role="actor")
        group = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=cls)
        group.init_model()
        return group, merged

    def _update(self, group: Any, merged: Any, proto: Any) -> dict[str, Any]:
        """One actor update, the way verl 0.9's own PPO loop calls it: padded DataProto -> no-padding TensorDict."""
        from verl.protocol import pad_dataproto_to_divisor
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import left_right_2_no_padding

        proto, _ = pad_dataproto_to_divisor(proto, self.n_gpus)  # padding rows repeat real ones
        actor = merged.actor_rollout_ref.actor
        td = left_right_2_no_padding(proto.to_tensordict())
        rows = len(proto)
        mini = max(self.n_gpus, (rows // max(1, int(self.cfg.trainer.mini_batches))) // self.n_gpus * self.n_gpus)
        tu.assign_non_tensor(td, calculate_entropy=float(actor.entropy_coeff) != 0.0, distillation_use_topk=False,
                             distillation_only=False, global_batch_size=mini, mini_batch_size=mini,
                             epochs=int(actor.ppo_epochs), seed=int(self.cfg.seed),
                             dataloader_kwargs={"shuffle": True}, compute_loss=True)
        out = group.update_actor(td)
        return dict(tu.get(out, "metrics") or {})

    def fit(self) -> dict[str, Any]:
        import ray

        from agentr1_core.config import component
        from agentr1_core.distributed.pool import RolloutPool
        from agentr1_core.distributed.ray_trainer import run_name_for
        from agentr1_core.distributed.settings import init_ray
        from agentr1_core.distributed.verl_data import step_rows_to_verl, to_dataproto, verl_config
        from agentr1_core.models import load_model_and_tokenizer
        from agentr1_core.trainers.batching import build_step_batch, trajectories_to_rows
        from agentr1_core.trainers.metrics import MetricsWriter, console_line, rollout_metrics, validation_metrics
        from agentr1_core.rollout.base import SamplingParams

        cfg = self.cfg
        owns = init_ray(self.settings)
        run_dir = Path(str(cfg.run_dir))
        run_dir.mkdir(parents=True, exist_ok=True)
        writer = MetricsWriter(run_dir)
        name, aparams = component(cfg, "algorithm")
        algorithm = self.registry.build("algorithm", name, aparams, where="algorithm")
        _, tokenizer = load_model_and_tokenizer(str(cfg.model.path), dtype="float32", device="cpu")
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        container = OmegaConf.to_container(cfg, resolve=True)
        pool = RolloutPool(container, self.settings, run_name_for(str(cfg.run_dir)))
        group, merged = self._build_actor(verl_config(cfg, aparams, False, n_gpus=self.n_gpus))
        dname, dparams = component(cfg, "data.train")
        rows_all = list(self.registry.build("dataset", dname, dparams, where="data.train"))
        ro = cfg.rollout
        sampling = SamplingParams(temperature=float(ro.temperature), top_p=float(ro.top_p), top_k=int(ro.top_k),
                                  max_new_tokens=int(ro.max_new_tokens), stop=list(ro.stop))
        history: dict[str, Any] = {"iterations": 0}
        start = time.perf_counter()
        try:
            for it in range(1, int(cfg.trainer.total_steps) + 1):
                t0 = time.perf_counter()
                lo = ((it - 1) * int(ro.batch_size)) % len(rows_all)
                rows = [rows_all[(lo + i) % len(rows_all)] for i in range(int(ro.batch_size))]
                trajs = pool.run(rows, int(ro.n), sampling, prefix=f"it{it}-", desc=f"rollout {it}")
                seconds = time.perf_counter() - t0
                metrics: dict[str, Any] = {"iteration": it, **rollout_metrics(trajs, seconds)}
                steps = trajectories_to_rows(trajs)
                metrics["train_steps"] = len(steps.rows)
                if steps.rows:
                    batch = build_step_batch(steps.rows)
                    adv = algorithm.compute_advantages(batch)
                    metrics.update({f"adv/{k}": v for k, v in adv.metrics.items()})
                    layout = step_rows_to_verl(
                        steps.rows, adv.advantages, adv.returns, pad_id, steps.group_keys, steps.traj_uids,
                        meta={"temperature": float(ro.temperature), "epochs": int(cfg.trainer.update_epochs),
                              "mini_batch_size": merged.actor_rollout_ref.actor.ppo_mini_batch_size,
                              "seed": int(cfg.seed) + it})
                    t_upd = time.perf_counter()
                    got = self._update(group, merged, to_dataproto(layout))
                    metrics["update_seconds"] = time.perf_counter() - t_upd
                    metrics.update({f"verl/{k}": (sum(v) / len(v) if isinstance(v, list) and v else v)
                                    for k, v in got.items() if isinstance(v, (int, float, list))})
                    ckpt = run_dir / "verl_weights"
                    group.save_checkpoint(str(ckpt), global_step=it, max_ckpt_to_keep=1)
                    pool.publish(_read_hf_state(ckpt))
                metrics.update(pool.take_stats())
                metrics["iteration_seconds"] = time.perf_counter() - t0
                writer.write(metrics)
                print(console_line(metrics, int(cfg.trainer.total_steps)), flush=True)
                history["iterations"] = it
            if OmegaConf.select(cfg, "data.val") is not None:
                vname, vparams = component(cfg, "data.val")
                vrows = list(self.registry.build("dataset", vname, vparams, where="data.val"))
                vrows = vrows[: int(cfg.validation.max_rows) or None]
                vs = SamplingParams(temperature=float(cfg.validation.temperature),
                                    max_new_tokens=int(ro.max_new_tokens), stop=list(ro.stop))
                result = validation_metrics(pool.run(vrows, int(cfg.validation.n), vs, prefix="val-",
                                                     desc="validate"))
                writer.write({"event": "validation", "label": "after_rl", **result})
                history["validation"] = {"after_rl": result}
        finally:
            pool.close()
            if owns:
                ray.shutdown()
        history["wall_seconds"] = time.perf_counter() - start
        return history


def _read_hf_state(folder: Path) -> dict[str, Any]:
    """The newest ``*.safetensors`` weights under ``folder`` as numpy arrays (what ``RolloutPool.publish`` takes)."""
    from safetensors.torch import load_file

    files = sorted(folder.rglob("*.safetensors"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"no Hugging Face weights were saved under {folder} "
                                "(set actor.checkpoint.save_contents to include hf_model)")
    newest = files[-1].parent
    state: dict[str, Any] = {}
    for f in newest.glob("*.safetensors"):
        state.update({k: v.float().numpy() for k, v in load_file(str(f)).items()})  # bf16 has no numpy dtype
    return state
