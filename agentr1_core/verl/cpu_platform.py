"""A CPU platform for verl 0.9, so that verl's FSDP engine workers can update an actor on a machine without a GPU.

verl ships platforms for CUDA, ROCm and Ascend only. This module registers ``cpu`` in verl's platform registry and
is loaded through verl's external-module hook: with ``VERL_USE_EXTERNAL_MODULES=agentr1_core.verl.cpu_platform``
in the environment, ``import verl`` imports it (in the driver and in every Ray worker, which
inherit the environment through ``cpu_environment()``). What it changes:

* ``torch.cpu`` stands in for ``torch.cuda``; the memory statistics and stream calls verl makes on its device module
  are no-ops (zeros), ``get_device_name()`` answers ``"CPU"``;
* FSDP2's CPU offload policy (verl's choice for forward-only engines such as the KL reference) does not pin
  memory (pinning needs an accelerator);
* the process group is a plain ``gloo`` group (verl builds ``"cpu:gloo,<device>:<backend>"``, which names the CPU
  twice on this platform);
* the "current device" is ``torch.device("cpu")`` (verl moves tensors to it by index on GPUs);
* verl's engine registry keys its FSDP engine by device ``cuda``: ``VERL_ENGINE_DEVICE=cuda`` selects it (FSDP2 runs
  on CPU with gloo).

Use ``attn_implementation: sdpa`` (flash-attn needs CUDA). This is for CI and for trying the verl backend on CPU;
it is not fast. ``cpu_environment()`` returns the variables that switch it on.
"""

from __future__ import annotations

import os
import types
from contextlib import contextmanager
from typing import Any

import torch

MODULE = "agentr1_core.verl.cpu_platform"
CPU = torch.device("cpu")


def cpu_environment() -> dict[str, str]:
    """Environment variables that make verl (imported after they are set) run on this CPU platform."""
    modules = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m and m != MODULE]
    return {"VERL_USE_EXTERNAL_MODULES": ",".join([*modules, MODULE]), "VERL_PLATFORM": "cpu",
            "VERL_ENGINE_DEVICE": "cuda", "CUDA_VISIBLE_DEVICES": ""}


class _Stream:
    """A stand-in for a device stream: every call does nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait_stream(self, other: Any) -> None:
        pass

    def __enter__(self) -> "_Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class _Event(_Stream):
    def record(self, *args: Any) -> None:
        pass

    def elapsed_time(self, other: Any) -> float:
        return 0.0


def _cpu_device_module() -> types.ModuleType:
    """``torch.cpu`` plus the ``torch.cuda``-style calls verl makes on its device module (no-ops here)."""
    mod = types.ModuleType("agentr1_verl_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(mod, name, getattr(torch.cpu, name))
    zero = lambda *a, **k: 0  # noqa: E731
    none = lambda *a, **k: None  # noqa: E731
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(mod, name, zero)
    for name in ("empty_cache", "ipc_collect", "reset_peak_memory_stats", "set_per_process_memory_fraction",
                 "set_device", "synchronize", "manual_seed", "manual_seed_all"):
        setattr(mod, name, none)
    mod.manual_seed = lambda seed: torch.manual_seed(seed)
    mod.manual_seed_all = lambda seed: torch.manual_seed(seed)
    mod.get_rng_state = lambda *a, **k: torch.get_rng_state()
    mod.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    mod.mem_get_info = lambda *a, **k: (0, 0)
    mod.memory_stats = lambda *a, **k: {}
    mod.is_available = lambda: True
    mod.device_count = lambda: 1
    mod.current_device = lambda: CPU
    mod.get_device_name = lambda *a, **k: "CPU"
    mod.current_stream = lambda *a, **k: _Stream()
    mod.Stream = _Stream
    mod.Event = _Event

    @contextmanager
    def stream(*args: Any, **kwargs: Any):
        yield

    mod.stream = stream
    return mod


def register() -> None:
    """Register the platform and the gloo process group (idempotent). ``import verl`` calls this through the
    external-module hook; a process that imported verl before setting the environment calls it directly."""
    global _registered
    if _registered:
        return
    _registered = True
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry

    cpu_module = _cpu_device_module()

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):
        """verl platform for CPU-only processes (FSDP2 over gloo)."""

        device_name = "cpu"
        vendor_name = "cpu"
        device_module = cpu_module

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu"

        def current_device(self) -> Any:
            return CPU  # verl only moves tensors to it (``.to(...)``, ``torch.device(...)``)

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            pass

        def synchronize(self, device_index: int | None = None) -> None:
            pass

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            pass

        def empty_cache(self) -> None:
            pass

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            pass

        def profiler_stop(self) -> None:
            pass

        def ray_resource_name(self) -> str:
            return "CPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {}

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    _unpinned_offload()
    import verl.utils.distributed as dist_utils

    original = dist_utils.initialize_global_process_group_ray

    def init_gloo_group(timeout_second: Any = None, backend: str | None = None) -> None:
        return original(timeout_second=timeout_second, backend=backend or "gloo")

    dist_utils.initialize_global_process_group_ray = init_gloo_group


def _unpinned_offload() -> None:
    """FSDP2's ``CPUOffloadPolicy`` without pinned memory (pinning needs an accelerator). verl gives forward-only
    engines (the KL reference) ``CPUOffloadPolicy(pin_memory=True)``; on this platform the pin is dropped."""
    import sys

    import torch.distributed.fsdp as fsdp

    base = fsdp.CPUOffloadPolicy
    if getattr(base, "_agentr1_unpinned", False):
        return

    class UnpinnedCPUOffloadPolicy(base):
        _agentr1_unpinned = True

        def __init__(self, pin_memory: bool = False) -> None:
            super().__init__(pin_memory=False)

    fsdp.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy
    for name in ("verl.utils.fsdp_utils", "verl.workers.engine.fsdp.transformer_impl"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "CPUOffloadPolicy"):
            module.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


_registered = False
if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    register()
