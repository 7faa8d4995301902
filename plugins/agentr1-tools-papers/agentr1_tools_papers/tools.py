"""The ``paper_search`` and ``paper_expand`` tools, over one paper service (offline index or HTTP API).

Both tools open their service when they are built, so a missing corpus or an unreachable service stops a run at
startup with one line (the run's preflight builds the env and its tools before the model loads). ``execute`` is
synchronous: the core runs each call in its own thread under the tool's timeout. A service error during an episode is an error observation the agent sees, and an unknown paper
id on expand is a plain observation ("no paper with id ..."), never a crash.
"""

from __future__ import annotations

import os
from typing import Any

from agentr1_core.tools import BaseTool, ToolResult

from agentr1_tools_papers.papers import DIRECTIONS, Paper, ServiceError

SHIPPED_CORPUS = "data/scholargym_papers.jsonl"


def shipped_corpus() -> str:
    from agentr1_core.named_configs import package_data

    return str(package_data("agentr1_tools_papers", SHIPPED_CORPUS))


def open_service(corpus: str = "", index: str = "", url: str = "", timeout: float = 10.0, retries: int = 2,
                 max_concurrency: int = 4, api_key: str = "") -> Any:
    """The paper service a tool talks to: the HTTP API at ``url`` (``"env"``: ``$AGENTR1_PAPER_SERVICE``) checked
    once, else the offline index of ``corpus`` (empty: the shipped ScholarGym sample), shared per process."""
    if url:
        from agentr1_tools_papers.http_service import HttpPaperService

        service = HttpPaperService("" if url == "env" else url, timeout=timeout, retries=retries,
                                   max_concurrency=max_concurrency, api_key=api_key or os.environ.get(
                                       "AGENTR1_PAPER_SERVICE_KEY", ""))
        service.check()
        return service
    from agentr1_tools_papers.index import OfflineIndex

    return OfflineIndex.open(corpus or shipped_corpus(), index or None)


def format_papers(papers: list[Paper], snippet_chars: int) -> str:
    """One line per paper (``[id] Title (year)``), plus an abstract snippet when ``snippet_chars`` > 0."""
    lines = []
    for p in papers:
        lines.append(f"[{p.id}] {p.title}" + (f" ({p.year})" if p.year else ""))
        if snippet_chars > 0 and p.abstract:
            text = p.abstract if len(p.abstract) <= snippet_chars else (
                p.abstract[:snippet_chars].rsplit(" ", 1)[0] + " ...")
            lines.append(f"    {text}")
    return "\n".join(lines)


def paper_dicts(papers: list[Paper]) -> list[dict[str, Any]]:
    return [p.to_dict() for p in papers]


class _PaperTool(BaseTool):
    def __init__(self, corpus: str = "", index: str = "", url: str = "", top_k: int = 5, snippet_chars: int = 0,
                 timeout: float = 10.0, retries: int = 2, max_concurrency: int = 4, api_key: str = "") -> None:
        if top_k < 1:
            raise ValueError(f"{self.name}: top_k must be at least 1, got {top_k}")
        if snippet_chars < 0:
            raise ValueError(f"{self.name}: snippet_chars must be >= 0, got {snippet_chars}")
        self.top_k, self.snippet_chars = top_k, snippet_chars
        self.service = open_service(corpus, index, url, timeout, retries, max_concurrency, api_key)

    def _result(self, papers: list[Paper], empty: str) -> ToolResult:
        if not papers:
            return ToolResult(empty, info={"papers": []})
        return ToolResult(format_papers(papers, self.snippet_chars), info={"papers": paper_dicts(papers)})

    def execute(self, **arguments: Any) -> ToolResult:
        try:
            return self.run(**arguments)
        except ServiceError as exc:
            return ToolResult(f"Error: {self.name}: the paper service failed: {exc}", error="service_error")

    def run(self, **arguments: Any) -> ToolResult:
        raise NotImplementedError


class PaperSearchTool(_PaperTool):
    """Search papers by keywords. Params: ``corpus`` (JSONL; empty: the shipped sample), ``index`` (a folder from
    ``agentr1-core papers index``), ``url`` (a Semantic-Scholar-style API; ``env``: ``$AGENTR1_PAPER_SERVICE``),
    ``top_k``, ``snippet_chars`` (abstract characters per paper), ``timeout``/``retries``/``max_concurrency``
    (HTTP), ``max_query_chars``."""

    name = "paper_search"
    description = ("Search academic papers by keywords. Returns papers as [paper id] title (year). "
                   "Use a few key words of the topic, e.g. 'graph attention anomaly detection'.")
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "a few keywords of the topic"},
            "year_max": {"type": "integer", "description": "optional: only papers published in or before this year"},
        },
        "required": ["query"],
    }

    def __init__(self, max_query_chars: int = 300, **params: Any) -> None:
        super().__init__(**params)
        self.max_query_chars = max_query_chars

    def run(self, query: Any = "", year_max: Any = None, **_: Any) -> ToolResult:
        query = str(query).strip()
        if not query:
            return ToolResult("Error: paper_search: the query is empty; write a few keywords",
                              error="bad_arguments")
        if len(query) > self.max_query_chars:
            return ToolResult(f"Error: paper_search: the query is {len(query)} characters long; the limit is "
                              f"{self.max_query_chars}. Use a few keywords", error="bad_arguments")
        try:
            cutoff = None if year_max in (None, "") else int(year_max)
        except (TypeError, ValueError):
            return ToolResult(f"Error: paper_search: year_max must be a year, got {year_max!r}",
                              error="bad_arguments")
        return self._result(self.service.search(query, self.top_k, cutoff),
                            f"No papers found for {query!r}. Try other keywords.")


class PaperExpandTool(_PaperTool):
    """The papers citing a paper, or cited by it. Same params as ``paper_search`` (point both at one corpus or
    service)."""

    name = "paper_expand"
    description = ("List the papers that cite a paper (direction 'citations') or that it cites ('references'). "
                   "Give the paper id shown in brackets by paper_search.")
    parameters = {
        "type": "object",
        "properties": {
            "paper": {"type": "string", "description": "a paper id, as shown in brackets"},
            "direction": {"type": "string", "enum": list(DIRECTIONS), "description": "citations or references"},
        },
        "required": ["paper"],
    }

    def run(self, paper: Any = "", direction: Any = "references", **_: Any) -> ToolResult:
        pid = str(paper).strip().strip("[]")
        if not pid:
            return ToolResult("Error: paper_expand: give a paper id", error="bad_arguments")
        direction = str(direction or "references").strip().lower()
        if direction not in DIRECTIONS:
            return ToolResult(f"Error: paper_expand: direction must be citations or references, got "
                              f"{direction!r}", error="bad_arguments")
        if self.service.paper(pid) is None:
            return ToolResult(f"No paper with id {pid!r}. Use an id shown in brackets by paper_search.",
                              info={"papers": [], "unknown_id": pid})
        papers = self.service.neighbours(pid, direction, self.top_k)
        return self._result(papers, f"No {direction} known for paper {pid}.")
