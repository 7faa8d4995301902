"""Papers and paper services: the ``Paper`` record, corpus files, and the ``PaperService`` interface.

A paper service answers three questions: which papers match a query (``search``), what one paper is (``paper``),
and which papers cite it or it cites (``neighbours``). Two services implement it: ``OfflineIndex`` (BM25 over a
corpus JSONL, ``agentr1_tools_papers.index``) and ``HttpPaperService`` (a Semantic-Scholar-style API,
``agentr1_tools_papers.http_service``). The tools and the env only speak this interface.

A corpus line is one JSON object: ``id`` (``arxiv_id``/``paperId`` are accepted), ``title``, and optionally
``abstract``, ``year``, ``references`` and ``citations`` (lists of paper ids). A line that is not such a record
raises ``CorpusError`` naming the file and line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Protocol

from agentr1_core.jsonl import JsonlError, iter_jsonl

DIRECTIONS = ("citations", "references")


class CorpusError(ValueError):
    """A corpus file that cannot be read: missing, or a line that is not a paper record (names file and line)."""


class ServiceError(RuntimeError):
    """A paper service that did not answer usefully (unreachable, an HTTP error, malformed JSON)."""


@dataclass
class Paper:
    id: str
    title: str
    year: int | None = None
    abstract: str = ""
    references: list[str] = field(default_factory=list)
    citations: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "year": self.year, "abstract": self.abstract}


class PaperService(Protocol):
    """What the paper tools need. Every method may raise ``ServiceError``; an unknown id is ``None`` / ``[]``."""

    def search(self, query: str, k: int, year_max: int | None = None) -> list[Paper]: ...

    def paper(self, paper_id: str) -> Paper | None: ...

    def neighbours(self, paper_id: str, direction: str, k: int) -> list[Paper]: ...


def _year(value: Any, where: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise CorpusError(f"{where}: year must be a number, got {value!r}") from None


def _ids(value: Any, key: str, where: str) -> list[str]:
    if value in (None, ""):
        return []
    if not isinstance(value, list):
        raise CorpusError(f"{where}: {key} must be a list of paper ids")
    return [str(v["paperId"] if isinstance(v, dict) and "paperId" in v else v) for v in value]


def paper_from_record(rec: Any, where: str) -> Paper:
    """A ``Paper`` from one corpus record; ``where`` (``file:line``) prefixes every error."""
    if not isinstance(rec, dict):
        raise CorpusError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    pid = rec.get("id", rec.get("arxiv_id", rec.get("paperId")))
    title = rec.get("title")
    if pid in (None, "") or not isinstance(title, str) or not title.strip():
        raise CorpusError(f"{where}: a paper needs an id (id, arxiv_id or paperId) and a non-empty title")
    return Paper(id=str(pid), title=" ".join(title.split()), year=_year(rec.get("year"), where),
                 abstract=" ".join(str(rec.get("abstract") or "").split()),
                 references=_ids(rec.get("references"), "references", where),
                 citations=_ids(rec.get("citations"), "citations", where))


def jsonl_records(path: str | os.PathLike, error: type[ValueError], what: str) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` per non-blank line of a JSONL file (``where`` is ``file:line``); a missing file raises
    ``error`` naming ``what`` the file holds, and the lines that are not JSON objects are raised together as
    ``error`` once the file was read, one ``file:line`` each (``agentr1_core.jsonl``)."""
    file = Path(path)
    if not file.is_file():
        raise error(f"{what} not found: {file}")
    try:
        yield from iter_jsonl(file)
    except JsonlError as exc:
        raise error(str(exc)) from None


def read_corpus(path: str | os.PathLike) -> Iterator[Paper]:
    """Papers of a corpus JSONL, in file order (blank lines skipped)."""
    for where, rec in jsonl_records(path, CorpusError, "paper corpus"):
        yield paper_from_record(rec, where)
