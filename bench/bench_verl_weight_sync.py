"""Weight sync of the verl trainer: gathering the actor's weights in memory vs a Hugging Face checkpoint round trip.

Starts verl's FSDP actor (one worker; the CPU platform when torch sees no GPU) for ``--model`` and times, ``--repeats``
times each: ``export_weights`` (FSDP full tensors gathered to numpy in the driver, what the trainer publishes) and
the former path: ``save_checkpoint`` with ``hf_model`` contents to disk, then reading the safetensors back. Prints one
JSON line. Run it in ``.venv-verl``:  .venv-verl/bin/python bench/bench_verl_weight_sync.py --model smollm2-135m-instruct
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from common import parse_args, write_result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--repeats", type=int, default=3)
    args = parse_args(parser, smoke={"repeats": 1})

    import ray
    from safetensors.torch import load_file

    from agentr1_core.config import load_config
    from agentr1_core.verl import compat as verl_compat, cpu_platform as verl_cpu_platform
    from agentr1_core.verl.data import merge_into_verl_config, verl_config
    from agentr1_core.models import model_folder
    from agentr1_core.verl.trainer import pick_device, verl_default_config
    from agentr1_core.plugins import get_registry

    device = pick_device(1)
    os.environ.update(verl_compat.compat_environment())
    if device == "cpu":
        os.environ.update(verl_cpu_platform.cpu_environment())
        verl_cpu_platform.register()
    verl_compat.apply()
    path = model_folder(args.model)
    cfg = load_config("default", [f"model.path={path}", "trainer.train_layers=0"])
    algorithm = get_registry().build("algorithm", "grpo", {}, where="algorithm")
    merged = merge_into_verl_config(verl_default_config(), verl_config(cfg, algorithm, model_path=path, device=device))
    merged.actor_rollout_ref.actor.checkpoint.save_contents = ["hf_model"]
    ray.init(num_cpus=2, include_dashboard=False)
    from agentr1_core.verl.workers import VerlGroups

    groups = VerlGroups(merged, 1, device, need_ref=False, need_critic=False)
    memory, disk, nbytes = [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            t0 = time.perf_counter()
            state = groups.export_weights()
            memory.append(time.perf_counter() - t0)
            nbytes = sum(v.nbytes for v in state.values())
            t0 = time.perf_counter()
            folder = Path(tmp) / f"step_{i}"
            groups.actor.save_checkpoint(str(folder), global_step=i, max_ckpt_to_keep=None)
            loaded = {k: v.float().numpy() for f in folder.rglob("*.safetensors") for k, v in load_file(str(f)).items()}
            disk.append(time.perf_counter() - t0)
            assert loaded, "no safetensors written"
    ray.shutdown()
    result = {"model": args.model, "device": device, "weights_mb": round(nbytes / 2 ** 20, 1),
              "in_memory_s": [round(x, 3) for x in memory], "disk_round_trip_s": [round(x, 3) for x in disk],
              "load_avg": os.getloadavg()}
    print(json.dumps(result))
    if args.smoke:
        write_result("verl_weight_sync", result)


if __name__ == "__main__":
    main()
