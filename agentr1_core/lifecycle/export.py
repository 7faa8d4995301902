"""``agentr1-core export RUN_DIR OUT``: a plain Hugging Face model folder from a run's latest checkpoint.

A LoRA checkpoint is merged into its base model. The result loads with ``AutoModelForCausalLM.from_pretrained(OUT)``
(and vLLM) with no agentr1 code. The folder is written under a temporary name and renamed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from agentr1_core.lifecycle.checkpoint import latest_checkpoint, load_state


def export_model(run_dir: str | Path, out: str | Path, checkpoint: str | Path | None = None) -> Path:
    ckpt = Path(checkpoint) if checkpoint else latest_checkpoint(run_dir)
    if ckpt is None or not (ckpt / "model").is_dir():
        raise FileNotFoundError(f"no complete checkpoint with a model under {Path(run_dir) / 'checkpoints'}")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        src = ckpt / "model"
        if (src / "adapter_config.json").is_file():
            from peft import PeftModel

            from agentr1_core.models import load_model_and_tokenizer

            base_path = load_state(ckpt).get("model_path")
            if not base_path:
                raise FileNotFoundError(f"{ckpt} holds a LoRA adapter but no base model path")
            base, tokenizer = load_model_and_tokenizer(base_path)
            merged = PeftModel.from_pretrained(base, str(src)).merge_and_unload()
            merged.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
        else:
            for item in src.iterdir():
                shutil.copy2(item, tmp / item.name)
        if out.exists():
            out.rmdir()
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir")
    parser.add_argument("out")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint folder (default: the latest)")
    parser.set_defaults(func=_cmd_export)


def _cmd_export(args: argparse.Namespace) -> int:
    ckpt = Path(args.checkpoint) if args.checkpoint else latest_checkpoint(args.run_dir)
    out = export_model(args.run_dir, args.out, ckpt)
    print(f"[export] checkpoint {ckpt} -> {out}", flush=True)
    return 0
