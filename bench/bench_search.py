"""Benchmark of the ``search`` tool (agentr1-tools-search): queries/s and latency percentiles on a 100k-passage corpus.

The corpus is synthesised (seeded) by recombining sentences and titles of the HotpotQA sample corpus shipped with the
plugin, so it has real vocabulary and passage lengths. Queries are the shipped HotpotQA questions (dev + train) and
passage titles, cycled. Each query goes through ``call_tool`` exactly as in a rollout (argument check, worker
thread, formatting). Measured: index build time, sequential latency p50/p99 and queries/s, and queries/s with
``--concurrency`` searches in flight. Prints a table and writes ``bench/results/search.json``.

    python bench/bench_search.py [--passages 100000] [--queries 2000] [--concurrency 8] [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import statistics
import tempfile
import time
from pathlib import Path

from agentr1_core.tools import call_tool
from agentr1_tools_search.bm25 import build_bm25_index
from agentr1_tools_search.corpus import SAMPLE_CORPUS, scan_corpus
from agentr1_tools_search.datasets import load_hotpotqa
from agentr1_tools_search.tool import SearchTool
from common import parse_args, write_result

_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def synthesise_corpus(path: Path, n: int, seed: int) -> None:
    """``n`` passages of 3-8 sentences drawn from the sample corpus; titles are real titles with a number."""
    rng = random.Random(seed)
    passages = [p for _, p in scan_corpus(SAMPLE_CORPUS)]
    sentences = [s for p in passages for s in _SENTENCE.split(p.text) if len(s) > 20]
    titles = [p.title for p in passages]
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            title = f"{rng.choice(titles)} ({i})"
            body = " ".join(rng.choice(sentences) for _ in range(rng.randint(3, 8)))
            fh.write(json.dumps({"id": str(i), "title": title, "contents": f'"{title}"\n{body}'},
                                ensure_ascii=False) + "\n")


def queries(count: int, seed: int) -> list[str]:
    rows = load_hotpotqa(split="dev") + load_hotpotqa(split="train")
    pool = [r["prompt"] for r in rows] + [t for r in rows for t in r["extra_info"]["supporting_titles"]]
    random.Random(seed).shuffle(pool)
    return [pool[i % len(pool)] for i in range(count)]


async def sequential(tool: SearchTool, qs: list[str]) -> list[float]:
    latencies = []
    for q in qs:
        t0 = time.perf_counter()
        result = await call_tool(tool, {"query": q})
        latencies.append(time.perf_counter() - t0)
        if result.error:
            raise RuntimeError(result.text)
    return latencies


async def concurrent(tool: SearchTool, qs: list[str], width: int) -> float:
    sem = asyncio.Semaphore(width)

    async def one(q: str) -> None:
        async with sem:
            await call_tool(tool, {"query": q})

    t0 = time.perf_counter()
    await asyncio.gather(*(one(q) for q in qs))
    return time.perf_counter() - t0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = parse_args(ap, smoke={"passages": 200, "queries": 20, "concurrency": 2})

    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        corpus = Path(tmp) / "synthetic_corpus.jsonl"
        t0 = time.perf_counter()
        synthesise_corpus(corpus, args.passages, args.seed)
        synth_s = time.perf_counter() - t0
        meta = build_bm25_index(corpus, Path(tmp) / "synthetic.bm25", progress=True)
        tool = SearchTool(index=str(Path(tmp) / "synthetic.bm25"), top_k=args.top_k)
        qs = queries(args.queries, args.seed)
        asyncio.run(sequential(tool, qs[:50]))  # warm-up
        lat = asyncio.run(sequential(tool, qs))
        conc_s = asyncio.run(concurrent(tool, qs, args.concurrency))
        corpus_mb = corpus.stat().st_size / 1e6

    seq_total = sum(lat)
    result = {
        "passages": args.passages, "corpus_mb": round(corpus_mb, 1), "queries": len(lat), "top_k": args.top_k,
        "synthesise_s": round(synth_s, 2), "index_build_s": meta["build_seconds"],
        "sequential_qps": round(len(lat) / seq_total, 1),
        "latency_ms_p50": round(1000 * statistics.median(lat), 2),
        "latency_ms_p99": round(1000 * percentile(lat, 0.99), 2),
        "latency_ms_mean": round(1000 * seq_total / len(lat), 2),
        f"concurrent{args.concurrency}_qps": round(len(qs) / conc_s, 1),
        "seed": args.seed, "cpus": os.cpu_count(), "python": platform.python_version(),
        "machine": platform.machine(),
    }
    width = max(len(k) for k in result)
    print("\nsearch tool benchmark (BM25, bm25s + PyStemmer)")
    for k, v in result.items():
        print(f"  {k:<{width}}  {v}")
    print(f"\nwrote {write_result('search', result)}")


if __name__ == "__main__":
    main()
