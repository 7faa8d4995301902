"""verl worker groups of the ``verl`` trainer: the FSDP actor, an optional frozen reference and an optional critic.

``VerlGroups(merged_config, n_gpus, device, ...)`` starts them on Ray (one resource pool each) and offers what one
iteration needs, each taking a padded ``DataProto`` built by ``data.step_rows_to_verl``:

* ``update_actor``: verl's own actor update (``ppo_loss``: the mapped policy loss, entropy, KL to ``ref_log_prob``);
* ``log_probs`` / ``ref_log_probs``: per-response-token log-probs of the actor / the reference (``[S, R]``);
* ``values``: the critic's value per step, read before the step's first action token (column 0 of verl's
  per-response-token values: the value head's output at the last prompt token). The critic gets its own rows: with
  ``critic.prefix`` each prompt starts with the row's privileged prefix ids (``batching.critic_view``), so column 0
  is still the state before the first action token, now read after the prefix; the actor never sees them;
* ``update_critic``: verl's clipped value loss with the critic's own optimizer, on one token per step (the
  response mask keeps only the first action token, so verl's ``token-mean`` is a mean over steps);
* ``sft_update``: cross-entropy on the response tokens with the actor's optimizer (the warm-start stage);
* ``train_layers > 0``: only the actor's top decoder blocks (and final norm) are trained, as with the local trainer;
* ``export_weights``: the actor's full weights as numpy arrays, gathered in memory (no disk round trip);
* ``start_reference``: (re)starts the reference from a model folder (the policy as RL starts, after SFT);
* ``save`` / ``load``: verl checkpoints of the actor and the critic.

This module imports verl at the top: only the ``verl`` trainer imports it, in verl's own environment.
"""

from __future__ import annotations

import re
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding


def response_nll_loss(config: Any, model_output: Any, data: Any, dp_group: Any = None) -> tuple[Any, dict]:
    """Token-mean negative log-likelihood of the response tokens (the SFT warm start), normalised like verl's
    ``ppo_loss`` (over the global mini-batch's tokens)."""
    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    mask = data.select("response_mask").to_padded_tensor()["response_mask"].to(log_prob.dtype)
    tokens = data["batch_num_tokens"]
    loss = -(log_prob * mask).sum() / tokens * data["dp_size"]
    return loss, {"sft_nll": float(loss.detach().item())}


class AgentR1ActorWorker(ActorRolloutRefWorker):
    """verl's actor worker plus two calls: the full weights in memory, and switching to the SFT loss."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def export_weights(self) -> dict[str, np.ndarray] | None:
        params, peft_config = self.actor.engine.get_per_tensor_param()
        if peft_config is not None:
            raise NotImplementedError("export_weights needs merged LoRA weights (actor_rollout_ref.model.lora.merge)")
        out = {}
        for name, tensor in params:  # every rank takes part in the gather; rank 0 keeps the result
            if self.rank == 0:
                out[name] = tensor.detach().to("cpu", torch.float32).numpy()
        return out if self.rank == 0 else None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def train_top_layers(self, top: int) -> int:
        """Train only the top ``top`` decoder blocks and the final norm, as the local trainer's ``train_layers``:
        the rest gets ``requires_grad=False`` (no gradient, so the optimizer and the grad clip skip it). Returns
        the number of trainable parameters on this rank."""
        module = self.actor.engine.module
        block = re.compile(r"(?:^|\.)layers\.(\d+)\.")
        ids = sorted({int(m.group(1)) for n, _ in module.named_parameters() if (m := block.search(n))})
        if not ids:
            raise ValueError("trainer.train_layers needs a model with decoder blocks named '...layers.<i>...'")
        keep = set(ids[-int(top):])
        trainable = 0
        for name, param in module.named_parameters():
            m = block.search(name)
            on = int(m.group(1)) in keep if m else name.split(".")[-2] == "norm"
            param.requires_grad_(on)
            trainable += param.numel() if on else 0
        return trainable

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def set_sft_mode(self, on: bool, lr: float = 0.0) -> None:
        engine = self.actor.engine
        sched = getattr(engine, "lr_scheduler", None)
        if on:
            self._agentr1_ppo_loss = self.actor.loss_fn
            self._agentr1_lrs = [g["lr"] for g in engine.optimizer.param_groups]
            self._agentr1_base_lrs = list(getattr(sched, "base_lrs", []))
            self.actor.set_loss_fn(partial(response_nll_loss, None))
            for g in engine.optimizer.param_groups:
                g["lr"] = lr
            if sched is not None and hasattr(sched, "base_lrs"):
                sched.base_lrs = [lr for _ in sched.base_lrs]
        else:
            self.actor.set_loss_fn(self._agentr1_ppo_loss)
            for g, value in zip(engine.optimizer.param_groups, self._agentr1_lrs):
                g["lr"] = value
            if sched is not None and self._agentr1_base_lrs:
                sched.base_lrs = list(self._agentr1_base_lrs)
            engine.optimizer.state.clear()  # fresh moments for RL, as the local trainer does


def _first_token_only(mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(mask)
    out[:, 0] = mask[:, 0]
    return out


class VerlGroups:
    def __init__(self, merged: Any, n_gpus: int, device: str, need_ref: bool, need_critic: bool,
                 train_layers: int = 0) -> None:
        import ray
        from omegaconf import OmegaConf

        self.merged, self.n_gpus, self.device = merged, int(n_gpus), device
        use_gpu = device != "cpu"

        def pool() -> RayResourcePool:
            return RayResourcePool([self.n_gpus], use_gpu=use_gpu, max_colocate_count=1)

        def group(cls: Any) -> RayWorkerGroup:
            return RayWorkerGroup(resource_pool=pool(), ray_cls_with_init=cls, device_name=device)

        self.actor = group(RayClassWithInitArgs(cls=ray.remote(AgentR1ActorWorker),
                                                config=merged.actor_rollout_ref, role="actor"))
        self.actor.init_model()
        self.trainable_params = None
        if int(train_layers) > 0:
            self.trainable_params = int(self.actor.train_top_layers(int(train_layers))[0])
        self._group = group
        self.ref = None
        if need_ref:
            self.start_reference(None)
        self.critic = None
        if need_critic:
            from verl.utils.config import omega_conf_to_dataclass
            from verl.workers.config import CriticConfig
            from verl.workers.engine_workers import TrainingWorkerConfig
            from verl.workers.utils.losses import value_loss

            critic_cfg: CriticConfig = omega_conf_to_dataclass(merged.critic)
            engine = critic_cfg.engine
            engine.infer_max_token_len_per_gpu = critic_cfg.ppo_infer_max_token_len_per_gpu
            engine.max_token_len_per_gpu = critic_cfg.ppo_max_token_len_per_gpu
            worker_cfg = TrainingWorkerConfig(model_type="value_model", model_config=critic_cfg.model,
                                              engine_config=engine, optimizer_config=critic_cfg.optim,
                                              checkpoint_config=critic_cfg.checkpoint)
            self.critic = group(RayClassWithInitArgs(cls=ray.remote(TrainingWorker), config=worker_cfg))
            self.critic.reset()
            self.critic.set_loss_fn(partial(value_loss, config=critic_cfg))
            self.critic_mini = int(OmegaConf.select(merged, "critic.ppo_mini_batch_size"))

    def start_reference(self, model_path: str | None) -> None:
        """(Re)start the frozen reference from ``model_path`` (a Hugging Face folder; None: the actor's model)."""
        import copy

        import ray

        cfg = self.merged.actor_rollout_ref
        if model_path is not None:
            cfg = copy.deepcopy(cfg)
            cfg.model.path = str(model_path)
        if self.ref is not None:
            for worker in self.ref.workers:
                ray.kill(worker)
        self.ref = self._group(RayClassWithInitArgs(cls=ray.remote(ActorRolloutRefWorker), config=cfg, role="ref"))
        self.ref.init_model()

    # -- helpers ------------------------------------------------------------------------------------------------
    def _padded(self, proto: Any) -> tuple[Any, int]:
        """``proto`` padded to a multiple of the ranks. verl pads by repeating real rows; here those copies carry no
        weight: their response mask is 0, so they add nothing to any loss, nor to its token count (verl normalises
        by the masked tokens of the global mini-batch), and the losses equal those of one rank."""
        from verl.protocol import pad_dataproto_to_divisor

        padded, pad = pad_dataproto_to_divisor(proto, self.n_gpus)
        if pad:
            mask = padded.batch["response_mask"].clone()
            mask[len(proto):] = 0
            padded.batch["response_mask"] = mask
        return padded, pad

    @staticmethod
    def _real_rows(mini: int, real: int, padded: int) -> float:
        """The real rows of a mini-batch of ``mini`` rows out of ``padded`` (``real`` of them not padding): what the
        sequence-mean losses divide by. Exact with one mini-batch; with several, padding rows fall into them at
        random (verl shuffles), so each divides by the average share."""
        return mini * real / padded if padded else float(mini)

    def _micro(self, rows: int) -> int:
        """The micro-batch size for a batch of ``rows`` over all ranks: the largest divisor of each rank's share
        that does not exceed ``trainer.micro_batch_size`` (verl needs each rank's rows to split evenly; step
        counts vary per rollout). The loss does not depend on it: verl normalises by the mini-batch's tokens."""
        per_rank = max(1, rows // self.n_gpus)
        cap = max(1, int(self.merged.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu))
        return max(d for d in range(1, min(per_rank, cap) + 1) if per_rank % d == 0)

    def _mini(self, rows: int, mini_batches: int) -> int:
        return max(self.n_gpus, (rows // max(1, mini_batches)) // self.n_gpus * self.n_gpus)

    def _infer(self, wg_call: Any, proto: Any, key: str, **meta: Any) -> torch.Tensor:
        padded, pad = self._padded(proto)
        td = left_right_2_no_padding(padded.to_tensordict())
        tu.assign_non_tensor(td, compute_loss=False, micro_batch_size_per_gpu=self._micro(len(padded)), **meta)
        out = wg_call(td)
        out = out.get() if hasattr(out, "get") and not isinstance(out, dict) and not hasattr(out, "keys") else out
        values = no_padding_2_padding(tu.get(out, key), td).float()
        return values[: len(proto)]

    # -- actor --------------------------------------------------------------------------------------------------
    def update_actor(self, proto: Any, mini_batches: int, epochs: int, seed: int) -> dict[str, Any]:
        actor = self.merged.actor_rollout_ref.actor
        padded, _ = self._padded(proto)
        td = left_right_2_no_padding(padded.to_tensordict())
        mini = self._mini(len(padded), mini_batches)
        tu.assign_non_tensor(td, calculate_entropy=float(actor.entropy_coeff) != 0.0, distillation_use_topk=False,
                             micro_batch_size_per_gpu=self._micro(mini),
                             distillation_only=False, global_batch_size=self._real_rows(mini, len(proto), len(padded)),
                             mini_batch_size=mini,
                             epochs=int(epochs), seed=int(seed), dataloader_kwargs={"shuffle": True},
                             compute_loss=True)
        return _metrics(self.actor.update_actor(td))

    def log_probs(self, proto: Any) -> torch.Tensor:
        return self._infer(self.actor.compute_log_prob, proto, "log_probs", calculate_entropy=False)

    def ref_log_probs(self, proto: Any) -> torch.Tensor:
        return self._infer(self.ref.compute_ref_log_prob, proto, "log_probs", calculate_entropy=False)

    def sft_update(self, proto: Any, lr: float, epochs: int, batch_size: int, seed: int) -> dict[str, Any]:
        self.actor.set_sft_mode(True, float(lr))
        try:
            padded, _ = self._padded(proto)
            td = left_right_2_no_padding(padded.to_tensordict())
            mini = max(self.n_gpus, min(len(padded), int(batch_size)) // self.n_gpus * self.n_gpus)
            tu.assign_non_tensor(td, calculate_entropy=False, distillation_use_topk=False, distillation_only=False,
                                 micro_batch_size_per_gpu=self._micro(mini),
                                 global_batch_size=mini, mini_batch_size=mini, epochs=int(epochs), seed=int(seed),
                                 dataloader_kwargs={"shuffle": True}, compute_loss=True)
            return _metrics(self.actor.update_actor(td))
        finally:
            self.actor.set_sft_mode(False)

    def export_weights(self) -> dict[str, np.ndarray]:
        return next(r for r in self.actor.export_weights() if r is not None)

    # -- critic -------------------------------------------------------------------------------------------------
    def values(self, proto: Any) -> torch.Tensor:
        """``[S]``: the critic's value before each step's first action token."""
        return self._infer(self.critic.infer_batch, proto, "values")[:, 0]

    def update_critic(self, proto: Any, values: torch.Tensor, returns: torch.Tensor, epochs: int,
                      seed: int) -> dict[str, Any]:
        """One clipped value-loss update on ``returns`` (``[S]``), with ``values`` (``[S]``) as the old values."""
        batch = proto.batch
        width = batch["response_mask"].shape[1]
        batch["response_mask"] = _first_token_only(batch["response_mask"])
        batch["values"] = values.float().unsqueeze(1).expand(-1, width).contiguous()
        batch["returns"] = returns.float().unsqueeze(1).expand(-1, width).contiguous()
        padded, _ = self._padded(proto)
        td = left_right_2_no_padding(padded.to_tensordict())
        mini = self._mini(len(padded), max(1, len(padded) // max(1, self.critic_mini)))
        tu.assign_non_tensor(td, global_batch_size=mini, mini_batch_size=mini, epochs=int(epochs), seed=int(seed),
                             micro_batch_size_per_gpu=self._micro(mini),
                             dataloader_kwargs={"shuffle": True})
        return _metrics(self.critic.train_mini_batch(td))

    # -- checkpoints --------------------------------------------------------------------------------------------
    def save(self, folder: Path, step: int) -> None:
        self.actor.save_checkpoint(str(folder / "actor"), global_step=step, max_ckpt_to_keep=None)
        if self.critic is not None:
            self.critic.save_checkpoint(str(folder / "critic"), global_step=step, max_ckpt_to_keep=None)

    def load(self, folder: Path) -> None:
        self.actor.load_checkpoint(str(folder / "actor"))
        if self.critic is not None:
            self.critic.load_checkpoint(str(folder / "critic"))


def _metrics(output: Any) -> dict[str, Any]:
    """The worker's metrics as plain numbers, or lists of them (one per micro-batch, in order)."""
    if hasattr(output, "get") and not hasattr(output, "keys"):
        output = output.get()
    raw = dict(tu.get(output, "metrics") or {})
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
            out[key] = [float(v) for v in value]
        elif isinstance(value, (int, float)):
            out[key] = value
    return out


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - t0
