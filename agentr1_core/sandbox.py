"""Sandboxes: where an episode's commands run (the ``sandbox`` component kind).

A sandbox is one episode's machine: a folder of its own and a way to run commands in it under limits. Tools that
run code (``bash``, ``python``) and envs whose reward is a test script run everything through one. A plugin adds a
sandbox with the ``agentr1_sandboxes`` hook (``SandboxSpec``); its factory is a ``Sandbox`` subclass whose keyword
parameters are the config (``env: {sandbox: {name: bwrap, memory_mb: 1024}}``, or the bare name).

The life of one::

    box = registry.build("sandbox", "local", {...})   # cheap: nothing started yet
    box.start()                                      # the episode's folder (``host_path("app")``)
    result = box.run("ls -la")                       # a CommandResult, never an exception for the command's fault
    box.close()                                      # everything it started is killed, its folder removed

Inside a sandbox a task sees named folders: ``app`` (the working folder every command starts in), and others a
caller asks for (``tests``, ``logs``); ``path(name)`` is where commands see one, ``host_path(name)`` where the host
writes into it. A sandbox with a file system of its own (``bwrap``, ``docker``) shows them at ``/app``,
``/tests``, ``/logs`` as Harbor's tasks expect; ``local`` shows the host folders as they are.

``check()`` (a class method) says whether the sandbox can run on this machine and what isolation is in force, in one
line each: the checks before a run call it and refuse a sandbox that cannot run, with the one line.

This module defines the interface only; the sandboxes themselves live in plugins (``agentr1-env-terminal``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot run here (a program missing, no daemon): one line saying what and how to get it."""


@dataclass(frozen=True)
class Availability:
    """What ``Sandbox.check`` found: ``ok`` (it can run), ``isolation`` (one line: what is in force, or why not)."""

    ok: bool
    isolation: str


@dataclass
class CommandResult:
    """One command's end. ``exit_code`` is None when it was killed (``killed``: ``wall_time``, ``cpu_time``,
    ``memory``, ``signal SIGNAME``). Output is decoded with replacement and capped; ``truncated`` says it was."""

    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    killed: str | None = None
    truncated: bool = False
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def describe(self) -> str:
        """The result as the model sees it: the output, then one line with the exit code or why it was killed."""
        parts = [self.stdout.rstrip("\n")] if self.stdout.strip() else []
        if self.stderr.strip():
            parts.append(self.stderr.rstrip("\n"))
        if self.truncated:
            parts.append("[output truncated]")
        if self.killed:
            parts.append(f"[killed: {self.killed}]")
        else:
            parts.append(f"[exit code {self.exit_code}]")
        return "\n".join(parts)


class Sandbox:
    """Subclass and implement ``check``, ``start``, ``run``, ``path`` and ``close``. The constructor's keyword
    parameters are its config; it must not start anything (the checks before a run build one to read its
    parameters). ``run`` is called from tool threads, several at a time for one episode: it must be thread-safe."""

    name: ClassVar[str] = ""

    @classmethod
    def check(cls) -> Availability:
        """Whether this sandbox can run on this machine, and the isolation in force (one line)."""
        return Availability(True, "no isolation")

    def start(self) -> None:
        """Make the episode's folder (and whatever the sandbox runs in). Called once, before any ``run``."""
        raise NotImplementedError

    def host_path(self, name: str = "app") -> Path:
        """Where the host reads and writes the sandbox's folder ``name`` (``app``, ``tests``, ``logs``...); the
        folder exists after the call."""
        raise NotImplementedError

    def path(self, name: str = "app") -> str:
        """Where commands in the sandbox see the folder ``name``."""
        raise NotImplementedError

    def run(self, command: str | list[str], *, timeout: float | None = None, stdin: str | None = None,
            env: Mapping[str, str] | None = None) -> CommandResult:
        """Run ``command`` (a shell line, or an argv list) in the working folder under the sandbox's limits;
        ``timeout`` lowers the wall-time limit for this command. Never raises for what the command does."""
        raise NotImplementedError

    def close(self) -> None:
        """Kill what is still running and remove the folder; safe to call twice."""

    def copy_in(self, source: Path, name: str = "app") -> Path:
        """Copy the files under ``source`` into the folder ``name`` (modes kept), owned like that folder, so that a
        sandbox that runs commands as a user of its own gets files that user can change. Returns the host folder."""
        dest = self.host_path(name)
        shutil.copytree(source, dest, dirs_exist_ok=True, symlinks=True)
        owned_like(dest, dest)
        return dest

    def make_dir(self, name: str, *parts: str) -> Path:
        """The host path of ``parts`` inside the folder ``name``, made (owned like that folder) if missing."""
        base = self.host_path(name)
        path = base.joinpath(*parts)
        path.mkdir(parents=True, exist_ok=True)
        owned_like(path, base)
        return path


def owned_like(path: Path, folder: Path) -> None:
    """Give ``path`` and everything under it the owner of ``folder`` (only root can, and only needs to when the
    folder is not root's)."""
    owner = folder.stat()
    if os.geteuid() != 0 or (owner.st_uid, owner.st_gid) == (0, 0):
        return
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.lchown(item, owner.st_uid, owner.st_gid)


def build_sandbox(spec: Any, where: str = "env.sandbox") -> Sandbox:
    """The sandbox a config names: a bare name or ``{name: ..., **params}``; a ``Sandbox`` is returned as is. A
    sandbox that cannot run here raises ``SandboxUnavailable`` with its one line."""
    if isinstance(spec, Sandbox):
        return spec
    from agentr1_core.plugins import get_registry

    cfg = {"name": spec} if isinstance(spec, str) else dict(spec)
    name = cfg.pop("name", None)
    if not name:
        raise ValueError(f"{where}: a sandbox needs a name")
    registry = get_registry()
    factory = registry.validate("sandbox", name, cfg, where=where)
    availability = availability_of(factory, name)
    if not availability.ok:
        raise SandboxUnavailable(f"sandbox {name!r} cannot run here: {availability.isolation}")
    return factory(**cfg)


_CHECKED: dict[type, Availability] = {}


def availability_of(cls: type, name: str = "") -> Availability:
    """``cls.check()``, once per process (it may start programs to find out). The first time, a sandbox that can
    run prints the isolation in force: ``[sandbox] local: process group, rlimits ...`` (the checks before a run
    build the env, so a run says it before the model loads)."""
    if cls not in _CHECKED:
        check = getattr(cls, "check", None)
        _CHECKED[cls] = check() if callable(check) else Availability(True, "unknown")
        if _CHECKED[cls].ok:
            print(f"[sandbox] {name or getattr(cls, 'name', '') or cls.__name__}: {_CHECKED[cls].isolation}",
                  flush=True)
    return _CHECKED[cls]
