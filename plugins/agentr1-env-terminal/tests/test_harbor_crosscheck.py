"""``read_task`` against Harbor's own task model: Harbor 0.25.0 (``Task``, ``TaskConfig``, ``TaskPaths``) loads
generated tasks and hand-written edge cases (task.toml with only some sections, legacy fields, a canary line) in
``.venv-harbor`` (``bash scripts/setup_harbor.sh``; Harbor needs Python 3.12), and what it reads must be what
agentr1 reads. Without ``.venv-harbor`` the tests skip, except in CI (``AGENTR1_CI=1``), where they fail."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from agentr1_core.testing.ci import missing
from agentr1_env_terminal.harbor import read_task
from agentr1_env_terminal.tasks.generate import write_tasks

ROOT = Path(__file__).resolve().parents[3]
HARBOR_PYTHON = ROOT / ".venv-harbor" / "bin" / "python"

SNIPPET = textwrap.dedent("""\
    import json, sys, warnings
    warnings.simplefilter("ignore")
    from harbor.models.task.task import Task
    out = []
    for folder in sys.argv[1:]:
        assert Task.is_valid_dir(folder), folder
        task = Task(folder)
        config, metadata = task.config, task.config.metadata
        solve = task.paths.discovered_solve_path
        out.append({
            "name": task.name, "instruction": task.instruction,
            "verifier_timeout_sec": config.verifier.timeout_sec, "agent_timeout_sec": config.agent.timeout_sec,
            "build_timeout_sec": config.environment.build_timeout_sec, "cpus": config.environment.cpus,
            "memory_mb": config.environment.memory_mb, "storage_mb": config.environment.storage_mb,
            "docker_image": config.environment.docker_image, "category": metadata.get("category", ""),
            "difficulty": metadata.get("difficulty", ""),
            "tags": metadata.get("tags", config.task.keywords if config.task else []),  # agentr1's rule
            "verifier_env": config.verifier.env, "test_script": str(task.paths.discovered_test_path),
            "solution_script": str(solve) if solve else None})
    print(json.dumps(out))
    """)


def ours(folder: Path) -> dict:
    task = read_task(folder)
    return {"name": task.name, "instruction": task.instruction, "verifier_timeout_sec": task.verifier_timeout_sec,
            "agent_timeout_sec": task.agent_timeout_sec, "build_timeout_sec": task.build_timeout_sec,
            "cpus": task.cpus, "memory_mb": task.memory_mb, "storage_mb": task.storage_mb,
            "docker_image": task.docker_image, "category": task.category, "difficulty": task.difficulty,
            "tags": list(task.tags), "verifier_env": dict(task.verifier_env), "test_script": str(task.test_script),
            "solution_script": str(task.solution_script) if task.solution_script else None}


def harbors(folders: list[Path]) -> list[dict]:
    if not HARBOR_PYTHON.is_file():
        missing(f"the Harbor environment is missing: {HARBOR_PYTHON} (bash scripts/setup_harbor.sh)")
    proc = subprocess.run([str(HARBOR_PYTHON), "-c", SNIPPET, *map(str, folders)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def edge_task(root: Path, name: str, toml: str, instruction: str = "Do the thing.\n", solve: bool = True) -> Path:
    folder = root / name
    (folder / "environment").mkdir(parents=True)
    (folder / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
    (folder / "tests").mkdir()
    (folder / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    if solve:
        (folder / "solution").mkdir()
        (folder / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    (folder / "instruction.md").write_text(instruction)
    (folder / "task.toml").write_text(toml)
    return folder


EDGE_CASES = {
    "empty-toml": "",
    "metadata-only": '[metadata]\ncategory = "debugging"\ndifficulty = "hard"\ntags = ["c", "gdb"]\n',
    "verifier-only": "[verifier]\ntimeout_sec = 45\n",
    "agent-only": "[agent]\ntimeout_sec = 300\n",
    "environment-only": '[environment]\ncpus = 2.0\nmemory_mb = 2048\ndocker_image = "python:3.12-slim"\n',
    "legacy-sizes": 'version = "1.0"\n\n[environment]\nmemory = "4G"\nstorage = "512M"\ncpus = 1.5\n',
    "package-name": '[task]\nname = "example-org/edge-task"\nkeywords = ["shell"]\n\n[verifier]\nenv = {MODE = "x"}\n',
}


def test_generated_tasks_read_as_harbor_reads_them(tmp_path):
    folders = write_tasks(tmp_path / "train", "train", count=8) + write_tasks(tmp_path / "val", "val")[-2:]
    theirs = harbors(folders)
    assert [ours(f) for f in folders] == theirs
    assert {t["category"] for t in theirs} >= {"count", "fix_bug", "head_tail"}


def test_sparse_and_legacy_task_toml_defaults_agree_with_harbors(tmp_path):
    folders = [edge_task(tmp_path, name, toml) for name, toml in EDGE_CASES.items()]
    folders.append(edge_task(tmp_path, "canary-no-solution", "", solve=False,
                             instruction="# harbor-canary GUID 6f1e0a\n\nFix the build.\n"))
    theirs = harbors(folders)
    for folder, harbor in zip(folders, theirs):
        assert ours(folder) == harbor, folder.name
    by_name = dict(zip([f.name for f in folders], theirs))
    assert by_name["empty-toml"]["verifier_timeout_sec"] == 600.0 and by_name["empty-toml"]["agent_timeout_sec"] is None
    assert by_name["legacy-sizes"]["memory_mb"] == 4096 and by_name["environment-only"]["cpus"] == 2
    assert by_name["canary-no-solution"]["instruction"] == "Fix the build.\n"
