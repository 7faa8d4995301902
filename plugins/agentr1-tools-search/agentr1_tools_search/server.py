"""Serve one retriever over HTTP so that many rollout workers share one loaded index.

``POST /search`` with ``{"query": str, "top_k": int}`` answers ``{"hits": [{id, title, text, score}]}``;
``GET /health`` answers ``{"passages": N}``. Standard library only (a threading HTTP server); it binds to loopback
by default and has no authentication, so do not expose it beyond the machine.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY = 64 * 1024
MAX_TOP_K = 100


def make_handler(retriever: Any, max_query_chars: int = 2000) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, payload: dict[str, Any]) -> None:
            body = json.dumps(payload, ensure_ascii=False).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            if self.path == "/health":
                self._send(200, {"passages": len(retriever)})
            else:
                self._send(404, {"error": f"unknown path {self.path}; use POST /search or GET /health"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/search":
                self._send(404, {"error": f"unknown path {self.path}; use POST /search"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._send(413, {"error": f"request body over {MAX_BODY} bytes"})
                return
            try:
                req = json.loads(self.rfile.read(length) or b"{}")
                query, k = str(req["query"]), int(req.get("top_k", 3))
            except (ValueError, KeyError, TypeError):
                self._send(400, {"error": 'body must be JSON {"query": str, "top_k": int}'})
                return
            if not query.strip() or len(query) > max_query_chars:
                self._send(400, {"error": f"query must be 1..{max_query_chars} characters"})
                return
            hits = retriever.search(query, max(1, min(k, MAX_TOP_K)))
            self._send(200, {"hits": [h.as_dict() for h in hits]})

        def log_message(self, format: str, *args: Any) -> None:  # quiet by default
            return None

    return Handler


def make_server(retriever: Any, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server bound to ``host:port`` (port 0: any free port; read it from ``server.server_address``)."""
    server = ThreadingHTTPServer((host, port), make_handler(retriever))
    server.daemon_threads = True
    return server
