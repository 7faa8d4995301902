"""``search_qa``: answer a question by searching, with the context rebuilt at every step.

Each turn the model either calls the ``search`` tool (hermes ``<tool_call>`` format by default) or answers with
``<answer>...</answer>``, which ends the episode. What the model sees next depends on ``context``:

- ``summary`` (default): one user message rebuilt each step: the question, a bounded list of the distinct passages
  retrieved so far (the newest ``max_passages``, best hit of the latest search first), the searches done and the model's own short notes (its text outside
  tags, each cut to ``note_chars``, the last ``max_notes``). The prompt stays flat however long the episode runs.
- ``window``: system prompt, question, and the last ``window`` turns of the transcript.
- ``append``: the whole transcript.

A turn with neither a call nor an answer gets an error note and the episode goes on (until ``max_turns``). Step
rewards are 0 except ``search_reward`` for a search that found passages; the answer is scored by the run's reward
function (``qa_em`` / ``qa_f1``). ``expert_action`` is a scripted expert for warm-start SFT: it searches each gold
supporting title (the question itself when the data has none), then answers with the first gold answer.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter, OrderedDict
from typing import Any

from agentr1_core.envs import ToolEnv
from agentr1_core.mdp import Action, Observation, StepResult

from agentr1_tools_search.answers import ANSWER_TAG, as_answers, extract_answer

CONTEXT_MODES = ("summary", "window", "append")
DEFAULT_SYSTEM_PROMPT = (
    "You answer questions by searching an encyclopedia. Search as often as you need, one short query at a time, "
    "then give the final answer, a few words only, as <answer>...</answer>.")
NO_ACTION = ("Error: write either a search call or the final answer as <answer>...</answer>.")


class SearchQAEnv(ToolEnv):
    """Question answering with a search tool; context ``summary`` | ``window`` | ``append`` (see module doc)."""

    def __init__(self, tools: list[Any] | None = None, tool_format: str = "hermes",
                 system_prompt: str = DEFAULT_SYSTEM_PROMPT, max_turns: int = 4, context: str = "summary",
                 window: int = 2, max_passages: int = 5, passage_chars: int = 300, note_chars: int = 200,
                 max_notes: int = 4, max_calls_per_turn: int = 2, search_reward: float = 0.0,
                 tool_timeout: float | None = None) -> None:
        if context not in CONTEXT_MODES:
            raise ValueError(f"search_qa: context must be one of {', '.join(CONTEXT_MODES)}, got {context!r}")
        super().__init__(tools=list(tools) if tools else [{"name": "search"}], tool_format=tool_format,
                         system_prompt=system_prompt, max_turns=max_turns, context="append", window=window,
                         tool_timeout=tool_timeout)
        self.context = context
        self.max_passages = max_passages
        self.passage_chars = passage_chars
        self.note_chars = note_chars
        self.max_notes = max_notes
        self.max_calls_per_turn = max_calls_per_turn
        self.search_reward = search_reward
        self.question = ""
        self.passages: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.notes: list[str] = []
        self.queries: list[str] = []
        self._plan: list[str] = []

    # -- episode ------------------------------------------------------------------------------------------------
    async def reset(self, row: dict[str, Any]) -> Observation:
        await super().reset(row)
        extra = row.get("extra_info") or {}
        prompt = row.get("prompt", "")
        if isinstance(prompt, list):
            prompt = next((m.get("content", "") for m in reversed(prompt) if m.get("role") == "user"), "")
        self.question = str(extra.get("question") or prompt).strip()
        self.head = [self.head[0]] if self.head and self.head[0]["role"] == "system" else []
        self.head.append({"role": "user", "content": f"Question: {self.question}"})
        self.passages, self.notes, self.queries = OrderedDict(), [], []
        self._plan = self._expert_plan(row)
        return self.observation()

    def observation(self) -> Observation:
        if self.context == "append":
            turns = self.turns
        elif self.context == "window":
            turns = self.turns[-self.window:] if self.window > 0 else []
        else:
            return Observation(messages=self.head[:-1] + [{"role": "user", "content": self.summary()}])
        return Observation(messages=self.head + [m for turn in turns for m in turn])

    def summary(self) -> str:
        """The single user message of ``summary`` mode."""
        parts = [f"Question: {self.question}"]
        if self.passages:
            lines = []
            for i, p in enumerate(reversed(self.passages.values()), 1):
                text = " ".join(p["text"].split())
                if len(text) > self.passage_chars:
                    text = text[:self.passage_chars].rsplit(" ", 1)[0] + " ..."
                lines.append(f"[{i}] {p['title']}\n{text}")
            parts.append("Passages found so far:\n" + "\n".join(lines))
        if self.queries:
            parts.append("Searches done: " + "; ".join(json.dumps(q, ensure_ascii=False) for q in self.queries))
        if self.notes:
            parts.append("Your notes:\n" + "\n".join(f"- {n}" for n in self.notes))
        parts.append("Search again, or give the final answer as <answer>...</answer>.")
        return "\n\n".join(parts)

    def _note(self, content: str) -> None:
        text = " ".join(ANSWER_TAG.sub("", content).split())
        if not text:
            return
        if len(text) > self.note_chars:
            text = text[:self.note_chars].rsplit(" ", 1)[0] + " ..."
        self.notes = (self.notes + [text])[-self.max_notes:] if self.max_notes > 0 else []

    def _remember(self, hits: list[dict[str, Any]]) -> None:
        """Newest first; within one search the best hit is the newest, so eviction drops old low-ranked ones."""
        for h in reversed(hits):
            self.passages.pop(str(h["id"]), None)
            self.passages[str(h["id"])] = h
        while len(self.passages) > self.max_passages:
            self.passages.popitem(last=False)

    async def step(self, action: Action) -> StepResult:
        self.turn += 1
        answer = extract_answer(action.text)
        if answer is not None:
            return StepResult(observation=None, done=True,
                              info={"answer": answer, "searches": len(self.queries)})
        parsed = self.format.parse(action.text)
        self._note(parsed.content)
        calls = parsed.calls[:self.max_calls_per_turn]
        messages = [{"role": "assistant", "content": action.text}]
        errors: Counter[str] = Counter()
        reward = 0.0
        if not calls:
            errors["no_action"] += 1
            feedback = NO_ACTION
            messages.append({"role": "user", "content": feedback})
        else:
            results = await asyncio.gather(*(self.run_call(c) for c in calls))
            for call, res in zip(calls, results):
                messages.append(self.format.result_message(call, res.text))
                if res.error:
                    errors[res.error] += 1
                    continue
                hits = res.info.get("hits")
                if hits is not None:
                    self.queries.append(str(call.arguments.get("query", "")))
                    self._remember(hits)
                    reward += self.search_reward if hits else 0.0
            feedback = "\n".join(r.text for r in results)
            if self.context == "summary" and any(r.error for r in results):
                self._note("(tool error) " + "; ".join(r.text for r in results if r.error))
        self.tool_errors.update(errors)
        self.turns.append(messages)
        return StepResult(observation=self.observation(), reward=reward, truncated=self.turn >= self.max_turns,
                          feedback=feedback,
                          info={"tool_calls": len(calls), "tool_errors": dict(errors), "passages": len(self.passages)})

    # -- scripted expert ----------------------------------------------------------------------------------------
    def _expert_plan(self, row: dict[str, Any]) -> list[str]:
        if row.get("expert_actions"):
            return list(row["expert_actions"])
        golds = as_answers((row.get("reward_model") or {}).get("ground_truth"))
        if not golds or "search" not in self.tools:
            return []
        titles = list((row.get("extra_info") or {}).get("supporting_titles") or [])
        queries = titles[: max(self.max_turns - 1, 0)] or ([self.question] if self.max_turns > 1 else [])
        plan = [f"Searching for: {q}\n<tool_call>"
                + json.dumps({"name": "search", "arguments": {"query": q}}, ensure_ascii=False) + "</tool_call>"
                for q in queries]
        return plan + [f"<answer>{golds[0]}</answer>"]

    def expert_action(self) -> str | None:
        return self._plan.pop(0) if self._plan else None
