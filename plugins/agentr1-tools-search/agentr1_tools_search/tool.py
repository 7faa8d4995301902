"""The ``search`` tool: top-k passages for a query, as a compact numbered list with titles.

The retriever (BM25 by default, dense as an option, or a remote one over HTTP) is opened when the tool is built, so a
missing corpus or index fails at startup with one line, not in the middle of a run. Bad queries (empty, too long)
come back as error text for the model; searches run in a worker thread so other episodes keep going.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentr1_core.tools import BaseTool, ToolResult

from agentr1_tools_search.bm25 import Hit


def format_hits(hits: list[Hit], max_chars: int) -> str:
    """``[1] Title\\ntext`` blocks, each body cut to ``max_chars`` characters at a word boundary."""
    blocks = []
    for i, hit in enumerate(hits, 1):
        text = " ".join(hit.passage.text.split())
        if len(text) > max_chars:
            cut = text[:max_chars].rsplit(" ", 1)[0] if " " in text[:max_chars] else text[:max_chars]
            text = cut + " ..."
        title = hit.passage.title or f"passage {hit.passage.id}"
        blocks.append(f"[{i}] {title}\n{text}")
    return "\n".join(blocks)


class SearchTool(BaseTool):
    """Search a local corpus. Params: ``corpus`` (JSONL; empty: the shipped HotpotQA sample), ``index`` (a folder
    built by ``agentr1-core search index``), ``retriever`` (bm25 | dense), ``dense_model``, ``url`` (a retriever
    served with ``agentr1-core search serve``; then corpus/index are not read here), ``top_k``, ``max_chars``
    (per passage), ``max_query_chars``."""

    name = "search"
    description = ("Search an encyclopedia. Returns the most relevant passages (title and text) for a query. "
                   "Use short keyword queries, e.g. a person's or a film's name.")
    parameters = {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "what to look for, a few keywords"}},
        "required": ["query"],
    }
    runs_in_thread = False  # execute hands the search to a worker thread itself

    def __init__(self, corpus: str = "", index: str = "", retriever: str = "bm25", dense_model: str = "",
                 url: str = "", top_k: int = 3, max_chars: int = 400, max_query_chars: int = 300,
                 auto_build: bool = True, timeout: float = 10.0) -> None:
        if top_k < 1:
            raise ValueError(f"search: top_k must be at least 1, got {top_k}")
        if max_chars < 20:
            raise ValueError(f"search: max_chars must be at least 20, got {max_chars}")
        self.top_k = top_k
        self.max_chars = max_chars
        self.max_query_chars = max_query_chars
        self.timeout = timeout
        if url:
            from agentr1_tools_search.retriever import RemoteRetriever

            self.retriever: Any = RemoteRetriever(url, timeout=timeout)
        else:
            from agentr1_tools_search.retriever import open_retriever

            self.retriever = open_retriever(corpus, index, retriever, dense_model, auto_build)

    def check_query(self, query: str) -> str | None:
        if not query.strip():
            return "Error: search: the query is empty; write a few keywords, e.g. the name of a person or place"
        if len(query) > self.max_query_chars:
            return (f"Error: search: the query is {len(query)} characters long; the limit is "
                    f"{self.max_query_chars}. Use a few keywords")
        return None

    def search(self, query: str) -> ToolResult:
        """Synchronous search (what ``execute`` runs in a thread)."""
        problem = self.check_query(query)
        if problem:
            return ToolResult(problem, error="bad_arguments")
        hits = self.retriever.search(query.strip(), self.top_k)
        if not hits:
            return ToolResult(f"No passages found for {query.strip()!r}. Try other keywords.",
                              info={"hits": []})
        return ToolResult(format_hits(hits, self.max_chars),
                          info={"hits": [{"id": h.passage.id, "title": h.passage.title,
                                          "text": h.passage.text, "score": h.score} for h in hits]})

    async def execute(self, **arguments: Any) -> ToolResult:
        return await asyncio.to_thread(self.search, str(arguments.get("query", "")))
