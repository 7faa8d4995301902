"""What a run folder holds is data, never code: checkpoints load as data only, and code a saved config names is shown
and checked before anything imports it.

Run folders and checkpoints travel between people, so reading one must not run code of its author:

* ``load_data_file(path)``: a torch pickle (``trainer_state.pt``, a verl shard) loads with torch's weights-only
  unpickler: tensors, numbers, strings, containers and NumPy arrays. A file that names any other Python object is
  refused with one line (``UntrustedFileError``) and nothing of it runs. ``check_data_files(folder)`` applies it to
  every pickle of a checkpoint folder before another library (verl) reads them its own way.
* ``resolve_code(value)``: where code a config names lives (``components.code_refs`` finds it at the parameters
  each component's spec declares in ``code_params``: the gateway flow's ``agent: file.py:fn`` or ``pkg.mod:fn``).
  ``check_code_refs`` prints them and refuses (``UntrustedCodeError``, every one at once) code outside the installed
  distributions (site-packages, the package folders of editable installs; not the standard library) unless the
  user passed ``--trust-code``. Code inside the run folder is refused too: a file that came with a downloaded run
  folder is exactly what must not run unread. The commands that take a config from a run folder (``run RUN_DIR``,
  ``run --resume``, ``eval RUN_DIR``) call it before any of that code is imported.
* ``resolve_command(value)``: a program a config runs (``command_params`` of a spec: the CLI-agent flow's
  ``command`` and ``verifier``) is code too. Only ``python -m MODULE ...`` with ``MODULE`` in an installed
  distribution counts as installed; any other command (a shell, a script, ``python file.py``), and environment
  variables set for a command (``LD_PRELOAD``, ``PYTHONPATH`` change what it loads), are shown and refused the same
  way unless ``--trust-code``.

Nothing here imports code a config names: module locations are found with ``importlib.util.find_spec`` on the
top-level name, which reads the file system only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import sysconfig
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from agentr1_core.errors import UserError

PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".pkl", ".ckpt")


class UntrustedFileError(UserError):
    """A checkpoint file that holds more than data (its unpickling would run code)."""


class UntrustedCodeError(UserError):
    """A run folder's config names code that no installed distribution holds."""


def _numpy_globals() -> list[Any]:
    """The NumPy types a saved NumPy array or RNG state needs (data only: arrays, dtypes, scalars)."""
    try:
        import numpy as np
    except ImportError:
        return []
    core = getattr(np, "_core", None) or np.core
    found = [core.multiarray._reconstruct, core.multiarray.scalar, np.ndarray, np.dtype]
    found += [type(np.dtype(name)) for name in ("uint8", "uint32", "int32", "int64", "float32", "float64", "bool")]
    return found


def load_data_file(path: str | os.PathLike) -> Any:
    """``torch.load`` of ``path`` with the weights-only unpickler (on the CPU); anything but data is refused."""
    import pickle

    import torch

    try:
        with torch.serialization.safe_globals(_numpy_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        detail = next((ln.strip() for ln in str(exc).splitlines() if "GLOBAL" in ln or "global" in ln), "")
        raise UntrustedFileError(
            f"{path} holds Python objects other than data{f' ({detail})' if detail else ''}; agentr1 loads "
            f"checkpoints as data only and did not load it (nothing of it ran)") from exc


def check_data_files(folder: str | os.PathLike) -> int:
    """Load every pickle under ``folder`` as data only (``load_data_file``) before another library loads them its
    own way; returns how many were checked."""
    checked = 0
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and path.suffix in PICKLE_SUFFIXES:
            load_data_file(path)
            checked += 1
    return checked


# -- code a config names ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CodeRef:
    """Code a config names at ``key``: ``value`` as written, the file it resolves to, and whether it may load."""

    key: str
    value: str
    location: str
    where: str  # "installed distribution NAME", "site-packages", or why it is refused
    trusted: bool
    verb: str = "imports"  # how the config uses it: "imports" (a function), "runs" (a program), "sets" (variables)


@lru_cache(maxsize=1)
def _installed_roots() -> tuple[tuple[Path, str], ...]:
    """Folders whose code counts as installed, with a label each: the environment's site-packages and the package
    folders of each editable distribution (not its whole project folder, which may hold run folders and other
    files). The standard library is not among them: no agent lives there, and its functions that run commands are
    what a crafted config would name."""
    roots: list[tuple[Path, str]] = []
    paths = sysconfig.get_paths()
    for key in ("purelib", "platlib"):
        roots.append((Path(paths[key]).resolve(), "site-packages"))
    editable = {dist.metadata["Name"] for dist in metadata.distributions() if _is_editable(dist)}
    for top, names in metadata.packages_distributions().items():
        owners = [name for name in names if name in editable]
        if not owners:
            continue
        location = _module_location(top)
        if location is not None:
            folder = location.parent if location.name == "__init__.py" else location
            roots.append((folder, f"installed distribution {owners[0]}"))
    return tuple(roots)


def _is_editable(dist: metadata.Distribution) -> bool:
    try:
        info = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return False
    return bool((info.get("dir_info") or {}).get("editable"))


def _module_location(top: str) -> Path | None:
    """The file (or package folder) the top-level module ``top`` would be imported from, found without importing."""
    if not top or top in sys.builtin_module_names:
        return None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    origin = spec.origin if spec.origin not in (None, "namespace", "built-in", "frozen") else next(
        iter(spec.submodule_search_locations or []), None)
    return Path(origin).resolve() if origin else None


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _classify(location: Path, run_dir: Path | None) -> tuple[str, bool]:
    if run_dir is not None and _inside(location, run_dir):  # before the roots: a run folder may sit in a checkout
        return "inside the run folder (it came with the run, not with an installed package)", False
    for root, label in _installed_roots():
        if _inside(location, root):
            return label, True
    return "outside the installed packages", False


def resolve_code(value: str, run_dir: str | os.PathLike | None = None, key: str = "") -> CodeRef:
    """Where ``value`` (``path/to/file.py:attr`` or ``package.module:attr``) lives, without importing it."""
    run_root = Path(run_dir).resolve() if run_dir else None
    target = value.rpartition(":")[0] or value
    if target.endswith(".py"):
        location = Path(target).expanduser().resolve()
        where, trusted = _classify(location, run_root)
        return CodeRef(key, value, str(location), where, trusted)
    top = target.split(".")[0]
    if top in sys.builtin_module_names or top in sys.stdlib_module_names:
        return CodeRef(key, value, "(standard library)", "in the standard library, which holds no agent code", False)
    location = _module_location(top)
    if location is None:
        return CodeRef(key, value, "(not found)", "no installed module of that name", False)
    where, trusted = _classify(location, run_root)
    return CodeRef(key, value, str(location), where, trusted)


PYTHONS = ("python", "python3", os.path.basename(sys.executable))


def resolve_command(value: Any, run_dir: str | os.PathLike | None = None, key: str = "") -> CodeRef:
    """Whether the command ``value`` (an argv list or a program name) runs installed code: ``python -m MODULE ...``
    with ``MODULE`` in an installed distribution does; nothing else is known to."""
    argv = [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
    shown = " ".join(argv)
    if len(argv) >= 3 and os.path.basename(argv[0]) in PYTHONS and argv[1] == "-m":
        ref = resolve_code(f"{argv[2]}:main", run_dir, key)
        return CodeRef(key, shown, ref.location, ref.where, ref.trusted, verb="runs")
    return CodeRef(key, shown, argv[0] if argv else "(empty)", "a program run by the config (not an installed "
                   "module run as python -m MODULE)", False, verb="runs")


def environment_ref(value: Any, key: str = "") -> CodeRef | None:
    """Environment variables a config sets for a command it runs: None when there are none (they can change what a
    trusted command loads, so any is refused without ``--trust-code``)."""
    if not value:
        return None
    names = ", ".join(sorted(str(k) for k in dict(value)))
    return CodeRef(key, names, "(environment of the command)", "environment variables for a program the config "
                   "runs (they can change what it loads)", False, verb="sets")


def check_code_refs(refs: Iterable[CodeRef], source: str, trust_code: bool = False) -> None:
    """Print each of ``refs`` (code a config from ``source``, a run folder, names) and refuse the untrusted ones,
    all at once, unless ``trust_code``."""
    refs = list(refs)
    for ref in refs:
        note = "" if ref.trusted else (" (trusted by --trust-code)" if trust_code else " (refused)")
        print(f"[trust] {ref.key} = {ref.value} {ref.verb} {ref.location}: {ref.where}{note}", flush=True)
    refused = [ref for ref in refs if not ref.trusted]
    if refused and not trust_code:
        raise UntrustedCodeError("\n".join(
            f"config error at {ref.key}: the config of {source} names code {ref.where}: {ref.value} "
            f"({ref.location}); read it, then pass --trust-code to {ref.verb.rstrip('s')} it" for ref in refused))
