"""The ``opd`` algorithm component: online (on-policy) distillation at the step level.

The student samples its own episodes; before advantages, ``prepare_batch`` has the teacher score every step's action
tokens given that step's observation (``context: same``: what the student saw, rendered with the teacher's chat
template; ``context: privileged``: the same plus the row's ground truth in the system message). Then, per action
token ``t`` of a step,

    A_t = clip(log p_teacher(a_t | s, a_<t) - log p_student_old(a_t | s, a_<t), -c, c)  [+ w * A_mix]

a per-token (undiscounted, no look-ahead) estimate of the negative reverse KL, so the policy-gradient step lowers
``KL(student || teacher)`` on the student's own states. ``A_mix`` is the env-reward advantage of any registered
estimator (``mix_algorithm: grpo``, ``steppo`` ...). The loss is the shared policy loss (``losses.py``).

Student log-probs are ``batch.old_logprobs``: the engine's sampling log-probs, which equal the student's
distribution only at ``rollout.temperature: 1.0`` (the teacher scores at temperature 1).

Metrics: ``opd/reverse_kl_token`` (mean of ``log p_s - log p_t`` over action tokens: a sample estimate of the
per-token reverse KL), ``opd/reverse_kl_step`` (per-step sum, averaged over steps), ``opd/agreement_lower_bound``
(fraction of action tokens to which the teacher gives probability > 1/2; such a token is necessarily the teacher's
argmax, so this bounds from below how often the student's sampled token is the teacher's top choice; the engine's
``score`` returns only the sampled tokens' log-probs, not the teacher's argmax), teacher time and step counts.
A step the teacher could not score (prompt too long, engine error) gets log-ratio 0 and is counted, never fatal.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, Sequence

import torch

from agentr1_core.algorithms.base import AdvantageOutput, Algorithm, LossOutput, StepBatch
from agentr1_core.algorithms.components import PolicyGradientAlgorithm
from agentr1_core.algorithms.segments import check_choice
from agentr1_opd.teacher import CONTEXTS, Teacher, ground_truth_text

HALF_LOG = math.log(0.5)


class OnPolicyDistillation(PolicyGradientAlgorithm):
    """See the module docstring. Parameters:

    * ``teacher``: model id, local folder or alias (loaded on the first batch); ``teacher_engine`` (+
      ``teacher_engine_params``): the registered engine that scores; ``teacher_dtype`` / ``teacher_device``
      (``auto``: the policy's device);
    * ``context``: ``same`` | ``privileged``;
    * ``clip_log_ratio``: ``c`` above (> 0);
    * ``mix_algorithm`` (+ ``mix_params``) and ``mix_weight``: an env-reward estimator added with weight ``w``; its
      critic (StepPO/PPO) and groups requirements become this component's;
    * the shared loss parameters (``loss_type``, ``clip_ratio`` ...: ``losses.PolicyLossConfig``'s fields, added to
      this signature by ``components.PolicyGradientAlgorithm``).
    """

    needs_teacher = True

    def __init__(self, teacher: str = "smollm2-135m-instruct", teacher_engine: str = "transformers",
                 teacher_engine_params: dict | None = None, teacher_dtype: str = "float32",
                 teacher_device: str = "auto", context: str = "same", clip_log_ratio: float = 5.0,
                 mix_algorithm: str | None = None, mix_weight: float = 1.0, mix_params: dict | None = None,
                 **loss_options: Any) -> None:
        self.context = check_choice("context", context, CONTEXTS)
        if not clip_log_ratio > 0:
            raise ValueError(f"clip_log_ratio must be > 0, got {clip_log_ratio}")
        self.clip_log_ratio = float(clip_log_ratio)
        self.mix_weight = float(mix_weight)
        self.teacher = Teacher(teacher, engine=teacher_engine, engine_params=teacher_engine_params,
                               dtype=teacher_dtype, device=teacher_device)
        self.set_loss(**loss_options)
        self.mix: Algorithm | None = None
        if mix_algorithm:
            if mix_algorithm == "opd":
                raise ValueError("opd: mix_algorithm must be an env-reward estimator (grpo, steppo, ...), not opd")
            from agentr1_core.plugins import get_registry

            self.mix = get_registry().build("algorithm", mix_algorithm, dict(mix_params or {}),
                                            where="algorithm.mix_algorithm")
            self.needs_critic = bool(self.mix.needs_critic)
            self.needs_groups = bool(self.mix.needs_groups)
        elif mix_params:
            raise ValueError("opd: mix_params given without mix_algorithm")
        self._bound = False

    # -- startup ----------------------------------------------------------------------------------------------------
    def bind_policy(self, model_name: str, tokenizer: Any, device: str | None = None) -> None:
        """Called by the trainer once the policy is loaded: the tokenizer check (a clear error naming both
        models) happens here, before any rollout."""
        self.teacher.bind(tokenizer, model_name, device)
        self._bound = True

    # -- teacher scoring --------------------------------------------------------------------------------------------
    def prepare_batch(self, batch: StepBatch, steps: Any, trajectories: list[Any]) -> dict[str, float]:
        rows: Sequence[Any] = steps
        if not self._bound:
            warnings.warn("opd: the trainer did not bind the policy, so the teacher/student tokenizer check was "
                          "skipped and every prompt is re-rendered with the teacher's template", stacklevel=2)
            self._bound = True
        mdp_steps, truths = [], []
        for row in rows:
            traj = trajectories[row.traj] if trajectories is not None and row.traj < len(trajectories) else None
            step = None
            if traj is not None and row.step_index < len(traj.steps):
                step = traj.steps[row.step_index]
                if list(step.response_ids) != list(row.response_ids):
                    step = None  # rows not built from these trajectories: no observation to trust
            mdp_steps.append(step)
            info = getattr(traj, "info", None) or {}
            truths.append(ground_truth_text(info.get("reward_model")) if self.context == "privileged" else None)
        prompts = self.teacher.prompts(mdp_steps, rows, truths, self.context)
        t0 = time.perf_counter()
        results = self.teacher.score([(p.ids, list(r.response_ids)) for p, r in zip(prompts, rows)])
        seconds = time.perf_counter() - t0
        teacher_lp = torch.full_like(batch.old_logprobs, float("nan"))
        scored, errors = 0, []
        for i, (row, res) in enumerate(zip(rows, results)):
            n = len(row.response_ids)
            if isinstance(res, BaseException) or len(res) != n:
                errors.append(prompts[i].reason or (repr(res) if isinstance(res, BaseException) else "length"))
                continue
            if n:
                teacher_lp[i, :n] = torch.tensor(res, dtype=teacher_lp.dtype)
            scored += 1
        batch.teacher_logprobs = teacher_lp
        metrics = self.distillation_metrics(batch)
        metrics.update({
            "opd/scored_steps": float(scored), "opd/unscored_steps": float(len(rows) - scored),
            "opd/rendered_steps": float(sum(p.rendered for p in prompts)),
            "opd/privileged_steps": float(sum(p.privileged for p in prompts)),
            "opd/teacher_seconds": seconds,
            "opd/teacher_prompt_tokens": float(sum(len(p.ids or []) for p in prompts)),
        })
        if errors:
            batch.extras["opd_unscored_reasons"] = errors[:5]
        return metrics

    def _valid(self, batch: StepBatch) -> torch.Tensor:
        t = batch.teacher_logprobs
        return (batch.action_mask > 0) & torch.isfinite(t) & torch.isfinite(batch.old_logprobs)

    def distillation_metrics(self, batch: StepBatch) -> dict[str, float]:
        valid = self._valid(batch)
        n = int(valid.sum())
        if n == 0:
            return {"opd/reverse_kl_token": 0.0, "opd/reverse_kl_step": 0.0, "opd/agreement_lower_bound": 0.0,
                    "opd/teacher_logprob": 0.0, "opd/log_ratio_clip_fraction": 0.0}
        zero = torch.zeros((), dtype=batch.old_logprobs.dtype)
        kl = torch.where(valid, batch.old_logprobs - batch.teacher_logprobs, zero)
        t = torch.where(valid, batch.teacher_logprobs, zero)
        has = valid.any(-1)
        return {
            "opd/reverse_kl_token": float(kl.sum()) / n,
            "opd/reverse_kl_step": float(kl.sum(-1)[has].mean()),
            "opd/agreement_lower_bound": float(((t > HALF_LOG) & valid).sum()) / n,
            "opd/teacher_logprob": float(t.sum()) / n,
            "opd/log_ratio_clip_fraction": float(((kl.abs() > self.clip_log_ratio) & valid).sum()) / n,
        }

    # -- advantages and losses --------------------------------------------------------------------------------------
    def compute_advantages(self, batch: StepBatch) -> AdvantageOutput:
        if batch.teacher_logprobs is None:
            raise ValueError("opd needs batch.teacher_logprobs: call prepare_batch before compute_advantages")
        valid = self._valid(batch)
        zero = torch.zeros((), dtype=batch.old_logprobs.dtype)
        log_ratio = torch.where(valid, batch.teacher_logprobs - batch.old_logprobs, zero)
        adv = log_ratio.clamp(-self.clip_log_ratio, self.clip_log_ratio)
        returns = adv.sum(-1)
        metrics = {"opd_advantage_mean": float(adv[valid].mean()) if bool(valid.any()) else 0.0}
        if self.mix is not None:
            mixed = self.mix.compute_advantages(batch)
            mask = batch.action_mask > 0
            adv = adv + self.mix_weight * torch.where(mask, mixed.advantages.to(adv.dtype), zero)
            returns = mixed.returns
            metrics.update({f"mix_{k}": v for k, v in mixed.metrics.items()})
        return AdvantageOutput(advantages=adv * (batch.action_mask > 0), returns=returns, metrics=metrics)

    def value_loss(self, values: torch.Tensor, batch: StepBatch, returns: torch.Tensor) -> LossOutput:
        if self.mix is None or not self.mix.needs_critic:
            raise NotImplementedError("opd has a critic only when mixed with a critic algorithm (steppo, ppo)")
        return self.mix.value_loss(values, batch, returns)

    def close(self) -> None:
        self.teacher.close()
