"""``agentr1-core papers prepare --out DIR``: the paper-search recipe's full query files and a corpus.

Reads a query file in ScholarGym's format (default: ScholarGym's ``data/scholargym_bench.jsonl``, 2,536 queries of
AutoScholarQuery, RealScholarQuery and LitSearch with their gold arXiv papers) or PaSa's, and writes ``train.jsonl``
(the sources named by ``--train-source``, default AutoScholarQuery's dev queries) and ``test.jsonl`` (everything
else), refusing any query id or query text on both sides. The corpus ``corpus.jsonl`` holds the papers of
``--papers`` (a JSONL of paper records, or a JSON list or id -> record object, e.g. an arXiv metadata snapshot or
ScholarGym's paper database, downloaded by the user) plus every gold paper it lacks, title-only: without
``--papers`` the corpus is the title-only set of all gold papers. Prints the variables the recipe configs read.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Iterator

from agentr1_core.fetch import FetchError, add_prepare_command, fetch, sources_from_args

from agentr1_tools_papers.data import QueryFileError, gold_papers, read_query_records
from agentr1_tools_papers.papers import CorpusError, jsonl_records, paper_from_record

SCHOLARGYM_COMMIT = "f426fd15e3ff28ee11ddeafc253dffd73ef88500"
SOURCES = {"queries": f"https://raw.githubusercontent.com/shenhao-stu/ScholarGym/{SCHOLARGYM_COMMIT}/data/"
                      "scholargym_bench.jsonl"}
TRAIN_PREFIX = "AutoScholarQuery_dev"


def paper_records(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` of a paper file: JSONL (one paper per line), a JSON list of papers, or a JSON object
    mapping paper id -> record."""
    with open(path, encoding="utf-8") as fh:
        try:
            head = json.loads(fh.readline())
        except json.JSONDecodeError:
            head = None
    if isinstance(head, dict) and "title" in head:
        yield from jsonl_records(path, CorpusError, "paper file")
        return
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CorpusError(f"{path}: neither JSONL papers nor a JSON list or object ({exc.msg})") from None
    if not isinstance(data, (dict, list)):
        raise CorpusError(f"{path}: expected papers as JSONL, a JSON list or an id -> paper object")
    items = data.items() if isinstance(data, dict) else enumerate(data)
    for key, rec in items:
        if isinstance(data, dict) and isinstance(rec, dict) and not any(k in rec for k in ("id", "arxiv_id")):
            rec = {**rec, "id": key}
        yield f"{path}[{key!r}]", rec


def split_queries(queries: Path, train_sources: list[str]) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """Train and test lines of a query file, and every gold paper (id, title, year)."""
    train, test, gold, seen = [], [], {}, {}
    for where, rec in read_query_records(queries):
        qid = str(rec.get("qid", ""))
        text = " ".join(str(rec.get("query", rec.get("question", ""))).lower().split())
        side = "train" if any(qid.startswith(s) or rec.get("source") == s for s in train_sources) else "test"
        for key in (f"qid:{qid}" if qid else None, f"text:{text}"):
            if key and seen.setdefault(key, side) != side:
                raise FetchError(f"{where}: query {key[5:]!r} is on both the training and the held-out side")
        (train if side == "train" else test).append(json.dumps(rec, ensure_ascii=False))
        for paper in gold_papers(rec, where):
            gold.setdefault(paper["id"], paper)
    return train, test, list(gold.values())


def write_corpus(out: Path, gold: list[dict[str, Any]], papers: Path | None) -> tuple[int, int]:
    """``corpus.jsonl``: the papers of ``papers`` then the gold papers it lacks; returns (total, title-only)."""
    seen: set[str] = set()
    tmp = out.with_suffix(".part")
    with open(tmp, "w", encoding="utf-8") as fh:
        if papers is not None:
            for where, rec in paper_records(papers):
                paper = paper_from_record(rec, where)
                if paper.id not in seen:
                    seen.add(paper.id)
                    fh.write(json.dumps({**paper.to_dict(), "references": paper.references,
                                         "citations": paper.citations}, ensure_ascii=False) + "\n")
        added = 0
        for g in gold:
            if g["id"] not in seen and g["title"]:
                seen.add(g["id"])
                added += 1
                fh.write(json.dumps(g, ensure_ascii=False) + "\n")
    tmp.replace(out)
    return len(seen), added


def cmd_prepare(args: argparse.Namespace) -> int:
    try:
        return _prepare(args)
    except (CorpusError, QueryFileError) as exc:  # bad input files: one line, exit code 2
        raise FetchError(str(exc)) from None


def _prepare(args: argparse.Namespace) -> int:
    out = Path(args.out).expanduser().resolve()
    source = sources_from_args(args, SOURCES)["queries"]
    queries = fetch(source, out / "queries.jsonl", quiet=args.quiet)
    train, test, gold = split_queries(queries, args.train_source or [TRAIN_PREFIX])
    if not train or not test:
        raise FetchError(f"{queries}: the split left {len(train)} training and {len(test)} held-out queries; "
                         "choose the training side with --train-source")
    for name, lines in (("train", train), ("test", test)):
        (out / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    total, title_only = write_corpus(out / "corpus.jsonl", gold, Path(args.papers) if args.papers else None)
    print(f"wrote {out / 'train.jsonl'} ({len(train):,} queries), {out / 'test.jsonl'} ({len(test):,}), "
          f"{out / 'corpus.jsonl'} ({total:,} papers, {title_only:,} of them title-only)")
    print(f"export PAPERS_TRAIN={out / 'train.jsonl'} PAPERS_TEST={out / 'test.jsonl'} "
          f"PAPERS_CORPUS={out / 'corpus.jsonl'}")
    return 0


def register_prepare(sub: Any) -> None:
    parser = add_prepare_command(sub, "fetch the paper-search queries and write the recipe's files and corpus",
                                 SOURCES, "folder for train.jsonl, test.jsonl and corpus.jsonl", cmd_prepare)
    parser.add_argument("--papers", default="", help="a paper file with abstracts (JSONL, or a JSON list/object)")
    parser.add_argument("--train-source", action="append", default=[], metavar="QID_PREFIX_OR_SOURCE",
                        help=f"queries for training (a qid prefix or a source name; default {TRAIN_PREFIX})")
