"""What a run prints per RL iteration: one readable line (``console_line``) and, under it, a note for each thing a
user must know of (``console_notes``).

The line reads the iteration's metrics record. With a critic (PPO, StepPO) it gives the policy's loss and the value
loss apart (``loss`` is their sum, the value loss times ``trainer.value_coef`` when the value head shares the policy's
step), and the gradient norm is the one the policy's optimizer step clips, before clipping, followed by whether the
step was clipped (``grad_clip_fraction``) and, when the value head shares that step, the policy's and the value
head's own norms; a separate critic's norm follows on its own. These names are the same on every backend.

The notes: an update skipped because no row carries a gradient, an engine whose sampling log-probs disagree with the
trainer's past the limits of ``algorithms.mismatch``, ReMax's greedy baseline beating the samples in most groups
(``algorithms.remax``), a critic whose values are still far from the returns after its first update
(``critic_fit_note``), and episodes cut by a limit that were kept out of the loss or penalised (``overlong_note``,
``rollout.overlong``). Nothing here computes a metric or writes a file (``lifecycle.metrics`` writes them).
"""

from __future__ import annotations

import math
from typing import Any

from agentr1_core.algorithms.mismatch import mismatch_warning
from agentr1_core.algorithms.remax import remax_warning
from agentr1_core.trainers.dynamic_sampling import cap_note

CRITIC_R2_LIMIT = -0.5  # adv/value_r2 below this (after the first iteration) is said on the console


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "-" if not isinstance(value, (int, float)) or not math.isfinite(value) else format(value, spec)


def _counts(counts: Any) -> str:
    if not isinstance(counts, dict) or not counts:
        return ""
    return ",".join(f"{k}:{v}" for k, v in sorted(counts.items()))


def _clipped(fraction: Any) -> str:
    """Whether an update's optimizer steps were clipped, from the fraction of them that were."""
    if not isinstance(fraction, (int, float)) or not math.isfinite(fraction):
        return ""
    if fraction <= 0:
        return "not clipped"
    return "clipped" if fraction >= 1 else f"clipped in {fraction:.0%} of steps"


def loss_parts(m: dict[str, Any]) -> list[str]:
    """``loss``; with a critic, the policy's loss and the value loss instead."""
    if "value_loss" not in m:
        return [f"loss {_fmt(m.get('loss'), '.4f')}"]
    return [f"policy loss {_fmt(m.get('policy_loss'), '.4f')}", f"value loss {_fmt(m.get('value_loss'), '.4f')}"]


def gradient_parts(m: dict[str, Any]) -> list[str]:
    """The policy step's gradient norm before clipping and whether it was clipped; with the value head in that step,
    the policy's and the head's own norms; a separate critic's norm and clipping after it."""
    details = [_clipped(m.get("grad_clip_fraction"))]
    separate_critic = "critic_grad_clip_fraction" in m
    if "critic_grad_norm" in m and not separate_critic:
        details.append(f"policy {_fmt(m.get('policy_grad_norm'), '.2f')}, "
                       f"value head {_fmt(m.get('critic_grad_norm'), '.2f')}")
    shown = "; ".join(d for d in details if d)
    parts = [f"gnorm {_fmt(m.get('grad_norm'), '.2f')}" + (f" ({shown})" if shown else "")]
    if separate_critic:
        clipped = _clipped(m.get("critic_grad_clip_fraction"))
        parts.append(f"critic gnorm {_fmt(m.get('critic_grad_norm'), '.2f')}" + (f" ({clipped})" if clipped else ""))
    return parts


def critic_fit_note(m: dict[str, Any]) -> str | None:
    """One line when, after the first iteration, the critic's values (before this iteration's update) fit the
    returns worse than ``CRITIC_R2_LIMIT`` (``adv/value_r2``, ``algorithms.gae.critic_fit``); None otherwise."""
    r2 = m.get("adv/value_r2")
    if not isinstance(r2, (int, float)) or not r2 < CRITIC_R2_LIMIT or int(m.get("iteration") or 0) < 2:
        return None
    return (f"[critic] its values are still far from the returns: mean value {_fmt(m.get('adv/value_mean'))} "
            f"against mean return {_fmt(m.get('adv/return_mean'))}, mean |value - return| "
            f"{_fmt(m.get('adv/value_abs_error'))} (R^2 {r2:.2f}; 0 would be no better than the batch's mean "
            f"return); until it catches up the advantages follow the returns more than a baseline. If this lasts to "
            f"the end of the run, the critic learns too slowly: raise critic.head_lr (a value head on the policy) or "
            f"critic.lr (a separate critic model, verl's critic); both default to trainer.critic_lr")


def overlong_note(m: dict[str, Any]) -> str | None:
    """One line when ``rollout.overlong`` cut episodes out of the loss or lowered rewards (``trainers.overlong``);
    None when it did nothing this iteration."""
    cut = int(m.get("overlong/episodes") or 0)
    masked = int(m.get("overlong/masked_steps") or 0)
    penalty = m.get("overlong/penalty_mean")
    penalised = isinstance(penalty, (int, float)) and penalty != 0
    if not cut and not masked and not penalised:
        return None
    parts = [f"[overlong] {cut} of {m.get('episodes', '?')} episodes cut by a limit"]
    if "overlong/masked_steps" in m:
        parts.append(f"{masked} steps kept out of the loss")
    if penalised:
        parts.append(f"mean length penalty {penalty:.3f}")
    return "; ".join(parts)


def console_notes(m: dict[str, Any]) -> list[str]:
    """Lines printed after an iteration's line when it did something a user must know of (module docstring)."""
    notes = []
    if m.get("update_skipped"):
        with_critic = "adv/value_mean" in m  # only critic algorithms report their values
        why = ("every advantage is 0 and the critic already gives every return, e.g. a fresh critic before the first "
               "reward") if with_critic else "every advantage is 0, e.g. every episode of each group scored the same"
        if m.get("overlong/masked_steps") and m["overlong/masked_steps"] >= m.get("train_steps", math.inf):
            why = "every episode was cut by a limit and kept out of the loss, rollout.overlong.mode mask"
        notes.append(f"[update] skipped: no row carries a gradient ({why}); the optimizer did not step and the "
                     "weights are unchanged")
    for warning in (cap_note(m), mismatch_warning(m), remax_warning(m), critic_fit_note(m), overlong_note(m)):
        if warning:
            notes.append(warning)
    return notes


def console_line(m: dict[str, Any], total: int) -> str:
    """One readable line per iteration."""
    kl = m.get("kl", m.get("approx_kl"))
    parts = [
        f"it {m.get('iteration', 0)}/{total}",
        f"reward {_fmt(m.get('reward_mean'))}±{_fmt(m.get('reward_std'), '.2f')}",
        f"success {_fmt(m.get('success_rate'), '.2f')}",
        f"steps {_fmt(m.get('steps_per_episode'), '.1f')}",
        *loss_parts(m),
        f"kl {_fmt(kl, '.4f')}",
        f"ent {_fmt(m.get('entropy'), '.3f')}",
        *gradient_parts(m),
        f"clip {_fmt(m.get('clip_fraction'), '.3f')}",
        f"roll {_fmt(m.get('rollout_tok_s'), '.0f')} tok/s",
        f"upd {_fmt(m.get('update_tok_s'), '.0f')} tok/s",
        f"{_fmt(m.get('iteration_seconds'), '.0f')}s",
    ]
    ends = _counts({k: v for k, v in (m.get("terminations") or {}).items() if k != "done"})
    if ends:
        parts.append(f"ends {ends}")
    errors = _counts(m.get("tool_errors"))
    if errors:
        parts.append(f"tool errors {errors}")
    val = m.get("validation")
    if isinstance(val, dict):
        parts.append(f"val success {_fmt(val.get('success_rate'), '.3f')} ({val.get('cases', 0)} cases)")
    return " | ".join(parts)
