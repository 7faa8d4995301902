"""One limited process: the runner under the ``local`` and ``bwrap`` sandboxes (Linux only).

``Limits`` is the sandbox's config (CPU seconds, address space, file size, processes, wall time, output bytes);
``ProcessRunner.run`` starts one argv in a new session with those rlimits (``RLIMIT_CORE`` 0 as well), a stripped
environment and an optional ``setup`` callable that runs in the child before ``exec`` (namespaces, uid drop: the
sandbox's business). It drains stdout and stderr as they come (each kept up to ``output_bytes``, the rest read and
dropped, the command killed once a stream passes ``kill_output_bytes``) and says why a process was killed. The
command's process group is SIGKILLed at the wall limit and as soon as the command ends, so that nothing it left in
its group survives. With ``reaper=True`` a small subreaper (``fork_reaper``, a fork of the child) sits between the
runner and the command, does that killing and reaps what the command left behind, which otherwise stays a zombie
of the host's init, counted against the process limit. A process that left its group (``setsid``) is out of reach
here: the sandboxes kill those by uid (``kill_uid``) or by pid namespace.

It does not isolate anything by itself: no namespaces, no uid change (see ``local.py``, ``bwrap.py``).
"""

from __future__ import annotations

import ctypes
import os
import resource
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from agentr1_core.sandbox import CommandResult

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GRACE_SECONDS = 0.5  # how long the pipes are drained after the group was killed (a setsid escapee may hold them)
CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT, signal.SIGXCPU,
                 signal.SIGXFSZ, signal.SIGKILL, signal.SIGSYS, signal.SIGTRAP}


@dataclass(frozen=True)
class Limits:
    cpu_seconds: float = 10
    memory_mb: int = 1024
    file_size_mb: int = 16
    processes: int = 64
    wall_seconds: float = 20
    output_bytes: int = 16384

    @property
    def kill_output_bytes(self) -> int:
        """A stream that wrote this much is not going to stop by itself: its group is killed (``output_limit``)."""
        return max(1 << 20, 64 * self.output_bytes)

    def apply(self, nproc: int | None = None) -> None:
        """Set the rlimits on the calling process (in the child, before exec). ``nproc`` overrides ``processes``."""
        cpu = max(1, int(round(self.cpu_seconds)))
        mb = 1024 * 1024
        for what, soft, hard in ((resource.RLIMIT_CPU, cpu, cpu + 1),
                                 (resource.RLIMIT_AS, self.memory_mb * mb, self.memory_mb * mb),
                                 (resource.RLIMIT_FSIZE, self.file_size_mb * mb, self.file_size_mb * mb),
                                 (resource.RLIMIT_NPROC, nproc or self.processes, nproc or self.processes),
                                 (resource.RLIMIT_CORE, 0, 0)):
            resource.setrlimit(what, (soft, hard))


def base_env(home: str, tmpdir: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a command gets: PATH, HOME, LANG, TMPDIR, plus ``extra``; nothing else of the host's."""
    env = {"PATH": os.environ.get("PATH") or DEFAULT_PATH, "HOME": home, "LANG": "C.UTF-8", "TMPDIR": tmpdir}
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


class ProcessRunner:
    """Runs commands under ``limits``; thread-safe. ``kill_all`` kills the groups of the commands still running.
    ``exit_status_is_signal``: the started program reports a signal as 128+N (``bwrap``), read it back as one."""

    def __init__(self, limits: Limits, exit_status_is_signal: bool = False, reaper: bool = False):
        self.limits = limits
        self.exit_status_is_signal = exit_status_is_signal
        self.reaper = reaper
        self._lock = threading.Lock()
        self._groups: set[int] = set()

    def kill_all(self) -> None:
        with self._lock:
            groups = list(self._groups)
        for pgid in groups:
            self._stop(pgid)

    def _stop(self, pid: int) -> None:
        """Kill the command started as ``pid``: through its reaper (SIGTERM: it kills the command's group and
        reaps), else its group."""
        if self.reaper:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        else:
            _killpg(pid)

    def run(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], stdin: str | None = None,
            timeout: float | None = None, setup: Callable[[], None] | None = None) -> CommandResult:
        limits = self.limits
        wall = limits.wall_seconds if timeout is None else min(float(timeout), limits.wall_seconds)
        start = time.monotonic()

        def child_setup() -> None:  # runs in the forked child: rlimits first (setup may drop the uid)
            if setup is not None:
                setup()
            else:
                limits.apply()
            if self.reaper:
                fork_reaper()

        proc = subprocess.Popen(list(argv), cwd=cwd, env=dict(env), stdin=subprocess.PIPE if stdin else
                                subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, preexec_fn=child_setup, close_fds=True)
        with self._lock:
            self._groups.add(proc.pid)
        try:
            return self._watch(proc, stdin, start, start + wall)
        finally:
            with self._lock:
                self._groups.discard(proc.pid)

    def _watch(self, proc: subprocess.Popen, stdin: str | None, start: float, deadline: float) -> CommandResult:
        limits = self.limits
        pid = proc.pid
        pidfd = os.pidfd_open(pid)
        sel = selectors.DefaultSelector()
        kept = {"stdout": bytearray(), "stderr": bytearray()}
        seen = {"stdout": 0, "stderr": 0}
        for name in kept:
            stream = getattr(proc, name)
            os.set_blocking(stream.fileno(), False)
            sel.register(stream.fileno(), selectors.EVENT_READ, name)
        sel.register(pidfd, selectors.EVENT_READ, "exit")
        pending = (stdin or "").encode()
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, "stdin")
        killed: str | None = None
        status = None
        rusage = None
        drain_until = None
        hard_deadline: float | None = None
        try:
            while True:
                now = time.monotonic()
                if status is None and now >= deadline and killed is None:
                    killed = "wall_time"
                    self._stop(pid)
                    hard_deadline = now + 2
                if status is None and hard_deadline is not None and now >= hard_deadline:
                    _killpg(pid)  # the reaper did not answer
                    hard_deadline = None
                if drain_until is not None and now >= drain_until:
                    break
                if drain_until is not None and len(sel.get_map()) == 0:
                    break
                wait_for = (drain_until if drain_until is not None else deadline if killed is None else
                            hard_deadline if hard_deadline is not None else now + 1)
                for key, _ in sel.select(max(0.0, wait_for - now)):
                    if key.fd not in sel.get_map():  # unregistered earlier in this batch
                        continue
                    what = key.data
                    if what == "exit":
                        # The leader exited: kill its group while its zombie still holds the pgid, then reap it.
                        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
                        _killpg(pid)
                        _, status, rusage = os.wait4(pid, 0)
                        sel.unregister(pidfd)
                        if proc.stdin is not None and not proc.stdin.closed:
                            sel.unregister(proc.stdin.fileno())
                            proc.stdin.close()
                        drain_until = time.monotonic() + GRACE_SECONDS
                    elif what == "stdin":
                        try:
                            n = os.write(key.fd, pending[:65536])
                            pending = pending[n:]
                        except (BrokenPipeError, BlockingIOError) as exc:
                            if isinstance(exc, BrokenPipeError):
                                pending = b""
                        if not pending:
                            sel.unregister(key.fd)
                            proc.stdin.close()
                    else:
                        try:
                            chunk = os.read(key.fd, 65536)
                        except BlockingIOError:
                            continue
                        if not chunk:
                            sel.unregister(key.fd)
                            continue
                        room = limits.output_bytes - len(kept[what])
                        if room > 0:
                            kept[what] += chunk[:room]
                        seen[what] += len(chunk)
                        if seen[what] > limits.kill_output_bytes and killed is None and status is None:
                            killed = "output_limit"
                            self._stop(pid)
                            hard_deadline = time.monotonic() + 2
        finally:
            sel.close()
            os.close(pidfd)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass
            if status is None:  # only on an exception above: never leave the group or a zombie behind
                _killpg(pid)
                _, status, rusage = os.wait4(pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        code = proc.returncode
        sig = -code if code < 0 else None
        if sig is None and self.exit_status_is_signal and code > 128 and (code - 128) in CRASH_SIGNALS:
            sig = code - 128
        if killed is None and sig is not None:
            cpu_used = rusage.ru_utime + rusage.ru_stime if rusage is not None else 0.0
            if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_used >= limits.cpu_seconds):
                killed = "cpu_time"
            else:
                killed = f"signal {_signal_name(sig)}"
        truncated = any(seen[k] > len(kept[k]) for k in kept)
        return CommandResult(exit_code=None if killed else code,
                             stdout=bytes(kept["stdout"]).decode("utf-8", errors="replace"),
                             stderr=bytes(kept["stderr"]).decode("utf-8", errors="replace"),
                             killed=killed, truncated=truncated, seconds=round(time.monotonic() - start, 4),
                             info={"stdout_bytes": seen["stdout"], "stderr_bytes": seen["stderr"]})


# --- what the sandboxes need in their child: namespaces, mounts, uids (Linux) ----------------------------------

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
_libc = ctypes.CDLL(None, use_errno=True)  # loaded here, never in a forked child


def unshare(flags: int) -> None:
    if _libc.unshare(ctypes.c_int(flags)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: None if s is None else s.encode())
    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm")


def private_tmp(keep: Sequence[str]) -> None:
    """In a fresh mount namespace: a new tmpfs on each world-writable place of ``SHARED_TMP``, with the folders of
    ``keep`` that lay under one bound back at their paths."""
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    for where in SHARED_TMP:
        if os.path.islink(where) or not os.path.isdir(where):
            continue
        inside = [k for k in keep if k == where or k.startswith(where.rstrip("/") + "/")]
        fds = [os.open(k, os.O_PATH | os.O_DIRECTORY) for k in inside]
        mount("tmpfs", where, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
        for k, fd in zip(inside, fds):
            os.makedirs(k, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", k, None, MS_BIND | MS_REC)
            os.close(fd)


PR_SET_CHILD_SUBREAPER = 36


def fork_reaper() -> None:
    """In the child, last thing before exec: fork. The new process puts itself in a process group of its own and
    returns (to exec the command); this one stays behind as a subreaper: it waits for the command, kills the
    command's group when the command ends or on SIGTERM (the runner's wall-time kill), reaps every process left to
    it and exits as the command did. Without it, what a command leaves behind (a killed background job, bwrap's
    pid 1 that outlives bwrap by a moment) becomes a zombie of the host's init, counted by ``RLIMIT_NPROC`` until
    init reaps it, which some container inits never do."""
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return  # no reaper: the runner kills the group itself
    group: list[int] = []  # the command's, once forked; a SIGTERM before that waits for it (see below)
    stopped: list[bool] = []

    def stop(*_) -> None:
        stopped.append(True)
        for pgid in group:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass

    signal.signal(signal.SIGTERM, stop)  # before the fork: a kill at once is not lost (exec resets it in the child)
    child = os.fork()
    if child == 0:
        os.setpgid(0, 0)
        return
    try:
        os.setpgid(child, child)  # also here, so that a kill right away finds the group
    except OSError:
        pass  # it did so itself and has exec'd already
    group.append(child)
    os.closerange(0, 65536)  # the pipes too (the error pipe first): this process never reports to the runner
    try:
        if stopped:
            stop()
        _reap(child, stop)
    finally:
        os._exit(255)


def _reap(child: int, stop: Callable[[], None]) -> None:
    """The reaper's loop: wait for ``child``, kill its group, reap everything, exit as ``child`` did."""
    while True:
        try:
            os.waitid(os.P_PID, child, os.WEXITED | os.WNOWAIT)  # ended; not reaped, so its pgid stays its own
            break
        except InterruptedError:
            continue
    stop()
    status = 0
    while True:
        try:
            done, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if done == child:
            status = st
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status))


def drop_to(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def map_user(uid: int, gid: int) -> None:
    """After ``unshare(CLONE_NEWUSER)`` as a non-root user: be the same uid/gid inside. ``uid``/``gid`` are the
    ones from before the unshare (after it, ``getuid()`` says the overflow uid until the map is written)."""
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


def pids_of_uid(uid: int) -> list[int]:
    """The live processes whose real uid is ``uid`` (from /proc; zombies, dead already, are left out)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                state = ""
                for line in f:
                    if line.startswith("State:"):
                        state = line.split()[1]
                    elif line.startswith("Uid:"):
                        if int(line.split()[1]) == uid and state != "Z":
                            found.append(int(entry))
                        break
        except (OSError, ValueError, IndexError):
            continue
    return found


def kill_uid(uid: int, gid: int, rounds: int = 20) -> bool:
    """SIGKILL every process of ``uid`` (as root): ``kill(-1)`` from a process of that uid, until none is left.
    Returns whether none is left."""
    for _ in range(rounds):
        if not pids_of_uid(uid):
            return True
        child = os.fork()
        if child == 0:  # only syscalls here, then _exit
            try:
                drop_to(uid, gid)
                os.kill(-1, signal.SIGKILL)  # every process this uid may signal, this one excepted
            finally:
                os._exit(0)
        os.waitpid(child, 0)
        for pid in pids_of_uid(uid):  # in case kill(-1) could not run: one by one
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)
    return not pids_of_uid(uid)

