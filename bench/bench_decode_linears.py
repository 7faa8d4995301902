"""The linear layers of the engine's forwards: ``F.linear`` (MKL, ``x @ W^T``) vs weight-major (``W @ x^T``) vs
oneDNN's matmul, and whole decode steps plain vs inside ``CpuLinears`` (see ``agentr1_core/cpu_linears.py``).

One command: ``python bench/bench_decode_linears.py``. Two measurements per row count:

* ``linears``: every linear layer of the model (its real weights, in model order, so that they stream from memory as
  in a forward) applied to ``rows`` random input rows, three ways; ``--linear-rows`` adds row counts measured only
  this way (a prefill's 128 or 512 rows);
* ``decode``: one real decode step of the model through the engine's KV cache (``rows`` rows of ``--context``
  tokens), plain and inside ``CpuLinears`` with the engine's defaults (what ``TransformersEngine`` does).

Each figure is the median of ``--repeats`` rounds that alternate the ways (so that load drifts hit all of them), each
round timing ``--steps`` calls after a warm-up. The load average before each row count is recorded, and so are
torch's CPU capability and ``MKL_ENABLE_INSTRUCTIONS``: an AVX2 machine can be approximated on an AVX-512 one with
``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 python bench/bench_decode_linears.py
--out decode_linears_avx2``. Writes ``bench/results/decode_linears.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

from common import load_avg, machine_info, parse_args, print_table, write_result


def timed(fn, steps: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t0) / steps * 1000


def alternate(fns, steps: int, repeats: int) -> list[float]:
    """Median milliseconds of each of ``fns`` over ``repeats`` rounds that alternate them."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, bucket in zip(fns, times):
            bucket.append(timed(fn, steps))
    return [statistics.median(bucket) for bucket in times]


def decode_step_fns(model, rows: int, context: int):
    """Two callables that each run one decode step on a fresh ``rows`` x ``context`` cache (plain, ``CpuLinears``)."""
    from agentr1_core.rollout.transformers_engine import cache_keyword
    from agentr1_core.rollout.transformers_kv import BatchKV, prefill_batch
    from agentr1_core.cpu_linears import CpuLinears

    layers, kw = model.config.num_hidden_layers, cache_keyword(model)
    kv = BatchKV(layers)
    new = prefill_batch(layers, [None] * rows, [0] * rows, [context] * rows)
    ids = torch.randint(100, 10000, (rows, context))
    positions = (new.mask.cumsum(1) - 1).clamp(min=0)
    model(input_ids=ids, attention_mask=new.mask, position_ids=positions, **{kw: new.cache}, use_cache=True,
          logits_to_keep=1)
    kv.add(new)
    token = torch.randint(100, 10000, (rows, 1))

    def step():
        positions = kv.mask.sum(1, keepdim=True)
        kv.append_mask_column()
        model(input_ids=token, attention_mask=kv.mask, position_ids=positions, **{kw: kv.cache}, use_cache=True)

    def step_cpu_linears():
        with CpuLinears():
            step()

    return step, step_cpu_linears


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rows", default="1,2,4,8,16,32,64")
    parser.add_argument("--linear-rows", default="128,512", help="row counts measured on the linears only")
    parser.add_argument("--context", type=int, default=300, help="tokens already in each row's cache")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="decode_linears", help="result name (bench/results/<out>.json)")
    args = parse_args(parser, smoke={"rows": "2", "linear_rows": "", "context": 16, "steps": 1, "repeats": 1})

    from agentr1_core.models import load_model_and_tokenizer
    from agentr1_core.cpu_linears import onednn_linear, weight_major_linear

    torch.set_num_threads(args.threads)
    model, _ = load_model_and_tokenizer(args.model)
    model.eval()
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    result = {"benchmark": "decode_linears", "machine": machine_info(), "model": args.model,
              "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "mkl_enable_instructions": os.environ.get("MKL_ENABLE_INSTRUCTIONS"),
              "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
              "threads": args.threads, "context": args.context, "linear_layers": len(weights),
              "linear_params": sum(w.numel() for w in weights), "rows": {}}
    table = []
    decode_rows = [int(r) for r in args.rows.split(",")]
    linear_rows = [int(r) for r in args.linear_rows.split(",") if r]
    with torch.inference_mode():
        for rows in decode_rows + linear_rows:
            load = load_avg()[0]
            inputs = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in weights}
            lin = alternate([lambda way=way: [way(inputs[w.shape[1]], w) for w in weights]
                             for way in (F.linear, weight_major_linear, onednn_linear)], args.steps, args.repeats)
            entry = {"load_avg_1m_before": load, "linears_ms": round(lin[0], 1),
                     "linears_weight_major_ms": round(lin[1], 1), "linears_onednn_ms": round(lin[2], 1)}
            dec: list[float] = []
            if rows in decode_rows:
                dec = alternate(decode_step_fns(model, rows, args.context), args.steps, args.repeats)
                entry.update({"decode_step_ms": round(dec[0], 1), "decode_step_cpu_linears_ms": round(dec[1], 1),
                              "decode_speedup": round(dec[0] / dec[1], 2)})
            result["rows"][rows] = entry
            decode_cells = [f"{dec[0]:.1f}", f"{dec[1]:.1f}", f"{dec[0] / dec[1]:.2f}x"] if dec else ["-"] * 3
            table.append([rows, *(f"{t:.1f}" for t in lin), *decode_cells, load])
            print(f"[rows {rows}] {entry}", flush=True)
    print_table(["rows", "F.linear ms", "weight-major ms", "oneDNN ms", "decode step ms", "CpuLinears ms", "speedup",
                 "load"], table)
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()
