"""The trainer's language-model head, forward + backward: the hand-written ``HeadChunk`` vs the generic autograd path
(``agentr1_core/trainers/head.py``).

One command: ``python bench/bench_head.py``. The head is SmolLM2-135M-Instruct's own output layer (its 49,152 x 576
weight, frozen as with ``trainer.train_layers``), applied to ``--positions`` random hidden states (the response
positions of one update: 957 in one iteration of ``bench_peer_iteration.py``) at the default sampling temperature
0.7, with the entropy computed as the update does (a metric, no entropy term in the loss) and, separately, with an
entropy term. Each figure is the median of ``--repeats`` rounds that alternate the ways, per chunk size; the pass
without gradients (old log-probs) is timed too. Writes ``bench/results/head.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from common import load_avg, machine_info, parse_args, print_table, write_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--positions", type=int, default=957)
    parser.add_argument("--chunks", default="128,256,512")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="head")
    args = parse_args(parser, smoke={"positions": 16, "chunks": "8", "repeats": 1})
    torch.set_num_threads(args.threads)

    from agentr1_core.models import load_model_and_tokenizer
    from agentr1_core.trainers.head import chunked_head

    model, _ = load_model_and_tokenizer("smollm2-135m-instruct", dtype="float32", device="cpu")
    head = model.get_output_embeddings()
    head.weight.requires_grad_(False)
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(args.positions, head.weight.shape[1], generator=g)
    targets = torch.randint(0, head.weight.shape[0], (args.positions,), generator=g)

    def step(chunk: int, fused: bool, entropy_coef: float) -> None:
        h = hidden.clone().requires_grad_(True)
        lp, ent = chunked_head(head, h, targets, 0.7, True, chunk=chunk, fused=fused)
        (lp.sum() + entropy_coef * ent.sum() if entropy_coef else lp.sum()).backward()

    def no_grad(chunk: int, fused: bool) -> None:
        with torch.no_grad():
            chunked_head(head, hidden, targets, 0.7, True, chunk=chunk, fused=fused)

    ways = {"generic": dict(fused=False, entropy_coef=0.0), "fused": dict(fused=True, entropy_coef=0.0),
            "generic_entropy_term": dict(fused=False, entropy_coef=0.01),
            "fused_entropy_term": dict(fused=True, entropy_coef=0.01)}
    rows, table = [], []
    for chunk in (int(c) for c in args.chunks.split(",")):
        load = load_avg()[0]
        fns = [lambda w=w: step(chunk, **w) for w in ways.values()]
        fns += [lambda: no_grad(chunk, False), lambda: no_grad(chunk, True)]
        times: list[list[float]] = [[] for _ in fns]
        for fn in fns:
            fn()  # warm-up
        for _ in range(args.repeats):
            for fn, bucket in zip(fns, times):
                t0 = time.perf_counter()
                fn()
                bucket.append((time.perf_counter() - t0) * 1000)
        ms = [round(statistics.median(b), 1) for b in times]
        row = {"chunk": chunk, "load_avg_1m_before": load, **{f"{k}_ms": v for k, v in zip(ways, ms)},
               "generic_no_grad_ms": ms[-2], "fused_no_grad_ms": ms[-1],
               "speedup": round(ms[0] / ms[1], 2), "speedup_entropy_term": round(ms[2] / ms[3], 2),
               "speedup_no_grad": round(ms[-2] / ms[-1], 2)}
        rows.append(row)
        table.append([chunk, ms[0], ms[1], row["speedup"], ms[2], ms[3], ms[-2], ms[-1], load])
    print_table(["chunk", "generic ms", "fused ms", "x", "generic+ent", "fused+ent", "no-grad generic",
                       "no-grad fused", "load"], table)
    write_result(args.out, {"benchmark": "head", "machine": machine_info(), "positions": args.positions,
                            "vocab": int(head.weight.shape[0]), "hidden": int(head.weight.shape[1]),
                            "temperature": 0.7, "repeats": args.repeats, "rows": rows})


if __name__ == "__main__":
    main()
