"""Fixtures of the terminal plugin's tests: ``FolderSandbox``, a minimal sandbox (a temporary folder per episode with
``app``, ``tests`` and ``logs`` in it, commands run by ``bash -c`` there, no isolation), enough to run a task's
tests exactly as the env does. Its commands find ``python3`` in the folder of the real interpreter first: a pyenv
shim on ``PATH`` (a bash script) costs ~0.1 s a call, several minutes over the generated tasks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from agentr1_core.sandbox import CommandResult, Sandbox


def _python_bin() -> str:
    """The folder of the interpreter ``python3`` on PATH runs (resolved through shims), else this one's."""
    found = shutil.which("python3")
    if found:
        proc = subprocess.run([found, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip():
            return str(Path(proc.stdout.strip()).parent)
    return str(Path(sys.executable).parent)


PATH = os.pathsep.join([_python_bin(), os.environ.get("PATH", "")])


class FolderSandbox(Sandbox):
    name = "folder"

    def __init__(self) -> None:
        self.root: Path | None = None

    def start(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="agentr1-test-sandbox-"))

    def host_path(self, name: str = "app") -> Path:
        assert self.root is not None, "start() first"
        path = self.root / name
        path.mkdir(exist_ok=True)
        return path

    def path(self, name: str = "app") -> str:
        return str(self.host_path(name))

    def run(self, command, *, timeout=None, stdin=None, env=None) -> CommandResult:
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        start = time.monotonic()
        try:
            proc = subprocess.run(argv, cwd=self.host_path("app"), input=stdin, capture_output=True, text=True,
                                  timeout=timeout or 60, env={**os.environ, "PATH": PATH, **(env or {})})
        except subprocess.TimeoutExpired as exc:
            return CommandResult(None, str(exc.stdout or ""), str(exc.stderr or ""), killed="wall_time",
                                 seconds=time.monotonic() - start)
        return CommandResult(proc.returncode, proc.stdout, proc.stderr, seconds=time.monotonic() - start)

    def close(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


@pytest.fixture
def sandbox_factory():
    return FolderSandbox
