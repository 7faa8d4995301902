"""``agentr1-core search``: ``index`` (build an index with a progress bar), ``serve`` (HTTP on loopback),
``query`` (print the tool's answer for one query), ``prepare`` (fetch the full HotpotQA data). Registered through
the ``agentr1_cli_commands`` hook."""

from __future__ import annotations

import argparse
import json


def cmd_index(args: argparse.Namespace) -> int:
    from agentr1_tools_search.retriever import build_index

    out, meta = build_index(args.corpus, args.out, kind=args.retriever, dense_model=args.dense_model,
                            progress=not args.quiet)
    print(f"indexed {meta['num_passages']} passages of {args.corpus} into {out} ({meta['build_seconds']:.1f}s)")
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    from agentr1_tools_search.tool import SearchTool

    tool = SearchTool(corpus=args.corpus or "", index=args.index or "", retriever=args.retriever,
                      dense_model=args.dense_model, top_k=args.top_k, max_chars=args.max_chars)
    result = tool.search(args.query)
    if args.json:
        print(json.dumps({"text": result.text, "error": result.error, **result.info}, ensure_ascii=False, indent=2))
    else:
        print(result.text)
    return 1 if result.error else 0


def cmd_serve(args: argparse.Namespace) -> int:
    from agentr1_tools_search.retriever import open_retriever
    from agentr1_tools_search.server import make_server

    retriever = open_retriever(args.corpus or "", args.index or "", args.retriever, args.dense_model)
    server = make_server(retriever, args.host, args.port)
    print(f"serving {len(retriever)} passages on {server.url} (POST /search); Ctrl-C stops", flush=True)
    server.serve_forever()
    return 0


def _source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--retriever", choices=("bm25", "dense"), default="bm25")
    p.add_argument("--dense-model", default="", help="sentence-transformers model (folder or id) for dense")


def register(parser: argparse.ArgumentParser) -> None:
    from agentr1_tools_search.prepare import register_prepare

    sub = parser.add_subparsers(dest="search_command", metavar="ACTION", required=True)
    register_prepare(sub)
    idx = sub.add_parser("index", help="build an index of a JSONL corpus ({id, title?, contents} per line)")
    idx.add_argument("corpus", metavar="CORPUS.jsonl")
    idx.add_argument("--out", default=None, help="index folder (default: CORPUS.jsonl.bm25 next to the corpus)")
    idx.add_argument("--quiet", action="store_true", help="no progress bar")
    _source_args(idx)
    idx.set_defaults(func=cmd_index)

    query = sub.add_parser("query", help="search once and print the passages as the tool shows them")
    query.add_argument("query")
    query.add_argument("--corpus", default="", help="JSONL corpus (default: the shipped HotpotQA sample)")
    query.add_argument("--index", default="", help="index folder")
    query.add_argument("--top-k", type=int, default=3)
    query.add_argument("--max-chars", type=int, default=400)
    query.add_argument("--json", action="store_true")
    _source_args(query)
    query.set_defaults(func=cmd_query)

    serve = sub.add_parser("serve", help="serve a retriever over HTTP for the tool's url= mode")
    serve.add_argument("--corpus", default="")
    serve.add_argument("--index", default="")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    _source_args(serve)
    serve.set_defaults(func=cmd_serve)

