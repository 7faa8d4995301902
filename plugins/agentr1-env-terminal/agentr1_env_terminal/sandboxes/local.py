"""The ``local`` sandbox: a fresh folder per episode on the host; each command a process group under rlimits.

As root (here and in CI) every sandbox gets an unprivileged uid/gid of its own from a high range, its folders are
chown'd to it and commands run as it: the process limit holds (``RLIMIT_NPROC`` does not bind root), the host's
files are as read-only to it as to any stranger, and ``close()`` can kill whatever escaped its group (``setsid``) by
uid. Where the kernel allows, each command also gets a private network namespace (no network at all, loopback
included) and a private mount namespace with fresh tmpfs over /tmp, /var/tmp and /dev/shm (the episode folder is
bound back if it lies under one). Not root: the same namespaces inside an unprivileged user namespace where that
works, the caller's uid otherwise; then the files the caller can write, a command can write too. ``check()`` says
which of these are in force. Commands see the host's file system as it is (``path(name)`` is the host path); for a
file system of its own, see ``bwrap``.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import stat
import tempfile
import threading
from pathlib import Path
from typing import Mapping

from agentr1_core.sandbox import Availability, CommandResult, Sandbox

from .process import (CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWUSER, SHARED_TMP, Limits, ProcessRunner, base_env,
                      drop_to, kill_uid, map_user, pids_of_uid, private_tmp, unshare)

UID_RANGE = (1_500_000, 1_900_000)  # far above any distribution's users and the usual subuid ranges
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_uids_lock = threading.Lock()
_uids_taken: set[int] = set()
_probe_cache: dict[str, object] | None = None


def allocate_uid() -> int:
    """A uid no process of this machine runs as and no user of /etc/passwd has; held until ``release_uid``."""
    import pwd

    with _uids_lock:
        for _ in range(1000):
            uid = random.randrange(*UID_RANGE)
            if uid in _uids_taken:
                continue
            try:
                pwd.getpwuid(uid)
                continue
            except KeyError:
                pass
            if pids_of_uid(uid):
                continue
            _uids_taken.add(uid)
            return uid
    raise RuntimeError("no free sandbox uid found")


def release_uid(uid: int) -> None:
    with _uids_lock:
        _uids_taken.discard(uid)


def probe() -> dict[str, object]:
    """What works here, found in a forked child (once per process): ``root``, ``netns``, ``mntns``, ``uid`` (True
    or the error)."""
    global _probe_cache
    if _probe_cache is not None:
        return _probe_cache
    root = os.geteuid() == 0
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only syscalls, then _exit
        out = []
        try:
            if root:
                for what, flags in (("netns", CLONE_NEWNET), ("mntns", CLONE_NEWNS)):
                    try:
                        unshare(flags)
                        if what == "mntns":
                            private_tmp([])
                        out.append(f"{what}=ok")
                    except OSError as exc:
                        out.append(f"{what}={exc.strerror or exc}")
            else:  # one user namespace gives both, or neither
                try:
                    uid, gid = os.getuid(), os.getgid()
                    unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS)
                    map_user(uid, gid)
                    private_tmp([])
                    out += ["netns=ok", "mntns=ok"]
                except OSError as exc:
                    out += [f"netns=no user namespace: {exc.strerror or exc}"]
                    out += [f"mntns=no user namespace: {exc.strerror or exc}"]
            if root:
                try:
                    drop_to(UID_RANGE[0] - 1, UID_RANGE[0] - 1)
                    out.append("uid=ok")
                except OSError as exc:
                    out.append(f"uid={exc.strerror}")
            os.write(w, ";".join(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    raw = b""
    while chunk := os.read(r, 4096):
        raw += chunk
    os.close(r)
    os.waitpid(pid, 0)
    found: dict[str, object] = {"root": root, "netns": "not tried", "mntns": "not tried", "uid": not root}
    for item in raw.decode().split(";"):
        if "=" in item:
            key, value = item.split("=", 1)
            found[key] = True if value == "ok" else value
    _probe_cache = found
    return found


def isolation_line(found: Mapping[str, object], network: bool = False) -> str:
    parts = ["process group", "rlimits (cpu, memory, file size, processes, core)"]
    if found["root"]:
        parts.append("uid: own unprivileged uid per sandbox" if found["uid"] is True else
                     f"uid: root (NOT dropped: {found['uid']}; process limit not in force)")
    else:
        parts.append("uid: the caller's (files it can write, commands can write; the process limit counts all "
                     "its processes)")
    if network:
        parts.append("network: host's (network=True)")
    else:
        parts.append("network: private namespace" if found["netns"] is True else
                     f"network: NOT isolated ({found['netns']})")
    parts.append("/tmp: private" if found["mntns"] is True else f"/tmp: shared ({found['mntns']})")
    return ", ".join(parts)


class LocalSandbox(Sandbox):
    name = "local"

    def __init__(self, *, cpu_seconds: float = 10, memory_mb: int = 1024, file_size_mb: int = 16,
                 processes: int = 64, wall_seconds: float = 20, output_bytes: int = 16384, network: bool = False,
                 root: str | None = None):
        self.limits = Limits(cpu_seconds=cpu_seconds, memory_mb=memory_mb, file_size_mb=file_size_mb,
                             processes=processes, wall_seconds=wall_seconds, output_bytes=output_bytes)
        self.network = bool(network)
        self.root = root
        self.uid: int | None = None  # the sandbox's own uid (as root), else None
        self.gid: int | None = None
        self._dir: Path | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._runner = ProcessRunner(self.limits, exit_status_is_signal=self.reports_signals_as_status, reaper=True)

    reports_signals_as_status = False
    tmp_is_rebuilt = True  # a command's private /tmp rebuilds the way down to a folder under it

    @classmethod
    def check(cls) -> Availability:
        return Availability(True, isolation_line(probe()))

    # --- folders ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._dir is not None:
                return
            root = Path(self.root or tempfile.gettempdir())
            root.mkdir(parents=True, exist_ok=True)
            folder = Path(tempfile.mkdtemp(prefix=f"agentr1-{self.name}-", dir=root))
            if os.geteuid() == 0 and probe()["uid"] is True:
                self.uid = self.gid = allocate_uid()
                os.chown(folder, self.uid, self.gid)
                self._check_reachable(folder)
            os.chmod(folder, 0o700)
            self._dir = folder
            self._make("tmp")
        self.host_path("app")

    def _check_reachable(self, folder: Path) -> None:
        """The sandbox's uid must be able to walk down to its folder (unless a private /tmp rebuilds the way)."""
        under_tmp = any(str(folder).startswith(t + "/") for t in SHARED_TMP)
        if self.tmp_is_rebuilt and under_tmp and probe()["mntns"] is True:
            return
        for parent in folder.parents:
            if not parent.stat().st_mode & stat.S_IXOTH:
                raise PermissionError(f"sandbox root {parent} is not traversable by others (chmod o+x), the "
                                      f"sandbox's uid cannot reach its folder")

    def _make(self, name: str) -> Path:
        assert self._dir is not None
        folder = self._dir / name
        if not folder.is_dir():
            folder.mkdir(mode=0o700)
            if self.uid is not None:
                os.chown(folder, self.uid, self.gid)
        return folder

    def host_path(self, name: str = "app") -> Path:
        if not _NAME.match(name) or name == "tmp":
            raise ValueError(f"bad sandbox folder name {name!r}")
        if self._dir is None:
            raise RuntimeError(f"{self.name} sandbox: start() first")
        with self._lock:
            return self._make(name)

    def path(self, name: str = "app") -> str:
        return str(self.host_path(name))

    # --- commands ---------------------------------------------------------------------------------------------

    def _setup(self):
        """The callable the child runs before exec: namespaces, private /tmp, rlimits, the uid drop."""
        found, limits, network, uid, gid = probe(), self.limits, self.network, self.uid, self.gid
        keep = [str(self._dir)]
        flags = (0 if network or found["netns"] is not True else CLONE_NEWNET) | \
                (CLONE_NEWNS if found["mntns"] is True else 0)
        if uid is not None:
            def setup() -> None:
                if flags:
                    unshare(flags)
                if flags & CLONE_NEWNS:
                    private_tmp(keep)
                limits.apply()
                drop_to(uid, gid)
            return setup
        me_uid, me_gid = os.getuid(), os.getgid()
        nproc = len(pids_of_uid(me_uid)) + limits.processes  # the limit counts all of the caller's processes

        def setup_user() -> None:
            if flags:
                unshare(CLONE_NEWUSER | flags)
                map_user(me_uid, me_gid)
                if flags & CLONE_NEWNS:
                    private_tmp(keep)
            limits.apply(nproc=nproc)
        return setup_user

    def _argv(self, command: str | list[str], env: dict[str, str]) -> list[str]:
        return ["bash", "-c", command] if isinstance(command, str) else [str(a) for a in command]

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        assert self._dir is not None
        return base_env(self.path("app"), str(self._dir / "tmp"), extra)

    def run(self, command: str | list[str], *, timeout: float | None = None, stdin: str | None = None,
            env: Mapping[str, str] | None = None) -> CommandResult:
        if self._closed:
            raise RuntimeError(f"{self.name} sandbox is closed")
        if self._dir is None:
            self.start()
        full_env = self._env(env)
        return self._runner.run(self._argv(command, full_env), cwd=str(self.host_path("app")), env=full_env,
                                stdin=stdin, timeout=timeout, setup=self._setup())

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._runner.kill_all()
        if self.uid is not None:
            kill_uid(self.uid, self.gid)
            release_uid(self.uid)
        if self._dir is not None:
            remove_tree(self._dir)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def remove_tree(folder: Path) -> None:
    """Remove ``folder``; where a command made a folder of it unreadable (``chmod 000``, which binds the owner but
    not root), give its folders back their owner's rights, never through a symlink, and try again."""
    try:
        shutil.rmtree(folder)
        return
    except OSError:
        pass
    os.chmod(folder, 0o700)
    for dirpath, dirnames, _ in os.walk(folder):
        for name in dirnames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                try:
                    os.chmod(path, 0o700)
                except OSError:
                    pass
    shutil.rmtree(folder, ignore_errors=True)
