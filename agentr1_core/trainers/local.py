"""The ``local`` backend: one process, CPU or one GPU, a ``transformers`` model; and ``LocalTrainer``, the training
loop (``trainers.loop``) running on it (plugin name ``local``).

``LocalBackend.build`` loads the model and tokenizer, builds the engine (sharing the module, so optimizer updates
are seen by the next generation) and the flow factory. ``sft_update`` is cross-entropy on the response tokens of
expert steps at ``sft.lr``; ``rl_update`` scores the batch (old, reference and critic values), lets the algorithm
compute advantages and runs the policy (+ critic) update of ``trainers.update``.

Options: LoRA through ``peft`` (``model.lora.enabled``), training only the top ``trainer.train_layers`` blocks, a
frozen reference for the KL term (``trainer.ref_model`` or an algorithm with ``kl_coef > 0``): the policy as it was
when RL started, or the model ``trainer.ref_model`` names. Algorithms that need a critic get a value head on the
policy trunk, or a separate critic model (``critic.model``); episodes cut before ``done`` are bootstrapped with the
critic's value of the next observation. With ``critic.prefix`` the critic reads every step after the row's privileged
prefix (``algorithms.critic_prefix``), in a pass of its own; the actor's passes never see it. Old log-probs are
recomputed with the trainer's weights (``trainer.recompute_old_logprobs``) when one rollout feeds several optimizer
steps or the engine does not run the trainer's own module; the engine-vs-trainer log-prob gap is logged every
iteration. Sampled generations are seeded per (run seed, episode uid, call), so a resumed run samples what the
uninterrupted run would have sampled.

Checkpoints are ``lifecycle.trainer_state``'s: the model folder plus optimizer, scheduler, RNG and the loop's state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from agentr1_core.algorithms.critic_prefix import critic_prefixes
from agentr1_core.components import build_reward_fn
from agentr1_core.config import ConfigError, component
from agentr1_core import tool_sources
from agentr1_core.flows import FlowContext
from agentr1_core.rollout.driver import current_episode_uid, rollout_async
from agentr1_core.trainers import roles
from agentr1_core.trainers.backend import RunInputs
from agentr1_core.trainers.batching import build_step_batch
from agentr1_core.trainers.loop import TrainingLoop
from agentr1_core.trainers.optimizer_steps import make_optimizer
from agentr1_core.trainers.seeding import EpisodeSeededEngine
from agentr1_core.trainers.update import (
    Policy, UpdateSettings, off_policy_correction, policy_update, score_batch, sft_update,
)


def enable_activation_checkpointing(model: Any) -> None:
    """Recompute every decoder block's activations in the backward pass (non-reentrant checkpoints: frozen blocks
    and LoRA need no input gradients). transformers 5 calls it ``activation_checkpointing_enable``."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def decoder_layers(model: Any) -> Any:
    """The list of transformer blocks of a causal LM (``model.model.layers`` for Llama-like models)."""
    base = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if layers is None:
        raise ValueError("trainer.train_layers needs a model with decoder blocks at model.model.layers")
    return layers


def freeze_below_top(model: Any, top: int) -> None:
    """Train only the top ``top`` blocks (+ final norm): embeddings and lower blocks get ``requires_grad=False``,
    so backpropagation stops at the lowest trained block."""
    layers = decoder_layers(model)
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in list(layers)[-top:]:
        for p in layer.parameters():
            p.requires_grad_(True)
    norm = getattr(model.get_decoder(), "norm", None) if hasattr(model, "get_decoder") else None
    if norm is not None:
        for p in norm.parameters():
            p.requires_grad_(True)


class LocalBackend:
    """Models, engine and updates in this process (see the module docstring)."""

    #: the rollouts come from this process's engine running the policy module (a subclass that generates elsewhere,
    #: e.g. on Ray workers, sets False so that ``auto`` recomputes the old log-probs)
    rollouts_run_policy_module = True

    def __init__(self, config: Any, registry: Any) -> None:
        self.cfg = config
        self.registry = registry
        self.device = "cpu"  # resolved from model.device in build
        self.engine: Any = None
        self.critic_prefix: Any = None  # algorithms.critic_prefix.CriticPrefixes when critic.prefix is set
        self.loop: asyncio.AbstractEventLoop | None = None
        self._threads_before: int | None = None
        self._closed = False

    # -- build ------------------------------------------------------------------------------------------------------
    def build(self, run: RunInputs) -> str:
        cfg = self.cfg
        roles.check_recompute_mode(cfg.trainer.recompute_old_logprobs)  # bad input fails before the model loads
        off_policy_correction(cfg)
        if self.needs_proximal and roles.check_recompute_mode(cfg.trainer.recompute_old_logprobs) == "false":
            raise ConfigError("config error at trainer.recompute_old_logprobs: off_policy_correction=decoupled "
                              "recomputes the old log-probs; set it to auto or true")
        if int(cfg.trainer.threads) > 0:  # process-wide in torch: ``close`` gives the caller's count back
            self._threads_before = torch.get_num_threads()
            torch.set_num_threads(int(cfg.trainer.threads))
        self.algorithm = run.algorithm
        self.loop = asyncio.new_event_loop()
        self.env_config = OmegaConf.to_container(cfg.env, resolve=True)
        self.flow_name, self.flow_params = component(cfg, "agent_flow")
        self.reward_fn = build_reward_fn(cfg, self.registry)
        self.start_tool_sources()
        self._build_model()
        # critic.prefix: every training row's privileged prefix for the critic, tokenised once (and recorded)
        self.critic_prefix = critic_prefixes(cfg, self.algorithm, run.train_rows, self.tokenizer)
        prefix_line = ""
        if self.critic_prefix is not None:
            self.critic_prefix.record(run.run_dir)
            prefix_line = f"; {self.critic_prefix.line()}"
        return (f"model {cfg.model.path} on {self.device} ({self.trainable_params / 1e6:.2f}M trainable params, "
                f"loaded in {self.model_load_seconds:.1f}s){prefix_line}")

    def _build_model(self) -> None:
        from agentr1_core.models import load_model_and_tokenizer

        cfg, tr = self.cfg, self.cfg.trainer
        self.device = resolve_device(str(cfg.model.device))
        t0 = time.perf_counter()
        model, tokenizer = load_model_and_tokenizer(str(cfg.model.path), dtype=str(cfg.model.dtype), device=self.device)
        self.model_load_seconds = time.perf_counter() - t0
        self.tokenizer = tokenizer
        self.ref_mode = roles.reference_mode(tr.ref_model, bool(getattr(self.algorithm, "needs_reference", False)))
        ref_model, ref_context = None, None
        if self.ref_mode is not None and self.ref_mode != "policy":
            ref_model = roles.load_reference(self.ref_mode, tokenizer, str(cfg.model.dtype), self.device)
        if cfg.model.lora.enabled:
            from peft import LoraConfig, get_peft_model

            lcfg = cfg.model.lora
            layers = None
            if int(tr.train_layers) > 0:
                n = len(decoder_layers(model))
                layers = list(range(max(0, n - int(tr.train_layers)), n))
            peft_cfg = LoraConfig(r=int(lcfg.r), lora_alpha=int(lcfg.alpha), lora_dropout=float(lcfg.dropout),
                                  target_modules=list(lcfg.target_modules), layers_to_transform=layers,
                                  task_type="CAUSAL_LM")
            policy_model = get_peft_model(model, peft_cfg)
            engine_model = policy_model.get_base_model()  # LoRA layers are injected in place
            if self.ref_mode == "policy":
                ref_context = policy_model.disable_adapter  # untrained adapters: base = policy; replaced after SFT
        else:
            if int(tr.train_layers) > 0:
                freeze_below_top(model, int(tr.train_layers))
            policy_model = engine_model = model
            # self.ref_mode == "policy": a frozen copy is taken when RL starts (start_rl), i.e. after SFT
        value_head, critic = None, None
        critic_lr = float(cfg.critic.lr if cfg.critic.lr is not None else tr.critic_lr)  # a separate critic model
        head_lr = float(cfg.critic.head_lr if cfg.critic.head_lr is not None else tr.critic_lr)  # a head on the trunk
        if self.algorithm.needs_critic and cfg.critic.model:
            critic = roles.build_separate_critic(str(cfg.critic.model), tokenizer, str(cfg.model.dtype), self.device,
                                                 critic_lr, list(tr.betas), float(tr.max_grad_norm),
                                                 kernel=str(tr.optimizer_kernel))
        elif self.algorithm.needs_critic:
            value_head = roles.zero_value_head(model.config.hidden_size, self.device)
        trainable = [p for p in policy_model.parameters() if p.requires_grad]
        groups = [{"params": trainable, "lr": float(tr.lr)}]
        if value_head is not None:
            groups.append({"params": list(value_head.parameters()), "lr": head_lr})
        self.optimizer = make_optimizer(groups, lr=float(tr.lr), betas=list(tr.betas),
                                        weight_decay=float(tr.weight_decay), device=self.device,
                                        kernel=str(tr.optimizer_kernel))
        warmup = int(tr.warmup_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if bool(tr.activation_checkpointing):  # only while training: the engine and scoring run in eval mode
            enable_activation_checkpointing(policy_model)
        self.policy = Policy(model=policy_model, pad_id=int(pad_id), device=self.device, value_head=value_head,
                             ref_model=ref_model, ref_context=ref_context, critic=critic,
                             share_prefix=int(tr.share_prefix), micro_batch_tokens=int(tr.micro_batch_tokens),
                             onednn_linears=bool(tr.onednn_linears),
                             activation_checkpointing=bool(tr.activation_checkpointing),
                             params=trainable + (list(value_head.parameters()) if value_head is not None else []))
        self.policy.model.eval()
        # the module the engine would run to sample the policy's own weights; with rollouts ahead of the update the
        # engine runs a copy of it (frozen blocks shared) that takes new weights only between two rollouts
        self.policy_engine_module = engine_model
        if int(tr.max_staleness) > 0 and self.rollouts_run_policy_module:
            engine_model = roles.shared_frozen_copy(engine_model).eval()
        name, params = component(cfg, "engine")
        spec_params = self.registry.get("engine", name).parameters()
        if "device" in spec_params and "device" not in params:
            params["device"] = self.device
        if "seed" in spec_params and "seed" not in params:
            params["seed"] = int(cfg.seed)
        self.engine = self.registry.build("engine", name, params, where="engine", model=engine_model,
                                          tokenizer=tokenizer)
        self.trainable_params = sum(p.numel() for p in trainable)
        self.engine_model = engine_model
        self.sft_optimizer_mb = 0.0  # the optimizer's state at the end of SFT (cleared for RL), until measured
        # Algorithms that judge the policy's tokens with another model (a distillation teacher) check the policy's
        # tokenizer here, at startup, before any rollout.
        bind_policy = getattr(self.algorithm, "bind_policy", None)
        if callable(bind_policy):
            bind_policy(model_name=str(cfg.model.path), tokenizer=tokenizer, device=self.device)

    # -- rollouts ---------------------------------------------------------------------------------------------------
    def make_flow_factory(self, sampling: Any, policy: str = "model"):
        ctx = FlowContext(engine=self.engine, tokenizer=self.tokenizer, sampling=sampling,
                          env_config=dict(self.env_config), reward_fn=self.reward_fn,
                          max_turns=int(self.cfg.rollout.max_turns),
                          max_prompt_tokens=int(self.cfg.rollout.max_prompt_tokens), policy=policy)
        fallback = iter(range(1 << 62))

        def make_flow() -> Any:
            # the episode's uid carries the rollout prefix (e.g. the iteration): a seed per (run, episode, call)
            key = f"{int(self.cfg.seed)}/{current_episode_uid() or f'episode-{next(fallback)}'}"
            episode_ctx = dataclasses.replace(ctx, engine=EpisodeSeededEngine(self.engine, key))
            return self.registry.build("agent_flow", self.flow_name, self.flow_params, where="agent_flow",
                                       ctx=episode_ctx)

        return make_flow

    def rollout(self, rows: list[dict[str, Any]], n: int, sampling: Any, *, policy: str = "model",
                desc: str = "rollout", prefix: str = "", greedy_baseline: bool = False) -> list[Any]:
        self.policy.model.eval()
        return self.loop.run_until_complete(rollout_async(
            rows, n, self.make_flow_factory(sampling, policy), group_prefix=prefix, desc=desc,
            greedy_baseline=greedy_baseline))

    def take_stats(self) -> dict[str, Any]:
        take = getattr(self.engine, "take_prefix_stats", None)
        return take() if callable(take) else {}

    # -- updates ----------------------------------------------------------------------------------------------------
    def sft_update(self, steps: Any) -> dict[str, Any]:
        sft = self.cfg.sft
        scheduled = [group["lr"] for group in self.optimizer.param_groups]  # RL's rates, warm-up factor included
        for group in self.optimizer.param_groups[:1]:
            group["lr"] = float(sft.lr)
        gen = torch.Generator().manual_seed(int(self.cfg.seed))
        metrics = sft_update(self.policy, self.optimizer, steps.rows, epochs=int(sft.epochs),
                             batch_size=int(sft.batch_size), micro_batch_size=int(self.cfg.trainer.micro_batch_size),
                             max_grad_norm=float(self.cfg.trainer.max_grad_norm), generator=gen)
        for group, lr in zip(self.optimizer.param_groups, scheduled):
            group["lr"] = lr  # where the scheduler left them: RL's first step gets its first warm-up factor
        from agentr1_core.memory import optimizer_mb

        self.sft_optimizer_mb = optimizer_mb(self.optimizer)  # for the account of the SFT phase
        self.optimizer.state.clear()  # fresh moments for RL
        return metrics

    @property
    def recompute_old(self) -> bool:
        """``trainer.recompute_old_logprobs`` resolved: ``auto`` recomputes when one rollout feeds several optimizer
        steps or the rollouts do not come from this process's engine running the policy module."""
        tr = self.cfg.trainer
        several_steps = int(tr.update_epochs) > 1 or int(tr.mini_batches) > 1
        correction = off_policy_correction(self.cfg)
        if correction is not None and correction.mode == "tis" and str(tr.recompute_old_logprobs) == "auto":
            return several_steps  # truncated IS weighs against the engine's own log-probs: nothing to recompute
        return roles.recompute_old_logprobs(tr.recompute_old_logprobs, several_steps,
                                            self.engine if self.rollouts_run_policy_module else None,
                                            self.policy_engine_module, needs_proximal=self.needs_proximal)

    @property
    def needs_proximal(self) -> bool:
        """The decoupled correction takes its ratio to the weights at the start of the update (recomputed)."""
        correction = off_policy_correction(self.cfg)
        return correction is not None and correction.mode == "decoupled"

    def start_rl(self, after_sft: bool) -> None:
        """The KL reference is the policy as RL starts: copy it now unless a reference already exists (a named
        model, a restored copy) or the LoRA base still equals the policy (no adapter training yet)."""
        if self.ref_mode != "policy" or self.policy.ref_model is not None:
            return
        if self.policy.ref_context is not None and not after_sft:
            return
        self.policy.ref_model = roles.frozen_copy(self.policy.model)
        self.policy.ref_context = None

    def rl_update(self, steps: Any, trajectories: list[Any], iteration: int) -> dict[str, Any]:
        cfg, tr = self.cfg, self.cfg.trainer
        batch = build_step_batch(steps.rows)
        need_ref = self.policy.ref_model is not None or self.policy.ref_context is not None
        metrics: dict[str, Any] = {}
        if self.critic_prefix is not None:  # the critic reads each row after its privileged prefix
            metrics.update(self.critic_prefix.attach(steps.rows, trajectories))
        metrics.update(score_batch(self.policy, steps.rows, batch, int(tr.micro_batch_size),
                                   float(cfg.rollout.temperature), self.recompute_old, need_ref,
                                   self.policy.has_critic))
        if self.policy.has_critic and batch.values is not None:
            boot, from_obs = roles.bootstrap_values(self.policy, trajectories, steps.rows, batch.values,
                                                    self.tokenizer, int(tr.micro_batch_size))
            batch.extras["bootstrap_values"] = boot
            metrics["bootstrapped_steps"] = from_obs
        metrics.update(self.algorithm.prepare_batch(batch, steps.rows, trajectories) or {})
        adv = self.algorithm.compute_advantages(batch)
        metrics.update({f"adv/{k}": v for k, v in adv.metrics.items()})
        gen = torch.Generator().manual_seed(int(cfg.seed) * 100003 + iteration)
        metrics.update(policy_update(self.policy, self.algorithm, self.optimizer, steps.rows, batch, adv.advantages,
                                     adv.returns, UpdateSettings.from_config(cfg), self.scheduler, gen))
        return metrics

    def snapshot_weights(self) -> dict[str, torch.Tensor]:
        """A copy of the trained weights, named as in the module the engine runs (for ``publish_weights``)."""
        return {n: p.detach().clone() for n, p in self.policy_engine_module.named_parameters() if p.requires_grad}

    def start_tool_sources(self) -> None:
        """Start the tool sources ``env.tools`` names (``mcp:calc``) here, where the episodes run."""
        tool_sources.start_referenced(self.cfg, self.registry)

    def take_snapshot_metrics(self) -> dict[str, Any]:
        return {}  # a snapshot is a copy in this process: nothing measured beside its time

    def release_optimizer_state(self) -> None:
        """Free the optimizers' moments once training is over and saved (the last validation does not need them)."""
        from agentr1_core.memory import trim

        self.optimizer.state.clear()
        if self.policy.critic is not None:
            self.policy.critic.optimizer.state.clear()
        trim()

    def publish_weights(self, snapshot: dict[str, Any] | None = None) -> dict[str, Any]:
        """Make the engine sample the trainer's weights: it runs the policy's own module (nothing to copy) or, with
        rollouts ahead of the update, its own copy, which takes ``snapshot`` in place. Either way the change is
        announced (``sync_weights``): the engine's prefix cache belongs to one weight version, and an in-place
        update does not always show (AdamW's fused kernel leaves the parameters' version counters alone)."""
        t0 = time.perf_counter()
        if self.engine_model is not self.policy_engine_module:
            snapshot = snapshot if snapshot is not None else self.snapshot_weights()
            params = dict(self.engine_model.named_parameters())
            with torch.no_grad():
                for n, value in snapshot.items():
                    params[n].copy_(value)
        self.engine.sync_weights()
        return {"publish_seconds": time.perf_counter() - t0}

    def memory_parts(self) -> dict[str, float]:
        """MiB of what this backend holds, measured on its tensors: the policy's weights (the engine shares them),
        a separate reference, the critic with its optimizer, the optimizer's state, the gradients an update
        allocates (one per trainable parameter, freed after each step), the activations the largest micro-batch of
        the passes since the last call saved for its backward (``update.SavedActivations``), the engine's KV buffers
        at their peak since the last call and its prefix cache; plus the algorithm's own (``memory_parts()`` of a
        distillation teacher, for instance)."""
        from agentr1_core.memory import module_mb, optimizer_mb, tensor_mb

        policy = self.policy
        parts = {"weights": module_mb(policy.model) + module_mb(policy.value_head),
                 "optimizer": optimizer_mb(self.optimizer),
                 "gradients": tensor_mb(policy.params)}
        if self.sft_optimizer_mb:  # the moments SFT held until it ended
            parts["optimizer"] = max(parts["optimizer"], self.sft_optimizer_mb)
            self.sft_optimizer_mb = 0.0
        if policy.activations_peak_mb:
            parts["activations"] = policy.activations_peak_mb
            policy.activations_peak_mb = 0.0
        if policy.ref_model is not None:  # only what it does not share with the policy
            parts["reference"] = tensor_mb(roles.own_parameters(policy.ref_model, policy.model))
        if self.engine_model is not self.policy_engine_module:
            parts["engine_weights"] = tensor_mb(roles.own_parameters(self.engine_model, self.policy_engine_module))
        if policy.critic is not None:
            critic = policy.critic
            parts["critic"] = module_mb(critic.model) + module_mb(critic.head) + optimizer_mb(critic.optimizer)
            parts["gradients"] += tensor_mb(critic.params)
        engine_parts = getattr(self.engine, "take_memory_stats", None)
        if callable(engine_parts):
            parts.update(engine_parts())
        algorithm_parts = getattr(self.algorithm, "memory_parts", None)
        if callable(algorithm_parts):
            parts.update(algorithm_parts())
        return parts

    # -- state ------------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        trainable = {n: p.detach().clone() for n, p in self.policy.model.named_parameters() if p.requires_grad}
        return {
            "model": trainable,
            "value_head": self.policy.value_head.state_dict() if self.policy.value_head is not None else None,
            "critic": self._critic_state(),
            "reference": ({n: p.detach().clone() for n, p in self.policy.ref_model.named_parameters() if n in trainable}
                          if self.ref_mode == "policy" and self.policy.ref_model is not None else None),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": {"torch": torch.get_rng_state()},
        }

    def _critic_state(self) -> dict[str, Any] | None:
        critic = self.policy.critic
        if critic is None:
            return None
        return {"model": critic.model.state_dict(), "head": critic.head.state_dict(),
                "optimizer": critic.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        params = dict(self.policy.model.named_parameters())
        weights = state.get("model") or {}  # absent in checkpoints: their weights are the model/ folder
        missing = [n for n in weights if n not in params]
        if missing:
            raise KeyError(f"checkpoint has parameters the model lacks: {missing[:3]}")
        with torch.no_grad():
            for n, value in weights.items():
                params[n].copy_(value)
        if state.get("value_head") is not None and self.policy.value_head is not None:
            self.policy.value_head.load_state_dict(state["value_head"])
        if state.get("critic") is not None and self.policy.critic is not None:
            critic = self.policy.critic
            critic.model.load_state_dict(state["critic"]["model"])
            critic.head.load_state_dict(state["critic"]["head"])
            critic.optimizer.load_state_dict(state["critic"]["optimizer"])
        if state.get("reference") is not None and self.ref_mode == "policy":
            self.policy.ref_model = roles.frozen_copy(self.policy.model)  # frozen weights are the policy's
            self.policy.ref_context = None
            ref_params = dict(self.policy.ref_model.named_parameters())
            with torch.no_grad():
                for n, value in state["reference"].items():
                    ref_params[n].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"]["torch"])
        LocalBackend.publish_weights(self)  # this process's engine samples the restored weights

    def save_checkpoint(self, run_dir: Path, iteration: int, loop_state: dict[str, Any], metrics_offset: int) -> Path:
        from agentr1_core.lifecycle.trainer_state import save_trainer_checkpoint

        return save_trainer_checkpoint(self, run_dir, iteration, loop_state, metrics_offset)

    def load_latest_checkpoint(self, run_dir: Path) -> tuple[Path, dict[str, Any], int] | None:
        from agentr1_core.lifecycle.trainer_state import resume_latest

        return resume_latest(self, run_dir)

    def close(self) -> None:
        tool_sources.close_all()  # the servers of the tool sources this process started
        if self.engine is not None and not self._closed:
            self.engine.close()  # kept as an attribute: what it counted stays readable after the run
        self._closed = True
        if self.loop is not None and not self.loop.is_closed():
            self.loop.close()
        if self._threads_before is not None:
            torch.set_num_threads(self._threads_before)
            self._threads_before = None


class LocalTrainer(TrainingLoop):
    """The training loop on the ``local`` backend (the plugin ``trainer.name: local``)."""

    def __init__(self, config: Any, registry: Any, callbacks: list[Any] | None = None,
                 rows: dict[str, list[dict[str, Any]]] | None = None) -> None:
        super().__init__(config, registry, LocalBackend(config, registry), callbacks, rows)
