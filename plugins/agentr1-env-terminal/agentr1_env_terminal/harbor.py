"""Harbor task folders: reading one (``read_task``), finding what is wrong with one (``task_problems``), the ``harbor``
dataset (``load_tasks``), the expert's commands (``solution_commands``) and the verifier (``run_tests``).

A task folder, as Harbor lays it out::

    instruction.md          what the agent is asked (leading "canary" comment lines are dropped, as Harbor does)
    task.toml               [metadata], [verifier] timeout_sec, [agent] timeout_sec, [environment] cpus, memory_mb...
    environment/            Dockerfile (or docker-compose.yaml...) and the files it copies into the image
    tests/test.sh           run after the agent; writes /logs/verifier/reward.txt (or reward.json)
    solution/solve.sh       a reference solution

The files the agent starts with: a sandbox without Docker cannot build the image, so the convention is that the
files of ``environment/app/`` are what the image has in ``/app`` (the generated tasks' Dockerfiles do exactly
``COPY app/ /app/``, so the two agree). A task with only a Dockerfile and no ``app/`` folder starts with an empty
``/app``; whatever else its Dockerfile installs is not reproduced.

Defaults follow Harbor 0.25's ``TaskConfig`` (verifier timeout 600 s, build timeout 600 s, no agent timeout, no
resource limits); the tests cross-check them against Harbor's own model (``scripts/setup_harbor.sh``).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from agentr1_core.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib
from agentr1_core.sandbox import CommandResult, Sandbox

VERIFIER_TIMEOUT_SEC = 600.0  # Harbor's default [verifier] timeout_sec
BUILD_TIMEOUT_SEC = 600.0  # Harbor's default [environment] build_timeout_sec
MAX_TIMEOUT_SEC = 24 * 3600.0  # a longer timeout is a typo, not a test
MAX_LISTED = 100  # problem lines in an error's message; ``problems`` keeps them all

_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)


class HarborTaskError(ConfigError):
    """Problems of task folders, one line each in the message (``problems``: all of them)."""

    def __init__(self, problems: list[str]) -> None:
        listed = problems[:MAX_LISTED]
        if len(problems) > MAX_LISTED:
            listed.append(f"... and {len(problems) - MAX_LISTED} more problems")
        super().__init__("\n".join(listed))
        self.problems = list(problems)


@dataclass(frozen=True)
class HarborTask:
    """One task folder, read. ``config`` is task.toml as parsed; the typed fields are what the env needs.
    ``env_files_dir``: the folder whose files go into ``/app`` (``environment/app``), or None for an empty one."""

    name: str
    dir: Path
    instruction: str
    config: Mapping[str, Any] = field(repr=False, compare=False)
    agent_timeout_sec: float | None = None
    verifier_timeout_sec: float = VERIFIER_TIMEOUT_SEC
    build_timeout_sec: float = BUILD_TIMEOUT_SEC
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    docker_image: str | None = None
    category: str = ""
    difficulty: str = ""
    tags: tuple[str, ...] = ()
    verifier_env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    env_files_dir: Path | None = None
    tests_dir: Path = Path()
    test_script: Path = Path()
    solution_script: Path | None = None

    @property
    def family(self) -> str:
        return self.category or "task"

    @property
    def data_source(self) -> str:
        return f"terminal/{self.family}"


def strip_canary(text: str) -> str:
    """``text`` without its leading canary comment lines and the blank lines after them (Harbor's rule)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and _CANARY.match(lines[i].strip()):
        i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    return "\n".join(lines[i:])


def _table(config: dict, key: str, problems: list[str]) -> dict:
    value = config.get(key, {})
    if not isinstance(value, dict):
        problems.append(f"task.toml: [{key}] must be a table, got {type(value).__name__}")
        return {}
    return value


def _number(section: dict, key: str, where: str, problems: list[str], default: Any = None, *,
            maximum: float | None = None, integer: bool = False) -> Any:
    value = section.get(key, default)
    if value is None:
        return None
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or not math.isfinite(value) or value <= 0:
        kind = "a positive integer" if integer else "a positive number"
        problems.append(f"task.toml: {where}.{key} must be {kind}, got {value!r}")
        return None
    if maximum is not None and value > maximum:
        problems.append(f"task.toml: {where}.{key} = {value:g} is more than {maximum:g} s (a typo?)")
        return None
    return value


def _size_mb(text: str) -> int | None:
    """Harbor's legacy ``memory = "2G"`` / ``storage = "512M"`` in MB, None when unreadable."""
    text = text.strip().upper()
    scale = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}.get(text[-1:])
    try:
        return int(float(text[:-1]) * scale) if scale else None
    except ValueError:
        return None


def _environment(env: dict, problems: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "build_timeout_sec": _number(env, "build_timeout_sec", "[environment]", problems, BUILD_TIMEOUT_SEC,
                                     maximum=MAX_TIMEOUT_SEC),
        "cpus": _number(env, "cpus", "[environment]", problems),
        "memory_mb": _number(env, "memory_mb", "[environment]", problems, integer=True),
        "storage_mb": _number(env, "storage_mb", "[environment]", problems, integer=True),
    }
    if isinstance(out["cpus"], float) and out["cpus"].is_integer():
        out["cpus"] = int(out["cpus"])
    for legacy in ("memory", "storage"):
        if legacy in env and out[f"{legacy}_mb"] is None:
            mb = _size_mb(env[legacy]) if isinstance(env[legacy], str) else None
            if mb is None:
                problems.append(f"task.toml: [environment].{legacy} must look like '2G' or '512M', "
                                f"got {env[legacy]!r}")
            out[f"{legacy}_mb"] = mb
    image = env.get("docker_image")
    if image is not None and not (isinstance(image, str) and image.strip()):
        problems.append(f"task.toml: [environment].docker_image must be an image name, got {image!r}")
        image = None
    out["docker_image"] = image
    return out


def _read(path: Path, require_solution: bool) -> tuple[HarborTask | None, list[str]]:
    """The task of the folder ``path`` and the problems found (without the folder's name; the caller adds it)."""
    if not path.is_dir():
        return None, ["no such folder" if not path.exists() else "not a folder"]
    problems: list[str] = []
    instruction = ""
    ins = path / "instruction.md"
    if not ins.is_file():
        problems.append("no instruction.md")
    else:
        instruction = strip_canary(ins.read_text(encoding="utf-8", errors="replace"))
        if not instruction.strip():
            problems.append("instruction.md is empty")
    config: dict[str, Any] = {}
    toml_file = path / "task.toml"
    if not toml_file.is_file():
        problems.append("no task.toml")
    else:
        try:
            config = tomllib.loads(toml_file.read_text(encoding="utf-8", errors="replace"))
        except tomllib.TOMLDecodeError as exc:
            problems.append(f"task.toml is not valid TOML: {exc}")
    metadata = _table(config, "metadata", problems)
    verifier = _table(config, "verifier", problems)
    agent = _table(config, "agent", problems)
    env = _environment(_table(config, "environment", problems), problems)
    task_section = _table(config, "task", problems)
    verifier_timeout = _number(verifier, "timeout_sec", "[verifier]", problems, VERIFIER_TIMEOUT_SEC,
                               maximum=MAX_TIMEOUT_SEC)
    agent_timeout = _number(agent, "timeout_sec", "[agent]", problems, maximum=MAX_TIMEOUT_SEC)
    verifier_env = verifier.get("env", {})
    if not isinstance(verifier_env, dict) or not all(isinstance(v, str) for v in verifier_env.values()):
        problems.append("task.toml: [verifier].env must be a table of strings")
        verifier_env = {}
    if config.get("steps"):
        problems.append("task.toml: multi-step tasks ([[steps]]) are not supported")
    tags = metadata.get("tags", task_section.get("keywords", []))
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        problems.append(f"task.toml: [metadata].tags must be a list of strings, got {tags!r}")
        tags = []
    environment_dir = path / "environment"
    if not environment_dir.is_dir() and not env["docker_image"]:
        problems.append("no environment/ folder and no [environment].docker_image")
    test_script = path / "tests" / "test.sh"
    if not test_script.is_file():
        problems.append("no tests/test.sh")
    solve = path / "solution" / "solve.sh"
    if not solve.is_file():
        if require_solution:
            problems.append("no solution/solve.sh (the task needs a reference solution here)")
        solve = None
    if problems:
        return None, problems
    name = task_section.get("name") if isinstance(task_section.get("name"), str) else None
    app = environment_dir / "app"
    task = HarborTask(
        name=name or path.name, dir=path.resolve(), instruction=instruction, config=config,
        agent_timeout_sec=agent_timeout, verifier_timeout_sec=verifier_timeout,
        build_timeout_sec=env["build_timeout_sec"], cpus=env["cpus"], memory_mb=env["memory_mb"],
        storage_mb=env["storage_mb"], docker_image=env["docker_image"],
        category=str(metadata.get("category") or ""), difficulty=str(metadata.get("difficulty") or ""),
        tags=tuple(tags), verifier_env=dict(verifier_env),
        env_files_dir=app.resolve() if app.is_dir() else None,
        tests_dir=(path / "tests").resolve(), test_script=test_script.resolve(),
        solution_script=solve.resolve() if solve else None)
    return task, []


def task_problems(path: str | os.PathLike, require_solution: bool = True) -> list[str]:
    """What is wrong with the task folder ``path``, one line each naming the folder (empty: nothing)."""
    _, problems = _read(Path(path), require_solution)
    return [f"{path}: {problem}" for problem in problems]


def read_task(path: str | os.PathLike, require_solution: bool = False) -> HarborTask:
    """The task folder ``path``; its problems are raised together as ``HarborTaskError``."""
    task, problems = _read(Path(path), require_solution)
    if task is None:
        raise HarborTaskError([f"{path}: {problem}" for problem in problems])
    return task


def task_folders(root: Path) -> list[Path]:
    """The task folders of ``root`` sorted by name (``root`` itself when it is one: it has a task.toml)."""
    if (root / "task.toml").is_file():
        return [root]
    return sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")), key=lambda p: p.name)


def read_tasks(path: str | os.PathLike, require_solution: bool = True) -> list[HarborTask]:
    """Every task folder of ``path`` read; every problem of every folder is raised at once (``HarborTaskError``)."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise HarborTaskError([f"{root}: no such folder of Harbor tasks"])
    folders = task_folders(root)
    if not folders:
        raise HarborTaskError([f"{root}: no task folders in it (each one holds instruction.md, task.toml, "
                               "environment/, tests/test.sh, solution/solve.sh)"])
    tasks, problems = [], []
    for folder in folders:
        task, found = _read(folder, require_solution)
        problems += [f"{folder}: {problem}" for problem in found]
        if task is not None:
            tasks.append(task)
    if problems:
        raise HarborTaskError(problems)
    return tasks


def load_tasks(path: str, limit: int | None = None, families: list[str] | None = None,
               require_solution: bool = True) -> list[dict[str, Any]]:
    """The ``harbor`` dataset: a row per task folder of ``path`` (sorted by folder name), ``families`` (the tasks'
    ``[metadata] category``) keeping some, the first ``limit`` (None or 0: all)."""
    tasks = read_tasks(path, require_solution)
    if families:
        known = sorted({t.family for t in tasks})
        unknown = sorted(set(families) - set(known))
        if unknown:
            raise ConfigError(f"config error at data.families: no tasks of {unknown} in {path}; "
                              f"its families: {', '.join(known)}")
        tasks = [t for t in tasks if t.family in families]
    rows = [{"prompt": t.instruction.strip(), "data_source": t.data_source, "env_kwargs": {"task_dir": str(t.dir)},
             "task_name": t.name} for t in tasks]
    return rows[:limit] if limit else rows


_SET_LINE = re.compile(r"^set(\s+[-+][A-Za-z]+(\s+(pipefail|errexit|nounset|xtrace|errtrace|noclobber))?)+\s*(#.*)?$")
_STATEFUL = re.compile(r"^(cd|pushd|popd|export|source|\.|alias|unset|shopt|trap|exec|local|declare|readonly)\b"
                       r"|^[A-Za-z_][A-Za-z0-9_]*=\S*\s*$|^\w+\s*\(\)|^function\s")


def _standalone(line: str) -> bool:
    """Whether ``line`` is a complete command that leaves no state for the next one (conservative)."""
    if _STATEFUL.search(line) or line.endswith("\\") or re.search(r"<<-?\s*['\"]?\w", line):
        return False
    check = subprocess.run(["bash", "-n", "-c", line], capture_output=True, text=True, timeout=10)
    return check.returncode == 0 and not check.stderr.strip()


def solution_commands(task: HarborTask) -> list[str]:
    """``solve.sh`` as bash calls for an expert: one call per line when every non-empty, non-comment line is a
    complete command of its own that changes no shell state (no ``cd``, ``export``, heredoc, continuation...),
    else the whole script as one call. The shebang goes; ``set -e``-style lines go when split (each call stands
    alone) and stay in the single call, where they mean what the script meant."""
    if task.solution_script is None:
        return []
    lines = task.solution_script.read_text(encoding="utf-8", errors="replace").splitlines()
    if lines and lines[0].startswith("#!"):
        lines = lines[1:]
    body = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
    commands = [ln for ln in body if not _SET_LINE.match(ln)]
    if all(_standalone(ln) for ln in commands):
        return commands
    script = "\n".join(lines).strip("\n")
    return [script] if script.strip() else []


def copy_environment(task: HarborTask, sandbox: Sandbox) -> None:
    """Put the task's starting files (``env_files_dir``) into the sandbox's ``app`` folder, modes kept."""
    if task.env_files_dir is not None:
        sandbox.copy_in(task.env_files_dir, "app")


def read_reward(verifier_dir: Path) -> tuple[float | None, str]:
    """The reward the tests wrote in ``verifier_dir`` (reward.json first, then reward.txt, as Harbor reads them) and
    where it came from; ``(None, why)`` when there is none or it cannot be read."""
    json_file, text_file = verifier_dir / "reward.json", verifier_dir / "reward.txt"
    try:
        if json_file.is_file():
            data = json.loads(json_file.read_text())
            value = data.get("reward") if isinstance(data, dict) else data
            if isinstance(data, dict) and value is None and len(data) == 1:
                value = next(iter(data.values()))
            source = "reward.json"
        elif text_file.is_file():
            value, source = float(text_file.read_text().strip()), "reward.txt"
        else:
            return None, "no reward file"
    except (ValueError, OSError) as exc:
        return None, f"unreadable reward file: {exc}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None, f"{source} holds no finite 'reward' number"
    return float(value), source


def run_tests(task: HarborTask, sandbox: Sandbox, timeout: float | None = None) -> tuple[float, CommandResult]:
    """The verifier, as the env runs it after an episode: ``tests/`` copied into the sandbox's ``tests`` folder,
    stale rewards removed, ``bash <tests>/test.sh`` run in ``app`` with ``TESTS_DIR`` and ``LOGS_DIR`` set (and
    ``[verifier].env``) under the verifier's timeout; the reward is what the tests wrote in
    ``<logs>/verifier/reward.json`` or ``reward.txt``, else 1.0 for exit code 0 and 0.0 otherwise.
    ``result.info["reward_from"]`` says which."""
    sandbox.copy_in(task.tests_dir, "tests")
    verifier_dir = sandbox.make_dir("logs", "verifier")
    for stale in ("reward.json", "reward.txt"):
        (verifier_dir / stale).unlink(missing_ok=True)
    env = {**task.verifier_env, "TESTS_DIR": sandbox.path("tests"), "LOGS_DIR": sandbox.path("logs")}
    script = shlex.quote(f"{sandbox.path('tests')}/{task.test_script.name}")
    result = sandbox.run(f"bash {script}", timeout=timeout or task.verifier_timeout_sec, env=env)
    reward, source = read_reward(verifier_dir)
    if reward is None:
        reward = 1.0 if result.ok else 0.0
        source = f"exit code ({source})"
    result.info["reward_from"] = source
    return reward, result
