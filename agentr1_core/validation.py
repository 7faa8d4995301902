"""Value checks on a merged run config: ranges, choices and combinations that the types alone do not catch.

``check_values(cfg)`` raises a one-line ``ConfigError`` naming the key path and what would be valid (exit code 2 in
the CLI) for, e.g., ``rollout.n=0``, ``stages=[sft, rll]``, ``model.dtype=float16x``, ``trainer.resume=yes`` or
``model.device=cuda`` on a machine without CUDA. It reads only the config (torch is imported only to ask whether
CUDA is there, and only when a CUDA device is asked for). Component parameters are checked elsewhere, against
their factories (``params.validate_params``) and by building the light components once (``preflight``).
"""

from __future__ import annotations

import re
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentr1_core.errors import ConfigError, suggest

STAGES = ("sft", "rl")
DTYPES = ("float32", "fp32", "float16", "fp16", "bfloat16", "bf16")
RESUME_MODES = ("never", "auto")
OFF_POLICY_MODES = ("none", "tis", "decoupled")  # trainer.off_policy_correction (algorithms.losses)
OPTIMIZER_KERNELS = ("auto", "fused", "foreach")  # trainer.optimizer_kernel (trainers.optimizer_steps.make_optimizer)
IMPORTANCE_CAP_MODES = ("truncate", "mask")  # trainer.importance_cap_mode (algorithms.losses)
IMPORTANCE_LEVELS = ("token", "sequence", "geometric")  # trainer.importance_level (algorithms.losses)
_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")

# key path -> smallest valid value (integers and floats alike)
AT_LEAST: dict[str, float] = {
    "rollout.batch_size": 1, "rollout.n": 1, "rollout.max_new_tokens": 1, "rollout.max_turns": 1,
    "rollout.max_prompt_tokens": 1, "rollout.temperature": 0.0, "rollout.top_k": 0,
    "validation.every": 0, "validation.max_rows": 0, "validation.n": 1, "validation.temperature": 0.0,
    "sft.rows": 1, "sft.epochs": 1, "sft.batch_size": 1, "sft.lr": 0.0,
    "trainer.total_steps": 0, "trainer.lr": 0.0, "trainer.weight_decay": 0.0, "trainer.max_grad_norm": 0.0,
    "trainer.micro_batch_size": 1, "trainer.micro_batch_tokens": 0, "trainer.mini_batches": 1,
    "trainer.update_epochs": 1,
    "trainer.warmup_steps": 0, "trainer.critic_lr": 0.0, "trainer.value_coef": 0.0, "trainer.train_layers": 0,
    "trainer.threads": 0, "trainer.keep_checkpoints": 1, "trainer.min_free_gb": 0.0,
    "trainer.keep_train_episodes": 0, "trainer.mmap_threshold_kb": 0, "trainer.max_staleness": 0,
    "trainer.importance_cap": 1.0,
    "model.lora.r": 1, "model.lora.alpha": 1, "model.lora.dropout": 0.0,
}


def _fail(key: str, message: str) -> None:
    raise ConfigError(f"config error at {key}: {message}")


def _choice(key: str, value: Any, valid: tuple[str, ...]) -> None:
    if str(value) not in valid:
        _fail(key, f"{value!r} is not valid{suggest(str(value), valid)}; valid: {', '.join(valid)}")


def check_stages(cfg: DictConfig) -> list[str]:
    stages = [str(s) for s in (OmegaConf.select(cfg, "stages") or [])]
    if not stages:
        _fail("stages", "no stage selected; use [rl], [sft] or [sft, rl]")
    for i, stage in enumerate(stages):
        if stage not in STAGES:
            _fail(f"stages[{i}]", f"unknown stage {stage!r}{suggest(stage, STAGES)}; valid: {', '.join(STAGES)}")
    if len(set(stages)) != len(stages):
        _fail("stages", f"a stage is listed twice: {stages}")
    if stages == ["rl", "sft"]:
        _fail("stages", "sft is a warm start and runs before rl; write [sft, rl]")
    return stages


def check_device(key: str, device: str) -> None:
    if not _DEVICE.match(device):
        _fail(key, f"{device!r} is not a device; valid: auto, cpu, cuda, cuda:N, mps")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            _fail(key, f"{device!r} asked for, but CUDA is not available here; use auto or cpu")
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            _fail(key, f"{device!r} asked for, but only {torch.cuda.device_count()} CUDA device(s) are visible")


def check_values(cfg: DictConfig) -> None:
    """Raise ``ConfigError`` for the first out-of-range or unknown value in ``cfg``."""
    stages = check_stages(cfg)
    for key, low in AT_LEAST.items():
        value = OmegaConf.select(cfg, key)
        if value is not None and float(value) < low:
            _fail(key, f"must be >= {low:g}, got {value!r}")
    top_p = float(cfg.rollout.top_p)
    if not 0.0 < top_p <= 1.0:
        _fail("rollout.top_p", f"must be in (0, 1], got {top_p!r}")
    if "rl" in stages and int(cfg.trainer.total_steps) < 1:
        _fail("trainer.total_steps", f"must be >= 1 when stages include rl, got {cfg.trainer.total_steps!r}")
    _choice("model.dtype", cfg.model.dtype, DTYPES)
    _choice("trainer.resume", cfg.trainer.resume, RESUME_MODES)
    _choice("trainer.off_policy_correction", cfg.trainer.off_policy_correction, OFF_POLICY_MODES)
    _choice("trainer.optimizer_kernel", cfg.trainer.optimizer_kernel, OPTIMIZER_KERNELS)
    _choice("trainer.importance_cap_mode", cfg.trainer.importance_cap_mode, IMPORTANCE_CAP_MODES)
    _choice("trainer.importance_level", cfg.trainer.importance_level, IMPORTANCE_LEVELS)
    if not str(cfg.model.path).strip():
        _fail("model.path", "is empty; give a local folder, a Hugging Face id or smollm2-135m-instruct")
    if not str(cfg.run_dir).strip():
        _fail("run_dir", "is empty; give a folder for metrics and checkpoints")
    check_device("model.device", str(cfg.model.device))
