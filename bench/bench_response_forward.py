"""Forward + backward of the trainer's response log-prob/entropy computation: response positions only (the current
``trainers.forward.response_forward``) vs the former computation over every kept position, in one run.

One command: ``python bench/bench_response_forward.py [--rows 8] [--prompt 230] [--reps 3]``. SmolLM2-135M-Instruct
(fp32, all parameters trainable), ``--rows`` left-padded rows of random token ids with ``--prompt`` prompt tokens
and response lengths spread between 4 and ``--max-response`` (like a micro-batch of calculator steps: tool calls
~25 tokens, answers ~8), loss = a weighted sum of log-probs plus 0.01 x entropy, the way the GRPO loss reads them.
Alternating repetitions; the best of each is reported, with the load average. Writes
``bench/results/response_forward.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from common import load_avg, machine_info, parse_args, print_table, write_result


def all_positions_forward(model, inputs, width, temperature=1.0):
    """The former computation: vocabulary projection and log-softmax over all ``keep - 1`` kept positions."""
    import torch
    import torch.nn.functional as F

    out = model(input_ids=inputs.input_ids, attention_mask=inputs.attention_mask, position_ids=inputs.position_ids,
                logits_to_keep=inputs.keep, use_cache=False)
    rmax = inputs.keep - 1
    logits = out.logits[:, -inputs.keep:-1, :].float() / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    token_lp = logp_all.gather(-1, inputs.input_ids[:, -rmax:].unsqueeze(-1)).squeeze(-1)
    resp = inputs.response_lens
    cols = torch.arange(width)
    valid = cols.unsqueeze(0) < resp.unsqueeze(1)
    src = ((rmax - resp).unsqueeze(1) + cols.unsqueeze(0)).clamp(0, rmax - 1)
    pad = max(0, width - rmax)
    logprobs = F.pad(token_lp, (0, pad)).gather(1, src) * valid
    entropy = F.pad(-(logp_all.exp() * logp_all).sum(-1), (0, pad)).gather(1, src) * valid
    return logprobs, entropy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=230)
    parser.add_argument("--max-response", type=int, default=40)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parse_args(parser, smoke={"rows": 2, "prompt": 16, "max_response": 6, "reps": 1})

    import torch

    from agentr1_core.models import load_model_and_tokenizer
    from agentr1_core.trainers.batching import ModelInputs
    from agentr1_core.trainers.forward import response_forward

    torch.set_num_threads(args.threads)
    model, tokenizer = load_model_and_tokenizer("smollm2-135m-instruct")
    model.train()
    g = torch.Generator().manual_seed(0)
    resp = torch.linspace(4, args.max_response, args.rows).round().long()
    total = args.prompt + int(resp.max())
    ids = torch.randint(100, len(tokenizer), (args.rows, total), generator=g)
    mask = torch.ones_like(ids)
    for i, r in enumerate(resp.tolist()):  # left padding: shorter responses -> shorter rows
        pad = int(resp.max()) - r
        ids[i, :pad] = tokenizer.pad_token_id
        mask[i, :pad] = 0
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    inputs = ModelInputs(ids, mask, pos, resp, keep=int(resp.max()) + 1)
    width = int(resp.max())
    weights = torch.randn(args.rows, width, generator=g)

    def step(name):
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        if name == "response_positions":
            out = response_forward(model, inputs, width, 0.7, with_entropy=True)
            lp, ent = out.logprobs, out.entropy
        else:
            lp, ent = all_positions_forward(model, inputs, width, 0.7)
        ((lp * weights).sum() + 0.01 * ent.sum()).backward()
        return time.perf_counter() - t0

    step("response_positions")  # warm-up
    times = {"response_positions": [], "all_positions": []}
    loads = []
    for _ in range(args.reps):
        for name in times:
            loads.append(load_avg()[0])
            times[name].append(step(name))
    tokens = int(mask.sum())
    best = {k: min(v) for k, v in times.items()}
    result = {"benchmark": "response_forward", "machine": machine_info(), "rows": args.rows,
              "prompt_tokens": args.prompt, "response_lens": resp.tolist(), "tokens": tokens,
              "seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
              "best_seconds": {k: round(v, 3) for k, v in best.items()},
              "best_tok_s": {k: round(tokens / v, 1) for k, v in best.items()},
              "speedup": round(best["all_positions"] / best["response_positions"], 3),
              "load_avg_1m": loads, "load_avg_end": load_avg()}
    print_table(["computation", "best s", "tok/s (fwd+bwd)", "runs"],
                [[k, round(best[k], 3), result["best_tok_s"][k], [round(x, 2) for x in times[k]]] for k in times])
    print(f"speedup {result['speedup']}x; load {loads}")
    print(f"wrote {write_result('response_forward', result)}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
