"""Pure conversions between agentr1's step rows and verl's data/config layout (no verl import here).

``step_rows_to_verl(rows, ...)`` lays out one row per step the way verl's actor update reads a batch: prompts
left-padded to ``P`` columns, responses right-padded to ``R`` columns, ``input_ids = [prompts | responses]``,
``attention_mask`` 1 on real tokens, ``position_ids`` counting real tokens from 0, ``response_mask`` 1 on response
tokens, and per-response-token ``old_log_probs`` / ``advantages`` / ``returns`` / ``token_level_rewards``
(``ref_log_prob`` when given). For the actor's update, ``loss_tokens`` says which response tokens may enter the
loss (those whose log-probs the loss reads are finite); the others get ``response_mask`` 0, so that verl's loss
leaves them out of its numerator and its token count alike, as the local trainer does. No non-finite log-prob or
weight is handed to verl (they become 0). Token ids are copied as they are. Non-tensor columns carry the GRPO group
(``uid``),
the trajectory uid and the step index; ``meta_info`` carries the update settings. ``to_dataproto`` wraps the result
in ``verl.DataProto`` (that one needs verl). ``update_metrics`` gives verl's update metrics the local trainer's names
for the policy's and the critic's losses and gradient norms (what the console line shows).

``verl_config(cfg, algorithm, ...)`` maps an agentr1 run config and the built algorithm (its resolved loss settings,
defaults included) onto verl's ``actor_rollout_ref`` / ``critic`` / ``trainer`` keys (verl 0.9 names); anything
verl-specific can be set through ``trainer.params.verl`` (a nested dict merged last). ``merge_into_verl_config``
merges that into verl's composed Hydra config, which is in struct mode, so that new keys are accepted.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

KL_ESTIMATORS = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}
LOSS_MODES = {"ppo": "vanilla", "gspo": "gspo", "reinforce": "gpg"}  # gpg: -A log pi, this project's reinforce loss
DUAL_CLIP_OFF = 1e9  # verl's vanilla loss always dual-clips at -A*c for A < 0; no ratio reaches this c
VALUE_CLIP_OFF = 1e9


def step_rows_to_verl(rows: Sequence[Any], advantages: torch.Tensor, returns: torch.Tensor | None, pad_id: int,
                      group_keys: Sequence[str] = (), traj_uids: Sequence[str] = (),
                      old_logprobs: torch.Tensor | None = None, ref_logprobs: torch.Tensor | None = None,
                      meta: dict[str, Any] | None = None, is_weights: torch.Tensor | None = None,
                      loss_mask: torch.Tensor | None = None) -> dict[str, Any]:
    """``{"batch": {name: tensor}, "non_tensor_batch": {name: np.ndarray}, "meta_info": {...}}``.

    ``rows`` are ``StepRow``-like (``prompt_ids``, ``response_ids``, ``old_logprobs``, ``reward``, ``group``,
    ``traj``, ``step_index``); ``advantages`` is ``[S, T]`` right-padded (``T >= longest response``), ``returns``
    ``[S]`` per step. ``old_logprobs`` (``[S, T]``) replaces the rows' engine log-probs when given;
    ``is_weights`` (``[S, T]``) become ``rollout_is_weights``, which verl's policy loss multiplies each token's term
    by (the decoupled off-policy correction). ``loss_mask`` (``[S, T]``, see ``loss_tokens``) keeps only its tokens
    in verl's loss (``response_mask``).
    """
    if not rows:
        raise ValueError("step_rows_to_verl needs at least one row")
    s = len(rows)
    p = max(len(r.prompt_ids) for r in rows)
    r_len = max(max(len(r.response_ids) for r in rows), 1)
    if advantages.shape[0] != s or advantages.shape[1] < max(len(r.response_ids) for r in rows):
        raise ValueError(f"advantages shape {tuple(advantages.shape)} does not cover {s} rows x "
                         f"{r_len} response tokens")
    prompts = torch.full((s, p), int(pad_id), dtype=torch.long)
    responses = torch.full((s, r_len), int(pad_id), dtype=torch.long)
    prompt_mask = torch.zeros((s, p), dtype=torch.long)
    response_mask = torch.zeros((s, r_len), dtype=torch.long)
    old = torch.zeros((s, r_len), dtype=torch.float32)
    adv = torch.zeros((s, r_len), dtype=torch.float32)
    ret = torch.zeros((s, r_len), dtype=torch.float32)
    rewards = torch.zeros((s, r_len), dtype=torch.float32)
    ref = torch.zeros((s, r_len), dtype=torch.float32) if ref_logprobs is not None else None
    for i, row in enumerate(rows):
        n_p, n_r = len(row.prompt_ids), len(row.response_ids)
        if n_p:
            prompts[i, p - n_p:] = torch.tensor(row.prompt_ids, dtype=torch.long)
            prompt_mask[i, p - n_p:] = 1
        if n_r:
            responses[i, :n_r] = torch.tensor(row.response_ids, dtype=torch.long)
            response_mask[i, :n_r] = 1
            src = old_logprobs[i, :n_r] if old_logprobs is not None else torch.tensor(row.old_logprobs)
            old[i, :n_r] = src.float()
            adv[i, :n_r] = advantages[i, :n_r].float()
            if returns is not None:
                ret[i, :n_r] = float(returns[i])
            rewards[i, n_r - 1] = float(row.reward)
            if ref is not None:
                ref[i, :n_r] = ref_logprobs[i, :n_r].float()
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    position_ids = (torch.cumsum(attention_mask, dim=1) - 1).clamp(min=0)
    if loss_mask is not None:  # what stays out of the loss stays out of its token count too
        response_mask = response_mask * _columns(loss_mask.bool(), r_len, False)
    old = torch.nan_to_num(old, nan=0.0, posinf=0.0, neginf=0.0)
    if ref is not None:
        ref = torch.nan_to_num(ref, nan=0.0, posinf=0.0, neginf=0.0)
    batch = {
        "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask, "position_ids": position_ids, "response_mask": response_mask,
        "old_log_probs": old, "advantages": adv, "returns": ret, "token_level_rewards": rewards,
    }
    if ref is not None:
        batch["ref_log_prob"] = ref
    if is_weights is not None:
        weights = torch.nan_to_num(_columns(is_weights.float(), r_len, 1.0), nan=0.0, posinf=0.0, neginf=0.0)
        batch["rollout_is_weights"] = torch.where(response_mask > 0, weights, torch.zeros_like(weights))
    keys = list(group_keys)
    uids = list(traj_uids)
    non_tensor = {
        "uid": np.array([keys[r.group] if r.group < len(keys) else str(r.group) for r in rows], dtype=object),
        "traj_uid": np.array([uids[r.traj] if r.traj < len(uids) else str(r.traj) for r in rows], dtype=object),
        "step_index": np.array([int(r.step_index) for r in rows], dtype=np.int64),
    }
    meta_info = {"global_token_num": attention_mask.sum(dim=1).tolist(), **(meta or {})}
    return {"batch": batch, "non_tensor_batch": non_tensor, "meta_info": meta_info}


def loss_tokens(action_mask: torch.Tensor, old_logprobs: torch.Tensor, behaviour: torch.Tensor | None = None,
                ref_logprobs: torch.Tensor | None = None) -> torch.Tensor:
    """The action tokens that may enter verl's actor loss: those whose old log-prob (the proximal policy's, or the
    engine's when not recomputed), behaviour log-prob (with an off-policy correction) and reference log-prob (with
    a KL term) are finite: the rule of the local trainer (``losses.loss_denominators``)."""
    keep = (action_mask > 0) & torch.isfinite(old_logprobs)
    for other in (behaviour, ref_logprobs):
        if other is not None:
            keep &= torch.isfinite(other)
    return keep


def _columns(values: torch.Tensor, width: int, fill: Any) -> torch.Tensor:
    """``values`` ``[S, T]`` cut or padded with ``fill`` to ``width`` columns."""
    out = torch.full((values.shape[0], width), fill, dtype=values.dtype)
    cols = min(width, values.shape[1])
    out[:, :cols] = values[:, :cols]
    return out


def to_dataproto(layout: dict[str, Any]) -> Any:
    """Wrap ``step_rows_to_verl`` output in ``verl.DataProto`` (requires verl)."""
    from verl import DataProto

    return DataProto.from_dict(tensors=layout["batch"], non_tensors=layout["non_tensor_batch"],
                               meta_info=layout["meta_info"])


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in (extra or {}).items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def default_attn_implementation() -> str:
    """``flash_attention_2`` when the ``flash_attn`` package is importable, else ``sdpa`` (transformers refuses
    flash-attention without the package, on GPUs too)."""
    import importlib.util

    return "flash_attention_2" if importlib.util.find_spec("flash_attn") is not None else "sdpa"


def _mean(value: Any) -> float | None:
    values = value if isinstance(value, list) else [value]
    values = [float(v) for v in values if isinstance(v, (int, float))]
    return sum(values) / len(values) if values else None


def _clipped_share(norms: Any, limit: float) -> float | None:
    """The share of the optimizer steps whose gradient norm (one per step, or a single one) was above ``limit``."""
    values = [float(v) for v in (norms if isinstance(norms, list) else [norms]) if isinstance(v, (int, float))]
    if not values:
        return None
    return sum(v > limit for v in values) / len(values) if limit > 0 else 0.0


def update_metrics(actor: dict[str, Any], critic: dict[str, Any] | None, max_grad_norm: float) -> dict[str, float]:
    """The local trainer's names for what verl's actor and critic updates report (numbers, or lists with one value
    per optimizer step or micro-batch, as ``workers._metrics`` gives them): ``policy_loss`` (the actor's ``loss``:
    its policy-gradient, KL and entropy terms), ``policy_grad_norm`` (the actor's ``grad_norm``, before clipping;
    verl clips the actor alone, so it is the local ``grad_norm`` too) and ``grad_clip_fraction`` (the share of the
    actor's steps whose norm was above ``max_grad_norm``). With a critic (a separate value model, clipped at the
    same limit): ``critic_grad_norm``, ``critic_grad_clip_fraction``, ``value_loss`` and ``loss`` as the local
    trainer gives them with a separate critic, the policy's loss plus the value loss."""
    out: dict[str, float] = {}
    named = {"policy_loss": _mean(actor.get("loss")), "policy_grad_norm": _mean(actor.get("grad_norm")),
             "grad_clip_fraction": _clipped_share(actor.get("grad_norm"), max_grad_norm)}
    if critic is not None:
        named.update(critic_grad_norm=_mean(critic.get("grad_norm")),
                     critic_grad_clip_fraction=_clipped_share(critic.get("grad_norm"), max_grad_norm),
                     value_loss=_mean(critic.get("critic/vf_loss")))
        if named["policy_loss"] is not None and named["value_loss"] is not None:
            named["loss"] = named["policy_loss"] + named["value_loss"]
    out.update({k: v for k, v in named.items() if v is not None})
    return out


def loss_settings(algorithm: Any) -> dict[str, Any]:
    """verl actor loss keys from a built algorithm's resolved ``loss_config`` (its defaults included)."""
    lc = algorithm.loss_config
    if lc.loss_type not in LOSS_MODES:
        raise ValueError(f"algorithm loss_type {lc.loss_type!r} has no verl equivalent; valid with trainer verl: "
                         f"{', '.join(sorted(LOSS_MODES))}")
    return {
        "clip_ratio": float(lc.clip_ratio_low),
        "clip_ratio_low": float(lc.clip_ratio_low),
        "clip_ratio_high": float(lc.clip_ratio_high),
        # verl always applies its dual clip; a constant no ratio reaches switches it off (None = off here)
        "clip_ratio_c": float(lc.clip_ratio_c) if lc.clip_ratio_c is not None else DUAL_CLIP_OFF,
        "loss_agg_mode": str(lc.loss_agg),
        "policy_loss": {"loss_mode": LOSS_MODES[lc.loss_type]},
        "entropy_coeff": float(lc.entropy_coef),
        "use_kl_loss": float(lc.kl_coef) > 0,
        "kl_loss_coef": float(lc.kl_coef),
        "kl_loss_type": KL_ESTIMATORS[str(lc.kl_estimator)],
    }


def token_budget(cfg: Any) -> int | None:
    """``trainer.micro_batch_tokens`` as verl's dynamic micro-batches (``use_dynamic_bsz`` with a token cap per
    GPU), or None when it is 0. verl counts real tokens (no padding) and refuses a cap below its longest sequence,
    so the cap is at least ``rollout.max_prompt_tokens + rollout.max_new_tokens`` (the local trainer runs such a row
    alone instead)."""
    budget = int(getattr(cfg.trainer, "micro_batch_tokens", 0) or 0)
    if budget <= 0:
        return None
    return max(budget, int(cfg.rollout.max_prompt_tokens) + int(cfg.rollout.max_new_tokens))


def critic_prefix_tokens(cfg: Any) -> int:
    """The most tokens ``critic.prefix`` adds to a row the critic reads (0 without a prefix)."""
    prefix = getattr(getattr(cfg, "critic", None), "prefix", None)
    if prefix is None or (getattr(prefix, "template", None) is None and getattr(prefix, "field", None) is None):
        return 0
    return int(getattr(prefix, "max_tokens", 0) or 0)


def verl_config(cfg: Any, algorithm: Any, n_gpus: int = 1, nnodes: int = 1, model_path: str | None = None,
                device: str = "cuda", attn_implementation: str | None = None) -> dict[str, Any]:
    """verl 0.9 ``actor_rollout_ref`` / ``critic`` / ``trainer`` settings for an agentr1 run config.

    ``algorithm`` is the built algorithm component (its resolved loss settings are mapped, not the user's raw
    params); ``model_path`` the resolved local model folder; ``device="cpu"`` selects FSDP2 without torch.compile
    (the CPU platform in ``cpu_platform``). ``trainer.params.verl`` is merged last (``verl_overrides``).
    """
    tr, ro, lora = cfg.trainer, cfg.rollout, cfg.model.lora
    path = model_path or str(cfg.model.path)
    attn = attn_implementation or default_attn_implementation()
    micro = int(tr.micro_batch_size)
    dynamic = token_budget(cfg)
    steps_per_rollout = int(ro.batch_size) * int(ro.n)  # at least one step per episode
    engine: dict[str, Any] = {"param_offload": False, "optimizer_offload": False}
    if device == "cpu":
        # fp32 all through: without ``mixed_precision`` verl's FSDP engine runs the forward under bf16 autocast
        engine.update(strategy="fsdp2", use_torch_compile=False, model_dtype="fp32", dtype="float32",
                      mixed_precision={"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"})
    actor = {
        "strategy": "fsdp2" if device == "cpu" else "fsdp",
        "ppo_mini_batch_size": max(1, steps_per_rollout // max(1, int(tr.mini_batches))),
        "ppo_micro_batch_size_per_gpu": micro,
        "ppo_epochs": int(tr.update_epochs),
        "use_dynamic_bsz": dynamic is not None,
        **({"ppo_max_token_len_per_gpu": dynamic} if dynamic else {}),
        "grad_clip": float(tr.max_grad_norm),
        **loss_settings(algorithm),
        "optim": {"lr": float(tr.lr), "weight_decay": float(tr.weight_decay),
                  "betas": [float(b) for b in tr.betas], "lr_warmup_steps": int(tr.warmup_steps),
                  "total_training_steps": int(tr.total_steps)},
        "fsdp_config": engine,
        "checkpoint": {"save_contents": ["model", "optimizer", "extra"]},
    }
    checkpointing = bool(getattr(tr, "activation_checkpointing", False))
    model = {"path": path, "use_remove_padding": True, "enable_gradient_checkpointing": checkpointing,
             "lora_rank": int(lora.r) if lora.enabled else 0, "lora_alpha": int(lora.alpha),
             "target_modules": list(lora.target_modules), "override_config": {"attn_implementation": attn}}
    inference_budget = {"log_prob_use_dynamic_bsz": dynamic is not None,
                        **({"log_prob_max_token_len_per_gpu": dynamic} if dynamic else {})}
    rollout = {"name": "vllm", "mode": "async", "temperature": float(ro.temperature), "top_p": float(ro.top_p),
               "top_k": int(ro.top_k) if int(ro.top_k) > 0 else -1, "prompt_length": int(ro.max_prompt_tokens),
               "response_length": int(ro.max_new_tokens), "n": int(ro.n),
               "log_prob_micro_batch_size_per_gpu": micro, "tensor_model_parallel_size": 1,
               **inference_budget}
    out: dict[str, Any] = {
        "actor_rollout_ref": {"model": model, "actor": actor, "rollout": rollout,
                              "ref": {"log_prob_micro_batch_size_per_gpu": micro, **inference_budget,
                                      "fsdp_config": {**engine, "param_offload": device != "cpu"}}},
        "trainer": {"n_gpus_per_node": int(n_gpus), "nnodes": int(nnodes), "total_training_steps":
                    int(tr.total_steps), "device": device},
    }
    if getattr(algorithm, "needs_critic", False):
        value_clip = getattr(algorithm, "value_clip", None)
        critic_budget = dynamic + critic_prefix_tokens(cfg) if dynamic else None  # its rows carry the prefix too
        out["critic"] = {
            "enable": True, "strategy": actor["strategy"],
            "model": {"path": path, "use_remove_padding": True, "enable_gradient_checkpointing": checkpointing,
                      "override_config": {"attn_implementation": attn}},
            "optim": {"lr": float(cfg.critic.lr if cfg.critic.lr is not None else tr.critic_lr),
                      "weight_decay": float(tr.weight_decay),
                      "betas": [float(b) for b in tr.betas], "total_training_steps": int(tr.total_steps)},
            "fsdp": dict(engine), "ppo_micro_batch_size_per_gpu": micro, "use_dynamic_bsz": dynamic is not None,
            **({"ppo_max_token_len_per_gpu": critic_budget, "forward_max_token_len_per_gpu": critic_budget}
               if dynamic else {}),
            "ppo_mini_batch_size": actor["ppo_mini_batch_size"], "ppo_epochs": int(tr.update_epochs),
            "grad_clip": float(tr.max_grad_norm),
            # one value per step (read before its first action token): token-mean over those is a mean over steps
            "loss_agg_mode": "token-mean",
            "cliprange_value": float(value_clip) if value_clip else VALUE_CLIP_OFF,
            "checkpoint": {"save_contents": ["model", "optimizer", "extra"]},
        }
    return _merge(out, verl_overrides(cfg))


def verl_overrides(cfg: Any) -> dict[str, Any]:
    """``trainer.params.verl`` as a plain dict (empty when absent)."""
    params = cfg.trainer.params if hasattr(cfg.trainer, "params") else {}
    extra = params.get("verl") if hasattr(params, "get") else None
    if not extra:
        return {}
    if not isinstance(extra, dict):
        from omegaconf import OmegaConf

        extra = OmegaConf.to_container(extra, resolve=True)
    return dict(extra)


def merge_into_verl_config(full: Any, settings: dict[str, Any]) -> Any:
    """``settings`` merged into verl's composed Hydra config; keys verl's YAML lacks are added (the composed config
    is in struct mode, which would refuse them)."""
    from omegaconf import OmegaConf

    base = OmegaConf.create(OmegaConf.to_container(full, resolve=False))
    OmegaConf.set_struct(base, False)
    return OmegaConf.merge(base, OmegaConf.create(settings))
