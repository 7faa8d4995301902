"""Weights from the trainer to rollout engines: a CPU snapshot of what changed, and applying it.

``engine_state(policy_model, engine_model)`` returns ``{name: numpy array}`` in the engine model's parameter names,
holding only what training can change: the trainable parameters, or, for a LoRA model, every adapted weight merged
(``W + scale * B @ A``) so that an engine holding the plain base model receives ready-to-use weights. Numpy arrays
go through Ray's object store without a copy on the same node.

``to_torch_state`` turns such a snapshot back into CPU tensors for ``RolloutEngine.sync_weights(state)``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch


def _lora_layers(model: Any) -> list[tuple[str, Any]]:
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return []
    return [(name, m) for name, m in model.named_modules() if isinstance(m, LoraLayer)]


@torch.no_grad()
def engine_state(policy_model: Any, engine_model: Any | None = None) -> dict[str, np.ndarray]:
    """Snapshot of the weights the trainer may have changed, named as in the plain (non-LoRA) model."""
    engine_model = engine_model if engine_model is not None else policy_model
    state: dict[str, np.ndarray] = {}
    lora = _lora_layers(engine_model)
    if lora:
        for name, layer in lora:
            base = layer.get_base_layer()
            weight = base.weight.detach().float().clone()
            for adapter in getattr(layer, "active_adapters", []) or []:
                if adapter in getattr(layer, "lora_A", {}):
                    weight += layer.get_delta_weight(adapter).float()
            state[f"{name}.weight"] = weight.cpu().numpy()
            if getattr(base, "bias", None) is not None:
                state[f"{name}.bias"] = base.bias.detach().float().cpu().numpy().copy()
        return state
    for name, param in engine_model.named_parameters():
        if param.requires_grad:
            state[name] = param.detach().to("cpu", torch.float32).numpy().copy()
    return state


def to_torch_state(state: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """CPU tensors viewing the arrays (read-only object-store buffers are fine: engines copy them in place)."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "the given NumPy array is not writable"
        for name, array in state.items():
            out[name] = torch.from_numpy(np.asarray(array))
    return out


def state_nbytes(state: dict[str, np.ndarray]) -> int:
    return int(sum(a.nbytes for a in state.values()))
