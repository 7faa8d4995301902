"""HttpPaperService against real servers on 127.0.0.1: the offline index of the small corpus served by
``server.py``, and hand-written endpoints that are slow, fail, answer malformed JSON or count concurrent requests."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from agentr1_tools_papers.http_service import ENV_VAR, HttpPaperService
from agentr1_tools_papers.index import OfflineIndex
from agentr1_tools_papers.papers import DIRECTIONS, Paper, ServiceError, read_corpus
from agentr1_tools_papers.server import make_server, server_url

CORPUS = Path(__file__).parent / "data" / "papers_small.jsonl"
FAST = {"timeout": 5.0, "retries": 2, "backoff": 0.01}

Respond = Callable[[BaseHTTPRequestHandler, int], tuple[int, bytes]]


@contextmanager
def running(server: ThreadingHTTPServer) -> Iterator[str]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield server_url(server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def endpoint(respond: Respond) -> Iterator[tuple[str, list[str]]]:
    """A server answering every GET with ``respond(handler, hit_number)``; yields its URL and the paths it got."""
    hits: list[str] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            with lock:
                hits.append(self.path)
                n = len(hits)
            code, body = respond(self, n)
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the client gave up (the slow endpoint)
                pass

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with running(server) as url:
        yield url, hits


def ok(payload: Any) -> tuple[int, bytes]:
    return 200, json.dumps(payload).encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def raw_get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def corpus() -> dict[str, Paper]:
    return {p.id: p for p in read_corpus(CORPUS)}


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> OfflineIndex:
    mp = pytest.MonkeyPatch()
    mp.setenv("AGENTR1_CACHE", str(tmp_path_factory.mktemp("cache")))
    try:
        return OfflineIndex.open(CORPUS)
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def url(index) -> Iterator[str]:
    with running(make_server(index)) as base:
        yield base


@pytest.fixture
def client(url) -> HttpPaperService:
    return HttpPaperService(url, **FAST)


# -- answers from the served offline index ----------------------------------------------------------------------------

def test_search_returns_the_index_ranking_with_titles_years_and_abstracts(client, index, corpus):
    found = client.search("policy optimization", 5)
    assert [p.id for p in found] == [p.id for p in index.search("policy optimization", 5)]
    assert {"p5", "p7"} <= {p.id for p in found}
    for paper in found:
        assert paper.to_dict() == corpus[paper.id].to_dict()
    assert len(client.search("language models", 2)) == 2


def test_search_respects_the_year_cut_off(client, index):
    assert "p7" in {p.id for p in client.search("policy optimization", 5)}
    found = client.search("policy optimization", 5, year_max=2020)
    assert [p.id for p in found] == [p.id for p in index.search("policy optimization", 5, year_max=2020)]
    assert "p5" in {p.id for p in found} and "p7" not in {p.id for p in found}
    assert all(p.year is not None and p.year <= 2020 for p in found)


def test_paper_by_id(client, corpus):
    paper = client.paper("p6")
    assert paper is not None and paper.to_dict() == corpus["p6"].to_dict()


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_neighbours_of_every_paper_match_the_corpus(client, corpus, direction):
    for pid, paper in corpus.items():
        found = client.neighbours(pid, direction, 50)
        assert sorted(p.id for p in found) == sorted(getattr(paper, direction)), (pid, direction)
        assert all(p.title == corpus[p.id].title for p in found)
    assert len(client.neighbours("p3", "citations", 2)) == 2


def test_unknown_paper_is_none_and_has_no_neighbours(client):
    assert client.paper("no-such-paper") is None
    assert client.neighbours("no-such-paper", "citations", 5) == []
    assert client.neighbours("no-such-paper", "references", 5) == []
    with pytest.raises(ValueError, match="direction"):
        client.neighbours("p1", "cousins", 5)


def test_server_answers_400_and_404_and_s2_default_fields(url):
    assert raw_get(f"{url}/paper/search")[0] == 400
    assert raw_get(f"{url}/paper/search?query=%20")[0] == 400
    assert raw_get(f"{url}/paper/search?query=x&limit=many")[0] == 400
    assert raw_get(f"{url}/paper/search?query=x&year=2015-2018")[0] == 400
    assert raw_get(f"{url}/nothing/here")[0] == 404
    assert raw_get(f"{url}/paper/no-such-paper")[0] == 404
    assert raw_get(f"{url}/paper/no-such-paper/citations")[0] == 404
    assert raw_get(f"{url}/paper/p1/cousins")[0] == 404
    assert raw_get(f"{url}/paper/p1") == (200, {"paperId": "p1",
                                                "title": "Attention mechanisms for neural machine translation"})


def test_server_answers_502_for_a_service_error():
    class Broken:
        def search(self, query: str, k: int, year_max: int | None = None) -> list[Paper]:
            raise ServiceError("upstream is down")

    with running(make_server(Broken())) as base:
        code, body = raw_get(f"{base}/paper/search?query=x")
    assert code == 502 and body == {"error": {"message": "upstream is down", "type": "service_error"}}


@pytest.mark.parametrize("path, name", [
    *[(f"/paper/search?query=x&limit={limit}", "limit")
      for limit in ("Infinity", "NaN", "1.5", "0", "-3", "101", "1_0", "%D9%A3", "9" * 5000)],
    ("/paper/p1/citations?limit=1001", "limit"), ("/paper/p1/references?limit=0", "limit"),
    ("/paper/search?limit=3", "query"), ("/paper/search?query=%20", "query"),
    ("/paper/search?query=" + "x" * 2001, "query"),
])
def test_bad_parameters_get_400_naming_the_parameter(url, path, name):
    code, body = raw_get(url + path)
    assert code == 400 and body["error"]["type"] == "invalid_request" and name in body["error"]["message"], body


@pytest.mark.parametrize("request_bytes, status, words", [
    (b"GET /paper/search?query=x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "Content-Length"),
    (b"GET /paper/search?query=x HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400, "Content-Length"),
    (b"GET /paper/search?query=x HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n", 413, "over"),
    (b"POST /paper/search HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 405, "use GET"),
    (b"GET /nothing/here HTTP/1.1\r\n\r\n", 404, "/nothing/here"),
])
def test_malformed_requests_get_a_json_error_and_the_server_keeps_serving(url, request_bytes, status, words):
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:  # the old server hung on some
        sock.sendall(request_bytes)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    error = json.loads(body)["error"]
    assert int(head.split()[1]) == status and isinstance(error["type"], str) and words in error["message"], answer
    assert raw_get(f"{url}/paper/p1")[0] == 200


def test_odd_ids_round_trip_through_client_and_server():
    odd = Paper(id="DOI:10.1/a b?c#d", title="An odd id", year=2000, abstract="Slashes, spaces and marks.")

    class One:
        def paper(self, paper_id: str) -> Paper | None:
            return odd if paper_id == odd.id else None

        def neighbours(self, paper_id: str, direction: str, k: int) -> list[Paper]:
            return [odd] if paper_id == odd.id else []

    with running(make_server(One())) as base:
        client = HttpPaperService(base, **FAST)
        assert client.paper(odd.id) == odd
        assert client.neighbours(odd.id, "references", 5) == [odd]
        assert client.paper("DOI:10.1") is None


# -- the requests the client sends --------------------------------------------------------------------------------

def test_ids_and_queries_are_url_quoted():
    with endpoint(lambda h, n: ok({"data": []})) as (base, hits):
        client = HttpPaperService(base, **FAST)
        assert client.search("R&D #1 = 100%?", 3, year_max=1999) == []
        assert client.paper("a b/c?d#e") is None  # answered with no title
    query = urllib.parse.urlsplit(hits[0])
    assert query.path == "/paper/search"
    assert urllib.parse.parse_qs(query.query) == {"query": ["R&D #1 = 100%?"], "limit": ["3"], "year": ["-1999"],
                                                 "fields": ["title,year,abstract"]}
    segments = urllib.parse.urlsplit(hits[1]).path.split("/")
    assert len(segments) == 3 and urllib.parse.unquote(segments[2]) == "a b/c?d#e"


def test_api_key_header_only_when_given():
    keys: list[str | None] = []

    def respond(handler: BaseHTTPRequestHandler, n: int) -> tuple[int, bytes]:
        keys.append(handler.headers.get("x-api-key"))
        return ok({"data": []})

    with endpoint(respond) as (base, _):
        HttpPaperService(base, api_key="k-123", **FAST).search("x", 1)
        HttpPaperService(base, **FAST).search("x", 1)
    assert keys == ["k-123", None]


def test_untitled_and_null_papers_are_skipped():
    def respond(handler: BaseHTTPRequestHandler, n: int) -> tuple[int, bytes]:
        if "citations" in handler.path:
            return ok({"data": [{"citingPaper": {"paperId": "a", "title": "A"}}, {"citingPaper": None},
                                {"citingPaper": {"paperId": "b", "title": ""}}]})
        return ok({"data": [{"paperId": "a", "title": " A\n title ", "year": 2001, "abstract": None},
                            {"paperId": "b", "title": None}, {"paperId": "c"}, {"paperId": None, "title": "X"}]})

    with endpoint(respond) as (base, _):
        client = HttpPaperService(base, **FAST)
        assert client.search("x", 10) == [Paper(id="a", title="A title", year=2001)]
        assert [p.id for p in client.neighbours("z", "citations", 10)] == ["a"]


def test_answers_longer_than_k_are_cut_to_k():
    many = [{"paperId": str(i), "title": f"T{i}"} for i in range(5)]

    def respond(handler: BaseHTTPRequestHandler, n: int) -> tuple[int, bytes]:
        return ok({"data": [{"citedPaper": p} for p in many] if "references" in handler.path else many})

    with endpoint(respond) as (base, _):
        client = HttpPaperService(base, **FAST)
        assert [p.id for p in client.search("x", 2)] == ["0", "1"]
        assert [p.id for p in client.neighbours("z", "references", 3)] == ["0", "1", "2"]


# -- failures ---------------------------------------------------------------------------------------------------------

def test_slow_endpoint_times_out_after_the_retries():
    release = threading.Event()

    def respond(handler: BaseHTTPRequestHandler, n: int) -> tuple[int, bytes]:
        release.wait(5)
        return ok({"data": []})

    try:
        with endpoint(respond) as (base, _):
            client = HttpPaperService(base, timeout=0.1, retries=1, backoff=0.01)
            with pytest.raises(ServiceError, match="timed out") as err:
                client.search("slow", 3)
    finally:
        release.set()
    assert f"{base}/paper/search?" in str(err.value) and "after 2 attempts" in str(err.value)


@pytest.mark.parametrize("code", [500, 503, 429])
def test_overload_and_server_errors_are_retried_then_raised(code):
    with endpoint(lambda h, n: (code, b'{"error": "busy"}')) as (base, hits):
        with pytest.raises(ServiceError) as err:
            HttpPaperService(base, **FAST).paper("p1")
    assert len(hits) == FAST["retries"] + 1
    assert f"{base}/paper/p1?" in str(err.value) and f"HTTP {code}" in str(err.value)


@pytest.mark.parametrize("code", [400, 403])
def test_client_errors_are_not_retried(code):
    with endpoint(lambda h, n: (code, b'{"error": "no"}')) as (base, hits):
        with pytest.raises(ServiceError, match=f"HTTP {code}"):
            HttpPaperService(base, **FAST).search("x", 1)
    assert len(hits) == 1


def test_a_500_then_a_200_succeeds():
    def respond(handler: BaseHTTPRequestHandler, n: int) -> tuple[int, bytes]:
        return (500, b"{}") if n == 1 else ok({"data": [{"paperId": "a", "title": "A", "year": 2020}]})

    with endpoint(respond) as (base, hits):
        assert HttpPaperService(base, **FAST).search("x", 5) == [Paper(id="a", title="A", year=2020)]
    assert len(hits) == 2


def test_malformed_json_raises_without_retrying():
    with endpoint(lambda h, n: (200, b'{"data": [')) as (base, hits):
        with pytest.raises(ServiceError, match="malformed JSON"):
            HttpPaperService(base, **FAST).search("x", 5)
    assert len(hits) == 1


@pytest.mark.parametrize("payload", [[], {"data": "x"}, {"data": [1]}, {"error": "odd"}])
def test_a_wrong_shape_raises(payload):
    with endpoint(lambda h, n: ok(payload)) as (base, _):
        client = HttpPaperService(base, **FAST)
        with pytest.raises(ServiceError, match="data"):
            client.search("x", 5)
        with pytest.raises(ServiceError, match="data"):
            client.neighbours("p1", "references", 5)


def test_a_paper_that_is_not_an_object_raises():
    with endpoint(lambda h, n: ok([{"paperId": "p1", "title": "T"}])) as (base, _):
        with pytest.raises(ServiceError, match="paper object"):
            HttpPaperService(base, **FAST).paper("p1")


def test_a_reset_connection_is_retried(index):
    server = make_server(index)
    connections = []
    serve = server.process_request

    def reset_the_first(request: socket.socket, client_address: Any) -> None:
        connections.append(client_address)
        if len(connections) == 1:
            request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
            request.close()
            return
        serve(request, client_address)

    server.process_request = reset_the_first  # type: ignore[method-assign]
    with running(server) as base:
        found = HttpPaperService(base, **FAST).search("policy optimization", 5)
    assert [p.id for p in found] == [p.id for p in index.search("policy optimization", 5)]
    assert len(connections) == 2


def test_the_client_asks_at_most_the_caps_of_the_api(url, index):
    with endpoint(lambda h, n: ok({"data": []})) as (base, hits):
        client = HttpPaperService(base, **FAST)
        client.search("x", 500)
        client.neighbours("p1", "citations", 5000)
    assert [urllib.parse.parse_qs(urllib.parse.urlsplit(h).query)["limit"] for h in hits] == [["100"], ["1000"]]
    assert len(HttpPaperService(url, **FAST).search("language models", 500)) == len(index.search("language models",
                                                                                                100))


def test_refused_connection_raises_naming_the_url():
    base = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServiceError) as err:
        HttpPaperService(base, timeout=2.0, retries=1, backoff=0.01).search("x", 3)
    assert f"{base}/paper/search?" in str(err.value) and "after 2 attempts" in str(err.value)


def test_check_passes_on_a_live_service_and_raises_on_a_dead_or_wrong_one(url):
    HttpPaperService(url, **FAST).check()
    base = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServiceError, match=f"paper service at {base} is unreachable"):
        HttpPaperService(base, timeout=2.0, retries=0).check()
    with pytest.raises(ServiceError, match="unreachable.*404"):
        HttpPaperService(f"{url}/graph/v1", **FAST).check()


# -- configuration and concurrency ------------------------------------------------------------------------------

def test_the_environment_variable_gives_the_url(url, corpus, monkeypatch):
    monkeypatch.setenv(ENV_VAR, url + "/")
    client = HttpPaperService(**FAST)
    assert client.base_url == url
    assert client.paper("p1").title == corpus["p1"].title
    monkeypatch.delenv(ENV_VAR)
    with pytest.raises(ValueError, match=ENV_VAR):
        HttpPaperService()
    with pytest.raises(ValueError, match="http"):
        HttpPaperService("file:///etc")
    with pytest.raises(ValueError, match="max_concurrency"):
        HttpPaperService(url, max_concurrency=0)


def test_concurrent_requests_are_bounded():
    cond = threading.Condition()
    state = {"active": 0, "peak": 0}

    def respond(handler: BaseHTTPRequestHandler, n: int) -> tuple[int, bytes]:
        with cond:
            state["active"] += 1
            state["peak"] = max(state["peak"], state["active"])
            cond.notify_all()
            cond.wait_for(lambda: state["peak"] >= 2, timeout=5)  # the first waits for a second to overlap
        time.sleep(0.05)  # hold the request so that unbounded callers would pile up
        with cond:
            state["active"] -= 1
        return ok({"data": [{"paperId": str(n), "title": f"T{n}"}]})

    with endpoint(respond) as (base, hits):
        client = HttpPaperService(base, max_concurrency=2, **FAST)
        with ThreadPoolExecutor(max_workers=6) as pool:
            answers = list(pool.map(lambda i: client.search(f"q{i}", 1), range(6)))
    assert len(hits) == 6 and all(len(a) == 1 for a in answers)
    assert state["peak"] == 2
