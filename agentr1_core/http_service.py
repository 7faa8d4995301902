"""One serve loop for small JSON-over-HTTP services and static pages on 127.0.0.1 (standard library only).

Routes map ``(method, path)`` to a handler ``handler(request) -> (status, payload)``; ``payload`` is a JSON-able
value, or a ``Page`` (bytes with a content type). A path ending in ``*`` matches every path with that prefix
(``("GET", "/paper/*")``). ``pages`` are static GET pages. ``make_server`` binds to 127.0.0.1 by default;
``start()`` serves in a background thread (tests), ``serve_forever()`` until ``shutdown()`` or, called from the main
thread (the commands), until Ctrl-C or SIGTERM; both close the listening socket when they stop.

What every service gets (``Limits``):

- a listen backlog of 128 (the standard library's 5 resets clients under a burst of connections);
- at most ``max_connections`` connections handled at once, one thread each; the others wait in the backlog;
- one deadline for reading a whole request (request line, headers, body): an idle, half-open or trickling client
  loses its connection after ``read_timeout_s`` and frees its thread;
- a body only with a valid ``Content-Length`` (a missing one on POST/PUT/PATCH: 411; negative, not a number or
  chunked: 400/411; over ``max_body_bytes``: 413);
- JSON bodies parsed strictly: one object, UTF-8, no NaN/Infinity (nor 1e400), nesting at most ``max_json_depth``
  deep;
- a JSON error body ``{"error": {"message": ..., "type": ...}}`` for every refused request (404 unknown path,
  405 wrong method, 400 bad JSON, ...) and ``500`` for a handler that raised (the server keeps serving); a handler
  answers an error itself by raising ``HttpError``.

One request per connection (HTTP/1.0 replies). No TLS, no authentication, no keep-alive, no chunked bodies: do not
expose a service beyond the machine.
"""

from __future__ import annotations

import io
import json
import logging
import math
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping
from urllib.parse import parse_qs, urlsplit

LOOPBACK = "127.0.0.1"
BODY_METHODS = ("POST", "PUT", "PATCH")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
ERROR_TYPES = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed", 408: "request_timeout",
               411: "length_required", 413: "body_too_large", 500: "internal_error", 501: "not_implemented"}
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """What one client may cost the server."""

    max_body_bytes: int = 1024 * 1024
    read_timeout_s: float = 10.0  # the whole request, first byte to last
    max_connections: int = 32  # handled at once (one thread each); more wait in the listen backlog
    backlog: int = 128
    max_json_depth: int = 32


@dataclass(frozen=True)
class Page:
    """A static answer: bytes and their content type."""

    body: bytes
    content_type: str = "text/html; charset=utf-8"


@dataclass(frozen=True)
class Request:
    """One parsed request. ``path`` is as sent (percent-escapes kept); ``body`` is the JSON object of a
    POST/PUT/PATCH and ``None`` otherwise."""

    method: str
    path: str
    query: dict[str, list[str]] = field(default_factory=dict)
    body: dict[str, Any] | None = None


Handler = Callable[[Request], "tuple[int, Any]"]


class HttpError(Exception):
    """Raised by a handler (or the server) to answer ``status`` with the JSON error body."""

    def __init__(self, status: int, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind or ERROR_TYPES.get(status, "error")


def error_body(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind}}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def _nesting_depth(value: Any) -> int:
    """How deep lists and objects nest in a parsed JSON value (``[]`` is 1, ``[[1]]`` is 2), without recursion."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            pending.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def parse_json_object(raw: bytes, max_depth: int = Limits.max_json_depth) -> dict[str, Any]:
    """The JSON object in ``raw``, parsed strictly; ``HttpError(400)`` for anything else."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise HttpError(400, "the body is not UTF-8") from None
    too_deep = HttpError(400, f"the JSON body nests deeper than {max_depth} levels")
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:  # the parser's own stack ran out: far deeper than any limit
        raise too_deep from None
    except ValueError as exc:  # JSONDecodeError is a ValueError
        raise HttpError(400, f"the body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise HttpError(400, f"the body must be a JSON object, got {type(value).__name__}")
    if text.count("[") + text.count("{") > max_depth and _nesting_depth(value) > max_depth:
        raise too_deep
    return value


def _encode(payload: Any) -> tuple[bytes, str]:
    if isinstance(payload, Page):
        return payload.body, payload.content_type
    return json.dumps(payload, ensure_ascii=False).encode(), "application/json"


class _DeadlineReader(io.RawIOBase):
    """A socket's reading side where every ``recv`` waits at most until one deadline: a client that sends slowly
    cannot hold a connection longer than the deadline, however it spaces its bytes."""

    def __init__(self, sock: socket.socket, seconds: float) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = time.monotonic() + seconds

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request was not received in time")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _RequestHandler(BaseHTTPRequestHandler):
    server: LoopbackHttpServer
    server_version = "agentr1"

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the plain reader; the socket stays open
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self.server.limits.read_timeout_s))

    def log_message(self, format: str, *args: Any) -> None:  # quiet, as the services always were
        return None

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own refusals (bad request line, headers too long, ...) as JSON too."""
        self.close_connection = True
        self._reply(code, *_encode(error_body(message or HTTPStatus(code).phrase, ERROR_TYPES.get(code, "error"))))

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.connection.settimeout(self.server.limits.read_timeout_s)  # a client that does not read the answer
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _content_length(self) -> int | None:
        if self.headers.get("Transfer-Encoding"):
            raise HttpError(411, "send the body with a Content-Length (Transfer-Encoding is not supported)")
        values = {v.strip() for v in self.headers.get_all("Content-Length") or []}
        if not values:
            if self.command in BODY_METHODS:
                raise HttpError(411, f"a {self.command} needs a Content-Length header")
            return None
        if len(values) > 1:
            raise HttpError(400, "conflicting Content-Length headers")
        value = values.pop()
        if not (value.isascii() and value.isdigit()):
            raise HttpError(400, f"Content-Length must be a non-negative integer, got {value[:40]!r}")
        cap = self.server.limits.max_body_bytes
        if len(value) > 18 or int(value) > cap:
            raise HttpError(413, f"the body is over {cap} bytes")
        return int(value)

    def _read_body(self) -> bytes:
        length = self._content_length()
        if not length:
            return b""
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            raise HttpError(408, f"the request was not received within {self.server.limits.read_timeout_s:g}s") \
                from None
        if len(body) < length:
            raise HttpError(400, f"the body ended after {len(body)} of {length} bytes")
        return body

    def _answer(self) -> tuple[int, Any]:
        url = urlsplit(self.path)
        routes = self.server.routes
        handler = routes.find(self.command, url.path)
        raw = self._read_body()  # read even when refused below: unread bytes would reset the client's connection
        if handler is None:
            allowed = routes.methods(url.path)
            if allowed:
                raise HttpError(405, f"{self.command} is not allowed on {url.path}; use {', '.join(allowed)}")
            raise HttpError(404, f"unknown path {url.path}; known: {', '.join(routes.describe())}")
        body = parse_json_object(raw, self.server.limits.max_json_depth) if self.command in BODY_METHODS else None
        request = Request(self.command, url.path, parse_qs(url.query, keep_blank_values=True), body)
        status, payload = handler(request)
        return int(status), payload

    def _dispatch(self) -> None:
        self.close_connection = True
        try:
            status, payload = self._answer()
            body, content_type = _encode(payload)
        except HttpError as exc:
            status, (body, content_type) = exc.status, _encode(error_body(str(exc), exc.kind))
        except Exception as exc:  # a handler's bug must not leave the client without an answer
            log.error("%s %s failed", self.command, self.path, exc_info=True)
            message = " ".join(str(exc).split())[:300]
            status = 500
            body, content_type = _encode(error_body(f"{type(exc).__name__}: {message}" if message else
                                                    type(exc).__name__, "internal_error"))
        self._reply(status, body, content_type)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _dispatch  # noqa: N815


class Routes:
    """``(method, path)`` -> handler; a path ending in ``*`` is a prefix."""

    def __init__(self, routes: Mapping[tuple[str, str], Handler]) -> None:
        self._exact = {(m.upper(), p): h for (m, p), h in routes.items() if not p.endswith("*")}
        self._prefix = sorted(((m.upper(), p[:-1], h) for (m, p), h in routes.items() if p.endswith("*")),
                              key=lambda item: -len(item[1]))

    def find(self, method: str, path: str) -> Handler | None:
        if (method, path) in self._exact:
            return self._exact[(method, path)]
        return next((h for m, prefix, h in self._prefix if m == method and path.startswith(prefix)), None)

    def methods(self, path: str) -> list[str]:
        found = {m for m, p in self._exact if p == path} | {m for m, pre, _ in self._prefix if path.startswith(pre)}
        return sorted(found)

    def describe(self) -> list[str]:
        return sorted({f"{m} {p}" for m, p in self._exact} | {f"{m} {pre}*" for m, pre, _ in self._prefix})


class LoopbackHttpServer(ThreadingHTTPServer):
    """A threading HTTP server with the limits above; see ``make_server``."""

    daemon_threads = True

    def __init__(self, routes: Routes, host: str = LOOPBACK, port: int = 0, limits: Limits | None = None) -> None:
        self.routes = routes
        self.limits = limits or Limits()
        self.request_queue_size = self.limits.backlog  # listen() reads it when the server is activated
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._slots = threading.BoundedSemaphore(self.limits.max_connections)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        super().__init__((host, port), _RequestHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def process_request(self, request: Any, client_address: Any) -> None:
        """Hand the connection to a thread once one of ``max_connections`` is free; meanwhile new connections wait
        in the listen backlog."""
        while not self._slots.acquire(timeout=0.1):
            if self._stopping.is_set():
                self.shutdown_request(request)
                return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed outside a handler (the client reset it, ...): logged, never printed."""
        log.debug("connection from %s failed", client_address, exc_info=True)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve until ``shutdown()``, and in the main thread also until Ctrl-C or SIGTERM; then close the socket.

        In the main thread the loop runs in a second thread and the signals only set a flag: a ``KeyboardInterrupt``
        raised inside the loop's hand-off of a connection to its thread can leave a lock of ``threading`` held, and
        the process would hang instead of exiting."""
        if threading.current_thread() is not threading.main_thread():
            self._serve(poll_interval)
            return
        received: list[int] = []
        previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum))
                    for sig in STOP_SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN}  # nohup keeps its way
        try:
            self.start()
            while not received and self._thread is not None and self._thread.is_alive():
                time.sleep(0.1)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            self.stop()

    def _serve(self, poll_interval: float) -> None:
        try:
            super().serve_forever(poll_interval)
        finally:
            self.server_close()

    def shutdown(self) -> None:
        self._stopping.set()
        super().shutdown()

    def start(self) -> LoopbackHttpServer:
        """Serve in a daemon thread; ``stop()`` (or leaving a ``with`` block) ends it."""
        self._thread = threading.Thread(target=self._serve, args=(0.05,), daemon=True,
                                        name=f"http-service-{self.server_address[1]}")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self.shutdown()
            self._thread.join()
        self.server_close()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


def make_server(routes: Mapping[tuple[str, str], Handler] | None = None, pages: Mapping[str, Page] | None = None,
                host: str = LOOPBACK, port: int = 0, limits: Limits | None = None) -> LoopbackHttpServer:
    """A bound server (port 0: any free one; see ``server.url``) for ``routes`` and the static GET ``pages``."""
    table: dict[tuple[str, str], Handler] = dict(routes or {})
    for path, page in (pages or {}).items():
        table[("GET", path)] = lambda request, page=page: (200, page)
    return LoopbackHttpServer(Routes(table), host, port, limits)
