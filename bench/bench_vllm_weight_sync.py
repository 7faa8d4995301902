"""Weight sync into a vLLM engine: in memory (``VLLMEngine.sync_weights``) vs. a Hugging Face checkpoint written to
disk and read back first (what the ``verl`` trainer did before it exported weights in memory).

Runs in the vLLM environment (``bash scripts/setup_vllm.sh``)::

    .venv-vllm/bin/python bench/bench_vllm_weight_sync.py [--model smollm2-135m-instruct] [--repeats 3]

Each repeat ships every weight of the model (fp32, as the trainer publishes them), changed slightly so that the
engine really loads new values, and checks that the engine's log-probs changed. Prints one JSON line with the median
seconds of each path; ``--out`` also writes it to a file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from common import parse_args, write_result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="also write the result to this file (a smoke run: to its folder)")
    args = parse_args(parser, smoke={"repeats": 1})
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    import torch
    from safetensors.torch import load_file, save_file

    from agentr1_core.models import model_folder
    from agentr1_core.rollout.vllm_engine import VLLMEngine

    engine = VLLMEngine(model_path=args.model, dtype="float32", max_model_len=512, seed=0)
    folder = Path(model_folder(args.model))
    base = {}
    for f in sorted(folder.glob("*.safetensors")):
        base.update({k: v.float() for k, v in load_file(str(f)).items()})
    mb = sum(t.numel() * t.element_size() for t in base.values()) / 2 ** 20
    prompt, cont = [1, 17, 250, 3001], [42, 4242, 7]

    def scored() -> list[float]:
        return asyncio.run(engine.score(prompt, cont))

    times: dict[str, list[float]] = {"in_memory": [], "disk_round_trip": []}
    changed = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for path in ("in_memory", "disk_round_trip"):
                scale = 1.0 + 0.01 * (len(changed) + 1)
                state = {k: v * scale for k, v in base.items()}
                before = scored()
                t0 = time.perf_counter()
                if path == "disk_round_trip":
                    ckpt = Path(tmp) / f"iter_{r}"
                    ckpt.mkdir()
                    save_file(state, str(ckpt / "model.safetensors"))
                    state = {k: v.float().numpy() for k, v in load_file(str(ckpt / "model.safetensors")).items()}
                    state = {k: torch.from_numpy(v) for k, v in state.items()}
                engine.sync_weights(state)
                times[path].append(time.perf_counter() - t0)
                changed.append(scored() != before)
    engine.close()
    result = {"model": args.model, "weights_mb": round(mb, 1), "tensors": len(base), "repeats": args.repeats,
              "in_memory_s": round(statistics.median(times["in_memory"]), 3),
              "disk_round_trip_s": round(statistics.median(times["disk_round_trip"]), 3),
              "all_seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
              "every_sync_changed_the_logprobs": all(changed), "load_average": os.getloadavg()}
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    elif args.smoke:
        write_result("vllm_weight_sync", result)
    return 0 if all(changed) else 1


if __name__ == "__main__":
    raise SystemExit(main())
