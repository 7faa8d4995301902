"""The local trainer (plugin name ``local``): one process, CPU or one GPU, a ``transformers`` model.

``LocalTrainer(config, registry).fit()`` loads the model and tokenizer, builds the engine (sharing the module, so
optimizer updates are seen by the next generation), the env/flow/reward/algorithm and the datasets, then runs the
configured ``stages``:

* ``sft``: expert trajectories (``FlowContext.policy = "expert"``) through the same flow, cross-entropy on the
  response tokens of every step, ``sft.epochs`` passes; validation before and after.
* ``rl``: per iteration rollout -> rewards (the flow applies the reward function) -> ``compute_advantages`` ->
  policy (+ critic) update -> metrics; validation every ``validation.every`` iterations and at the end.

Options: LoRA through ``peft`` (``model.lora.enabled``), training only the top ``trainer.train_layers`` blocks, a
frozen reference for the KL term (``trainer.ref_model`` or an algorithm with ``kl_coef > 0``): the policy as it was
when RL started, or the model ``trainer.ref_model`` names. Algorithms that need a critic get a value head on the
policy trunk, or a separate critic model (``critic.model``); episodes cut before ``done`` are bootstrapped with the
critic's value of the next observation. Old log-probs are recomputed with the trainer's weights
(``trainer.recompute_old_logprobs``) when one rollout feeds several optimizer steps or the engine does not run the
trainer's own module; the engine-vs-trainer log-prob gap is logged every iteration.

Run management: ``callbacks`` (objects with ``on_iteration_end(trainer, metrics)``), ``state_dict()`` /
``load_state_dict()`` (model, optimizer, RNG, data position, iteration). Before anything loads, the run directory is
checked (writable, ``trainer.min_free_gb`` free). A checkpoint is written every ``trainer.checkpoint_every``
iterations and at the end (0: only at the end, < 0: never) through ``agentr1_core.lifecycle.trainer_state``;
``trainer.resume=auto`` continues from the latest one. Metrics go through ``agentr1_core.lifecycle.metrics``
(``metrics.jsonl`` + TensorBoard). Sampled generations are seeded per (run seed, iteration, episode, call), so a
resumed run samples what the uninterrupted run would have sampled.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import random
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from agentr1_core.config import component
from agentr1_core.flows import FlowContext
from agentr1_core.lifecycle.checkpoint import check_run_dir, latest_checkpoint
from agentr1_core.lifecycle.episode_errors import check_expert_steps, report_episode_errors
from agentr1_core.lifecycle.metrics import MetricsLogger, write_episodes
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.rollout.driver import current_episode_uid, rollout_async
from agentr1_core.trainers.batching import build_step_batch, trajectories_to_rows
from agentr1_core.trainers.metrics import (
    end_iteration, episode_metric_means, expert_problems, peak_rss_mb, rollout_metrics, validation_metrics,
)
from agentr1_core.trainers import roles
from agentr1_core.trainers.seeding import EpisodeSeededEngine
from agentr1_core.trainers.update import Policy, make_optimizer, policy_update, score_batch, sft_update
from agentr1_core.preflight import take_rows
from agentr1_core.runner import build_reward_fn


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2 ** 32))
    except ImportError:
        pass


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


class LocalTrainer:
    def __init__(self, config: Any, registry: Any, callbacks: list[Any] | None = None) -> None:
        self.cfg = config
        self.registry = registry
        self.callbacks = list(callbacks or [])
        self.iteration = 0
        self.data_epoch = 0
        self.data_cursor = 0
        self.data_rng = random.Random(int(config.seed))
        self.history: dict[str, Any] = {}
        self._setup_done = False

    # -- setup ------------------------------------------------------------------------------------------------------
    def setup(self) -> None:
        if self._setup_done:
            return
        cfg = self.cfg
        if int(cfg.trainer.threads) > 0:  # process-wide in torch: ``close`` gives the caller's count back
            self._threads_before = torch.get_num_threads()
            torch.set_num_threads(int(cfg.trainer.threads))
        seed_everything(int(cfg.seed))
        self.run_dir = Path(cfg.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.loop = asyncio.new_event_loop()
        self._build_data()
        self._build_components()
        self._build_model()
        self._setup_done = True
        self.resumed_from = self._maybe_resume()
        self.writer = self._make_writer()

    def _maybe_resume(self) -> Path | None:
        mode = str(self.cfg.trainer.resume)
        if mode not in ("never", "auto"):
            raise ValueError(f"trainer.resume must be 'never' or 'auto', got {mode!r}")
        if mode != "auto":
            return None
        from agentr1_core.lifecycle.trainer_state import resume_latest

        return resume_latest(self)

    def _make_writer(self) -> Any:
        return MetricsLogger(self.run_dir, config=OmegaConf.to_container(self.cfg, resolve=True),
                             purge_step=self.iteration + 1 if self.resumed_from is not None else None)

    def preflight(self) -> None:
        """Fail in a second, with one line, if the run directory cannot take metrics and checkpoints."""
        check_run_dir(self.cfg.run_dir, int(float(self.cfg.trainer.min_free_gb) * 1024 ** 3))

    def save_checkpoint(self) -> Path:
        from agentr1_core.lifecycle.trainer_state import save_trainer_checkpoint

        t0 = time.perf_counter()
        path = save_trainer_checkpoint(self)
        print(f"[checkpoint] {path} in {time.perf_counter() - t0:.1f}s", flush=True)
        return path

    def _checkpoint_due(self) -> bool:
        every, total = int(self.cfg.trainer.checkpoint_every), int(self.cfg.trainer.total_steps)
        return every >= 0 and (self.iteration >= total or (every > 0 and self.iteration % every == 0))

    def _build_data(self) -> None:
        name, params = component(self.cfg, "data.train")
        self.train_rows = take_rows(name, params) or list(self.registry.build("dataset", name, params,
                                                                              where="data.train"))
        if not self.train_rows:
            raise ValueError("data.train produced no rows")
        self.val_rows: list[dict[str, Any]] = []
        if OmegaConf.select(self.cfg, "data.val") is not None:
            name, params = component(self.cfg, "data.val")
            self.val_rows = take_rows(name, params) or list(self.registry.build("dataset", name, params,
                                                                                where="data.val"))
        limit = int(self.cfg.validation.max_rows)
        if limit > 0:
            self.val_rows = self.val_rows[:limit]
        self.order = list(range(len(self.train_rows)))
        self.data_rng.shuffle(self.order)

    def _build_components(self) -> None:
        cfg = self.cfg
        roles.check_recompute_mode(cfg.trainer.recompute_old_logprobs)  # bad input fails before the model loads
        self.env_config = OmegaConf.to_container(cfg.env, resolve=True)
        self.flow_name, self.flow_params = component(cfg, "agent_flow")
        self.reward_fn = build_reward_fn(cfg, self.registry)
        name, params = component(cfg, "algorithm")
        self.algorithm = self.registry.build("algorithm", name, params, where="algorithm")
        ro = cfg.rollout
        self.sampling = SamplingParams(temperature=float(ro.temperature), top_p=float(ro.top_p), top_k=int(ro.top_k),
                                       max_new_tokens=int(ro.max_new_tokens), stop=list(ro.stop))
        self.val_sampling = SamplingParams(temperature=float(cfg.validation.temperature), top_p=1.0, top_k=0,
                                           max_new_tokens=int(ro.max_new_tokens), stop=list(ro.stop))

    def _build_model(self) -> None:
        from agentr1_core.models import load_model_and_tokenizer

        cfg, tr = self.cfg, self.cfg.trainer
        self.device = resolve_device(str(cfg.model.device))
        t0 = time.perf_counter()
        model, tokenizer = load_model_and_tokenizer(str(cfg.model.path), dtype=str(cfg.model.dtype), device=self.device)
        self.model_load_seconds = time.perf_counter() - t0
        self.tokenizer = tokenizer
        self.ref_mode = roles.reference_mode(tr.ref_model, bool(getattr(self.algorithm, "needs_reference", False)))
        use_ref = self.ref_mode is not None
        ref_model, ref_context = None, None
        if use_ref and self.ref_mode != "policy":
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
            # self.ref_mode == "policy": a frozen copy is taken when RL starts (take_reference), i.e. after SFT
        value_head, critic = None, None
        critic_lr = float(cfg.critic.lr if cfg.critic.lr is not None else tr.critic_lr)
        if self.algorithm.needs_critic and cfg.critic.model:
            critic = roles.build_separate_critic(str(cfg.critic.model), tokenizer, str(cfg.model.dtype), self.device,
                                                 critic_lr, list(tr.betas), float(tr.max_grad_norm))
        elif self.algorithm.needs_critic:
            value_head = roles.zero_value_head(model.config.hidden_size, self.device)
        trainable = [p for p in policy_model.parameters() if p.requires_grad]
        groups = [{"params": trainable, "lr": float(tr.lr)}]
        if value_head is not None:
            groups.append({"params": list(value_head.parameters()), "lr": critic_lr})
        self.optimizer = make_optimizer(groups, lr=float(tr.lr), betas=list(tr.betas),
                                        weight_decay=float(tr.weight_decay), device=self.device)
        warmup = int(tr.warmup_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.policy = Policy(model=policy_model, pad_id=int(pad_id), device=self.device, value_head=value_head,
                             ref_model=ref_model, ref_context=ref_context, critic=critic,
                             share_prefix=int(tr.share_prefix), onednn_linears=bool(tr.onednn_linears),
                             params=trainable + (list(value_head.parameters()) if value_head is not None else []))
        self.policy.model.eval()
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
        # Algorithms that judge the policy's tokens with another model (a distillation teacher) check the policy's
        # tokenizer here, at startup, before any rollout.
        bind_policy = getattr(self.algorithm, "bind_policy", None)
        if callable(bind_policy):
            bind_policy(model_name=str(cfg.model.path), tokenizer=tokenizer, device=self.device)

    # -- rollouts ---------------------------------------------------------------------------------------------------
    def make_flow_factory(self, sampling: SamplingParams, policy: str = "model"):
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

    def rollout(self, rows: list[dict[str, Any]], n: int, sampling: SamplingParams, policy: str = "model",
                desc: str = "rollout", prefix: str = ""):
        self.policy.model.eval()
        t0 = time.perf_counter()
        trajs = self.loop.run_until_complete(rollout_async(
            rows, n, self.make_flow_factory(sampling, policy), group_prefix=prefix, desc=desc))
        return trajs, time.perf_counter() - t0

    def next_rows(self, count: int) -> list[dict[str, Any]]:
        """The next ``count`` training rows; reshuffles at each epoch boundary."""
        out = []
        while len(out) < count:
            if self.data_cursor >= len(self.order):
                self.data_epoch += 1
                self.data_cursor = 0
                self.data_rng.shuffle(self.order)
            out.append(self.train_rows[self.order[self.data_cursor]])
            self.data_cursor += 1
        return out

    def validate(self, label: str) -> dict[str, Any] | None:
        if not self.val_rows:
            return None
        trajs, seconds = self.rollout(self.val_rows, int(self.cfg.validation.n), self.val_sampling,
                                      desc=f"validate ({label})", prefix=f"val-{label}-")
        result = validation_metrics(trajs)
        result.update(label=label, seconds=seconds, iteration=self.iteration, peak_rss_mb=peak_rss_mb())
        report_episode_errors(self, trajs, f"validation {label}", result)
        self.history.setdefault("validation", {})[label] = result
        self.writer.write({"event": "validation", **result})
        write_episodes(self.run_dir / "episodes" / f"{label}.jsonl", trajs)
        by = ", ".join(f"{k} {v['success_rate']:.3f}" for k, v in result["by_source"].items())
        means = "".join(f" {k} {result[k]:.3f}" for k in episode_metric_means(trajs) if k != "num_steps")
        print(f"[validation {label}] success {result['success_rate']:.3f} reward {result['reward_mean']:.3f}{means} "
              f"on {result['cases']} cases ({by}) in {seconds:.0f}s", flush=True)
        return result

    # -- stages -----------------------------------------------------------------------------------------------------
    def run_sft(self) -> dict[str, Any]:
        sft = self.cfg.sft
        rows = self.next_rows(min(int(sft.rows), len(self.train_rows)))
        trajs, seconds = self.rollout(rows, 1, self.sampling, policy="expert", desc="expert rollouts",
                                      prefix="sft-")
        expert = rollout_metrics(trajs, seconds)
        record: dict[str, Any] = {"event": "sft", "expert_episodes": len(trajs),
                                  "expert_success_rate": expert["success_rate"],
                                  "expert_reward_mean": expert["reward_mean"],
                                  "expert_terminations": expert["terminations"],
                                  "expert_tool_errors": expert["tool_errors"]}
        report_episode_errors(self, trajs, "sft expert rollouts", record)
        steps = trajectories_to_rows(trajs)
        check_expert_steps(trajs, len(steps.rows))
        scheduled = [group["lr"] for group in self.optimizer.param_groups]  # RL's rates, warm-up factor included
        for group in self.optimizer.param_groups[:1]:
            group["lr"] = float(sft.lr)
        gen = torch.Generator().manual_seed(int(self.cfg.seed))
        metrics = sft_update(self.policy, self.optimizer, steps.rows, epochs=int(sft.epochs),
                             batch_size=int(sft.batch_size), micro_batch_size=int(self.cfg.trainer.micro_batch_size),
                             max_grad_norm=float(self.cfg.trainer.max_grad_norm), generator=gen)
        for group, lr in zip(self.optimizer.param_groups, scheduled):
            group["lr"] = lr  # where the scheduler left them: RL's first step gets its first warm-up factor
        self.optimizer.state.clear()  # fresh moments for RL
        self.engine.sync_weights()
        record.update(sft_steps=len(steps.rows), **metrics, peak_rss_mb=peak_rss_mb())
        self.writer.write(record)
        print(f"[sft] {len(trajs)} expert episodes (success {expert['success_rate']:.2f}{expert_problems(expert)}), "
              f"{len(steps.rows)} steps, {metrics['optimizer_steps']} updates, "
              f"nll {metrics.get('sft_nll', float('nan')):.3f}, {metrics['update_tok_s']:.0f} tok/s", flush=True)
        self.history["sft"] = record
        return record

    @property
    def recompute_old(self) -> bool:
        """``trainer.recompute_old_logprobs`` resolved: ``auto`` recomputes when one rollout feeds several optimizer
        steps or the rollouts do not come from this process's engine running the policy module (a subclass that
        overrides ``rollout``, e.g. a pool of remote engines)."""
        tr = self.cfg.trainer
        own_rollouts = type(self).rollout is LocalTrainer.rollout
        return roles.recompute_old_logprobs(tr.recompute_old_logprobs,
                                            int(tr.update_epochs) > 1 or int(tr.mini_batches) > 1,
                                            self.engine if own_rollouts else None, self.engine_model)

    def take_reference(self) -> None:
        """The KL reference is the policy as RL starts: copy it now unless a reference already exists (a named
        model, a restored copy) or the LoRA base still equals the policy (no adapter training yet)."""
        if self.ref_mode != "policy" or self.policy.ref_model is not None:
            return
        if self.policy.ref_context is not None and "sft" not in self.history:
            return
        self.policy.ref_model = roles.frozen_copy(self.policy.model)
        self.policy.ref_context = None

    def train_iteration(self) -> dict[str, Any]:
        cfg, tr = self.cfg, self.cfg.trainer
        t0 = time.perf_counter()
        self.iteration += 1
        rows = self.next_rows(int(cfg.rollout.batch_size))
        prefix_stats = getattr(self.engine, "take_prefix_stats", dict)
        prefix_stats()  # start the window at this rollout
        trajs, seconds = self.rollout(rows, int(cfg.rollout.n), self.sampling, desc=f"rollout {self.iteration}",
                                      prefix=f"it{self.iteration}-")
        metrics: dict[str, Any] = {"iteration": self.iteration, **rollout_metrics(trajs, seconds), **prefix_stats()}
        report_episode_errors(self, trajs, f"iteration {self.iteration}", metrics)
        steps = trajectories_to_rows(trajs)
        metrics.update(train_steps=len(steps.rows), nonfinite_logprob_steps=steps.nonfinite_logprob_steps)
        if steps.rows:
            batch = build_step_batch(steps.rows)
            need_ref = self.policy.ref_model is not None or self.policy.ref_context is not None
            metrics.update(score_batch(self.policy, steps.rows, batch, int(tr.micro_batch_size),
                                       float(cfg.rollout.temperature), self.recompute_old, need_ref,
                                       self.policy.has_critic))
            if self.policy.has_critic and batch.values is not None:
                boot, from_obs = roles.bootstrap_values(self.policy, trajs, steps.rows, batch.values, self.tokenizer,
                                                        int(tr.micro_batch_size))
                batch.extras["bootstrap_values"] = boot
                metrics["bootstrapped_steps"] = from_obs
            metrics.update(self.algorithm.prepare_batch(batch, steps.rows, trajs) or {})
            adv = self.algorithm.compute_advantages(batch)
            metrics.update({f"adv/{k}": v for k, v in adv.metrics.items()})
            gen = torch.Generator().manual_seed(int(cfg.seed) * 100003 + self.iteration)
            metrics.update(policy_update(
                self.policy, self.algorithm, self.optimizer, steps.rows, batch, adv.advantages, adv.returns,
                int(tr.micro_batch_size), int(tr.mini_batches), int(tr.update_epochs),
                float(cfg.rollout.temperature), float(tr.max_grad_norm), float(tr.value_coef), self.scheduler, gen,
                skip_inert=bool(tr.skip_inert_rows)))
            self.engine.sync_weights()
        return end_iteration(self, metrics, t0)

    def fit(self) -> dict[str, Any]:
        try:
            return self._fit()
        finally:
            self.close()

    def _fit(self) -> dict[str, Any]:
        start = time.perf_counter()
        self.preflight()
        self.setup()
        stages = [str(s) for s in self.cfg.stages]
        unknown = [s for s in stages if s not in ("sft", "rl")]
        if unknown:
            raise ValueError(f"unknown stage {unknown[0]!r}; valid: sft, rl")
        print(f"[setup] model {self.cfg.model.path} on {self.device} ({self.trainable_params / 1e6:.1f}M trainable "
              f"params, loaded in {self.model_load_seconds:.1f}s); {len(self.train_rows)} train rows, "
              f"{len(self.val_rows)} validation rows; stages {stages}", flush=True)
        if self.iteration == 0 and self.cfg.validation.before:
            self.validate("before_sft" if "sft" in stages else "before_rl")
        if "sft" in stages and "sft" not in self.history:
            self.run_sft()
            self.validate("after_sft")
        if "rl" in stages:
            self.take_reference()
            while self.iteration < int(self.cfg.trainer.total_steps):
                self.train_iteration()
            self.validate("after_rl")
        last = latest_checkpoint(self.run_dir)
        if int(self.cfg.trainer.checkpoint_every) >= 0 and (last is None or int(last.name.split("_")[-1]) !=
                                                             self.iteration):
            self.save_checkpoint()  # runs without RL iterations (e.g. SFT only)
        self.history.update(wall_seconds=time.perf_counter() - start, peak_rss_mb=peak_rss_mb(),
                            iterations=self.iteration, seed=int(self.cfg.seed))
        summary = {k: v for k, v in self.history.items()}
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
        val = summary.get("validation", {})
        line = ", ".join(f"{k} {v['success_rate']:.3f}" for k, v in val.items())
        print(f"[done] {self.iteration} iterations in {summary['wall_seconds']:.0f}s, peak RSS "
              f"{summary['peak_rss_mb']:.0f} MiB; held-out success: {line}", flush=True)
        return summary

    def close(self) -> None:
        writer = getattr(self, "writer", None)
        if writer is not None and hasattr(writer, "close"):
            writer.close()
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.close()
        loop = getattr(self, "loop", None)
        if loop is not None and not loop.is_closed():
            loop.close()
        threads = getattr(self, "_threads_before", None)
        if threads is not None:
            torch.set_num_threads(threads)
            self._threads_before = None

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
            "rng": {"python": random.getstate(), "torch": torch.get_rng_state(), "data": self.data_rng.getstate()},
            "data": {"epoch": self.data_epoch, "cursor": self.data_cursor, "order": list(self.order)},
            "iteration": self.iteration,
            "history": copy.deepcopy(self.history),
        }

    def _critic_state(self) -> dict[str, Any] | None:
        critic = self.policy.critic
        if critic is None:
            return None
        return {"model": critic.model.state_dict(), "head": critic.head.state_dict(),
                "optimizer": critic.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.setup()
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
        random.setstate(state["rng"]["python"])
        torch.set_rng_state(state["rng"]["torch"])
        self.data_rng.setstate(state["rng"]["data"])
        self.data_epoch, self.data_cursor = state["data"]["epoch"], state["data"]["cursor"]
        self.order = list(state["data"]["order"])
        self.iteration = int(state["iteration"])
        self.history = copy.deepcopy(state.get("history", {}))
        self.engine.sync_weights()
