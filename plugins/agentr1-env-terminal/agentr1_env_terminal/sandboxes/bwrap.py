"""The ``bwrap`` sandbox: each command in bubblewrap, with the host's files read-only and only the task's folders
writable, at ``/app``, ``/tests``, ``/logs``, ``/solution`` (Harbor's layout).

The file system a command sees: a read-only tmpfs as ``/`` with every top-level entry of the host's ``/`` bound
read-only on it (symlinks such as ``/bin -> usr/bin`` recreated), a fresh ``/dev``, ``/proc``, and tmpfs on ``/tmp``
and ``/var/tmp``; the sandbox's folders that exist when the command starts are bound writable at ``/NAME`` (a folder
asked for later is there from the next command on). Every namespace is unshared (no network unless
``network=True``), the pid namespace dies with the command, so nothing it started in the background outlives it.

As root, bwrap itself is started as the sandbox's own unprivileged uid (an unprivileged user namespace), so that
``RLIMIT_NPROC`` holds: bwrap's ``--uid`` on a user namespace of root's would still count as root outside, where the
process limit does not apply. The rlimits, the wall-time kill and the output caps are the runner's (``process.py``).
bwrap reports a command killed by signal N as exit status 128+N: such a status with a crash signal's N is read back
as that signal (an ``exit 139`` of the command's own reads the same).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Mapping

from agentr1_core.sandbox import Availability

from .local import UID_RANGE, LocalSandbox, probe
from .process import Limits, base_env, drop_to, pids_of_uid

NOT_INSTALLED = "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
OWN = {"proc", "dev", "tmp"}  # top-level entries bwrap makes fresh


def root_args(skip: set[str]) -> list[str]:
    """The read-only view of the host's ``/``: a tmpfs root with each top-level entry bound on it."""
    args = ["--tmpfs", "/"]
    for entry in sorted(os.listdir("/")):
        if entry in OWN or entry in skip:
            continue
        where = "/" + entry
        if os.path.islink(where):
            args += ["--symlink", os.readlink(where), where]
        elif os.path.isdir(where):
            args += ["--ro-bind", where, where]
        else:
            args += ["--ro-bind-try", where, where]
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    if os.path.isdir("/var/tmp") and not os.path.islink("/var") and "var" not in skip:
        args += ["--tmpfs", "/var/tmp"]
    return args


def bwrap_argv(binds: Mapping[str, str], env: Mapping[str, str], command: list[str], network: bool) -> list[str]:
    """bwrap's command line: ``binds`` maps a folder name to the host folder bound writable at ``/NAME``."""
    argv = [shutil.which("bwrap") or "bwrap", *root_args(set(binds))]
    for name, host in sorted(binds.items()):
        argv += ["--bind", host, "/" + name]
    argv += ["--remount-ro", "/", "--chdir", "/app", "--unshare-all"]
    if network:
        argv.append("--share-net")
    argv += ["--die-with-parent", "--new-session", "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return argv + ["--", *command]


class BwrapSandbox(LocalSandbox):
    name = "bwrap"
    reports_signals_as_status = True
    tmp_is_rebuilt = False  # bwrap binds the folders from the host's mount namespace: the uid must reach them

    @classmethod
    def check(cls) -> Availability:
        if shutil.which("bwrap") is None:
            return Availability(False, NOT_INSTALLED)
        found = probe()
        uid = UID_RANGE[0] - 1 if found["root"] and found["uid"] is True else None
        argv = bwrap_argv({}, {"PATH": "/usr/bin:/bin"}, ["true"], network=False)
        argv[argv.index("--chdir") + 1] = "/"
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10, cwd="/",
                                  user=uid, group=uid, extra_groups=[] if uid is not None else None)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Availability(False, f"bwrap cannot start: {exc}")
        if done.returncode != 0:
            lines = [line for line in (done.stderr or "").splitlines() if line.strip()]
            return Availability(False, f"bwrap cannot make a sandbox here: {lines[-1] if lines else done.returncode}")
        user = ("uid: own unprivileged uid per sandbox" if uid is not None else
                "uid: root (NOT dropped; process limit not in force)" if found["root"] else "uid: the caller's")
        return Availability(True, f"bubblewrap: host read-only, own /tmp, only the task's folders writable, {user}, "
                                  "network: private namespace, pid namespace, rlimits (cpu, memory, file size, "
                                  "processes, core)")

    def path(self, name: str = "app") -> str:
        self.host_path(name)
        return "/" + name

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        return base_env("/app", "/tmp", extra)

    def _argv(self, command: str | list[str], env: dict[str, str]) -> list[str]:
        assert self._dir is not None
        binds = {entry.name: str(entry) for entry in self._dir.iterdir() if entry.is_dir() and entry.name != "tmp"}
        inner = ["bash", "-c", command] if isinstance(command, str) else [str(a) for a in command]
        return bwrap_argv(binds, env, inner, self.network)

    def _setup(self):
        """In the child: rlimits, then (as root) the sandbox's uid; bwrap makes the namespaces."""
        limits: Limits = self.limits
        uid, gid = self.uid, self.gid
        # Not root: the limit counts all of the caller's processes (bwrap maps the caller's uid).
        nproc = None if uid is not None else len(pids_of_uid(os.getuid())) + limits.processes

        def setup() -> None:
            limits.apply(nproc=nproc)
            if uid is not None:
                drop_to(uid, gid)
        return setup
