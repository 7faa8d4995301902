"""``paper_search``: find the papers that answer a research query by searching and expanding citations, then
select them.

Each turn the model calls ``paper_search`` / ``paper_expand`` (hermes ``<tool_call>`` by default) or finishes with
``<answer>1, 4</answer>``: the numbers of the papers it selects from its pool (paper ids are accepted too), which
ends the episode. Every paper a call returns joins the pool under a stable number. What the model sees next depends
on ``context``:

- ``summary`` (default): one user message rebuilt each step: the query, the pool (the newest ``max_pool`` papers,
  numbered), the searches and expansions done, any tool error of the last turn, and the turns left (on the last
  one it asks for the answer). The prompt stays flat.
- ``window``: system prompt, query and the last ``window`` turns; ``append``: the whole transcript.

``year_cutoff`` (default on) limits every search to papers published in or before the year of the row's ``date``
(the citing paper's date: it could not cite later work). The env pays no reward itself: the run's reward function
(``paper_recall`` / ``paper_selector``) scores what each step found and the selection, and records the episode's
metrics.

The scripted expert (for the warm-start SFT) searches the query's key words, then the titles of gold papers not yet
found (while turns remain), each cut to ``expert_words`` words so that a call fits a small ``max_new_tokens``, and
selects the gold papers it found.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter, OrderedDict
from typing import Any

from agentr1_core.envs import ToolEnv
from agentr1_core.mdp import Action, Observation, StepResult

CONTEXT_MODES = ("summary", "window", "append")
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
DEFAULT_SYSTEM_PROMPT = (
    "You find academic papers for a research query. Search with a few key words at a time; papers you find are "
    "numbered. When done, answer with the numbers of the relevant papers, e.g. <answer>1, 3</answer>.")
NO_ACTION = "Error: call paper_search (or paper_expand), or finish with <answer>numbers of the relevant papers</answer>."
BOILERPLATE = set("""a an the of for in on to and or with by from about any some me i my we our you your can could
would should will do does did is are was were be been there their that which what who whom whose how why where when
this these those it its as at into onto papers paper studies study works work research researches literature
articles article publications publication give show provide tell find list suggest recommend refer look looking
explore explored exploring investigate investigated know want need like please also other such related propose
proposed proposes introduced introduce used use using""".split())


def key_words(query: str, limit: int = 8) -> str:
    """The query's content words, in order, without question boilerplate ("Can you tell me some papers about")."""
    words = [w for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9\-+']*", query) if w.lower() not in BOILERPLATE]
    return " ".join(words[:limit]) or query.strip()


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


class PaperSearchEnv(ToolEnv):
    """Paper search with ``paper_search`` and ``paper_expand``; see the module doc for actions and context."""

    def __init__(self, tools: list[Any] | None = None, tool_format: str = "hermes",
                 system_prompt: str = DEFAULT_SYSTEM_PROMPT, max_turns: int = 4, context: str = "summary",
                 window: int = 2, max_pool: int = 10, title_chars: int = 90, max_calls_per_turn: int = 2,
                 max_select: int = 10, year_cutoff: bool = True, expert_words: int = 6,
                 tool_timeout: float | None = 30.0) -> None:
        if context not in CONTEXT_MODES:
            raise ValueError(f"paper_search: context must be one of {', '.join(CONTEXT_MODES)}, got {context!r}")
        for key, value in (("max_pool", max_pool), ("max_select", max_select), ("title_chars", title_chars)):
            if value < 1:
                raise ValueError(f"paper_search: {key} must be at least 1, got {value}")
        super().__init__(tools=list(tools) if tools else [{"name": "paper_search"}, {"name": "paper_expand"}],
                         tool_format=tool_format, system_prompt=system_prompt, max_turns=max_turns,
                         context="append", window=window, tool_timeout=tool_timeout)
        self.context, self.max_pool, self.title_chars = context, max_pool, title_chars
        self.max_calls_per_turn, self.max_select = max_calls_per_turn, max_select
        self.year_cutoff, self.expert_words = year_cutoff, expert_words
        self.query, self.year_max, self.gold = "", None, []
        self.pool: OrderedDict[str, dict[str, Any]] = OrderedDict()  # id -> paper, in the order found
        self.actions: list[str] = []
        self.last_errors: list[str] = []
        self._expert_state: dict[str, Any] | None = None

    # -- episode ----------------------------------------------------------------------------------------------
    async def reset(self, row: dict[str, Any]) -> Observation:
        await super().reset(row)
        extra = row.get("extra_info") or {}
        self.query = str(extra.get("query") or row.get("prompt") or "").strip()
        if not self.query:
            raise ValueError("paper_search: the row has no query (extra_info.query)")
        date = str(extra.get("date") or "")
        self.year_max = int(date[:4]) if self.year_cutoff and date[:4].isdigit() else None
        self.gold = [str(g) for g in ((row.get("reward_model") or {}).get("ground_truth") or [])]
        self.head = ([self.head[0]] if self.head and self.head[0]["role"] == "system" else [])
        self.head.append({"role": "user", "content": f"Query: {self.query}"})
        self.pool, self.actions, self.last_errors = OrderedDict(), [], []
        if self._expert_state is not None:  # load_expert (run by ToolEnv.reset) found no demonstration in the row
            self._expert_state = {"searched": False, "titles": self._gold_titles(row)}
        return self.observation()

    def number_of(self, paper_id: str) -> int:
        return list(self.pool).index(paper_id) + 1

    def observation(self) -> Observation:
        if self.context == "summary":
            return Observation(messages=self.head[:-1] + [{"role": "user", "content": self.summary()}])
        turns = self.turns if self.context == "append" else self.turns[-self.window:] if self.window > 0 else []
        return Observation(messages=self.head + [m for turn in turns for m in turn])

    def summary(self) -> str:
        parts = [f"Query: {self.query}"]
        if self.pool:
            shown = list(self.pool.items())[-self.max_pool:]
            lines = [f"[{self.number_of(pid)}] {cut(p['title'], self.title_chars)}"
                     + (f" ({p['year']})" if p.get("year") else "") + f" id={pid}" for pid, p in shown]
            parts.append(f"Papers found so far ({len(self.pool)}):\n" + "\n".join(lines))
        if self.actions:
            parts.append("Done: " + "; ".join(self.actions))
        if self.last_errors:
            parts.append("Last turn: " + " ".join(self.last_errors))
        left = self.max_turns - self.turn
        if left <= 1:
            parts.append("This is your last turn: finish with <answer>numbers of the relevant papers</answer>.")
        else:
            parts.append(f"{left} turns left. Search again, or finish with <answer>numbers of the relevant "
                         "papers</answer>.")
        return "\n\n".join(parts)

    def selection(self, text: str) -> tuple[list[str], int]:
        """Paper ids named in an answer (pool numbers or ids), in order, and how many names matched nothing."""
        ids, unknown = [], 0
        for token in re.findall(r"[A-Za-z0-9][\w.\-/]*", text):
            pid = token if token in self.pool else None
            if pid is None and token.isdigit() and 1 <= int(token) <= len(self.pool):
                pid = list(self.pool)[int(token) - 1]
            if pid is None:
                unknown += 1
            elif pid not in ids:
                ids.append(pid)
        return ids[: self.max_select], unknown

    def _prepare(self, call: Any) -> None:
        """Apply the year cut-off to searches and resolve pool numbers given to ``paper_expand``."""
        if not isinstance(call.arguments, dict):
            return
        if call.name == "paper_search" and self.year_max is not None and call.arguments.get("year_max") is None:
            call.arguments["year_max"] = self.year_max
        if call.name == "paper_expand":
            ref = str(call.arguments.get("paper", "")).strip().strip("[]")
            if ref.isdigit() and ref not in self.pool and 1 <= int(ref) <= len(self.pool):
                call.arguments["paper"] = list(self.pool)[int(ref) - 1]

    def _describe(self, call: Any) -> str:
        args = call.arguments if isinstance(call.arguments, dict) else {}
        if call.name == "paper_search":
            return f"searched {json.dumps(str(args.get('query', '')), ensure_ascii=False)}"
        ref = str(args.get("paper", ""))
        label = f"[{self.number_of(ref)}]" if ref in self.pool else ref
        return f"expanded {label} {args.get('direction', 'references')}"

    async def step(self, action: Action) -> StepResult:
        self.turn += 1
        answer = ANSWER_TAG.findall(action.text)
        if answer:
            selected, unknown = self.selection(answer[-1])
            return StepResult(observation=None, done=True,
                              info={"selected": selected, "unknown_selections": unknown, "pool": len(self.pool)})
        parsed = self.format.parse(action.text)
        calls = parsed.calls[: self.max_calls_per_turn]
        messages = [{"role": "assistant", "content": action.text}]
        errors: Counter[str] = Counter()
        new_papers: list[dict[str, Any]] = []
        counts = Counter()
        self.last_errors = []
        if not calls:
            errors["no_action"] += 1
            self.last_errors.append(NO_ACTION)
            messages.append({"role": "user", "content": NO_ACTION})
            feedback = NO_ACTION
        else:
            for call in calls:
                self._prepare(call)
            results = await asyncio.gather(*(self.run_call(c) for c in calls))
            for call, res in zip(calls, results):
                messages.append(self.format.result_message(call, res.text))
                if res.error:
                    errors[res.error] += 1
                    self.last_errors.append(res.text)
                    continue
                counts["searches" if call.name == "paper_search" else "expansions"] += 1
                self.actions.append(self._describe(call))
                for paper in res.info.get("papers") or []:
                    if paper["id"] not in self.pool:
                        self.pool[paper["id"]] = paper
                        new_papers.append(paper)
                if "unknown_id" in res.info:
                    self.last_errors.append(res.text)
            feedback = "\n".join(r.text for r in results)
        self.tool_errors.update(errors)
        self.turns.append(messages)
        return StepResult(observation=self.observation(), truncated=self.turn >= self.max_turns,
                          feedback=feedback,
                          info={"tool_calls": len(calls), "tool_errors": dict(errors), "new_papers": new_papers,
                                "pool": len(self.pool), **counts})

    # -- scripted expert ----------------------------------------------------------------------------------------
    def _gold_titles(self, row: dict[str, Any]) -> list[tuple[str, str]]:
        papers = (row.get("extra_info") or {}).get("gold_papers") or []
        return [(str(p.get("id")), str(p.get("title") or "")) for p in papers if p.get("title")]

    @staticmethod
    def _call(name: str, arguments: dict[str, Any]) -> str:
        return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "</tool_call>"

    def expert_action(self) -> str | None:
        if self._expert_state is None:  # the row brought its own demonstration
            return super().expert_action()
        state = self._expert_state
        if "paper_search" not in self.tools or not self.gold:
            return None
        missing = [(pid, title) for pid, title in state["titles"] if pid not in self.pool]
        last_turn = self.turn >= self.max_turns - 1
        if not state["searched"] and not last_turn:
            state["searched"] = True
            return self._call("paper_search", {"query": key_words(self.query, self.expert_words)})
        if missing and not last_turn:
            pid, title = missing[0]
            state["titles"] = [t for t in state["titles"] if t[0] != pid]
            return self._call("paper_search", {"query": key_words(title, self.expert_words)})
        found = [self.number_of(pid) for pid in self.gold if pid in self.pool]
        return f"<answer>{', '.join(map(str, found))}</answer>" if found else "<answer></answer>"

    def load_expert(self, row: dict[str, Any]) -> None:
        super().load_expert(row)
        self._expert_state = None if getattr(self, "_expert_actions", None) else {}
