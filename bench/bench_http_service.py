"""Benchmark of the loopback serve loop (``agentr1_core.http_service``) against the standard library's loop that the
search and paper servers ran before: of the requests of N parallel clients, how many are answered, reset or lost.

Both servers run the same handler, the search plugin's ``POST /search`` over a BM25 index of the shipped HotpotQA
sample corpus (built in a temporary folder). The old loop is ``http.server.ThreadingHTTPServer`` with its defaults, as
the servers used it: a listen backlog of 5, one thread per connection, no read timeout. Each client thread opens a new
connection per request (as ``RemoteRetriever`` does, without its retries), and all clients start together. A request
is "answered" when a 200 with hits comes back, "reset" when the connection was reset or closed without an answer,
"refused", "timeout" (60 s) or "other" otherwise. Also: wall seconds per round and the p99 latency of the answered
requests. Prints a table and writes ``bench/results/http_service.json``.

    python bench/bench_http_service.py [--clients 20 64] [--requests 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

from agentr1_core.http_service import Request
from agentr1_tools_search.bm25 import BM25Retriever, build_bm25_index
from agentr1_tools_search.corpus import SAMPLE_CORPUS
from agentr1_tools_search.datasets import load_hotpotqa
from agentr1_tools_search.server import make_routes, make_server
from common import machine_info, parse_args, print_table, write_result

OUTCOMES = ("answered", "reset", "refused", "timeout", "other")


def stdlib_server(routes: dict[tuple[str, str], Callable]) -> ThreadingHTTPServer:
    """The earlier loop around the same handler: ThreadingHTTPServer's defaults, the body read by Content-Length."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            status, payload = routes[("POST", self.path)](Request("POST", self.path, {}, body))
            raw = json.dumps(payload, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    return server


def one_request(port: int, query: str) -> tuple[str, float]:
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/search", json.dumps({"query": query, "top_k": 3}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        answer = json.loads(resp.read())
        outcome = "answered" if resp.status == 200 and "hits" in answer else "other"
    except ConnectionRefusedError:
        outcome = "refused"
    except ConnectionError:  # reset, broken pipe, closed without an answer (RemoteDisconnected)
        outcome = "reset"
    except TimeoutError:
        outcome = "timeout"
    except (OSError, ValueError, http.client.HTTPException):
        outcome = "other"
    finally:
        conn.close()
    return outcome, time.perf_counter() - t0


def load_round(port: int, clients: int, requests: int, queries: list[str]) -> dict[str, Any]:
    """``requests`` requests from ``clients`` threads started together, each request on a new connection."""
    counts = dict.fromkeys(OUTCOMES, 0)
    latencies: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(clients)

    def client(i: int) -> None:
        start.wait()
        for n in range(i, requests, clients):
            outcome, seconds = one_request(port, queries[n % len(queries)])
            with lock:
                counts[outcome] += 1
                if outcome == "answered":
                    latencies.append(seconds)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else None
    return {**counts, "wall_s": round(time.perf_counter() - t0, 2), "p99_ms": round(1000 * p99, 1) if p99 else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[20, 64])
    ap.add_argument("--requests", type=int, default=200, help="requests per round")
    ap.add_argument("--rounds", type=int, default=3)
    args = parse_args(ap, smoke={"clients": [4, 8], "requests": 16, "rounds": 1})

    queries = [row["prompt"] for row in load_hotpotqa(split="dev")]
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        build_bm25_index(SAMPLE_CORPUS, Path(tmp) / "sample.bm25", progress=False)
        retriever = BM25Retriever(Path(tmp) / "sample.bm25", SAMPLE_CORPUS)
        passages = len(retriever)
        for loop, server in (("stdlib ThreadingHTTPServer (before)", stdlib_server(make_routes(retriever))),
                             ("agentr1_core.http_service", make_server(retriever))):
            thread = threading.Thread(target=server.serve_forever, daemon=True)
            thread.start()
            try:
                port = server.server_address[1]
                for clients in args.clients:
                    rounds = results.setdefault(loop, {}).setdefault(str(clients), [])
                    for _ in range(args.rounds):
                        rounds.append(load_round(port, clients, args.requests, queries))
                        time.sleep(1.0)  # the previous round's server threads finish first
            finally:
                server.shutdown()
                server.server_close()
                thread.join()

    rows = [[loop, clients, f"{r['answered']}/{args.requests}", r["reset"], r["refused"] + r["timeout"] + r["other"],
             r["wall_s"], r["p99_ms"]]
            for loop, by_clients in results.items() for clients, rounds in by_clients.items() for r in rounds]
    print_table(["serve loop", "clients", "answered", "reset", "refused/timeout/other", "wall s", "p99 ms"], rows)
    result = {"requests_per_round": args.requests, "rounds": args.rounds, "results": results,
              "corpus_passages": passages, "machine": machine_info()}
    print(f"\nwrote {write_result('http_service', result)}")


if __name__ == "__main__":
    main()
