"""Atomic checkpoints: ``<run_dir>/checkpoints/step_<N>/`` holding the model (or LoRA adapter), its tokenizer and
``trainer_state.pt`` (optimizer, scheduler, RNG states, data position, metrics step, ...).

A checkpoint is written into a hidden temporary folder next to its final place, every file is fsync'ed, a
``COMPLETE`` marker is written last, and the folder is renamed into place. A reader only considers folders with the
marker, so a run killed mid-write never resumes from half a checkpoint. The last ``keep`` checkpoints are kept.
``trainer_state.pt`` is read back as data only (``load_state``): a crafted file cannot run code.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agentr1_core.errors import CheckpointMismatch

STATE_FILE = "trainer_state.pt"
MARKER = "COMPLETE"
PREFIX = "step_"


class RunDirError(OSError):
    """The run directory cannot hold checkpoints (not writable, or not enough free space)."""


def checkpoint_root(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / "checkpoints"


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and (p / MARKER).is_file()]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX):]))


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def save_checkpoint(run_dir: str | os.PathLike, step: int, state: dict[str, Any], model: Any = None,
                    tokenizer: Any = None, keep: int = 2) -> Path:
    """Write checkpoint ``step`` atomically and prune older ones beyond ``keep``; returns its folder."""
    import torch

    root = checkpoint_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=root))
    try:
        if model is not None:
            model.save_pretrained(tmp / "model", safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp / "model")
        torch.save(state, tmp / STATE_FILE)
        (tmp / MARKER).write_text(f"{step}\n")
        _fsync_tree(tmp)
        if final.exists():  # re-saving the same step (e.g. after a resume): replace it
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob(".tmp-*"):  # leftovers of a killed writer
        shutil.rmtree(stale, ignore_errors=True)
    return final


def load_state(checkpoint: str | os.PathLike) -> dict[str, Any]:
    """The checkpoint's ``trainer_state.pt``, loaded as data only: a file that would run code is refused
    (``agentr1_core.trust``)."""
    from agentr1_core.trust import load_data_file

    state = load_data_file(Path(checkpoint) / STATE_FILE)
    if not isinstance(state, dict):
        raise CheckpointMismatch(f"{Path(checkpoint) / STATE_FILE} is not a trainer state (a {type(state).__name__})")
    return state


def check_run_dir(run_dir: str | os.PathLike, min_free_bytes: int = 2 * 1024**3) -> Path:
    """Fail before training starts if ``run_dir`` is not writable or has less than ``min_free_bytes`` free."""
    path = Path(run_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".write-probe-", delete=True)
        probe.write(b"ok")
        probe.flush()
        probe.close()
    except OSError as exc:
        raise RunDirError(f"run directory {path} is not writable: {exc.strerror or exc}") from exc
    free = shutil.disk_usage(path).free
    if free < min_free_bytes:
        raise RunDirError(f"run directory {path} has {free / 1024**3:.2f} GiB free; checkpoints need at least "
                          f"{min_free_bytes / 1024**3:.2f} GiB (set trainer.min_free_gb to change)")
    return path
