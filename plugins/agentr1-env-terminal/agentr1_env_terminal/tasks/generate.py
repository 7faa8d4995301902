"""The recipe's generated shell tasks, written as Harbor task folders, and the ``terminal_tasks`` dataset.

Splits: ``train`` (240 tasks, round-robin over the seven train families) and ``val`` (48: six of each train family,
none of them a train instance, and six of the held-out family ``head_tail``, which train never shows). Instance ``i``
of a split draws from ``random.Random("<split>/<seed>/<i>/<attempt>")``: the same seed gives the same bytes on every
machine, and a draw that repeats an earlier instance (of its split, or of train for val) is drawn again.

Each task folder: ``instruction.md``, ``task.toml``, ``environment/Dockerfile`` (``FROM python:3.12-slim``,
``WORKDIR /app``, ``COPY app/ /app/``) with ``environment/app/`` (the starting files), ``tests/test.sh`` (bash and
python3 only; checks the working folder, writes 1 or 0 to ``$LOGS_DIR/verifier/reward.txt``) and
``solution/solve.sh`` (the reference commands, one a line).

``load_generated`` writes a split once into the cache (``$AGENTR1_CACHE_DIR`` or ``~/.cache/agentr1``, then
``terminal-tasks/v1/<split>``), atomically (a temporary folder renamed into place), and writes it again when the
stamp in it (the generator's version and a digest of its code) differs.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agentr1_core.errors import ConfigError
from agentr1_env_terminal.harbor import load_tasks
from agentr1_env_terminal.tasks.families import FAMILIES, HELD_OUT_FAMILIES, TRAIN_FAMILIES, Instance

VERSION = "v1"
SPLITS = {"train": (240, TRAIN_FAMILIES), "val": (48, TRAIN_FAMILIES + HELD_OUT_FAMILIES)}
STAMP = ".agentr1-tasks.json"
AGENT_TIMEOUT_SEC = 120.0
VERIFIER_TIMEOUT_SEC = 30.0

TEST_SCRIPT = """#!/bin/bash
# Checks the result in the working folder; writes 1 (pass) or 0 to $LOGS_DIR/verifier/reward.txt.
LOGS_DIR="${LOGS_DIR:-/logs}"
mkdir -p "$LOGS_DIR/verifier"
if python3 - <<'CHECK'
import sys
from pathlib import Path


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def answer(name):
    path = Path(name)
    if not path.is_file():
        fail(f"{name} does not exist")
    return path.read_text(errors="replace").strip()


%s
print("PASS")
CHECK
then
  echo 1 > "$LOGS_DIR/verifier/reward.txt"
  exit 0
fi
echo 0 > "$LOGS_DIR/verifier/reward.txt"
exit 1
"""

DOCKERFILE = "FROM python:3.12-slim\nWORKDIR /app\nCOPY app/ /app/\n"


def instances(split: str, count: int | None = None, seed: int = 0) -> list[tuple[str, Instance]]:
    """``(folder name, instance)`` of the split: ``count`` of them (default: the split's size), names
    ``NNNN-family`` so that sorting by name keeps the round-robin order of the families."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; the splits: {', '.join(SPLITS)}")
    size, families = SPLITS[split]
    count = size if count is None else count
    seen: set = set()
    if split != "train":
        seen = {inst.key() for _, inst in instances("train", seed=seed)}
    out = []
    for i in range(count):
        family = families[i % len(families)]
        for attempt in range(1000):
            inst = FAMILIES[family](random.Random(f"{split}/{seed}/{i}/{attempt}"))
            if inst.key() not in seen:
                break
        else:  # pragma: no cover - the families have far more instances than a split asks for
            raise RuntimeError(f"{family}: no new instance after 1000 draws")
        seen.add(inst.key())
        out.append((f"{i:04d}-{family}", inst))
    return out


def task_toml(inst: Instance, split: str, seed: int) -> str:
    tags = json.dumps(["shell", inst.family, split])
    return (f'schema_version = "1.4"\n\n[metadata]\nauthor_name = "agentr1"\ndifficulty = "{inst.difficulty}"\n'
            f'category = "{inst.family}"\ntags = {tags}\ngenerator = "agentr1 terminal tasks {VERSION}"\n'
            f'split = "{split}"\nseed = {seed}\n\n[verifier]\ntimeout_sec = {VERIFIER_TIMEOUT_SEC}\n\n'
            f'[agent]\ntimeout_sec = {AGENT_TIMEOUT_SEC}\n\n[environment]\nbuild_timeout_sec = 300.0\ncpus = 1\n'
            'memory_mb = 1024\nstorage_mb = 1024\n')


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def write_task(folder: Path, inst: Instance, split: str, seed: int) -> None:
    """One task folder in Harbor's layout."""
    _write(folder / "instruction.md", inst.instruction + "\n")
    _write(folder / "task.toml", task_toml(inst, split, seed))
    _write(folder / "environment" / "Dockerfile", DOCKERFILE)
    (folder / "environment" / "app").mkdir(parents=True, exist_ok=True)
    for rel, text in inst.files.items():
        _write(folder / "environment" / "app" / rel, text)
    _write(folder / "tests" / "test.sh", TEST_SCRIPT % inst.check.rstrip("\n"), 0o755)
    _write(folder / "solution" / "solve.sh", "#!/bin/bash\n" + "".join(f"{c}\n" for c in inst.solution), 0o755)


def write_tasks(out_dir: str | os.PathLike, split: str, count: int | None = None, seed: int = 0) -> list[Path]:
    """The split's task folders written into ``out_dir`` (created; folders of the same name are replaced)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    folders = []
    for name, inst in instances(split, count, seed):
        folder = out / name
        if folder.exists():
            shutil.rmtree(folder)
        write_task(folder, inst, split, seed)
        folders.append(folder)
    return folders


def code_digest() -> str:
    """A digest of the generator's code: the cache is written again when it changes."""
    digest = hashlib.sha256(VERSION.encode())
    for module in ("families.py", "generate.py"):
        digest.update((Path(__file__).parent / module).read_bytes())
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    base = os.environ.get("AGENTR1_CACHE_DIR") or Path.home() / ".cache" / "agentr1"
    return Path(base).expanduser() / "terminal-tasks" / VERSION


def _stamp_of(folder: Path) -> dict | None:
    try:
        return json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return None


def ensure_split(split: str, seed: int = 0, root: str | os.PathLike | None = None) -> Path:
    """The folder of the split's tasks under ``root`` (default: the cache), written when missing or stale."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; the splits: {', '.join(SPLITS)}")
    base = Path(root).expanduser() if root else cache_root()
    dest = base / (split if seed == 0 else f"{split}-seed{seed}")
    stamp = {"version": VERSION, "split": split, "seed": seed, "count": SPLITS[split][0], "code": code_digest()}
    if _stamp_of(dest) == stamp:
        return dest
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=base))
    try:
        write_tasks(tmp, split, seed=seed)
        (tmp / STAMP).write_text(json.dumps(stamp))
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=base))
            os.replace(dest, old / "tasks")
            shutil.rmtree(old, ignore_errors=True)
        try:
            os.rename(tmp, dest)
        except OSError:  # another process put its copy in place first: use it when it is the same
            if _stamp_of(dest) != stamp:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def load_generated(split: str = "train", limit: int | None = None, families: list[str] | None = None,
                   root: str | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """The ``terminal_tasks`` dataset: the split's generated tasks (written into the cache on first use) as
    ``harbor`` rows, ``families`` keeping some, the first ``limit`` (None or 0: all)."""
    return load_tasks(str(ensure_split(split, seed, root)), limit=limit, families=families)
