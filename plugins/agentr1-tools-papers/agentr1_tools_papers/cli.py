"""``agentr1-core papers``: ``index`` (build a corpus's BM25 index), ``query`` (what the tool shows for one
search), ``serve`` (a corpus as a Semantic-Scholar-style API on loopback, for several training processes), and
``prepare`` (the full query files and a corpus, ``agentr1_tools_papers.prepare``). Registered through the
``agentr1_cli_commands`` hook."""

from __future__ import annotations

import argparse
import json


def cmd_index(args: argparse.Namespace) -> int:
    from agentr1_tools_papers.index import build_index
    from agentr1_tools_papers.papers import read_corpus

    papers = list(read_corpus(args.corpus))
    out = build_index(args.corpus, args.out, papers=papers, progress=not args.quiet)
    print(f"indexed {len(papers):,} papers of {args.corpus} into {out}")
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    from agentr1_tools_papers.tools import PaperSearchTool

    tool = PaperSearchTool(corpus=args.corpus, index=args.index, url=args.url, top_k=args.top_k,
                           snippet_chars=args.snippet_chars)
    result = tool.run(query=args.query, year_max=args.year_max)
    if args.json:
        print(json.dumps({"text": result.text, "error": result.error, **result.info}, ensure_ascii=False, indent=2))
    else:
        print(result.text)
    return 1 if result.error else 0


def cmd_serve(args: argparse.Namespace) -> int:
    from agentr1_tools_papers.server import serve
    from agentr1_tools_papers.tools import open_service

    serve(open_service(args.corpus, args.index), args.host, args.port)
    return 0


def _corpus_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", default="", help="paper corpus JSONL (default: the shipped ScholarGym sample)")
    p.add_argument("--index", default="", help="index folder built by `agentr1-core papers index`")


def register(parser: argparse.ArgumentParser) -> None:
    from agentr1_tools_papers.prepare import register_prepare

    sub = parser.add_subparsers(dest="papers_command", metavar="ACTION", required=True)
    register_prepare(sub)
    idx = sub.add_parser("index", help="build the BM25 index of a paper corpus ({id, title, abstract?} per line)")
    idx.add_argument("corpus", metavar="CORPUS.jsonl")
    idx.add_argument("--out", default=None, help="index folder (default: the cache, where the tools look)")
    idx.add_argument("--quiet", action="store_true", help="no progress bar")
    idx.set_defaults(func=cmd_index)

    query = sub.add_parser("query", help="search once and print the papers as the tool shows them")
    query.add_argument("query")
    _corpus_args(query)
    query.add_argument("--url", default="", help="a Semantic-Scholar-style API instead of a corpus")
    query.add_argument("--year-max", type=int, default=None)
    query.add_argument("--top-k", type=int, default=5)
    query.add_argument("--snippet-chars", type=int, default=0)
    query.add_argument("--json", action="store_true")
    query.set_defaults(func=cmd_query)

    srv = sub.add_parser("serve", help="serve a corpus as a Semantic-Scholar-style API (the tools' url= mode)")
    _corpus_args(srv)
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=4000)
    srv.set_defaults(func=cmd_serve)
