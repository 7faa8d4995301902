"""The engine's per-step sampler (``agentr1_core/rollout/transformers_sampling.py``) vs the exponential race it
replaced, on one decode step's logits.

One command: ``python bench/bench_sampling.py``. ``--rows`` rows of SmolLM2's 49,152-token vocabulary at temperature
0.7: ``sample_rows`` (inverse CDF, one uniform draw per row) with every row seeded (as in training, where each request
carries a seed) and with one shared generator, against the exponential race ``argmax(softmax / E)``, ``E ~ Exp(1)``
drawn with ``Tensor.exponential_`` over the whole vocabulary. Median of ``--repeats`` calls after a warm-up; writes
``bench/results/sampling.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from common import load_avg, machine_info, parse_args, print_table, write_result

VOCAB = 49152


def exponential_race(logits: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """The former draw: one Exp(1) number per row and vocabulary entry."""
    scaled = logits / 0.7
    torch.log_softmax(scaled, dim=-1)  # the reported log-probs, computed by both
    probs = torch.softmax(scaled, dim=-1)
    noise = torch.empty(probs.shape)
    for j, gen in enumerate(generators):
        noise[j].exponential_(generator=gen)
    return (probs / noise).argmax(dim=-1)


def median_ms(fn, repeats: int) -> float:
    for _ in range(max(5, repeats // 5)):  # warm-up (the first calls of a size pay one-off costs)
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,4,16,64")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    args = parse_args(parser, smoke={"rows": "1,4", "repeats": 2})
    torch.set_num_threads(args.threads)
    from agentr1_core.rollout.transformers_sampling import RowSampling, sample_rows

    results, table = [], []
    for n in (int(r) for r in args.rows.split(",")):
        logits = torch.randn(n, VOCAB, generator=torch.Generator().manual_seed(n)) * 3
        gens = [torch.Generator().manual_seed(i) for i in range(n)]
        seeded = [RowSampling(0.7, 0, 1.0, g) for g in gens]
        shared_rows = [RowSampling(0.7, 0, 1.0) for _ in range(n)]
        shared = torch.Generator().manual_seed(0)
        row = {"rows": n, "load_avg_1m_before": load_avg()[0],
               "sample_rows_seeded_ms": median_ms(lambda: sample_rows(logits, seeded), args.repeats),
               "sample_rows_shared_ms": median_ms(lambda: sample_rows(logits, shared_rows, shared), args.repeats),
               "exponential_race_ms": median_ms(lambda: exponential_race(logits, gens), args.repeats)}
        results.append(row)
        table.append([n, row["sample_rows_seeded_ms"], row["sample_rows_shared_ms"], row["exponential_race_ms"],
                      row["load_avg_1m_before"]])
    print_table(["rows", "sample_rows seeded ms", "shared ms", "exponential race ms", "load"], table)
    write_result("sampling", {"benchmark": "sampling", "machine": machine_info(), "vocab": VOCAB,
                              "temperature": 0.7, "repeats": args.repeats, "results": results})


if __name__ == "__main__":
    main()
