"""Value checks on a merged run config: ranges, choices and combinations that the types alone do not catch.

``value_problems(cfg)`` gives one line per problem, every one of them, naming the key path and what would be valid
(``check_values`` raises them as one ``ConfigError``: exit code 2 in the CLI) for, e.g., ``rollout.n=0``,
``stages=[sft, rll]``, ``model.dtype=float16x``, ``trainer.resume=yes`` or ``model.device=cuda`` on a machine
without CUDA. It reads only the config (torch is imported only to ask whether
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
OVERLONG_MODES = ("none", "mask", "penalty")  # rollout.overlong.mode (trainers.overlong)
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
    "critic.lr": 0.0, "critic.head_lr": 0.0,
    "rollout.dynamic_sampling.max_rounds": 0, "rollout.overlong.buffer_tokens": 0,
    "rollout.overlong.penalty_factor": 0.0, "data.curriculum.window": 1,
    "model.lora.r": 1, "model.lora.alpha": 1, "model.lora.dropout": 0.0,
}


class _Problems(list):
    """The problems found so far, one ``config error at KEY: ...`` line each."""

    def fail(self, key: str, message: str) -> None:
        self.append(f"config error at {key}: {message}")

    def choice(self, key: str, value: Any, valid: tuple[str, ...]) -> None:
        if str(value) not in valid:
            self.fail(key, f"{value!r} is not valid{suggest(str(value), valid)}; valid: {', '.join(valid)}")


def stage_problems(cfg: DictConfig, found: _Problems | None = None) -> list[str]:
    found = _Problems() if found is None else found
    stages = [str(s) for s in (OmegaConf.select(cfg, "stages") or [])]
    if not stages:
        found.fail("stages", "no stage selected; use [rl], [sft] or [sft, rl]")
    for i, stage in enumerate(stages):
        if stage not in STAGES:
            found.fail(f"stages[{i}]", f"unknown stage {stage!r}{suggest(stage, STAGES)}; valid: {', '.join(STAGES)}")
    if len(set(stages)) != len(stages):
        found.fail("stages", f"a stage is listed twice: {stages}")
    if stages == ["rl", "sft"]:
        found.fail("stages", "sft is a warm start and runs before rl; write [sft, rl]")
    return found


def device_problem(key: str, device: str) -> str | None:
    """What is wrong with ``device`` at ``key`` (a malformed name, CUDA asked for where there is none), or None."""
    if not _DEVICE.match(device):
        return f"config error at {key}: {device!r} is not a device; valid: auto, cpu, cuda, cuda:N, mps"
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return f"config error at {key}: {device!r} asked for, but CUDA is not available here; use auto or cpu"
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            return (f"config error at {key}: {device!r} asked for, but only {torch.cuda.device_count()} CUDA "
                    f"device(s) are visible")
    return None


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def value_problems(cfg: DictConfig) -> list[str]:
    """Every out-of-range or unknown value in ``cfg``, one line each (empty when there is none)."""
    found = _Problems()
    stage_problems(cfg, found)
    stages = [str(s) for s in (OmegaConf.select(cfg, "stages") or [])]
    for key, low in AT_LEAST.items():
        value = OmegaConf.select(cfg, key)
        number = _number(value)
        if value is not None and (number is None or number < low):
            found.fail(key, f"must be >= {low:g}, got {value!r}")
    top_p = _number(cfg.rollout.top_p)
    if top_p is None or not 0.0 < top_p <= 1.0:
        found.fail("rollout.top_p", f"must be in (0, 1], got {cfg.rollout.top_p!r}")
    total = _number(cfg.trainer.total_steps)
    if "rl" in stages and total is not None and 0 <= total < 1:  # a negative one is reported above
        found.fail("trainer.total_steps", f"must be >= 1 when stages include rl, got {cfg.trainer.total_steps!r}")
    found.choice("model.dtype", cfg.model.dtype, DTYPES)
    found.choice("trainer.resume", cfg.trainer.resume, RESUME_MODES)
    found.choice("trainer.off_policy_correction", cfg.trainer.off_policy_correction, OFF_POLICY_MODES)
    found.choice("trainer.optimizer_kernel", cfg.trainer.optimizer_kernel, OPTIMIZER_KERNELS)
    found.choice("trainer.importance_cap_mode", cfg.trainer.importance_cap_mode, IMPORTANCE_CAP_MODES)
    found.choice("trainer.importance_level", cfg.trainer.importance_level, IMPORTANCE_LEVELS)
    n = _number(cfg.rollout.n)
    if bool(cfg.rollout.dynamic_sampling.enabled) and n is not None and n < 2:
        found.fail("rollout.dynamic_sampling.enabled", f"needs groups of at least 2 episodes (rollout.n >= 2), got "
                   f"rollout.n={cfg.rollout.n!r}: a group of one never has rewards that differ")
    found.choice("rollout.overlong.mode", cfg.rollout.overlong.mode, OVERLONG_MODES)
    if str(cfg.rollout.overlong.mode) == "penalty":
        buffer, budget = _number(cfg.rollout.overlong.buffer_tokens), _number(cfg.rollout.max_new_tokens)
        if buffer is not None and budget is not None and not 0 < buffer <= budget:
            found.fail("rollout.overlong.buffer_tokens", f"must be in [1, rollout.max_new_tokens={budget:g}] with "
                       f"mode penalty, got {cfg.rollout.overlong.buffer_tokens!r}")
    if not str(cfg.model.path).strip():
        found.fail("model.path", "is empty; give a local folder, a Hugging Face id or smollm2-135m-instruct")
    if not str(cfg.run_dir).strip():
        found.fail("run_dir", "is empty; give a folder for metrics and checkpoints")
    device = device_problem("model.device", str(cfg.model.device))
    if device:
        found.append(device)
    return list(found)


def check_values(cfg: DictConfig) -> None:
    """Raise one ``ConfigError`` listing every out-of-range or unknown value in ``cfg`` (``value_problems``)."""
    problems = value_problems(cfg)
    if problems:
        raise ConfigError("\n".join(problems))
