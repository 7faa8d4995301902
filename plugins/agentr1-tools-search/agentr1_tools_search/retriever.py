"""Find, build and open retrievers; one loaded index is shared by every tool instance of a process.

Where an index lives: an explicit ``index`` folder; else ``CORPUS.<kind>`` next to the corpus (what
``agentr1-core search index CORPUS`` writes); else a folder in the cache (``$AGENTR1_CACHE/search`` or
``~/.cache/agentr1/search``), which is also where an index is built automatically when the corpus folder is not
writable (the shipped sample corpus, for one). ``RemoteRetriever`` queries a retriever served over HTTP
(``agentr1-core search serve``) with the same ``search`` interface, and tries a refused or reset connection again.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from agentr1_tools_search.bm25 import BM25Retriever, Hit, build_bm25_index
from agentr1_tools_search.corpus import SAMPLE_CORPUS, CorpusError, Passage
from agentr1_tools_search.server import MAX_TOP_K

KINDS = ("bm25", "dense")
_open: dict[tuple[str, str], Any] = {}
_open_lock = threading.Lock()


def cache_dir() -> Path:
    env = os.environ.get("AGENTR1_CACHE")
    return (Path(env) if env else Path.home() / ".cache" / "agentr1") / "search"


def index_candidates(corpus: Path, kind: str = "bm25") -> list[Path]:
    """Where an index of ``corpus`` is looked for, in order: next to it, then in the cache."""
    resolved = corpus.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    return [resolved.parent / f"{resolved.name}.{kind}", cache_dir() / f"{resolved.stem}-{digest}.{kind}"]


def default_index_dir(corpus: Path, kind: str = "bm25") -> Path:
    """Where a new index of ``corpus`` goes: next to it when that folder is writable and not inside this package."""
    beside, cached = index_candidates(corpus, kind)
    inside_package = Path(__file__).parent in corpus.resolve().parents
    return beside if os.access(beside.parent, os.W_OK) and not inside_package else cached


def build_index(corpus: str | os.PathLike, out_dir: str | os.PathLike | None = None, kind: str = "bm25",
                dense_model: str = "", progress: bool = True) -> tuple[Path, dict[str, Any]]:
    corpus = Path(corpus)
    out = Path(out_dir) if out_dir else default_index_dir(corpus, kind)
    if kind == "bm25":
        return out, build_bm25_index(corpus, out, progress=progress)
    if kind == "dense":
        from agentr1_tools_search.dense import build_dense_index

        return out, build_dense_index(corpus, out, model=dense_model, progress=progress)
    raise CorpusError(f"unknown retriever {kind!r}; valid: {', '.join(KINDS)}")


def open_retriever(corpus: str = "", index: str = "", kind: str = "bm25", dense_model: str = "",
                   auto_build: bool = True, progress: bool = True) -> Any:
    """A loaded retriever, cached per index folder. Empty ``corpus`` and ``index``: the shipped sample corpus."""
    if kind not in KINDS:
        raise CorpusError(f"unknown retriever {kind!r}; valid: {', '.join(KINDS)}")
    if index:
        index_dir = Path(index)
        if not (index_dir / "meta.json").is_file():
            raise CorpusError(f"search index not found: {index_dir}; build it with: "
                              f"agentr1-core search index CORPUS.jsonl --out {index_dir}")
    else:
        corpus_path = Path(corpus) if corpus else SAMPLE_CORPUS
        if not corpus_path.is_file():
            raise CorpusError(f"corpus file not found: {corpus_path}")
        found = [p for p in index_candidates(corpus_path, kind) if (p / "meta.json").is_file()]
        if found:
            index_dir = found[0]
        elif auto_build:
            index_dir, _ = build_index(corpus_path, None, kind, dense_model, progress)
        else:
            raise CorpusError(f"no {kind} index for {corpus_path}; build it with: "
                              f"agentr1-core search index {corpus_path}")
    key = (kind, str(index_dir.resolve()))
    with _open_lock:
        if key not in _open:
            if kind == "bm25":
                _open[key] = BM25Retriever(index_dir, corpus or None)
            else:
                from agentr1_tools_search.dense import DenseRetriever

                _open[key] = DenseRetriever(index_dir, corpus or None, model=dense_model)
        return _open[key]


def forget_open_retrievers() -> None:
    """Drop the process-wide cache (tests use it after rebuilding an index)."""
    with _open_lock:
        for r in _open.values():
            r.close()
        _open.clear()


class _ConnectionFailed(Exception):
    """An attempt whose connection was refused, reset or closed before an answer: worth one more try."""


class RemoteRetriever:
    """Client of ``agentr1-core search serve``: POSTs ``{"query", "top_k"}`` to ``URL/search``.

    A connection that is refused, reset or closed before the answer is tried again up to ``retries`` times, the
    n-th time after ``backoff * 2 ** (n - 1)`` seconds, then a ``RuntimeError`` names the URL and the cause. An
    answer with an error status (a 4xx is the request's fault) and a timeout are not retried. ``k`` above the
    server's cap asks for the cap (100), as the server itself did before it refused larger values.
    """

    def __init__(self, url: str, timeout: float = 10.0, retries: int = 3, backoff: float = 0.1) -> None:
        if retries < 0 or backoff < 0:
            raise ValueError("search: retries and backoff must be >= 0")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff

    def search(self, query: str, k: int = 3) -> list[Hit]:
        body = json.dumps({"query": query, "top_k": max(1, min(int(k), MAX_TOP_K))}).encode()
        attempts = self.retries + 1
        for attempt in range(attempts):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                payload = self._post(body)
                break
            except _ConnectionFailed as exc:
                cause = str(exc)
        else:
            raise RuntimeError(f"search server {self.url} is not reachable after {attempts} attempts: {cause}")
        return [Hit(Passage(str(h["id"]), h.get("title", ""), h.get("text", "")), float(h.get("score", 0.0)))
                for h in payload.get("hits", [])]

    def _post(self, body: bytes) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.url}/search", data=body,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise RuntimeError(f"search server {self.url} answered {exc.code}: {detail}") from exc
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            if isinstance(reason, ConnectionRefusedError):
                raise _ConnectionFailed(f"connection refused ({reason})") from None
            if isinstance(reason, ConnectionError):  # reset, aborted, broken pipe, closed without an answer
                raise _ConnectionFailed(f"connection reset or closed before an answer ({reason})") from None
            if isinstance(reason, TimeoutError):
                raise RuntimeError(f"search server {self.url} did not answer within {self.timeout:g}s") from exc
            raise RuntimeError(f"search server {self.url} is not reachable: {reason}") from exc

    def close(self) -> None:
        return None
