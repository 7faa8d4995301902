"""Where a run's memory goes: resident-set peaks per phase and an account by part.

``PhasePeaks`` measures the peak resident set of each phase of a run (model load, rollout, update, validation) with
the kernel's own high-water mark: on Linux, writing ``5`` to ``/proc/self/clear_refs`` resets ``VmHWM`` to the
current RSS, so the mark read at the end of a phase is that phase's peak. The run's overall peak is kept here
(``overall_peak_mb``), because the reset also lowers what ``getrusage`` reports. Elsewhere (no ``/proc``) every
phase reports the process peak so far.

``child_processes_mb`` adds what runs beside the process (game processes, tool servers, Ray workers: the peaks of
its descendants), which no phase peak of the process itself contains. ``account(parts, peak_mb, baseline_mb)`` lays
out one phase's peak: the parts a backend measured (bytes of tensors it holds: weights, reference, critic, optimizer
state, gradients, the engine's KV buffers at their peak, the prefix cache), the baseline (the process before any
model: interpreter, libraries, datasets, envs' data loaded at startup) and what is left unexplained (allocator slack,
the backward pass's temporaries, Python objects, data envs load on first use, anything no part names). This module
measures nothing about models itself: ``tensor_mb`` / ``module_mb`` are helpers for backends.

Freed memory goes back to the OS at the start of every phase (``trim``: glibc's ``malloc_trim``). glibc raises its
mmap threshold each time a large block is freed, so one phase's KV buffers and activations end up in the heap, where
freed memory stays resident and the next phase's peak lands on top of it. Trimming at the phase boundaries took the
default run's peak from 4.4 GiB to 3.5 GiB at the same wall time and held-out numbers (docs/benchmarks.md, section
12). ``set_mmap_threshold(kb)`` (``trainer.mmap_threshold_kb``, off by default) instead serves every block above
``kb`` with its own mapping: 3.4 GiB, but a quarter slower (every such block is faulted in anew).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import resource
from pathlib import Path
from typing import Any, Iterable

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
MB = 2 ** 20


M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h


@functools.lru_cache(maxsize=1)
def _libc() -> Any:
    """The C library, loaded once (``trim`` runs at every phase boundary)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def trim() -> bool:
    """Give the heap's free pages back to the OS (glibc's ``malloc_trim``); False where there is none."""
    fn = getattr(_libc(), "malloc_trim", None)
    return bool(fn is not None and fn(0))


def set_mmap_threshold(kb: int) -> bool:
    """Serve allocations above ``kb`` KiB with their own mappings (returned to the OS when freed); 0 leaves the
    allocator's default. True when glibc took it (elsewhere: False, nothing changes)."""
    if kb <= 0:
        return False
    mallopt = getattr(_libc(), "mallopt", None)
    return bool(mallopt is not None and mallopt(M_MMAP_THRESHOLD, int(kb) * 1024) == 1)


def _status_kb(field: str) -> float | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1])
    except OSError:
        return None
    return None


def rss_mb() -> float:
    """The resident set now, in MiB."""
    kb = _status_kb("VmRSS")
    return kb / 1024 if kb is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _hwm_mb() -> float:
    kb = _status_kb("VmHWM")
    return kb / 1024 if kb is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


_overall = 0.0


def overall_peak_mb() -> float:
    """The process's peak resident set since it started (phase resets included), in MiB."""
    global _overall
    _overall = max(_overall, _hwm_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return _overall


def _reset_mark() -> None:
    overall_peak_mb()  # keep what the reset is about to forget
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        pass


class PhasePeaks:
    """``with peaks.phase("rollout"): ...`` records the phase's peak RSS (MiB) in ``peaks.last["rollout"]`` and the
    highest one seen for that phase in ``peaks.highest``."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        self.highest: dict[str, float] = {}

    def phase(self, name: str) -> "_Phase":
        return _Phase(self, name)

    def record(self, name: str, value: float) -> None:
        self.last[name] = value
        self.highest[name] = max(value, self.highest.get(name, 0.0))


class _Phase:
    def __init__(self, peaks: PhasePeaks, name: str) -> None:
        self.peaks, self.name = peaks, name

    def __enter__(self) -> None:
        trim()  # what the last phase freed goes back to the OS: each phase starts from what is really held
        _reset_mark()

    def __exit__(self, *exc: Any) -> None:
        self.peaks.record(self.name, _hwm_mb())
        overall_peak_mb()


def tensor_mb(tensors: Iterable[Any]) -> float:
    """MiB held by ``tensors``, each storage counted once (views and shared weights are not double-counted)."""
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if t is None or not hasattr(t, "untyped_storage"):
            continue
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in seen or key == 0:
            continue
        seen.add(key)
        total += storage.nbytes()
    return total / MB


def module_mb(module: Any) -> float:
    """MiB of a module's parameters and buffers."""
    if module is None:
        return 0.0
    return tensor_mb(list(module.parameters()) + list(module.buffers()))


def optimizer_mb(optimizer: Any) -> float:
    """MiB of an optimizer's state tensors (Adam's moments; empty before its first step)."""
    if optimizer is None:
        return 0.0
    return tensor_mb(v for state in optimizer.state.values() for v in state.values() if hasattr(v, "nbytes"))


def _descendants(pid: str = "self") -> list[str]:
    """The pids of every process below ``pid`` (children of any of its threads, recursively)."""
    found: list[str] = []
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            tasks = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            found.extend(children)
            stack.extend(children)
    return found


def child_processes_mb() -> float:
    """The summed peak resident sets (``VmHWM``) of this process's descendants alive now, in MiB: game processes,
    tool servers, Ray workers. Their memory is not in this process's peak. 0 where there is no ``/proc``."""
    total = 0.0
    for pid in _descendants():
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += float(line.split()[1]) / 1024
                    break
        except OSError:
            continue
    return total


def account(parts: dict[str, float], peak_mb: float, baseline_mb: float) -> dict[str, float]:
    """``parts`` (MiB) plus ``baseline`` and ``unexplained`` = peak - baseline - sum(parts), and the ``peak``."""
    explained = sum(parts.values())
    out = {k: round(v, 1) for k, v in parts.items()}
    out.update(baseline=round(baseline_mb, 1), unexplained=round(peak_mb - baseline_mb - explained, 1),
               peak=round(peak_mb, 1))
    return out


def account_line(label: str, acc: dict[str, float]) -> str:
    """``[memory update] peak 4210 MiB = baseline 610 + weights 513 + ... + unexplained 890``."""
    outside = ("peak", "baseline", "unexplained", "child_processes")
    parts = " + ".join(f"{k} {v:.0f}" for k, v in acc.items() if k not in outside and v)
    children = (f"; child processes {acc['child_processes']:.0f} MiB besides" if acc.get("child_processes")
                else "")
    return (f"[memory {label}] peak {acc['peak']:.0f} MiB = baseline {acc['baseline']:.0f}"
            f"{' + ' + parts if parts else ''} + unexplained {acc['unexplained']:.0f}{children}")
