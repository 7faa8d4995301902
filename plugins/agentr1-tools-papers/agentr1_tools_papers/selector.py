"""The ``paper_selector`` reward: a judge LLM scores every newly found paper for relevance to the query.

Scoring. For a query and a paper the judge sees one chat-templated prompt (a system line, then ``Query: ...``,
``Paper: title (year). abstract`` and ``Is this paper relevant to the query? Answer Yes or No.``) followed by the
template's generation prompt. The continuations are the judge tokenizer's encoding of ``Yes`` and of ``No`` (no
leading space: the assistant turn starts right after the generation prompt). Their log-probs, summed over the
continuation's tokens when an answer has several, come from the judge engine's ``score``, and the paper's score is
``P(yes) = exp(lp_yes) / (exp(lp_yes) + exp(lp_no))``. Scores are cached per ``(query, paper id)`` (LRU-bounded).

Rewards. Step ``i`` gets ``sum of the top_k scores of its new papers (a score below threshold counts 0) -
action_cost``, added to ``traj.steps[i].reward``. The call returns ``selection_weight * F1`` of the last step's
``selected`` ids against the gold ids (0 for an episode that did not finish, as in ``paper_recall``); the flow
adds it to the last step. Metrics: ``selector_score_mean`` (mean score of all new papers, 0 if none),
``selector_found`` (papers scoring at least ``threshold``, or at least 0.5 when ``threshold`` is 0) and the episode
metrics every paper reward records (``agentr1_tools_papers.rewards.episode_metrics``: recall, precision, f1, ...).

The judge loads on the first call that has papers to score, never at construction, and runs on its own event loop
in a daemon thread, so the reward can be called synchronously from inside a running event loop. A judge that cannot
be built or fails to score raises ``JudgeError``. This module does not deduplicate papers across steps (the env
reports each paper at the step that first found it) and does not sample text from the judge.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import OrderedDict
from concurrent.futures import Future
from typing import Any, Coroutine

from agentr1_core.mdp import Trajectory

from agentr1_tools_papers.rewards import episode_metrics, selected_ids

SYSTEM = "You judge whether academic papers are relevant to a search query."
QUESTION = "Is this paper relevant to the query? Answer Yes or No."
ANSWERS = ("Yes", "No")
DTYPES = ("float32", "fp32", "float16", "fp16", "bfloat16", "bf16")


class JudgeError(RuntimeError):
    """The judge model or engine could not be built, or failed to score."""


def judge_messages(query: str, paper: dict[str, Any], max_abstract_chars: int = 400) -> list[dict[str, str]]:
    """The chat messages that ask the judge whether ``paper`` is relevant to ``query``."""
    title = " ".join(str(paper.get("title") or "").split())
    year = paper.get("year")
    head = f"{title} ({year})." if year not in (None, "") else f"{title}."
    abstract = " ".join(str(paper.get("abstract") or "").split())
    if len(abstract) > max_abstract_chars:
        abstract = abstract[:max_abstract_chars].rstrip() + "..."
    text = f"{head} {abstract}" if abstract else head
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Query: {query}\nPaper: {text}\n{QUESTION}"}]


def _p_yes(lp_yes: float, lp_no: float) -> float:
    d = lp_no - lp_yes
    return 1.0 / (1.0 + math.exp(d)) if d < 700 else 0.0


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class PaperSelector:
    """The ``paper_selector`` reward (see the module docstring). ``judge`` is a model id, folder or alias loaded
    with ``agentr1_core.models.load_model_and_tokenizer``; ``judge_engine`` is any registered engine."""

    def __init__(self, judge: str = "smollm2-135m-instruct", judge_engine: str = "transformers",
                 judge_engine_params: dict[str, Any] | None = None, judge_dtype: str = "float32",
                 judge_device: str = "auto", top_k: int = 3, threshold: float = 0.0, action_cost: float = 0.0,
                 selection_weight: float = 0.0, max_abstract_chars: int = 400, cache_size: int = 100_000) -> None:
        for key, value in (("judge", judge), ("judge_engine", judge_engine), ("judge_device", judge_device)):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"paper_selector: {key} must be a non-empty string, got {value!r}")
        if judge_engine_params is not None and not isinstance(judge_engine_params, dict):
            raise ValueError(f"paper_selector: judge_engine_params must be a mapping, got {judge_engine_params!r}")
        if judge_dtype not in DTYPES:
            raise ValueError(f"paper_selector: judge_dtype must be one of {', '.join(DTYPES)}, got {judge_dtype!r}")
        if not _is_int(top_k) or top_k < 1:
            raise ValueError(f"paper_selector: top_k must be an integer >= 1, got {top_k!r}")
        if not _is_number(threshold) or not 0.0 <= threshold <= 1.0:
            raise ValueError(f"paper_selector: threshold must be in [0, 1], got {threshold!r}")
        for key, value in (("action_cost", action_cost), ("selection_weight", selection_weight)):
            if not _is_number(value) or value < 0:
                raise ValueError(f"paper_selector: {key} must be a finite number >= 0, got {value!r}")
        for key, value in (("max_abstract_chars", max_abstract_chars), ("cache_size", cache_size)):
            if not _is_int(value) or value < 0:
                raise ValueError(f"paper_selector: {key} must be an integer >= 0, got {value!r}")
        self.judge, self.judge_engine = judge, judge_engine
        self.judge_dtype, self.judge_device = judge_dtype, judge_device
        self.judge_engine_params = dict(judge_engine_params or {})
        self.top_k, self.threshold = top_k, float(threshold)
        self.action_cost, self.selection_weight = float(action_cost), float(selection_weight)
        self.max_abstract_chars, self.cache_size = max_abstract_chars, cache_size
        self.model: Any = None
        self.tokenizer: Any = None
        self._engine: Any = None
        self._answer_ids: list[list[int]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._cache: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = threading.RLock()

    @property
    def found_at(self) -> float:
        """The score from which a paper counts as found in ``selector_found``."""
        return self.threshold if self.threshold > 0 else 0.5

    # -- judge --------------------------------------------------------------------------------------------------------
    def _device(self) -> str:
        if self.judge_device != "auto":
            return self.judge_device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def ensure_engine(self) -> Any:
        """Build the judge engine (and load its model) once; raises ``JudgeError`` with the reason."""
        with self._lock:
            if self._engine is not None:
                return self._engine
            from agentr1_core.plugins import PluginError, get_registry

            registry = get_registry()
            try:
                accepts = registry.get("engine", self.judge_engine).parameters()
            except PluginError as exc:
                raise JudgeError(f"paper_selector: cannot build the judge engine: {exc}") from exc
            if self.model is None:
                from agentr1_core.models import load_model_and_tokenizer

                try:
                    model, tokenizer = load_model_and_tokenizer(self.judge, dtype=self.judge_dtype,
                                                                device=self._device())
                except Exception as exc:
                    raise JudgeError(f"paper_selector: cannot load the judge model {self.judge!r}: "
                                     f"{type(exc).__name__}: {exc}") from exc
                for p in model.parameters():
                    p.requires_grad_(False)
                self.model, self.tokenizer = model, tokenizer
            self._answer_ids = [list(self.tokenizer.encode(a, add_special_tokens=False)) for a in ANSWERS]
            if not all(self._answer_ids):
                raise JudgeError(f"paper_selector: the judge tokenizer encodes {ANSWERS} to no tokens")
            params = dict(self.judge_engine_params)
            if "device" in accepts and "device" not in params:
                params["device"] = self._device()
            try:
                self._engine = registry.build("engine", self.judge_engine, params,
                                              where="reward.judge_engine_params", model=self.model,
                                              tokenizer=self.tokenizer)
            except Exception as exc:
                raise JudgeError(f"paper_selector: cannot build the judge engine {self.judge_engine!r}: "
                                 f"{type(exc).__name__}: {exc}") from exc
            return self._engine

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on the judge's own event loop (its daemon thread) and wait for the result."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="paper-selector-judge", daemon=True)
            self._thread.start()
        future: Future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result()

    def prompt_ids(self, query: str, paper: dict[str, Any]) -> list[int]:
        """The judge's prompt ids for ``(query, paper)`` (needs the judge tokenizer: call ``ensure_engine`` first)."""
        from agentr1_core.flows import render_prompt
        from agentr1_core.mdp import Observation

        messages = judge_messages(query, paper, self.max_abstract_chars)
        return render_prompt(self.tokenizer, Observation(messages=messages))

    def _judge(self, query: str, papers: list[dict[str, Any]]) -> list[float]:
        engine = self.ensure_engine()
        prompts = [self.prompt_ids(query, p) for p in papers]

        async def all_of() -> list[list[float]]:
            return await asyncio.gather(*(engine.score(p, a) for p in prompts for a in self._answer_ids))

        try:
            logprobs = self._run(all_of())
        except Exception as exc:
            raise JudgeError(f"paper_selector: the judge {self.judge!r} ({self.judge_engine}) failed to score "
                             f"{len(papers)} papers: {type(exc).__name__}: {exc}") from exc
        n = len(self._answer_ids)
        scores = [_p_yes(sum(logprobs[i * n]), sum(logprobs[i * n + 1])) for i in range(len(papers))]
        if not all(math.isfinite(s) for s in scores):
            raise JudgeError(f"paper_selector: the judge {self.judge!r} gave non-finite log-probs")
        return scores

    def score_papers(self, query: str, papers: list[dict[str, Any]]) -> list[float]:
        """P(yes) of each paper for ``query``, from the cache or one batched judge call for the rest."""
        keys = [(query, str(p.get("id", p.get("title", "")))) for p in papers]
        with self._lock:
            found = {k: self._cache[k] for k in keys if k in self._cache}
            todo = {k: p for k, p in zip(keys, papers) if k not in found}
            if todo:
                found.update(zip(todo, self._judge(query, list(todo.values()))))
            for k in keys:
                self._cache[k] = found[k]
                self._cache.move_to_end(k)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return [found[k] for k in keys]

    # -- reward -------------------------------------------------------------------------------------------------------
    def step_reward(self, scores: list[float]) -> float:
        """The reward of one step whose new papers got ``scores``."""
        kept = sorted((s if s >= self.threshold else 0.0 for s in scores), reverse=True)
        return sum(kept[:self.top_k]) - self.action_cost

    def __call__(self, traj: Trajectory, row: dict[str, Any]) -> float:
        per_step = [list(step.info.get("new_papers") or []) for step in traj.steps]
        flat = [p for papers in per_step for p in papers]
        scores: list[float] = []
        if flat:
            query = (row.get("extra_info") or {}).get("query")
            if not isinstance(query, str) or not query.strip():
                raise ValueError("paper_selector: the row has no query (row['extra_info']['query'])")
            scores = self.score_papers(query, flat)
        start = 0
        for step, papers in zip(traj.steps, per_step):
            step.reward += self.step_reward(scores[start:start + len(papers)])
            start += len(papers)
        traj.metrics["selector_score_mean"] = sum(scores) / len(scores) if scores else 0.0
        traj.metrics["selector_found"] = float(sum(s >= self.found_at for s in scores))
        metrics = episode_metrics(traj, row)
        if selected_ids(traj) is None:
            return 0.0
        return self.selection_weight * metrics["f1"]

    def close(self) -> None:
        """Close the judge engine and stop its event loop (a later call loads the judge again)."""
        with self._lock:
            if self._engine is not None:
                self._engine.close()
                self._engine = None
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                if self._thread is not None:
                    self._thread.join(timeout=30)
                self._loop.close()
                self._loop, self._thread = None, None
            self.model = self.tokenizer = None
