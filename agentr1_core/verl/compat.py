"""Fixes to verl 0.9.1 that the ``verl`` trainer needs on machines without flash-attn, applied on ``import verl``.

verl's value-model loader (``verl.utils.model.load_valuehead_model``, used for the critic) asks transformers for
``flash_attention_2`` unconditionally, so a critic cannot start where the ``flash_attn`` package is absent (any CPU
machine, and GPU machines without it). Here it is replaced by the same loader with the attention implementation
this project picks (``data.default_attn_implementation``: flash-attention 2 when importable, else sdpa);
the loaded model (a token-classification head with one label) is what verl's loader builds first.

The trainer puts this module in ``VERL_USE_EXTERNAL_MODULES`` (``compat_environment()``), so verl imports it in
the driver and in every Ray worker; ``apply()`` is idempotent.
"""

from __future__ import annotations

import os
from typing import Any

MODULE = "agentr1_core.verl.compat"


def compat_environment() -> dict[str, str]:
    """``VERL_USE_EXTERNAL_MODULES`` with this module added (kept once)."""
    modules = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m and m != MODULE]
    return {"VERL_USE_EXTERNAL_MODULES": ",".join([MODULE, *modules])}


def load_valuehead_model(local_path: str, torch_dtype: Any, model_config: Any, trust_remote_code: bool) -> Any:
    """A one-label token-classification model (verl's critic), loaded with an attention implementation that
    exists on this machine."""
    from transformers import AutoModelForTokenClassification

    from agentr1_core.verl.data import default_attn_implementation

    return AutoModelForTokenClassification.from_pretrained(
        pretrained_model_name_or_path=local_path, torch_dtype=torch_dtype, config=model_config,
        attn_implementation=default_attn_implementation(), trust_remote_code=trust_remote_code)


_applied = False


def apply() -> None:
    global _applied
    if _applied:
        return
    _applied = True
    import verl.utils.model as verl_model

    verl_model.load_valuehead_model = load_valuehead_model


apply()
