"""Decode steps of small batches: ``F.linear`` (``x @ W^T``) vs the engine's weight-major linears (``W @ x^T``).

One command: ``python bench/bench_decode_linears.py``. Two measurements at 1, 2, 4, 8, 16 and 32 rows:

* ``linears``: every linear layer of the model (its real weights, in model order, so that they stream from memory as
  in a decode step) applied to ``rows`` random inputs, both ways;
* ``decode``: one real decode step of the model through the engine's KV cache (``rows`` rows of ``--context``
  tokens), plain and inside ``WeightMajorLinear``, which is what ``TransformersEngine`` does for 2 to
  ``weight_major_rows`` rows (at 1 row the mode reroutes nothing, so that figure is the mode's own cost).

Each figure is the median of ``--repeats`` rounds that alternate the two ways (so that load drifts hit both), each
round timing ``--steps`` calls after a warm-up. The load average before each row size is recorded, and so are
torch's CPU capability and ``MKL_ENABLE_INSTRUCTIONS``: an AVX2 machine can be approximated on an AVX-512 one with
``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 python bench/bench_decode_linears.py --out decode_linears_avx2``.
Writes ``bench/results/decode_linears.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

from common import load_avg, machine_info, print_table, write_result


def timed(fn, steps: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t0) / steps * 1000


def alternate(plain, weight_major, steps: int, repeats: int) -> tuple[float, float]:
    """Median milliseconds of ``plain`` and ``weight_major`` over ``repeats`` alternating rounds."""
    a, b = [], []
    for _ in range(repeats):
        a.append(timed(plain, steps))
        b.append(timed(weight_major, steps))
    return statistics.median(a), statistics.median(b)


def decode_step_fns(model, rows: int, context: int):
    """Two callables that each run one decode step on a fresh ``rows`` x ``context`` cache (plain, weight-major)."""
    from agentr1_core.rollout.transformers_engine import cache_keyword
    from agentr1_core.rollout.transformers_kv import BatchKV, prefill_batch
    from agentr1_core.rollout.weight_major import WeightMajorLinear

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

    def step_weight_major():
        with WeightMajorLinear(max_rows=rows):
            step()

    return step, step_weight_major


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rows", default="1,2,4,8,16,32")
    parser.add_argument("--context", type=int, default=300, help="tokens already in each row's cache")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="decode_linears", help="result name (bench/results/<out>.json)")
    args = parser.parse_args()

    from agentr1_core.models import load_model_and_tokenizer
    from agentr1_core.rollout.weight_major import weight_major_linear

    torch.set_num_threads(args.threads)
    model, _ = load_model_and_tokenizer(args.model)
    model.eval()
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    result = {"benchmark": "decode_linears", "machine": machine_info(), "model": args.model,
              "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "mkl_enable_instructions": os.environ.get("MKL_ENABLE_INSTRUCTIONS"),
              "threads": args.threads, "context": args.context, "linear_layers": len(weights),
              "linear_params": sum(w.numel() for w in weights), "rows": {}}
    table = []
    with torch.inference_mode():
        for rows in [int(r) for r in args.rows.split(",")]:
            load = load_avg()[0]
            inputs = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in weights}
            lin = alternate(lambda: [F.linear(inputs[w.shape[1]], w) for w in weights],
                            lambda: [weight_major_linear(inputs[w.shape[1]], w) for w in weights],
                            args.steps, args.repeats)
            step, step_wm = decode_step_fns(model, rows, args.context)
            dec = alternate(step, step_wm, args.steps, args.repeats)
            result["rows"][rows] = {"load_avg_1m_before": load, "linears_ms": round(lin[0], 1),
                                    "linears_weight_major_ms": round(lin[1], 1),
                                    "decode_step_ms": round(dec[0], 1), "decode_step_weight_major_ms": round(dec[1], 1),
                                    "decode_speedup": round(dec[0] / dec[1], 2)}
            table.append([rows, f"{lin[0]:.1f}", f"{lin[1]:.1f}", f"{dec[0]:.1f}", f"{dec[1]:.1f}",
                          f"{dec[0] / dec[1]:.2f}x", load])
            print(f"[rows {rows}] {result['rows'][rows]}", flush=True)
    print_table(["rows", "linears ms", "weight-major ms", "decode step ms", "weight-major ms", "speedup", "load"],
                table)
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()
