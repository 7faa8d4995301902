"""The teacher side of online distillation: load the teacher lazily, check it shares the student's tokenizer,
render each step's prompt in the teacher's own chat template (optionally with privileged context), and score the
student's action tokens through a registered engine's ``score`` (all steps submitted at once, so the engine batches
them).

A step's action ids are always scored exactly as the student sampled them: only the prompt side is re-rendered.
When the teacher's chat template equals the student's and the context is ``same``, the student's own prompt ids are
reused as they are (no rendering at all). This module samples nothing and computes no loss.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Sequence

CONTEXTS = ("same", "privileged")
PRIVILEGED_NOTE = ("Reference answer (known to the grader only; use it to judge what a correct reply looks like): "
                   "{ground_truth}")
SPECIAL_ATTRS = ("bos_token", "eos_token", "unk_token")


class TokenizerMismatchError(ValueError):
    """The teacher cannot score the student's tokens: their tokenizers differ."""


def tokenizer_mismatch(student: Any, teacher: Any) -> str | None:
    """``None`` when both tokenizers have the same vocabulary and special tokens, else what differs."""
    sv, tv = student.get_vocab(), teacher.get_vocab()
    if sv != tv:
        only_s = sorted(set(sv) - set(tv))[:3]
        only_t = sorted(set(tv) - set(sv))[:3]
        moved = sorted(k for k in set(sv) & set(tv) if sv[k] != tv[k])[:3]
        return (f"vocabularies differ ({len(sv)} vs {len(tv)} tokens; only in the student e.g. {only_s}, only in "
                f"the teacher e.g. {only_t}, different ids e.g. {moved})")
    for attr in SPECIAL_ATTRS:
        if getattr(student, attr, None) != getattr(teacher, attr, None):
            return f"{attr} differs ({getattr(student, attr, None)!r} vs {getattr(teacher, attr, None)!r})"
    s_special = {i: t.content for i, t in student.added_tokens_decoder.items() if t.special}
    t_special = {i: t.content for i, t in teacher.added_tokens_decoder.items() if t.special}
    if s_special != t_special:
        diff = sorted(set(s_special.items()) ^ set(t_special.items()))[:3]
        return f"special tokens differ (e.g. {diff})"
    return None


def check_tokenizers(student: Any, student_name: str, teacher: Any, teacher_name: str) -> None:
    problem = tokenizer_mismatch(student, teacher)
    if problem:
        raise TokenizerMismatchError(
            f"opd: the teacher {teacher_name!r} cannot score the student {student_name!r}: {problem}. Online "
            f"distillation scores the student's token ids with the teacher, so both models need the same tokenizer.")


def ground_truth_text(reward_model: Any) -> str | None:
    if reward_model is None:
        return None
    if isinstance(reward_model, dict):
        value = reward_model.get("ground_truth", reward_model)
    else:
        value = reward_model
    if isinstance(value, (list, tuple)):
        return " | ".join(str(v) for v in value)
    return str(value)


def with_privileged_note(messages: list[dict[str, Any]], note: str) -> list[dict[str, Any]]:
    """A copy of ``messages`` with ``note`` appended to the system message (one is added when there is none)."""
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system" and isinstance(out[0].get("content"), str):
        out[0]["content"] = f"{out[0]['content']}\n\n{note}"
    else:
        out.insert(0, {"role": "system", "content": note})
    return out


@dataclass
class TeacherPrompt:
    ids: list[int] | None  # None: this step cannot be scored (the reason says why)
    rendered: bool = False  # re-rendered with the teacher's template (False: the student's prompt ids reused)
    privileged: bool = False
    reason: str = ""


def teacher_prompt(step: Any, prompt_ids: Sequence[int], tokenizer: Any, context: str, same_template: bool,
                   ground_truth: str | None, note: str = PRIVILEGED_NOTE) -> TeacherPrompt:
    """The teacher's prompt ids for one step (see the module docstring)."""
    from agentr1_core.flows import render_prompt
    from agentr1_core.mdp import Observation

    obs = getattr(step, "observation", None) if step is not None else None
    privileged = context == "privileged" and ground_truth is not None
    if not privileged and same_template:
        return TeacherPrompt(list(prompt_ids))
    if obs is None:
        if not privileged:
            return TeacherPrompt(None, reason="no observation to render with the teacher's template")
        return TeacherPrompt(None, reason="no observation to add the privileged context to")
    if privileged:
        extra = note.format(ground_truth=ground_truth)
        if obs.messages is not None:
            obs = Observation(messages=with_privileged_note(obs.messages, extra), tools=obs.tools)
        elif obs.text is not None:
            obs = Observation(text=f"{extra}\n\n{obs.text}")
        else:  # token ids managed by the env (same tokenizer): nothing to render the note into
            return TeacherPrompt(list(prompt_ids), reason="token-id observation: no privileged context")
    return TeacherPrompt(render_prompt(tokenizer, obs), rendered=True, privileged=privileged)


def _same_template(a: Any, b: Any) -> bool:
    return getattr(a, "chat_template", None) == getattr(b, "chat_template", None)


class Teacher:
    """A teacher model behind a registered engine. ``bind`` checks the student's tokenizer (cheap: loads only the
    teacher's tokenizer when possible); the model and engine are loaded on the first ``score_steps``."""

    def __init__(self, path: str, engine: str = "transformers", engine_params: dict[str, Any] | None = None,
                 dtype: str = "float32", device: str = "auto") -> None:
        self.path, self.engine_name, self.dtype = path, engine, dtype
        self.engine_params = dict(engine_params or {})
        self.device = device
        self.tokenizer: Any = None
        self.model: Any = None
        self.engine: Any = None
        self.student_tokenizer: Any = None
        self.student_name = ""
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- loading ----------------------------------------------------------------------------------------------------
    def _resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def load_tokenizer(self) -> Any:
        if self.tokenizer is None:
            from agentr1_core import models

            cached = models.cache_root() / models.SMOLLM2_CACHE_NAME
            if self.path.lower() in models.SMOLLM2_ALIASES and not models._is_complete_cache(cached):
                self.load_model()  # the alias's first load converts the GGUF and writes the cache
            else:
                self.tokenizer = models.load_tokenizer(self.path)  # the weights load when the teacher first scores
        return self.tokenizer

    def load_model(self) -> None:
        if self.model is None:
            from agentr1_core.models import load_model_and_tokenizer

            self.model, tokenizer = load_model_and_tokenizer(self.path, dtype=self.dtype,
                                                             device=self._resolved_device())
            for p in self.model.parameters():
                p.requires_grad_(False)
            self.tokenizer = self.tokenizer or tokenizer

    def bind(self, student_tokenizer: Any, student_name: str = "student", device: str | None = None) -> None:
        """Check the student's tokenizer against the teacher's (raises ``TokenizerMismatchError``)."""
        if device is not None and self.device == "auto":
            self.device = str(device)
        check_tokenizers(student_tokenizer, student_name, self.load_tokenizer(), self.path)
        self.student_tokenizer, self.student_name = student_tokenizer, student_name

    def ensure_engine(self) -> Any:
        if self.engine is None:
            from agentr1_core.plugins import get_registry

            self.load_model()
            registry = get_registry()
            params = dict(self.engine_params)
            if "device" in registry.get("engine", self.engine_name).parameters() and "device" not in params:
                params["device"] = self._resolved_device()
            self.engine = registry.build("engine", self.engine_name, params, where="algorithm.teacher_engine",
                                         model=self.model, tokenizer=self.tokenizer)
        return self.engine

    @property
    def same_template(self) -> bool:
        return self.student_tokenizer is not None and _same_template(self.student_tokenizer, self.tokenizer)

    # -- scoring ----------------------------------------------------------------------------------------------------
    def prompts(self, steps: Sequence[Any], rows: Sequence[Any], ground_truths: Sequence[str | None],
                context: str) -> list[TeacherPrompt]:
        self.load_tokenizer()
        same = self.same_template
        return [teacher_prompt(step, row.prompt_ids, self.tokenizer, context, same, gt)
                for step, row, gt in zip(steps, rows, ground_truths)]

    def score(self, requests: Sequence[tuple[list[int] | None, list[int]]]) -> list[list[float] | BaseException]:
        """Teacher log-probs of each ``(prompt_ids, action_ids)``; a request whose prompt is None, or whose
        scoring failed, yields the exception instead (the caller leaves that step unscored)."""
        engine = self.ensure_engine()

        async def one(prompt: list[int] | None, action: list[int]) -> list[float]:
            if prompt is None:
                raise ValueError("no teacher prompt")
            return await engine.score(prompt, action)

        async def all_of() -> list[Any]:
            return await asyncio.gather(*(one(p, a) for p, a in requests), return_exceptions=True)

        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(all_of())

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()

