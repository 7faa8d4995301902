"""Measure how far a student is from its teacher on the student's own episodes: the exact per-token reverse KL
``KL(p_student || p_teacher)`` over the whole vocabulary, and how often the student's token is the teacher's argmax.

``held_out_distance(trainer, algorithm, rows)`` samples episodes from the trainer's current policy on ``rows`` (at
temperature 1, seeded), renders the teacher's prompt of each step as training does, and runs both models directly
(full logits, not the engines' sampled-token scores). Nothing is trained here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import torch
import torch.nn.functional as F


@torch.no_grad()
def response_distributions(model: Any, prompt_ids: Sequence[int], response_ids: Sequence[int],
                           device: Any = "cpu") -> torch.Tensor:
    """Log-probabilities ``[len(response), V]`` of the next token at each response position."""
    ids = torch.tensor([list(prompt_ids) + list(response_ids)], dtype=torch.long, device=device)
    n = len(response_ids)
    logits = model(input_ids=ids, logits_to_keep=n + 1, use_cache=False).logits[0, :-1].float()
    return F.log_softmax(logits, dim=-1)


@torch.no_grad()
def step_distance(student: Any, teacher: Any, student_prompt: Sequence[int], teacher_prompt: Sequence[int],
                  response_ids: Sequence[int], device: Any = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token exact reverse KL ``[n]`` and per-token argmax agreement ``[n]`` (bool) of one step."""
    ls = response_distributions(student, student_prompt, response_ids, device)
    lt = response_distributions(teacher, teacher_prompt, response_ids, device)
    kl = (ls.exp() * (ls - lt)).sum(-1)
    target = torch.tensor(list(response_ids), device=lt.device)
    return kl.cpu(), (lt.argmax(-1) == target).cpu()


def held_out_distance(trainer: Any, algorithm: Any, rows: list[dict[str, Any]], n: int = 1, seed: int = 1234,
                      label: str = "eval") -> dict[str, float]:
    """Mean exact reverse KL per token and per step, and argmax agreement, on fresh student episodes on ``rows``."""
    from agentr1_core.trainers.batching import trajectories_to_rows

    sampling = replace(trainer.sampling, temperature=1.0, top_p=1.0, top_k=0, seed=seed)
    trajs, _ = trainer.rollout(rows, n, sampling, desc=f"opd {label}", prefix=f"opd-{label}-")
    flat = trajectories_to_rows(trajs).rows
    teacher = algorithm.teacher
    teacher.load_model()
    steps = [trajs[r.traj].steps[r.step_index] for r in flat]
    truths = [None] * len(flat)
    if algorithm.context == "privileged":
        from agentr1_opd.teacher import ground_truth_text

        truths = [ground_truth_text(trajs[r.traj].info.get("reward_model")) for r in flat]
    prompts = teacher.prompts(steps, flat, truths, algorithm.context)
    student = trainer.backend.policy.model
    student.eval()
    kls, agree, per_step = [], [], []
    for row, prompt in zip(flat, prompts):
        if prompt.ids is None or not row.response_ids:
            continue
        kl, ok = step_distance(student, teacher.model, row.prompt_ids, prompt.ids, row.response_ids,
                               trainer.backend.device)
        kls.append(kl)
        agree.append(ok)
        per_step.append(float(kl.sum()))
    if not kls:
        return {"kl_token": float("nan"), "kl_step": float("nan"), "agreement": float("nan"), "tokens": 0.0,
                "steps": 0.0, "episodes": float(len(trajs))}
    kl_all, agree_all = torch.cat(kls), torch.cat(agree)
    return {"kl_token": float(kl_all.mean()), "kl_step": sum(per_step) / len(per_step),
            "agreement": float(agree_all.float().mean()), "tokens": float(kl_all.numel()),
            "steps": float(len(per_step)), "episodes": float(len(trajs))}
