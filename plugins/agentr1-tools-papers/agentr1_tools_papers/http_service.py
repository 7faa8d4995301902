"""``HttpPaperService``: the ``PaperService`` interface over a Semantic-Scholar-style HTTP API.

It speaks the S2 Graph API shape (``/paper/search``, ``/paper/{id}``, ``/paper/{id}/citations`` and
``/references``), so it works against api.semanticscholar.org/graph/v1 and against ``agentr1_tools_papers.server``
serving any local service. Standard library only (``urllib.request``).

What it does: one timeout per request; bounded retries with exponential backoff on 429, 5xx, timeouts and
connection errors (refused, reset, closed before the answer), never on another 4xx; a ``limit`` within the API's
caps (100 papers a search, 1,000 citations or references); a semaphore bounding the requests in flight across
threads; an ``x-api-key`` header when a key is given; ``None`` / ``[]`` for an unknown paper (404). Every other
failure is a ``ServiceError`` of one line that names the URL and the cause. Papers without an id or a title are
skipped.

What it does not do: cache answers, page past the first page of results, honour ``Retry-After``, or fill
``Paper.references`` / ``Paper.citations`` (use ``neighbours`` for those).
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from agentr1_tools_papers.papers import DIRECTIONS, Paper, ServiceError

ENV_VAR = "AGENTR1_PAPER_SERVICE"
FIELDS = "title,year,abstract"
MAX_SEARCH_LIMIT = 100  # what S2 (and agentr1_tools_papers.server) accept as one search's limit
MAX_NEIGHBOUR_LIMIT = 1000  # and as one citations or references page's limit
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
_NEIGHBOUR_KEY = {"citations": "citingPaper", "references": "citedPaper"}


class _Retryable(Exception):
    """A failed attempt worth repeating (429, 5xx, timeout, connection error); the message is the cause."""


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _to_paper(obj: Any) -> Paper | None:
    """A ``Paper`` from one S2 paper object, or ``None`` when it has no id or no title."""
    if not isinstance(obj, dict):
        return None
    pid, title = obj.get("paperId"), obj.get("title")
    if pid in (None, "") or not isinstance(title, str) or not title.strip():
        return None
    try:
        year = int(obj["year"]) if obj.get("year") not in (None, "") else None
    except (TypeError, ValueError):
        year = None
    abstract = obj.get("abstract")
    return Paper(id=str(pid), title=" ".join(title.split()), year=year,
                 abstract=" ".join(abstract.split()) if isinstance(abstract, str) else "")


class HttpPaperService:
    """A ``PaperService`` backed by a Semantic-Scholar-style API at ``base_url``.

    ``base_url`` empty: read from the ``AGENTR1_PAPER_SERVICE`` environment variable. ``retries`` is the number of
    repeats after the first attempt; the n-th repeat waits ``backoff * 2 ** (n - 1)`` seconds.
    """

    def __init__(self, base_url: str = "", timeout: float = 10.0, retries: int = 2, backoff: float = 0.5,
                 max_concurrency: int = 4, api_key: str = "") -> None:
        url = (base_url or os.environ.get(ENV_VAR, "")).strip().rstrip("/")
        if not url:
            raise ValueError(f"no paper service URL: pass base_url or set {ENV_VAR} "
                             "(e.g. https://api.semanticscholar.org/graph/v1)")
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"paper service URL must start with http:// or https://, got {url!r}")
        if timeout <= 0 or retries < 0 or backoff < 0 or max_concurrency < 1:
            raise ValueError("paper service needs timeout > 0, retries >= 0, backoff >= 0 and max_concurrency >= 1")
        self.base_url = url
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.max_concurrency = int(max_concurrency)
        self._headers = {"Accept": "application/json", "User-Agent": "agentr1-tools-papers"}
        if api_key:
            self._headers["x-api-key"] = api_key
        self._slots = threading.BoundedSemaphore(self.max_concurrency)

    def __repr__(self) -> str:
        return f"HttpPaperService({self.base_url!r})"

    # -- PaperService ---------------------------------------------------------------------------------------------

    def search(self, query: str, k: int, year_max: int | None = None) -> list[Paper]:
        if k < 1 or not query.strip():
            return []
        params: dict[str, Any] = {"query": query, "limit": min(k, MAX_SEARCH_LIMIT), "fields": FIELDS}
        if year_max is not None:
            params["year"] = f"-{int(year_max)}"
        url = self._url("paper/search", params)
        return self._papers(self._get(url), url, key=None)[:k]

    def paper(self, paper_id: str) -> Paper | None:
        url = self._url(f"paper/{self._quote_id(paper_id)}", {"fields": FIELDS})
        payload = self._get(url)
        if payload is None:
            return None
        if not isinstance(payload, dict):
            raise ServiceError(f"paper service {url} answered {type(payload).__name__}, expected a paper object")
        return _to_paper(payload)

    def neighbours(self, paper_id: str, direction: str, k: int) -> list[Paper]:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        if k < 1:
            return []
        url = self._url(f"paper/{self._quote_id(paper_id)}/{direction}",
                        {"fields": FIELDS, "limit": min(k, MAX_NEIGHBOUR_LIMIT)})
        return self._papers(self._get(url), url, key=_NEIGHBOUR_KEY[direction])[:k]

    def check(self) -> None:
        """One cheap request (a search with limit 1); ``ServiceError`` when the service cannot answer it."""
        try:
            url = self._url("paper/search", {"query": "language", "limit": 1, "fields": "title"})
            payload = self._get(url)
            if payload is None:
                raise ServiceError(f"{url} answered 404 (is the base URL right?)")
            self._papers(payload, url, key=None)
        except ServiceError as exc:
            raise ServiceError(f"paper service at {self.base_url} is unreachable: {exc}") from exc

    # -- HTTP -----------------------------------------------------------------------------------------------------

    @staticmethod
    def _quote_id(paper_id: str) -> str:
        return urllib.parse.quote(str(paper_id), safe=":")

    def _url(self, path: str, params: dict[str, Any]) -> str:
        return f"{self.base_url}/{path}?{urllib.parse.urlencode(params, quote_via=urllib.parse.quote)}"

    def _get(self, url: str) -> Any:
        """The decoded JSON answer of ``GET url``; ``None`` on 404; ``ServiceError`` once the retries are spent."""
        attempts = self.retries + 1
        for attempt in range(attempts):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                return self._attempt(url)
            except _Retryable as exc:
                cause = str(exc)
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        raise ServiceError(f"paper service request {url} failed{tries}: {cause}")

    def _attempt(self, url: str) -> Any:
        request = urllib.request.Request(url, headers=self._headers, method="GET")
        with self._slots:
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                    body = resp.read(MAX_RESPONSE_BYTES + 1)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    exc.close()
                    return None
                detail = self._error_detail(exc)
                if exc.code == 429 or exc.code >= 500:
                    raise _Retryable(f"HTTP {exc.code}{detail}") from None
                raise ServiceError(f"paper service request {url} failed: HTTP {exc.code}{detail}") from None
            except (OSError, http.client.HTTPException) as exc:  # URLError and timeouts are OSErrors
                raise _Retryable(self._describe(exc)) from None
        if len(body) > MAX_RESPONSE_BYTES:
            raise ServiceError(f"paper service request {url} failed: answer over {MAX_RESPONSE_BYTES} bytes")
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ServiceError(f"paper service request {url} answered malformed JSON: "
                               f"{_one_line(str(exc))}") from None

    @staticmethod
    def _error_detail(exc: urllib.error.HTTPError) -> str:
        try:
            text = exc.read(2000).decode("utf-8", "replace")
        except Exception:  # the body of an error answer is only a hint
            text = ""
        finally:
            exc.close()
        return f" ({_one_line(text)})" if text.strip() else (f" {exc.reason}" if exc.reason else "")

    def _describe(self, exc: BaseException) -> str:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            return f"timed out after {self.timeout:g}s"
        return _one_line(str(reason) or type(reason).__name__)

    # -- answers --------------------------------------------------------------------------------------------------

    @staticmethod
    def _papers(payload: Any, url: str, key: str | None) -> list[Paper]:
        """The papers of a ``{"data": [...]}`` answer (``key``: each item's paper is under that key)."""
        if payload is None:
            return []
        data = payload.get("data") if isinstance(payload, dict) else None
        if data is None and isinstance(payload, dict) and "data" not in payload and "total" in payload:
            data = []  # S2 leaves "data" out of a search with no results
        if not isinstance(data, list):
            raise ServiceError(f"paper service {url} answered without a \"data\" list")
        papers = []
        for item in data:
            if not isinstance(item, dict):
                raise ServiceError(f"paper service {url} answered a \"data\" item that is not an object")
            paper = _to_paper(item.get(key) if key else item)
            if paper is not None:
                papers.append(paper)
        return papers
