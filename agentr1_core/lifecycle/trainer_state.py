"""Checkpoint and resume of the local trainer on top of ``checkpoint.py``.

A checkpoint of iteration N is ``<run_dir>/checkpoints/step_<N>/`` with ``model/`` (the Hugging Face folder of the
trained model, or of its LoRA adapter, plus the tokenizer: what ``export`` reads) and ``trainer_state.pt`` (optimizer,
scheduler, value head, every RNG, data position, iteration, history, ``model_path`` of the base model, and the size
of ``metrics.jsonl`` at that moment). Model weights are stored once, in ``model/``.

``resume_latest`` restores all of it into a set-up trainer and cuts ``metrics.jsonl`` back to what the checkpoint
saw, so the resumed run logs every later iteration exactly once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from agentr1_core.lifecycle.checkpoint import latest_checkpoint, load_state, save_checkpoint
from agentr1_core.lifecycle.metrics import truncate_metrics
from agentr1_core.plugins import PluginError


def load_weights(model: Any, folder: str | os.PathLike) -> None:
    """Copy the weights of a checkpoint's ``model/`` folder (full model or LoRA adapter) into ``model`` in place."""
    from safetensors.torch import load_file

    folder = Path(folder)
    adapter = folder / "adapter_model.safetensors"
    if adapter.is_file():
        if not hasattr(model, "peft_config"):
            raise ValueError(f"{folder} holds a LoRA adapter but the model has none (set model.lora.enabled=true)")
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(model, load_file(str(adapter)))
        unexpected = list(getattr(result, "unexpected_keys", []) or [])
        if unexpected:
            raise KeyError(f"adapter in {folder} has weights the model lacks: {unexpected[:3]}")
        return
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no model weights (*.safetensors) in {folder}")
    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    if hasattr(model, "peft_config"):
        raise ValueError(f"{folder} holds a full model but the model is a LoRA model (set model.lora.enabled=false)")
    params = target.state_dict()
    with torch.no_grad():
        for file in files:
            for name, value in load_file(str(file)).items():
                if name not in params:
                    raise KeyError(f"checkpoint weight {name!r} in {file.name} does not fit the model")
                params[name].copy_(value)


def save_trainer_checkpoint(trainer: Any) -> Path:
    """Write the trainer's checkpoint for its current iteration (atomically; older ones pruned)."""
    cfg = trainer.cfg
    state = trainer.state_dict()
    state.pop("model", None)  # the weights are the model/ folder
    state["model_path"] = str(cfg.model.path)
    state["lora"] = bool(cfg.model.lora.enabled)
    state["seed"] = int(cfg.seed)
    state["metrics_offset"] = trainer.writer.offset() if hasattr(trainer.writer, "offset") else None
    return save_checkpoint(trainer.run_dir, trainer.iteration, state, model=trainer.policy.model,
                           tokenizer=trainer.tokenizer, keep=max(1, int(cfg.trainer.keep_checkpoints)))


class CheckpointMismatch(PluginError):
    """A checkpoint that cannot be loaded into the run's model or optimizer (one line, exit code 2)."""


def resume_latest(trainer: Any) -> Path | None:
    """Restore the latest complete checkpoint of ``trainer.run_dir`` into ``trainer``; None when there is none."""
    ckpt = latest_checkpoint(trainer.run_dir)
    if ckpt is None:
        return None
    try:
        state = load_state(ckpt)
        load_weights(trainer.policy.model, ckpt / "model")
        trainer.load_state_dict(state)
    except (KeyError, ValueError, RuntimeError) as exc:  # another model, optimizer layout or trainer
        raise CheckpointMismatch(f"checkpoint {ckpt} does not fit this run's model and trainer "
                                 f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}); "
                                 f"resume with the run's own config or start a new run_dir") from exc
    offset = state.get("metrics_offset")
    dropped = truncate_metrics(trainer.run_dir, int(offset)) if offset is not None else 0
    print(f"[resume] {ckpt} (iteration {trainer.iteration}); dropped {dropped} metric records written after it",
          flush=True)
    return ckpt
