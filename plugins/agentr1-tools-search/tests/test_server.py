"""The search server (what ``agentr1-core search serve`` runs) and ``RemoteRetriever`` against real sockets on
127.0.0.1: malformed requests get a 400 that names the field, bad lengths never hang the server, and the client
retries a connection that was reset or refused, a bounded number of times, but never a 4xx; ``agentr1-core search
serve`` answers until Ctrl-C."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from agentr1_core.testing.fixtures import ctrl_c_reaches_it
from agentr1_tools_search.bm25 import BM25Retriever, build_bm25_index
from agentr1_tools_search.retriever import RemoteRetriever
from agentr1_tools_search.server import MAX_TOP_K, make_server

FAST = {"timeout": 10.0, "retries": 2, "backoff": 0.01}


@pytest.fixture(scope="module")
def retriever(dev_corpus, tmp_path_factory) -> BM25Retriever:
    out = tmp_path_factory.mktemp("idx") / "dev.bm25"
    build_bm25_index(dev_corpus, out, progress=False)
    return BM25Retriever(out)


class Served:
    """The real server in a background thread; the first ``resets`` connections are reset before a byte is read."""

    def __init__(self, retriever: BM25Retriever, resets: int = 0) -> None:
        self.server = make_server(retriever, "127.0.0.1", 0)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        self.resets = resets
        serve = self.server.process_request

        def process_request(request: socket.socket, client_address: Any) -> None:
            self.connections += 1
            if self.connections <= self.resets:
                request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
                request.close()
                return
            serve(request, client_address)

        self.server.process_request = process_request  # type: ignore[method-assign]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def served(retriever) -> Iterator[Served]:
    s = Served(retriever)
    yield s
    s.close()


def exchange(port: int, data: bytes) -> tuple[int, Any]:
    """Raw bytes in, (status, JSON body) out; the client gives up after 10 s (the old server hung on some)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def post_search(port: int, body: bytes) -> tuple[int, Any]:
    return exchange(port, b"POST /search HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


def assert_error(answer: tuple[int, Any], status: int, words: str) -> None:
    code, body = answer
    assert code == status, answer
    assert set(body) == {"error"} and isinstance(body["error"].get("type"), str), body
    assert words in body["error"]["message"], body


# -- the server ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("body, field", [
    (b'{"query": null}', "query"),
    (b'{"query": 5}', "query"),
    (b'{"query": ["a", "b"]}', "query"),
    (b'{"top_k": 3}', "query"),
    (b'{"query": "  "}', "query"),
    (b'{"query": "' + b"x" * 2001 + b'"}', "query"),
    (b'{"query": "x", "top_k": Infinity}', "Infinity"),
    (b'{"query": "x", "top_k": NaN}', "NaN"),
    (b'{"query": "x", "top_k": 1.5}', "top_k"),
    (b'{"query": "x", "top_k": true}', "top_k"),
    (b'{"query": "x", "top_k": "3"}', "top_k"),
    (b'{"query": "x", "top_k": 0}', "top_k"),
    (b'{"query": "x", "top_k": -2}', "top_k"),
    (b'{"query": "x", "top_k": 101}', "top_k"),
    (b'{"query": "x", "top_k": 1000000000000000000000000000000}', "top_k"),
    (b'{"query": "x", "top_k": 1e400}', "1e400"),
])
def test_malformed_search_requests_get_400_naming_the_problem(served, body, field):
    assert_error(post_search(served.port, body), 400, field)


@pytest.mark.parametrize("head, status, words", [
    (b"POST /search HTTP/1.1\r\nContent-Length: -1\r\n\r\n{}", 400, "Content-Length"),
    (b"POST /search HTTP/1.1\r\nContent-Length: abc\r\n\r\n{}", 400, "Content-Length"),
    (b"POST /search HTTP/1.1\r\nContent-Length: 65537\r\n\r\n", 413, "65536"),
    (b"POST /search HTTP/1.1\r\n\r\n{}", 411, "Content-Length"),
    (b"POST /search HTTP/1.1\r\nContent-Length: 60000\r\n\r\n" + b"[" * 60000, 400, "deeper"),
    (b"GET /search HTTP/1.1\r\n\r\n", 405, "POST"),
    (b"GET /nothing HTTP/1.1\r\n\r\n", 404, "/nothing"),
])
def test_bad_requests_are_answered_and_the_server_keeps_serving(served, head, status, words):
    assert_error(exchange(served.port, head), status, words)
    assert exchange(served.port, b"GET /health HTTP/1.1\r\n\r\n") == (200, {"passages": 1000})


def test_a_good_request_answers_the_local_ranking(served, retriever):
    code, body = post_search(served.port, b'{"query": "Constantin Medien media group", "top_k": 5}')
    assert code == 200
    assert [h["id"] for h in body["hits"]] == [h.passage.id for h in retriever.search("Constantin Medien media group",
                                                                                     5)]
    code, body = post_search(served.port, b'{"query": "the river of the city"}')  # top_k defaults to 3
    assert code == 200 and len(body["hits"]) == 3


# -- the client ---------------------------------------------------------------------------------------------------

def test_the_client_retries_a_reset_connection(retriever):
    flaky = Served(retriever, resets=1)
    try:
        hits = RemoteRetriever(flaky.url, **FAST).search("Constantin Medien media group", 3)
    finally:
        flaky.close()
    assert [h.passage.id for h in hits] == [h.passage.id for h in retriever.search("Constantin Medien media group", 3)]
    assert flaky.connections == 2


def test_the_client_gives_up_after_its_retries_with_a_clear_error(retriever):
    broken = Served(retriever, resets=100)
    try:
        with pytest.raises(RuntimeError, match=r"search server http://127\.0\.0\.1:\d+ is not reachable after 3 "
                                               r"attempts") as err:
            RemoteRetriever(broken.url, **FAST).search("x", 3)
    finally:
        broken.close()
    assert broken.connections == 3 and "reset" in str(err.value).lower()


def test_the_client_never_retries_a_4xx_and_asks_at_most_the_servers_cap(served):
    with pytest.raises(RuntimeError, match="answered 400") as err:
        RemoteRetriever(served.url, **FAST).search("", 3)
    assert served.connections == 1 and "query" in str(err.value)
    assert len(RemoteRetriever(served.url, **FAST).search("river", MAX_TOP_K + 50)) <= MAX_TOP_K
    assert served.connections == 2


def test_a_refused_connection_is_retried_then_named(retriever):
    gone = Served(retriever)
    gone.close()
    with pytest.raises(RuntimeError, match=f"{gone.url} is not reachable after 3 attempts"):
        RemoteRetriever(gone.url, **FAST).search("x", 3)


# -- the command --------------------------------------------------------------------------------------------------

def test_search_serve_answers_until_ctrl_c(retriever, isolated_cache):
    cli = shutil.which("agentr1-core") or str(Path(sys.executable).parent / "agentr1-core")
    proc = subprocess.Popen([cli, "search", "serve", "--index", str(retriever.index_dir), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_reaches_it,
                            env={**os.environ, "AGENTR1_CACHE": str(isolated_cache)})
    try:
        line = proc.stdout.readline()
        assert "passages on http://127.0.0.1:" in line, line + proc.stderr.read()
        url = line.split(" on ")[1].split()[0]
        hits = RemoteRetriever(url, **FAST).search("Constantin Medien media group", 2)
        assert [h.passage.id for h in hits] == [h.passage.id for h in retriever.search("Constantin Medien media group",
                                                                                       2)]
        assert_error(post_search(int(url.rsplit(":", 1)[1]), b'{"query": null}'), 400, "query")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
