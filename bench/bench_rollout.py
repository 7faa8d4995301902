"""Rollout throughput: the transformers engine vs plain ``model.generate`` on SmolLM2-135M (CPU, fp32).

One command: ``python bench/bench_rollout.py``. Builds 32 multi-turn-like chat prompts of varying length (1-4 prior
turns), generates greedily with the same ``max_new_tokens`` three ways, and prints generated tokens/s:

* engine: all requests submitted concurrently to ``TransformersEngine`` (continuous batching),
* plain loop: ``model.generate`` one request at a time,
* static batch: one left-padded ``model.generate`` call over all requests (tokens after EOS are not counted).

Writes ``bench/results/rollout.json`` (after each method; ``--methods`` reruns a subset and keeps the other rows).
The 1-minute host load average before each method is recorded, since other processes sharing the CPU skew results. Greedy decoding makes the three produce (nearly) the same tokens, so the
token counts are comparable. Nothing here asserts anything; it only measures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from agentr1_core.models import load_model_and_tokenizer  # noqa: E402
from agentr1_core.rollout.base import SamplingParams  # noqa: E402
from agentr1_core.rollout.transformers_engine import TransformersEngine  # noqa: E402
from common import parse_args, results_dir  # noqa: E402

TOPICS = ["prime numbers", "the moon", "bread baking", "sorting algorithms", "volcanoes", "chess openings",
          "photosynthesis", "the French revolution"]
ASKS = ["Answer in one word.", "Give a short answer.", "Explain in two sentences.",
        "Write a detailed explanation with an example."]


def build_prompts(tokenizer, n: int) -> list[list[int]]:
    prompts = []
    for i in range(n):
        topic, turns = TOPICS[i % len(TOPICS)], 1 + (i * 7) % 4
        messages = []
        for t in range(turns - 1):
            messages.append({"role": "user", "content": f"Tell me fact {t + 1} about {topic}."})
            messages.append({"role": "assistant", "content": f"Fact {t + 1}: {topic} is a topic with a long "
                                                                f"history and many details worth knowing."})
        messages.append({"role": "user", "content": f"Now about {topic}: {ASKS[i % len(ASKS)]}"})
        out = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        prompts.append(list(out if isinstance(out, list) else out["input_ids"]))
    return prompts


def trim_after_eos(ids: list[int], eos: int) -> list[int]:
    return ids[: ids.index(eos) + 1] if eos in ids else ids


def run_engine(model, tokenizer, prompts, max_new: int) -> tuple[float, int]:
    engine = TransformersEngine(model, tokenizer, max_batch_size=64)
    sampling = SamplingParams(temperature=0, max_new_tokens=max_new)

    async def go():
        return await asyncio.gather(*[engine.generate(p, sampling) for p in prompts])

    start = time.perf_counter()
    gens = asyncio.run(go())
    elapsed = time.perf_counter() - start
    engine.close()
    assert all(g.finish_reason in ("stop", "length") for g in gens), [g.info for g in gens]
    return elapsed, sum(len(g.token_ids) for g in gens)


def run_plain(model, tokenizer, prompts, max_new: int) -> tuple[float, int]:
    total = 0
    start = time.perf_counter()
    with torch.inference_mode():
        for p in prompts:
            ids = torch.tensor([p])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new,
                                 pad_token_id=tokenizer.pad_token_id)
            total += len(trim_after_eos(out[0, len(p):].tolist(), tokenizer.eos_token_id))
    return time.perf_counter() - start, total


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_static(model, tokenizer, prompts, max_new: int, device: str = "cpu",
               warm_up: bool = False) -> tuple[float, int]:
    """One left-padded ``model.generate`` over all prompts; ``warm_up`` first runs 4 rows for 4 tokens untimed."""
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, longest - len(p):] = torch.tensor(p)
        mask[i, longest - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    with torch.inference_mode():
        if warm_up:
            model.generate(ids[:4], attention_mask=mask[:4], do_sample=False, max_new_tokens=4,
                           pad_token_id=tokenizer.pad_token_id)
        synchronize(device)
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new,
                             pad_token_id=tokenizer.pad_token_id)
        synchronize(device)
    elapsed = time.perf_counter() - start
    total = sum(len(trim_after_eos(row[longest:].tolist(), tokenizer.eos_token_id)) for row in out)
    return elapsed, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--methods", default="engine,plain_loop,static_batch",
                        help="comma list; rows already in --out for other methods are kept")
    parser.add_argument("--out", default=None, help="result file (default: bench/results/rollout.json)")
    args = parse_args(parser, smoke={"requests": 3, "max_new_tokens": 4})
    torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    model, tokenizer = load_model_and_tokenizer(args.model)
    load_s = time.perf_counter() - t0
    prompts = build_prompts(tokenizer, args.requests)
    with torch.inference_mode():  # warm up kernels once so no method pays first-call costs
        model.generate(torch.tensor([prompts[0]]), do_sample=False, max_new_tokens=2,
                       pad_token_id=tokenizer.pad_token_id)

    out = Path(args.out) if args.out else results_dir() / "rollout.json"
    previous = json.loads(out.read_text()) if out.is_file() else {}
    rows = {k: v for k, v in previous.get("results", {}).items() if previous.get("requests") == args.requests
            and previous.get("max_new_tokens") == args.max_new_tokens}
    lengths = [len(p) for p in prompts]
    result = {"model": args.model, "requests": args.requests, "max_new_tokens": args.max_new_tokens,
              "threads": args.threads, "prompt_tokens": {"min": min(lengths), "max": max(lengths),
                                                           "mean": round(sum(lengths) / len(lengths), 1)},
              "load_seconds": round(load_s, 2), "torch": torch.__version__, "platform": platform.platform(),
              "results": rows, **({"smoke": True} if args.smoke else {})}
    methods = {"engine": run_engine, "plain_loop": run_plain, "static_batch": run_static}
    for name in args.methods.split(","):
        load_before = os.getloadavg()[0]
        elapsed, tokens = methods[name](model, tokenizer, prompts, args.max_new_tokens)
        rows[name] = {"seconds": round(elapsed, 2), "generated_tokens": tokens,
                      "tokens_per_s": round(tokens / elapsed, 2), "host_load_avg_1m": round(load_before, 1)}
        print(f"  {name}: {tokens} tokens in {elapsed:.1f}s (host load {load_before:.1f})", flush=True)
        _write(out, result)  # keep partial results if a later method is interrupted

    base = rows.get("plain_loop", {}).get("tokens_per_s")
    print(f"\n{'method':<14}{'tokens':>8}{'seconds':>10}{'tok/s':>9}{'x plain':>9}{'load':>7}")
    for name, row in rows.items():
        if base:
            row["speedup_vs_plain_loop"] = round(row["tokens_per_s"] / base, 2)
        print(f"{name:<14}{row['generated_tokens']:>8}{row['seconds']:>10}{row['tokens_per_s']:>9}"
              f"{row.get('speedup_vs_plain_loop', '-'):>9}{row.get('host_load_avg_1m', '-'):>7}")
    _write(out, result)
    print(f"\nwrote {out}")


def _write(out: Path, result: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")

if __name__ == "__main__":
    main()
