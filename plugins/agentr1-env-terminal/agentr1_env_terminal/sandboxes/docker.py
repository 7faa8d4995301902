"""The ``docker`` sandbox: a container per episode (``image``), commands by ``docker exec``.

``start()`` makes the episode's folders on the host and runs ``IMAGE sleep infinity`` with no network (unless
``network=True``), a memory cap (swap included), a pids limit, ``cpus``, the CPU-time/file-size/core ulimits, and
the folders ``app``, ``tests``, ``logs``, ``solution`` (plus any other named before ``start``) bind-mounted at
``/NAME``; a folder not mounted at start cannot be added later (``host_path`` refuses it). ``run()`` execs
``bash -c`` in ``/app`` with the stripped environment (the image's own variables stay, the host's never reach it)
under a small in-container wrapper: the command runs under ``timeout -s KILL`` (coreutils), in the process group
that ``timeout`` makes, and that group is killed when the command ends, so its background jobs do not outlive it;
the host kills the ``docker exec`` client a little after the wall limit in case the container does not answer.
Output is capped as in the other sandboxes (``process.py``). ``close()`` is ``docker rm -f``.

Commands run as the image's user (root in most images): files they leave in the folders belong to it. A command
killed by SIGKILL (137) is reported as ``signal SIGKILL``: the container's OOM kill and a ``kill -9`` read the same.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Mapping

from agentr1_core.sandbox import Availability, CommandResult, Sandbox

from .process import DEFAULT_PATH, Limits, ProcessRunner, base_env

NOT_INSTALLED = "docker is not installed (https://docs.docker.com/engine/install/)"
MOUNTED = ("app", "tests", "logs", "solution")
EXEC_GRACE = 3.0  # seconds past the wall limit before the host kills the docker exec client
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
# $1: the wall limit in seconds, the rest: the command. timeout makes a process group of its own (its pid); the
# explicit <&0 keeps stdin, which a background job would get as /dev/null.
WRAPPER = ('timeout -s KILL "$1" "${@:2}" <&0 & p=$!; wait "$p"; rc=$?; '
           'kill -KILL -- -"$p" 2>/dev/null; exit "$rc"')


def _one_line(text: str, fallback: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else fallback


class DockerSandbox(Sandbox):
    name = "docker"

    def __init__(self, *, image: str = "python:3.12-slim", cpu_seconds: float = 10, memory_mb: int = 1024,
                 file_size_mb: int = 16, processes: int = 64, wall_seconds: float = 20, output_bytes: int = 16384,
                 network: bool = False, root: str | None = None, cpus: float = 1.0):
        self.image = image
        self.limits = Limits(cpu_seconds=cpu_seconds, memory_mb=memory_mb, file_size_mb=file_size_mb,
                             processes=processes, wall_seconds=wall_seconds, output_bytes=output_bytes)
        self.network = bool(network)
        self.root = root
        self.cpus = cpus
        self.container: str | None = None
        self._dir: Path | None = None
        self._mounted: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False
        # The host side only caps output and kills the client: the limits proper are the container's.
        client_limits = Limits(cpu_seconds=float("inf"), memory_mb=0, file_size_mb=0, processes=0,
                               wall_seconds=wall_seconds + EXEC_GRACE, output_bytes=output_bytes)
        self._runner = ProcessRunner(client_limits, exit_status_is_signal=True)

    @classmethod
    def check(cls) -> Availability:
        docker = shutil.which("docker")
        if docker is None:
            return Availability(False, NOT_INSTALLED)
        try:
            done = subprocess.run([docker, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                                  timeout=5, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Availability(False, "no Docker daemon answered `docker info` within 5 s")
        except OSError as exc:
            return Availability(False, f"docker cannot start: {exc}")
        if done.returncode != 0:
            why = _one_line(done.stderr, f"exit {done.returncode}")
            return Availability(False, f"no Docker daemon reachable: {why}")
        version = _one_line(done.stdout, "unknown version")
        return Availability(True, f"Docker {version}: a container per episode, network none (unless network=True), "
                                  "memory/pids/cpu limits, only the task's folders mounted")

    # --- folders ----------------------------------------------------------------------------------------------

    def _folder(self, name: str) -> Path:
        if not _NAME.match(name):
            raise ValueError(f"bad sandbox folder name {name!r}")
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="agentr1-docker-", dir=self.root or None))
        folder = self._dir / name
        if self.container is not None and name not in self._mounted:
            raise ValueError(f"docker sandbox: folder {name!r} was not mounted at start (mounted: "
                             f"{', '.join(sorted(self._mounted))})")
        folder.mkdir(exist_ok=True)
        return folder

    def host_path(self, name: str = "app") -> Path:
        with self._lock:
            return self._folder(name)

    def path(self, name: str = "app") -> str:
        self.host_path(name)
        return "/" + name

    def run_argv(self) -> list[str]:
        """``docker run``'s command line (the folders exist by then)."""
        assert self._dir is not None
        lim = self.limits
        cpu = max(1, int(round(lim.cpu_seconds)))
        argv = ["docker", "run", "-d", "--network", "bridge" if self.network else "none",
                "--memory", f"{lim.memory_mb}m", "--memory-swap", f"{lim.memory_mb}m",
                "--pids-limit", str(lim.processes), "--cpus", str(self.cpus),
                "--ulimit", f"cpu={cpu}:{cpu + 1}", "--ulimit", f"fsize={lim.file_size_mb * 1024 * 1024}",
                "--ulimit", "core=0", "--label", "agentr1.sandbox=1"]
        for name in sorted(self._mounted):
            argv += ["-v", f"{self._dir / name}:/{name}"]
        return argv + ["-w", "/app", self.image, "sleep", "infinity"]

    def start(self) -> None:
        with self._lock:
            if self.container is not None:
                return
            if self._dir is None:
                self._folder("app")
            for name in MOUNTED:
                self._folder(name)
            self._mounted = {p.name for p in self._dir.iterdir() if p.is_dir()}
            argv = self.run_argv()
            argv[0] = shutil.which("docker") or "docker"
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                raise RuntimeError(f"docker run failed: {_one_line(done.stderr, str(done.returncode))}")
            self.container = done.stdout.strip().splitlines()[-1]

    # --- commands ---------------------------------------------------------------------------------------------

    def exec_argv(self, command: str | list[str], wall: float, env: Mapping[str, str], stdin: bool) -> list[str]:
        """``docker exec``'s command line for one command."""
        inner = ["bash", "-c", command] if isinstance(command, str) else [str(a) for a in command]
        argv = ["docker", "exec"] + (["-i"] if stdin else []) + ["-w", "/app"]
        for key, value in env.items():
            argv += ["-e", f"{key}={value}"]
        return argv + [str(self.container), "bash", "-c", WRAPPER, "agentr1", f"{wall:g}", *inner]

    def run(self, command: str | list[str], *, timeout: float | None = None, stdin: str | None = None,
            env: Mapping[str, str] | None = None) -> CommandResult:
        if self._closed:
            raise RuntimeError("docker sandbox is closed")
        if self.container is None:
            self.start()
        wall = self.limits.wall_seconds if timeout is None else min(float(timeout), self.limits.wall_seconds)
        full_env = base_env("/app", "/tmp", env)
        full_env["PATH"] = (env or {}).get("PATH", DEFAULT_PATH)
        argv = self.exec_argv(command, wall, full_env, stdin is not None)
        argv[0] = shutil.which("docker") or "docker"
        # The client gets the host's environment (DOCKER_HOST, its config); the command only what -e gives.
        result = self._runner.run(argv, cwd=str(self._dir), env=dict(os.environ), stdin=stdin,
                                  timeout=wall + EXEC_GRACE, setup=lambda: None)
        if result.seconds >= wall and (result.killed in ("wall_time", "signal SIGKILL")):
            result.killed, result.exit_code = "wall_time", None
        return result

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._runner.kill_all()
        if self.container is not None:
            subprocess.run([shutil.which("docker") or "docker", "rm", "-f", self.container], capture_output=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

