"""Checkpoint and resume of the local trainer on top of ``checkpoint.py``.

A checkpoint of iteration N is ``<run_dir>/checkpoints/step_<N>/`` with ``model/`` (the Hugging Face folder of the
trained model, or of its LoRA adapter, plus the tokenizer: what ``export`` reads) and ``trainer_state.pt`` (optimizer,
scheduler, value head, torch's RNG, ``loop``: the training loop's state (iteration, data order, history, Python's
RNG), ``model_path`` of the base model, and the size of ``metrics.jsonl`` at that moment). Model weights are
stored once, in ``model/``.

``resume_latest`` restores the backend's part into a built local backend and returns the loop's part and the
metrics offset; the loop cuts ``metrics.jsonl`` back to what the checkpoint saw, so the resumed run logs every later
iteration exactly once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from agentr1_core.lifecycle.checkpoint import latest_checkpoint, load_state, save_checkpoint
from agentr1_core.errors import CheckpointMismatch


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


def save_trainer_checkpoint(backend: Any, run_dir: Path, iteration: int, loop_state: dict[str, Any],
                            metrics_offset: int) -> Path:
    """Write the local backend's checkpoint of ``iteration`` with the loop's state (atomically; older ones
    pruned)."""
    cfg = backend.cfg
    state = backend.state_dict()
    state.pop("model", None)  # the weights are the model/ folder
    state.update(loop=loop_state, model_path=str(cfg.model.path), lora=bool(cfg.model.lora.enabled),
                 seed=int(cfg.seed), metrics_offset=int(metrics_offset))
    return save_checkpoint(run_dir, iteration, state, model=backend.policy.model, tokenizer=backend.tokenizer,
                           keep=max(1, int(cfg.trainer.keep_checkpoints)))


def resume_latest(backend: Any, run_dir: Path) -> tuple[Path, dict[str, Any], int] | None:
    """Restore the latest complete checkpoint of ``run_dir`` into a built local backend; returns (its path, the
    loop's state, the metrics offset), or None when there is none."""
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        return None
    try:
        state = load_state(ckpt)
        if "loop" not in state:
            raise KeyError("the checkpoint has no training-loop state (written by an older version)")
        load_weights(backend.policy.model, ckpt / "model")
        backend.load_state_dict(state)
    except (KeyError, ValueError, RuntimeError) as exc:  # another model, optimizer layout or trainer
        raise CheckpointMismatch(f"checkpoint {ckpt} does not fit this run's model and trainer "
                                 f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}); "
                                 f"resume with the run's own config or start a new run_dir") from exc
    return ckpt, state["loop"], int(state.get("metrics_offset") or 0)
