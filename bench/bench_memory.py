"""Where the bytes go, measured on SmolLM2-135M-Instruct (fp32, CPU): two experiments, each case in its own process.

1. ``sft``: one SFT optimizer step on a WebShop-sized micro-batch (``--rows`` rows of ``--tokens`` tokens, 8 x 1,100
   by default: what ``webshop-cpu``'s SFT stage runs) through the top ``--train-layers`` blocks, under token budgets
   per micro-batch (``trainer.micro_batch_tokens``, ``--budgets``) and with ``trainer.activation_checkpointing``:
   the phase's peak RSS, its seconds, and the account by part.
2. ``kv``: the engine generating for 8 / 32 / 128 concurrent requests with the same prompt length: the KV buffers at
   their peak and the phase's peak RSS, which must follow the tokens in flight (not ``engine.max_batch_size``).

    python bench/bench_memory.py                 # both, results in bench/results/memory.json
    python bench/bench_memory.py --only kv

Prints a table per experiment. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine_info, parse_args, print_table, results_dir, run_json_subprocess, write_result  # noqa: E402


def child_sft(args: argparse.Namespace) -> dict:
    import torch

    from agentr1_core.memory import PhasePeaks, module_mb, optimizer_mb, rss_mb, tensor_mb
    from agentr1_core.mdp import Step, Trajectory
    from agentr1_core.models import load_model_and_tokenizer
    from agentr1_core.trainers.batching import trajectories_to_rows
    from agentr1_core.trainers.local import enable_activation_checkpointing, freeze_below_top
    from agentr1_core.trainers.optimizer_steps import make_optimizer
    from agentr1_core.trainers.update import Policy, sft_update

    torch.set_num_threads(args.threads)
    baseline = rss_mb()
    model, tok = load_model_and_tokenizer("smollm2-135m-instruct", dtype="float32", device="cpu")
    freeze_below_top(model, args.train_layers)
    if args.checkpointing:
        enable_activation_checkpointing(model)
    gen = torch.Generator().manual_seed(0)
    trajs = []
    for i in range(args.rows):
        ids = torch.randint(100, 40000, (args.tokens,), generator=gen).tolist()
        cut = args.tokens - args.response
        trajs.append(Trajectory(steps=[Step(ids[:cut], ids[cut:], [0.0] * args.response, done=True)], uid=f"t{i}"))
    rows = trajectories_to_rows(trajs).rows
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer([{"params": params, "lr": 1e-5}], lr=1e-5)
    policy = Policy(model=model, pad_id=int(tok.eos_token_id), params=params, share_prefix=0,
                    activation_checkpointing=args.checkpointing, micro_batch_tokens=args.budget)
    peaks = PhasePeaks()
    t0 = time.perf_counter()
    with peaks.phase("sft"):
        sft_update(policy, opt, rows, epochs=1, batch_size=args.rows, micro_batch_size=args.rows, max_grad_norm=1.0,
                   progress=False)
    seconds = time.perf_counter() - t0
    return {"checkpointing": args.checkpointing, "micro_batch_tokens": args.budget, "seconds": round(seconds, 2),
            "peak_mb": round(peaks.last["sft"], 1),
            "baseline_mb": round(baseline, 1), "weights_mb": round(module_mb(model), 1),
            "optimizer_mb": round(optimizer_mb(opt), 1), "gradients_mb": round(tensor_mb(params), 1),
            "trainable_m": round(sum(p.numel() for p in params) / 1e6, 2)}


def child_kv(args: argparse.Namespace) -> dict:
    import torch

    from agentr1_core.memory import PhasePeaks, rss_mb
    from agentr1_core.models import load_model_and_tokenizer
    from agentr1_core.rollout.base import SamplingParams
    from agentr1_core.rollout.transformers_engine import TransformersEngine

    torch.set_num_threads(args.threads)
    model, tok = load_model_and_tokenizer("smollm2-135m-instruct", dtype="float32", device="cpu")
    engine = TransformersEngine(model, tok, max_batch_size=128, prefix_cache_mb=0)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, 40000, (args.prompt,), generator=gen).tolist() for _ in range(args.concurrent)]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens)
    before = rss_mb()
    peaks = PhasePeaks()

    async def run() -> list:
        return await asyncio.gather(*(engine.generate(p, sampling) for p in prompts))

    t0 = time.perf_counter()
    with peaks.phase("rollout"):
        outs = asyncio.run(run())
    seconds = time.perf_counter() - t0
    stats = engine.take_memory_stats()
    engine.close()
    tokens = sum(len(o.token_ids) for o in outs)
    return {"concurrent": args.concurrent, "prompt_tokens": args.prompt, "new_tokens": tokens,
            "kv_peak_mb": round(stats["kv_peak"], 1), "before_mb": round(before, 1),
            "peak_mb": round(peaks.last["rollout"], 1), "seconds": round(seconds, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["sft", "kv"])
    ap.add_argument("--child", choices=["sft", "kv"])
    ap.add_argument("--checkpointing", action="store_true")
    ap.add_argument("--budget", type=int, default=0, help="trainer.micro_batch_tokens of one sft child")
    ap.add_argument("--budgets", default="0,4096,2048", help="the sft experiment's token budgets (no checkpointing)")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1100)
    ap.add_argument("--response", type=int, default=60)
    ap.add_argument("--train-layers", type=int, default=10)
    ap.add_argument("--concurrent", type=int, default=8, help="concurrent requests of one kv child")
    ap.add_argument("--levels", default="8,32,128", help="the kv experiment's concurrent requests")
    ap.add_argument("--prompt", type=int, default=400)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = parse_args(ap, smoke={"rows": 2, "tokens": 64, "response": 8, "budgets": "64", "train_layers": 2,
                                 "levels": "2", "prompt": 32, "new_tokens": 4})
    if args.child:
        print(json.dumps(child_sft(args) if args.child == "sft" else child_kv(args)))
        return
    me = str(Path(__file__).resolve())
    previous = results_dir() / "memory.json"
    # one experiment alone keeps the other's last results
    result: dict = json.loads(previous.read_text()) if args.only and previous.exists() else {}
    result["machine"] = machine_info()
    if args.only in (None, "sft"):
        cases = [(False, int(b)) for b in args.budgets.split(",") if b.strip()] + [(True, 0)]
        rows = [run_json_subprocess([me, "--child", "sft", *(["--checkpointing"] if c else []), "--budget", str(b),
                                     "--rows", str(args.rows), "--tokens", str(args.tokens), "--response",
                                     str(args.response), "--train-layers",
                                     str(args.train_layers), "--threads", str(args.threads)])
                for c, b in cases]
        result["sft"] = rows
        print(print_table(["checkpointing", "token budget", "peak MiB", "seconds", "baseline", "weights",
                           "optimizer", "gradients"],
                          [[r["checkpointing"], r["micro_batch_tokens"], r["peak_mb"], r["seconds"], r["baseline_mb"],
                            r["weights_mb"], r["optimizer_mb"], r["gradients_mb"]] for r in rows]))
    if args.only in (None, "kv"):
        rows = [run_json_subprocess([me, "--child", "kv", "--concurrent", str(n), "--prompt", str(args.prompt),
                                     "--new-tokens", str(args.new_tokens), "--threads", str(args.threads)])
                for n in (int(x) for x in args.levels.split(","))]
        result["kv"] = rows
        print(print_table(["concurrent", "prompt", "KV peak MiB", "RSS before", "peak MiB", "seconds"],
                          [[r["concurrent"], r["prompt_tokens"], r["kv_peak_mb"], r["before_mb"], r["peak_mb"],
                            r["seconds"]] for r in rows]))
    print(write_result("memory", result))


if __name__ == "__main__":
    main()
