"""Update throughput of the local trainer as a fraction of this machine's fp32 matmul peak, measured in one run.

One command: ``python bench/bench_peer_update.py``.

* Peak: square fp32 matrix products (sizes ``--sizes``), ``2·n³`` FLOPs each, best of ``--reps``, with both of
  torch's CPU kernels (``torch.mm``, which is MKL, and oneDNN's matmul, which the update uses by default: see
  ``agentr1_core/cpu_linears.py``); measured right before and right after the update, the highest is the peak.
* Update: the RL policy update of the default task (``policy_update``: forward with log-probs and entropy, GRPO
  loss, backward, AdamW step; micro-batches of ``trainer.micro_batch_size`` step rows) on the step rows of real
  2-turn calculator episodes of the default task (the scripted expert's episodes: real prompts through the real
  chat template, no generation needed). All parameters are trained (``trainer.train_layers=0``) so that the usual
  ``6·N·tokens`` count applies: ``N`` = every parameter of the model (the tied embedding counted once), tokens = the
  non-padding token positions the update computes (prompt + response of every step row, where a micro-batch's
  shared prefix, ``trainer.share_prefix``, counts once). The rows' own token count (a shared prefix once per row)
  gives the "effective" figures: what the update delivers, above what the hardware computes. The advantages come
  from random rewards: their values do not change the work done (with one episode per task GRPO's advantages are
  all 0, so the update is told to run the rows it would otherwise skip as inert). A second column counts ``N``
  without the embedding matrix, since the language-model head runs only over response positions
  (``logits_to_keep``). The peak is a best-of figure; so that a busy moment on a shared machine does not decide the
  ratio alone, the rows are then updated again one micro-batch per optimizer step and the best micro-batch is
  reported too.

``--profile`` then runs one more update of all rows under ``torch.profiler`` and records where its CPU time went:
the share of matrix products (``mm``/``addmm``/``bmm``, attention kernels and their backward) and the top operators
by self time, so that what is not a matmul can be found and removed.

Writes ``bench/results/peer_update.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from common import (
    default_config, load_avg, machine_info, make_trainer, parse_args, print_table, profile_ops, quiet, task_rows,
    write_result,
)


def matmul_peak(sizes: list[int], reps: int) -> dict:
    import torch

    from agentr1_core.cpu_linears import onednn_available, onednn_linear

    kernels = {"mkl": torch.mm}
    if onednn_available():
        kernels["onednn"] = onednn_linear  # a @ b^T: the same FLOPs for square matrices
    best: dict[str, dict[int, float]] = {name: {} for name in kernels}
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        for name, kernel in kernels.items():
            kernel(a, b)  # warm-up
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                kernel(a, b)
                times.append(time.perf_counter() - t0)
            best[name][n] = 2 * n**3 / min(times) / 1e9
    return {"gflops_by_kernel_and_size": {name: {str(k): round(v, 1) for k, v in by_size.items()}
                                          for name, by_size in best.items()},
            "gflops": round(max(v for by_size in best.values() for v in by_size.values()), 1)}


def computed(metrics: dict) -> tuple[int, float]:
    """Token positions an update computed and their rate (its seconds are ``update_tokens / update_tok_s``)."""
    seconds = metrics["update_tokens"] / metrics["update_tok_s"]
    return metrics["update_computed_tokens"], metrics["update_computed_tokens"] / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes", default="1024,2048,3072")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="profile one more update (operator self times)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override (e.g. trainer.onednn_linears=false); repeatable")
    parser.add_argument("--out", default="peer_update", help="result name (bench/results/<out>.json)")
    args = parse_args(parser, smoke={"episodes": 2, "sizes": "64,128", "reps": 1,
                                     "set": ["trainer.micro_batch_size=2"]})

    import torch

    from agentr1_core.trainers.batching import build_step_batch, trajectories_to_rows
    from agentr1_core.trainers.update import UpdateSettings, policy_update, score_batch

    torch.set_num_threads(args.threads)
    sizes = [int(s) for s in args.sizes.split(",")]
    result = {"benchmark": "peer_update", "machine": machine_info(), "load_avg_start": load_avg(),
              "threads": args.threads, "overrides": args.set,
              "flops_formula": "6 * N * tokens (forward 2N + backward 4N per token)"}
    cfg = default_config(["trainer.train_layers=0", "validation.max_rows=0", f"trainer.threads={args.threads}",
                          *args.set])
    trainer = make_trainer(cfg)
    try:
        with quiet():
            trajs, _ = trainer.rollout(task_rows(args.episodes, split="train"), 1, trainer.sampling, policy="expert")
        steps = trajectories_to_rows(trajs).rows
        gen = torch.Generator().manual_seed(0)
        for r in steps:
            r.reward = float(torch.rand(1, generator=gen))
        batch = build_step_batch(steps)
        tr = cfg.trainer
        temp = float(cfg.rollout.temperature)
        score_batch(trainer.backend.policy, steps, batch, int(tr.micro_batch_size), temp, True, False, False)
        adv = trainer.algorithm.compute_advantages(batch)

        def update(rows_subset):
            sub = build_step_batch(rows_subset, width=batch.action_mask.shape[1])
            sub.old_logprobs = batch.old_logprobs[: len(rows_subset)]
            # one sample per task: GRPO's advantages are 0, run the rows and step anyway (skip_inert=False,
            # step_without_gradient=True)
            return policy_update(trainer.backend.policy, trainer.algorithm, trainer.backend.optimizer, rows_subset,
                                 sub, adv.advantages[: len(rows_subset)], adv.returns[: len(rows_subset)],
                                 UpdateSettings(micro_batch_size=int(tr.micro_batch_size), temperature=temp,
                                                max_grad_norm=float(tr.max_grad_norm), skip_inert=False,
                                                step_without_gradient=True))

        mb = int(tr.micro_batch_size)
        update(steps[:mb])  # warm-up: one micro-batch
        peak_before = matmul_peak(sizes, args.reps)
        load_before = load_avg()[0]
        metrics = update(steps)
        # the same rows again, one optimizer step per micro-batch: a best-of figure, like the matmul peak's
        chunks = [update(steps[i:i + mb]) for i in range(0, len(steps) - mb + 1, mb)]
        peak_after = matmul_peak(sizes, args.reps)
        profiled = profile_ops(lambda: update(steps)) if args.profile else None
    finally:
        trainer.close()
    model = trainer.backend.policy.model
    n_all = sum(p.numel() for p in model.parameters())
    n_embed = model.get_input_embeddings().weight.numel()
    row_tokens, row_tok_s = metrics["update_tokens"], metrics["update_tok_s"]
    tokens, tok_s = computed(metrics)
    peak = max(peak_before["gflops"], peak_after["gflops"])
    achieved = 6 * n_all * tok_s / 1e9
    achieved_nonembed = 6 * (n_all - n_embed) * tok_s / 1e9
    best_tok_s = max(computed(c)[1] for c in chunks)
    achieved_best = 6 * n_all * best_tok_s / 1e9
    prompt_lens = [len(r.prompt_ids) for r in steps]
    result.update({
        "step_rows": len(steps), "update_tokens": tokens, "update_seconds": round(tokens / tok_s, 2),
        "update_tok_s": round(tok_s, 1), "share_prefix": int(cfg.trainer.share_prefix),
        "row_tokens": row_tokens, "row_tok_s": round(row_tok_s, 1),
        "effective_fraction_of_peak_6N_nonembedding": round(6 * (n_all - n_embed) * row_tok_s / 1e9 / peak, 3),
        "mean_prompt_tokens": round(sum(prompt_lens) / len(prompt_lens), 1),
        "mean_response_tokens": round(sum(len(r.response_ids) for r in steps) / len(steps), 1),
        "micro_batch_size": int(cfg.trainer.micro_batch_size), "params_all": n_all, "params_embedding": n_embed,
        "matmul_peak_before": peak_before, "matmul_peak_after": peak_after, "matmul_peak_gflops": peak,
        "achieved_gflops_6N": round(achieved, 1), "fraction_of_peak_6N": round(achieved / peak, 3),
        "achieved_gflops_6N_nonembedding": round(achieved_nonembed, 1),
        "fraction_of_peak_6N_nonembedding": round(achieved_nonembed / peak, 3),
        "micro_batch_updates_tok_s": [round(computed(c)[1], 1) for c in chunks],
        "best_micro_batch_tok_s": round(best_tok_s, 1), "achieved_gflops_6N_best": round(achieved_best, 1),
        "fraction_of_peak_6N_best": round(achieved_best / peak, 3),
        "load_avg_1m_before_update": load_before, "load_avg_end": load_avg(),
        "optimizer_steps": metrics["optimizer_steps"],
    })
    if profiled is not None:
        result["profile"] = profiled
        print_table(["op (self CPU time)", "seconds", "share", "calls"],
                    [[o["op"], o["self_seconds"], o["share"], o["calls"]] for o in profiled["top_ops"]])
        print(f"matrix products: {profiled['matmul_share']:.1%} of the update's self CPU time")
    print_table(["update tok/s", "tokens", "row tokens", "matmul peak GFLOP/s", "6N GFLOP/s", "of peak",
                 "6N(non-emb) of peak", "effective (row tokens)", "best micro-batch of peak", "load"],
                [[result["update_tok_s"], tokens, row_tokens, peak, result["achieved_gflops_6N"],
                  result["fraction_of_peak_6N"], result["fraction_of_peak_6N_nonembedding"],
                  result["effective_fraction_of_peak_6N_nonembedding"], result["fraction_of_peak_6N_best"],
                  load_before]])
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
