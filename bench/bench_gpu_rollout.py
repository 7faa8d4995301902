"""Rollout tokens/s at a given number of concurrent requests: the transformers engine, one static-batch ``generate``
and the vLLM engine, on one device (meant for a GPU; runs on a CPU too, slowly).

``python bench/bench_gpu_rollout.py --concurrency 64,256 --max-new-tokens 128 --out rollout.json``

For each concurrency N: N chat prompts of varying length (``bench_rollout.build_prompts``), greedy, the same
``max_new_tokens``, generated three ways, counting the tokens up to and including EOS:

* engine: N requests submitted at once to ``TransformersEngine`` with ``max_batch_size`` N (continuous batching),
* static_batch: one left-padded ``model.generate`` call over the N prompts,
* vllm: N requests submitted at once to ``VLLMEngine`` (``max_batch_size`` N), after the two above have freed the
  device.

Each method runs once untimed on a few prompts first, so that kernel compilation and CUDA start-up stay out of the
numbers. Writes the rows to ``--out`` (default ``bench/results/rollout_gpu.json``) after every method; a method that
fails is recorded with its error, the rest go on, and the exit code is 1. ``--smoke`` runs the transformers methods
on 2 requests of 4 tokens (CI). Measures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench_rollout import build_prompts, run_static, synchronize  # noqa: E402
from common import parse_args, results_dir  # noqa: E402

from agentr1_core.models import load_model_and_tokenizer  # noqa: E402
from agentr1_core.rollout.base import SamplingParams  # noqa: E402
from agentr1_core.rollout.transformers_engine import TransformersEngine  # noqa: E402


async def _submit(engine, prompts: list[list[int]], sampling: SamplingParams):
    return await asyncio.gather(*[engine.generate(p, sampling) for p in prompts])


def run_engine(engine, prompts: list[list[int]], max_new: int, device: str) -> tuple[float, int]:
    sampling = SamplingParams(temperature=0, max_new_tokens=max_new)
    asyncio.run(_submit(engine, prompts[:4], SamplingParams(temperature=0, max_new_tokens=4)))  # warm-up
    synchronize(device)
    start = time.perf_counter()
    gens = asyncio.run(_submit(engine, prompts, sampling))
    synchronize(device)
    elapsed = time.perf_counter() - start
    bad = [g.info for g in gens if g.finish_reason not in ("stop", "length")]
    if bad:
        raise RuntimeError(f"{len(bad)} requests failed, first: {bad[0]}")
    return elapsed, sum(len(g.token_ids) for g in gens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", help="the transformers model's dtype (engine, static_batch)")
    parser.add_argument("--vllm-dtype", default="bfloat16")
    parser.add_argument("--vllm-memory", type=float, default=0.3, help="vLLM's gpu_memory_utilization")
    parser.add_argument("--concurrency", default="64,256")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--methods", default="engine,static_batch,vllm")
    parser.add_argument("--out", default=None, help="the JSON result [bench/results/rollout_gpu.json]")
    args = parse_args(parser, smoke={"device": "cpu", "concurrency": "2", "max_new_tokens": 4,
                                     "methods": "engine,static_batch"})
    sizes = [int(n) for n in args.concurrency.split(",")]
    methods = args.methods.split(",")
    unknown = set(methods) - {"engine", "static_batch", "vllm"}
    if unknown or not sizes or min(sizes) < 1:
        parser.error(f"--methods takes engine,static_batch,vllm (got {sorted(unknown)}); --concurrency positive ints")

    result = {"model": args.model, "device": args.device, "dtype": args.dtype, "vllm_dtype": args.vllm_dtype,
              "max_new_tokens": args.max_new_tokens, "torch": torch.__version__, "platform": platform.platform(),
              "gpu": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else None, "rows": [],
              **({"smoke": True} if args.smoke else {})}
    out = Path(args.out) if args.out else results_dir() / "rollout_gpu.json"

    def record(method: str, n: int, fn) -> None:
        row = {"method": method, "concurrency": n}
        try:
            elapsed, tokens = fn()
            row.update(seconds=round(elapsed, 3), generated_tokens=tokens, tokens_per_s=round(tokens / elapsed, 1))
            print(f"  {method:<13} {n:>4} concurrent: {tokens} tokens in {elapsed:.2f} s = {tokens / elapsed:,.0f} "
                  f"tok/s", flush=True)
        except Exception as exc:  # noqa: BLE001 - recorded, the other methods still run
            row["error"] = f"{type(exc).__name__}: {exc}"
            print(f"  {method:<13} {n:>4} concurrent: FAILED {row['error']}", flush=True)
            traceback.print_exc()
        result["rows"].append(row)
        out.write_text(json.dumps(result, indent=2) + "\n")

    model, tokenizer = load_model_and_tokenizer(args.model, dtype=args.dtype, device=args.device)
    prompts = {n: build_prompts(tokenizer, n) for n in sizes}
    for n in sizes:
        if "engine" in methods:
            engine = TransformersEngine(model, tokenizer, max_batch_size=n, device=args.device)
            try:
                record("engine", n, lambda: run_engine(engine, prompts[n], args.max_new_tokens, args.device))
            finally:
                engine.close()
        if "static_batch" in methods:
            record("static_batch", n, lambda: run_static(model, tokenizer, prompts[n], args.max_new_tokens,
                                                         args.device, warm_up=True))
    del model
    gc.collect()
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    if "vllm" in methods:
        from agentr1_core.rollout.vllm_engine import VLLMEngine

        engine = None
        try:
            engine = VLLMEngine(model_path=args.model, dtype=args.vllm_dtype, max_batch_size=max(sizes),
                                gpu_memory_utilization=args.vllm_memory, max_model_len=2048)
            result["vllm_engine"] = {"enforce_eager": True, "max_num_seqs": max(sizes)}
            for n in sizes:
                record("vllm", n, lambda: run_engine(engine, prompts[n], args.max_new_tokens, "cpu"))
        except Exception as exc:  # noqa: BLE001 - the engine did not start: one row says why
            result["rows"].append({"method": "vllm", "error": f"{type(exc).__name__}: {exc}"})
            out.write_text(json.dumps(result, indent=2) + "\n")
            print(f"  vllm: FAILED to start: {exc}", flush=True)
            traceback.print_exc()
        finally:
            if engine is not None:
                engine.close()

    print(f"\n{'method':<13}{'concurrent':>11}{'tokens':>9}{'seconds':>9}{'tok/s':>10}")
    for row in result["rows"]:
        if "error" in row:
            print(f"{row['method']:<13}{row.get('concurrency', '-'):>11}  failed: {row['error'][:60]}")
        else:
            print(f"{row['method']:<13}{row['concurrency']:>11}{row['generated_tokens']:>9}{row['seconds']:>9}"
                  f"{row['tokens_per_s']:>10,.0f}")
    print(f"\nwrote {out}")
    if any("error" in row for row in result["rows"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
