"""``LoopSettings``: what the training loop reads from a run config, typed and read once.

The config travels as an OmegaConf tree that every reader used to cast again (``int(cfg.trainer.total_steps)``);
the loop and its rollout sources read these fields instead. A config that reached the loop passed the run's checks
(``preflight``), so ``from_config`` only converts; the two values a loop could not run with (unknown stages, a
``trainer.resume`` other than never/auto) are still refused here, for callers that build a loop without the checks.
Backends read their own keys when they build (``UpdateSettings`` does the same for the update).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentr1_core.errors import ConfigError
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.validation import STAGES


@dataclass(frozen=True)
class LoopSettings:
    seed: int
    stages: tuple[str, ...]
    total_steps: int  # RL iterations
    batch_size: int  # dataset rows per RL iteration
    n: int  # episodes per row
    train_sampling: SamplingParams
    val_sampling: SamplingParams
    validation_every: int  # iterations between validations (0: only before and after training)
    validation_n: int
    validation_max_rows: int  # 0: every validation row
    validate_before: bool
    sft_rows: int
    checkpoint_every: int  # 0: only at the end, < 0: never
    resume: bool
    min_free_bytes: int
    keep_train_episodes: int
    max_staleness: int
    dynamic_sampling: bool = False  # drop groups of equal rewards and roll out more rows (rollout.dynamic_sampling)
    dynamic_sampling_rounds: int = 0  # extra rollout rounds per iteration at most
    overlong_mode: str = "none"  # none | mask | penalty (rollout.overlong)
    overlong_buffer_tokens: int = 0
    overlong_penalty_factor: float = 1.0
    curriculum: bool = False  # skip rows solved or failed on each of their last curriculum_window visits
    curriculum_window: int = 2
    curriculum_skip_solved: bool = True
    curriculum_skip_failed: bool = True

    @classmethod
    def from_config(cls, cfg: Any) -> "LoopSettings":
        stages = tuple(str(s) for s in cfg.stages)
        unknown = [s for s in stages if s not in STAGES]
        if unknown:
            raise ConfigError(f"config error at stages: unknown stage {unknown[0]!r}; valid: {', '.join(STAGES)}")
        resume = str(cfg.trainer.resume)
        if resume not in ("never", "auto"):
            raise ConfigError(f"config error at trainer.resume: must be 'never' or 'auto', got {resume!r}")
        ro, val, tr, cur = cfg.rollout, cfg.validation, cfg.trainer, cfg.data.curriculum
        train_sampling = SamplingParams(temperature=float(ro.temperature), top_p=float(ro.top_p), top_k=int(ro.top_k),
                                        max_new_tokens=int(ro.max_new_tokens), stop=list(ro.stop))
        val_sampling = SamplingParams(temperature=float(val.temperature), top_p=1.0, top_k=0,
                                      max_new_tokens=int(ro.max_new_tokens), stop=list(ro.stop))
        return cls(seed=int(cfg.seed), stages=stages, total_steps=int(tr.total_steps), batch_size=int(ro.batch_size),
                   n=int(ro.n), train_sampling=train_sampling, val_sampling=val_sampling,
                   validation_every=int(val.every), validation_n=int(val.n), validation_max_rows=int(val.max_rows),
                   validate_before=bool(val.before), sft_rows=int(cfg.sft.rows),
                   checkpoint_every=int(tr.checkpoint_every), resume=resume == "auto",
                   min_free_bytes=int(float(tr.min_free_gb) * 1024 ** 3),
                   keep_train_episodes=int(tr.keep_train_episodes), max_staleness=int(tr.max_staleness),
                   dynamic_sampling=bool(ro.dynamic_sampling.enabled),
                   dynamic_sampling_rounds=int(ro.dynamic_sampling.max_rounds),
                   overlong_mode=str(ro.overlong.mode), overlong_buffer_tokens=int(ro.overlong.buffer_tokens),
                   overlong_penalty_factor=float(ro.overlong.penalty_factor),
                   curriculum=bool(cur.enabled), curriculum_window=int(cur.window),
                   curriculum_skip_solved=bool(cur.skip_solved), curriculum_skip_failed=bool(cur.skip_failed))
