"""Paper-search queries as recipe rows (the ``scholar_queries`` dataset) and the shipped sample.

A query file is JSONL in ScholarGym's format (``query``, ``cited_paper``: ``[{arxiv_id, title, year}]``, ``qid``,
``date``, ``source``) or PaSa's (``question``, ``answer_arxiv_id`` with ``answer`` titles, ``qid``,
``source_meta.published_time``). A row is::

    {"data_source": "autoscholarquery", "prompt": QUERY, "reward_model": {"ground_truth": [paper ids]},
     "extra_info": {"query", "qid", "date", "source", "gold_papers": [{"id", "title", "year"}]}}

Queries without gold papers are skipped (nothing to find, nothing to score). The shipped sample (400 training and
100 held-out AutoScholarQuery queries and a 4,498-paper title-only corpus) is described in ``data/README.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from agentr1_tools_papers.papers import jsonl_records

SAMPLES = {"train": "data/autoscholar_train400.jsonl", "test": "data/autoscholar_test100.jsonl"}


class QueryFileError(ValueError):
    """A query file that is missing or has a line that is not a query record (names file and line)."""


def sample_path(split: str) -> Path:
    from agentr1_core.named_configs import package_data

    if split not in SAMPLES:
        raise QueryFileError(f"scholar_queries: no shipped sample for split {split!r}; valid: {', '.join(SAMPLES)}")
    return Path(package_data("agentr1_tools_papers", SAMPLES[split]))


def gold_papers(rec: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The gold papers (``id``, ``title``, ``year``) of one query record, ScholarGym or PaSa format."""
    if "cited_paper" in rec:
        papers = rec["cited_paper"]
        if not isinstance(papers, list):
            raise QueryFileError(f"{where}: cited_paper must be a list")
        out = []
        for p in papers:
            if not isinstance(p, dict) or not p.get("arxiv_id", p.get("id")):
                raise QueryFileError(f"{where}: each cited_paper needs an arxiv_id")
            out.append({"id": str(p.get("arxiv_id", p.get("id"))), "title": str(p.get("title") or ""),
                        "year": p.get("year")})
        return out
    ids, titles = rec.get("answer_arxiv_id"), rec.get("answer") or []
    if not isinstance(ids, list):
        raise QueryFileError(f"{where}: a query needs cited_paper (ScholarGym) or answer_arxiv_id (PaSa)")
    titles = titles if isinstance(titles, list) and len(titles) == len(ids) else [""] * len(ids)
    return [{"id": str(i), "title": str(t), "year": None} for i, t in zip(ids, titles)]


def _date(rec: dict[str, Any]) -> str:
    if rec.get("date"):
        return str(rec["date"])
    published = str((rec.get("source_meta") or {}).get("published_time") or "")
    return f"{published[:4]}-{published[4:6]}" if len(published) >= 6 and published[:6].isdigit() else published


def read_query_records(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, record)`` per non-blank line of a JSONL query file."""
    for where, rec in jsonl_records(path, QueryFileError, "query file"):
        if not isinstance(rec, dict):
            raise QueryFileError(f"{where}: expected a JSON object")
        yield where, rec


def query_row(rec: dict[str, Any], where: str, index: int) -> dict[str, Any] | None:
    """The recipe row of one query record, or None when it has no gold paper."""
    query = rec.get("query", rec.get("question"))
    if not isinstance(query, str) or not query.strip():
        raise QueryFileError(f"{where}: a query needs a non-empty query (or question) string")
    gold = gold_papers(rec, where)
    if not gold:
        return None
    source = str(rec.get("source") or "queries")
    qid = str(rec.get("qid", rec.get("id", index)))
    return {"data_source": source.lower().replace("pasa_", "").replace("_", ""), "prompt": query.strip(),
            "reward_model": {"ground_truth": [p["id"] for p in gold]},
            "extra_info": {"query": query.strip(), "qid": qid, "date": _date(rec), "source": source,
                           "gold_papers": gold}}


def load_scholar_queries(path: str = "", split: str = "train", limit: int = 0,
                         sources: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows of a query file (empty ``path``: the shipped sample of ``split``); ``sources`` keeps only records whose
    ``source`` is listed (e.g. ``[PASA_RealScholar]``); ``limit`` caps the rows."""
    file = Path(path) if path else sample_path(split)
    rows = []
    for i, (where, rec) in enumerate(read_query_records(file)):
        if sources and str(rec.get("source")) not in sources:
            continue
        row = query_row(rec, where, i)
        if row is not None:
            rows.append(row)
        if limit and len(rows) >= limit:
            break
    if not rows:
        raise QueryFileError(f"{file}: no query with gold papers" + (f" from sources {sources}" if sources else ""))
    return rows
