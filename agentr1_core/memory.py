"""Where a run's memory goes: the run's peak, resident-set peaks per phase and an account by part.

The run's peak (``overall_peak_mb``, ``peak_rss_mb`` in ``summary.json`` and the ``[done]`` line) is the figure
``/usr/bin/time -v`` prints as "Maximum resident set size": ``ru_maxrss`` of the process, or of a child process it
has waited for when one was larger. Nothing here resets the kernel's high-water mark that figure comes from.

``PhasePeaks`` measures the peak resident set of each phase of a run (validation, SFT, rollout, update) without
touching that mark. A phase that raised the process's high-water mark (``ru_maxrss``) peaked exactly there; for any
other phase a thread reads the resident set every ``SAMPLE_SECONDS`` while the phase runs and keeps the highest
reading (a spike shorter than that can be missed). On CUDA each phase also records the device's
``max_memory_allocated`` and ``max_memory_reserved``, reset at the start of the phase. Elsewhere (no ``/proc``)
every phase reports the process peak so far.

``child_processes_mb`` adds what runs beside the process (game processes, tool servers, Ray workers: the peaks of
its descendants), which no phase peak of the process itself contains. ``account(parts, peak_mb, baseline_mb)`` lays
out one phase's peak: the parts a backend measured (bytes of tensors it holds: weights, reference, critic, optimizer
state, gradients, the engine's KV buffers at their peak, the prefix cache), the baseline (the process before any
model: interpreter, libraries, datasets, envs' data loaded at startup) and what is left unexplained (allocator slack,
the backward pass's temporaries, Python objects, data envs load on first use, anything no part names). Parts that
live on an accelerator are not host memory: the training loop lists them beside the device's peaks instead
(``device_account``). This module measures nothing about models itself: ``tensor_mb`` / ``module_mb`` are helpers
for backends.

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
import os
import resource
import sys
import threading
from pathlib import Path
from typing import Any, Iterable

MB = 2 ** 20
SAMPLE_SECONDS = 0.02  # how often the resident set is read while a phase runs (about 0.5% of a core)

M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h
# ru_maxrss is in KiB on Linux, in bytes on macOS
_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024


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


def _maxrss_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss * _MAXRSS_UNIT / MB


class _Statm:
    """``/proc/self/statm`` kept open (one ``pread`` a reading: the sampler reads it 50 times a second),
    reopened in a forked child, whose ``self`` is another process."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.pid = -1
        self.page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def resident_mb(self) -> float | None:
        try:
            if self.pid != os.getpid():
                self.fd, self.pid = os.open("/proc/self/statm", os.O_RDONLY), os.getpid()
            return int(os.pread(self.fd, 128, 0).split()[1]) * self.page / MB
        except (OSError, IndexError, ValueError):
            return None


_statm = _Statm()


def rss_mb() -> float:
    """The resident set now, in MiB."""
    mb = _statm.resident_mb()
    return mb if mb is not None else _maxrss_mb(resource.RUSAGE_SELF)


def overall_peak_mb() -> float:
    """The run's peak resident set in MiB, the figure ``/usr/bin/time -v`` reports for the process: its
    ``ru_maxrss``, or that of a child process it has waited for when one was larger."""
    return max(_maxrss_mb(resource.RUSAGE_SELF), _maxrss_mb(resource.RUSAGE_CHILDREN))


class _Window:
    """The highest resident set read while one phase runs."""

    def __init__(self) -> None:
        self.peak = rss_mb()

    def see(self, mb: float) -> None:
        if mb > self.peak:
            self.peak = mb


class _Sampler:
    """One thread, running while at least one phase is open, that reads the resident set every
    ``SAMPLE_SECONDS`` into every open window."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.windows: list[_Window] = []
        self.stop: threading.Event | None = None
        self.thread: threading.Thread | None = None

    def open(self) -> _Window:
        window = _Window()
        with self.lock:
            self.windows.append(window)
            if self.thread is None:
                self.stop = threading.Event()
                self.thread = threading.Thread(target=self._run, args=(self.stop,), name="rss-sampler", daemon=True)
                self.thread.start()
        return window

    def close(self, window: _Window) -> None:
        window.see(rss_mb())
        thread = None
        with self.lock:
            self.windows.remove(window)
            if not self.windows and self.thread is not None:
                self.stop.set()
                thread, self.thread = self.thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(SAMPLE_SECONDS):
            mb = _statm.resident_mb()
            if mb is None:
                return
            with self.lock:
                for window in self.windows:
                    window.see(mb)


_sampler = _Sampler()


def _cuda() -> Any:
    """``torch.cuda`` when this process has used CUDA (torch is not imported for it), else None."""
    torch = sys.modules.get("torch")
    try:
        return torch.cuda if torch is not None and torch.cuda.is_initialized() else None
    except (AttributeError, RuntimeError):
        return None


class PhasePeaks:
    """``with peaks.phase("rollout"): ...`` records the phase's peak RSS (MiB) in ``peaks.last["rollout"]`` and the
    highest one seen for that phase in ``peaks.highest``; on CUDA also the device's peaks of the phase,
    ``{"allocated_peak": MiB, "reserved_peak": MiB}``, in ``peaks.device_last`` and (the highest of each)
    ``peaks.device_highest``."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        self.highest: dict[str, float] = {}
        self.device_last: dict[str, dict[str, float]] = {}
        self.device_highest: dict[str, dict[str, float]] = {}

    def phase(self, name: str) -> "_Phase":
        return _Phase(self, name)

    def record(self, name: str, value: float) -> None:
        self.last[name] = value
        self.highest[name] = max(value, self.highest.get(name, 0.0))

    def record_device(self, name: str, allocated_mb: float, reserved_mb: float) -> None:
        now = {"allocated_peak": allocated_mb, "reserved_peak": reserved_mb}
        self.device_last[name] = now
        before = self.device_highest.get(name, {})
        self.device_highest[name] = {k: max(v, before.get(k, 0.0)) for k, v in now.items()}


class _Phase:
    def __init__(self, peaks: PhasePeaks, name: str) -> None:
        self.peaks, self.name = peaks, name

    def __enter__(self) -> None:
        trim()  # what the last phase freed goes back to the OS: each phase starts from what is really held
        cuda = _cuda()
        if cuda is not None:
            cuda.reset_peak_memory_stats()
        self.mark_before = _maxrss_mb(resource.RUSAGE_SELF)
        self.window = _sampler.open()

    def __exit__(self, *exc: Any) -> None:
        _sampler.close(self.window)
        mark = _maxrss_mb(resource.RUSAGE_SELF)
        # a phase that raised the high-water mark peaked there; any other at its highest reading (never above it)
        self.peaks.record(self.name, mark if mark > self.mark_before else min(self.window.peak, mark))
        cuda = _cuda()
        if cuda is not None:
            self.peaks.record_device(self.name, cuda.max_memory_allocated() / MB, cuda.max_memory_reserved() / MB)


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


def device_account(peaks: dict[str, float] | None, parts: dict[str, float]) -> dict[str, Any]:
    """One phase on an accelerator: the device's ``allocated_peak`` and ``reserved_peak`` (MiB, when known) and
    ``tensors``, the parts measured there. The parts are listed, not subtracted: each was measured at its own
    moment, and none of them is in the host's resident set."""
    out: dict[str, Any] = {k: round(v, 1) for k, v in (peaks or {}).items()}
    if parts:
        out["tensors"] = {k: round(v, 1) for k, v in parts.items()}
    return out


def account_line(label: str, acc: dict[str, Any]) -> str:
    """``[memory update] peak 4210 MiB = baseline 610 + weights 513 + ... + unexplained 890``, then the child
    processes' peaks and, on an accelerator, the device's peaks and the tensors it holds."""
    outside = ("peak", "baseline", "unexplained", "child_processes", "device")
    parts = " + ".join(f"{k} {v:.0f}" for k, v in acc.items() if k not in outside and v)
    children = (f"; child processes {acc['child_processes']:.0f} MiB besides" if acc.get("child_processes")
                else "")
    return (f"[memory {label}] peak {acc['peak']:.0f} MiB = baseline {acc['baseline']:.0f}"
            f"{' + ' + parts if parts else ''} + unexplained {acc['unexplained']:.0f}{children}"
            f"{_device_words(acc.get('device'))}")


def _device_words(device: dict[str, Any] | None) -> str:
    if not device:
        return ""
    peaks = [f"{word} peak {device[key]:.0f} MiB" for key, word in (("allocated_peak", "allocated"),
                                                                    ("reserved_peak", "reserved")) if key in device]
    tensors = ", ".join(f"{k} {v:.0f}" for k, v in (device.get("tensors") or {}).items() if v)
    return "; device " + ", ".join(peaks + ([f"holding {tensors}"] if tensors else []))
