"""Serve any ``PaperService`` over HTTP under the Semantic-Scholar Graph API routes.

Several training processes can then share one loaded offline index through ``HttpPaperService``:

- ``GET /paper/search?query=Q&limit=K&fields=title,year,abstract[&year=-YYYY]`` answers
  ``{"total": n, "offset": 0, "data": [paper...]}``;
- ``GET /paper/{id}?fields=...`` answers one paper object;
- ``GET /paper/{id}/citations?fields=...&limit=K`` answers ``{"offset": 0, "data": [{"citingPaper": paper}...]}``
  and ``/references`` answers ``{"offset": 0, "data": [{"citedPaper": paper}...]}``.

A paper object always has ``paperId`` and the requested ``fields`` among title, year and abstract (title alone when
``fields`` is absent). Unknown ids and routes answer 404, a missing query or a bad parameter 400 (``query``: 1 to
2,000 characters, not blank; ``limit``: an integer from 1 to 100 for a search, to 1,000 for citations and
references, as S2 allows), a ``ServiceError`` of the served service 502, every error with a JSON body
``{"error": {"message", "type"}}``. Only the ``year=-YYYY`` form (an upper bound) of S2's year filter is understood.

The serve loop is the core's (``agentr1_core.http_service``: a 10-second deadline to send a whole request, 32
requests handled at once, a listen backlog of 128, GET only). It binds to loopback by default and has no
authentication, so do not expose it beyond the machine.
"""

from __future__ import annotations

import socketserver
from typing import Any
from urllib.parse import unquote

from agentr1_core.http_service import HttpError, Limits, LoopbackHttpServer, Request, make_server as make_http_server
from agentr1_tools_papers.papers import DIRECTIONS, Paper, PaperService, ServiceError

KNOWN_FIELDS = ("title", "year", "abstract")
MAX_SEARCH_LIMIT = 100
MAX_NEIGHBOUR_LIMIT = 1000
MAX_QUERY_CHARS = 2000
_NEIGHBOUR_KEY = {"citations": "citingPaper", "references": "citedPaper"}


def _fields(params: dict[str, list[str]]) -> list[str]:
    wanted = params.get("fields", ["title"])[0].split(",")
    return [f for f in KNOWN_FIELDS if f in {w.strip() for w in wanted}]


def _paper_obj(paper: Paper, fields: list[str]) -> dict[str, Any]:
    obj: dict[str, Any] = {"paperId": paper.id}
    for name in fields:
        obj[name] = getattr(paper, name)
    return obj


def _limit(params: dict[str, list[str]], default: int, most: int) -> int:
    raw = params.get("limit", [str(default)])[0].strip()
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 9 and 1 <= int(raw) <= most):
        raise HttpError(400, f"limit must be an integer from 1 to {most}, got {raw[:40]!r}")
    return int(raw)


def _year_max(params: dict[str, list[str]]) -> int | None:
    raw = params.get("year", [""])[0].strip()
    if not raw:
        return None
    if raw.startswith("-") and raw[1:].isascii() and raw[1:].isdigit() and len(raw) <= 6:
        return int(raw[1:])
    raise HttpError(400, f"year must be -YYYY (papers up to that year), got {raw!r}")


def _answer(service: PaperService, path: str, params: dict[str, list[str]]) -> dict[str, Any]:
    """The JSON answer for one GET; ``HttpError`` for 4xx."""
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if len(parts) < 2 or parts[0] != "paper" or not parts[1]:
        raise HttpError(404, f"unknown path {path}; use /paper/search, /paper/{{id}}, /paper/{{id}}/citations "
                             "or /paper/{id}/references")
    fields = _fields(params)
    if parts[1:] == ["search"]:
        query = params.get("query", [""])[0]
        if not query.strip() or len(query) > MAX_QUERY_CHARS:
            raise HttpError(400, f"query must be 1..{MAX_QUERY_CHARS} characters, not blank, got {len(query)}")
        found = service.search(query, _limit(params, 10, MAX_SEARCH_LIMIT), _year_max(params))
        return {"total": len(found), "offset": 0, "data": [_paper_obj(p, fields) for p in found]}
    paper_id = parts[1]
    if len(parts) > 3 or (len(parts) == 3 and parts[2] not in DIRECTIONS):
        raise HttpError(404, f"unknown path {path}")
    paper = service.paper(paper_id)
    if paper is None:
        raise HttpError(404, f"Paper with id {paper_id} not found")
    if len(parts) == 2:
        return _paper_obj(paper, fields)
    direction = parts[2]
    found = service.neighbours(paper_id, direction, _limit(params, 100, MAX_NEIGHBOUR_LIMIT))
    key = _NEIGHBOUR_KEY[direction]
    return {"offset": 0, "data": [{key: _paper_obj(p, fields)} for p in found]}


def make_routes(service: PaperService) -> dict[tuple[str, str], Any]:
    def answer(request: Request) -> tuple[int, dict[str, Any]]:
        try:
            return 200, _answer(service, request.path, request.query)
        except ServiceError as exc:
            raise HttpError(502, str(exc), "service_error") from None

    return {("GET", "/paper/*"): answer}


def make_server(service: PaperService, host: str = "127.0.0.1", port: int = 0) -> LoopbackHttpServer:
    """A server for ``service`` bound to ``host:port`` (port 0: any free port; see ``server.server_address``)."""
    return make_http_server(make_routes(service), host=host, port=port, limits=Limits(max_body_bytes=64 * 1024))


def server_url(server: socketserver.TCPServer) -> str:
    """The base URL to give ``HttpPaperService`` for ``server`` (this module's or any other TCP server)."""
    host, port = server.server_address[:2]
    host = host.decode() if isinstance(host, bytes) else host
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def serve(service: PaperService, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve ``service`` until interrupted, printing the URL to point ``AGENTR1_PAPER_SERVICE`` at."""
    server = make_server(service, host, port)
    source = getattr(service, "corpus", "")
    what = f"{type(service).__name__}{f' of {source}' if source else ''}"
    print(f"serving {what} at {server.url} (set AGENTR1_PAPER_SERVICE to this URL)", flush=True)
    server.serve_forever()
