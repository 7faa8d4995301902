"""Serve one retriever over HTTP so that many rollout workers share one loaded index.

``POST /search`` with ``{"query": str, "top_k": int}`` answers ``{"hits": [{id, title, text, score}]}``;
``GET /health`` answers ``{"passages": N}``. ``query`` must be a non-blank string of at most 2,000 characters and
``top_k`` (default 3) an integer from 1 to 100; anything else is a 400 whose message names the field.

The serve loop is the core's (``agentr1_core.http_service``): a body of at most 64 KiB with a Content-Length, one
10-second deadline to send a whole request, 32 requests handled at once with a listen backlog of 128, and a JSON
body ``{"error": {"message", "type"}}`` with every 4xx/5xx. It binds to loopback by default and has no
authentication, so do not expose it beyond the machine.
"""

from __future__ import annotations

import json
from typing import Any

from agentr1_core.http_service import HttpError, Limits, LoopbackHttpServer, Request, make_server as make_http_server

MAX_BODY = 64 * 1024
MAX_TOP_K = 100
MAX_QUERY_CHARS = 2000
DEFAULT_TOP_K = 3


def json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words (for error messages)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return {int: "a number", float: "a number", str: "a string", list: "an array"}.get(type(value), "an object")


def read_query(body: dict[str, Any], max_chars: int = MAX_QUERY_CHARS) -> str:
    if "query" not in body:
        raise HttpError(400, '"query" is missing; send {"query": str, "top_k": int}')
    query = body["query"]
    if not isinstance(query, str):
        raise HttpError(400, f'"query" must be a string, got {json_kind(query)}')
    if not query.strip() or len(query) > max_chars:
        raise HttpError(400, f'"query" must be 1..{max_chars} characters, not blank, got {len(query)}')
    return query


def read_top_k(body: dict[str, Any]) -> int:
    top_k = body.get("top_k", DEFAULT_TOP_K)
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise HttpError(400, f'"top_k" must be an integer from 1 to {MAX_TOP_K}, got {json_kind(top_k)}')
    if not 1 <= top_k <= MAX_TOP_K:
        raise HttpError(400, f'"top_k" must be an integer from 1 to {MAX_TOP_K}, got {str(top_k)[:40]}')
    return top_k


def make_routes(retriever: Any, max_query_chars: int = MAX_QUERY_CHARS) -> dict[tuple[str, str], Any]:
    def search(request: Request) -> tuple[int, dict[str, Any]]:
        body = request.body or {}
        query, k = read_query(body, max_query_chars), read_top_k(body)
        return 200, {"hits": [h.as_dict() for h in retriever.search(query, k)]}

    def health(request: Request) -> tuple[int, dict[str, Any]]:
        return 200, {"passages": len(retriever)}

    return {("POST", "/search"): search, ("GET", "/health"): health}


def make_server(retriever: Any, host: str = "127.0.0.1", port: int = 0) -> LoopbackHttpServer:
    """A server bound to ``host:port`` (port 0: any free port; read it from ``server.server_address``)."""
    return make_http_server(make_routes(retriever), host=host, port=port, limits=Limits(max_body_bytes=MAX_BODY))
