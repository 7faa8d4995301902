"""What decides a CLI agent's reward, and the commands it runs: the ``cli_agent`` flow's helpers.

* ``run_command``: a command in a new session (its own process group) with a time limit; at the limit, and
  when the command ends, the whole group is killed, so nothing it started in the background outlives it (a process
  that made a session of its own with ``setsid`` escapes, as it would any process-group kill). Its output is kept
  as the last lines of each stream (``Tail``).
* ``run_verifier``: the config's ``verifier`` command after the agent exits; the reward is the number in
  ``reward_file`` when it wrote one, else the number on its last stdout line, else 1.0 for exit code 0 and 0.0
  otherwise.
* ``harbor``: the optional ``agentr1-env-terminal`` plugin (Harbor task folders, sandboxes, their tests), imported
  only when a row names a task; a missing plugin is one line naming the ``pip install``.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from agentr1_core.errors import ConfigError

LINE_CHARS = 1000  # a kept line longer than this is cut
INSTALL_TERMINAL = "pip install ./plugins/agentr1-env-terminal"


def harbor() -> Any:
    """``agentr1_env_terminal.harbor``, or a ``ConfigError`` naming the install when the plugin is missing."""
    try:
        from agentr1_env_terminal import harbor as module
    except ImportError as exc:
        raise ConfigError(f"the row names a Harbor task (env_kwargs.task_dir) but agentr1-env-terminal is not "
                          f"installed ({exc}): {INSTALL_TERMINAL}") from None
    return module


def task_dir(row: Mapping[str, Any]) -> str | None:
    """The Harbor task folder a row names (``env_kwargs.task_dir``, as the terminal datasets give), or None."""
    kwargs = row.get("env_kwargs")
    value = kwargs.get("task_dir") if isinstance(kwargs, Mapping) else None
    return str(value) if value else None


class Tail:
    """The last ``lines`` lines of a stream (each cut at ``LINE_CHARS``), and how many there were in all."""

    def __init__(self, lines: int) -> None:
        self.lines: deque[str] = deque(maxlen=max(1, int(lines)))
        self.total = 0
        self._partial = ""

    def feed(self, chunk: str) -> None:
        text = self._partial + chunk
        *complete, self._partial = text.split("\n")
        if len(self._partial) > 4 * LINE_CHARS:  # a huge line without a newline: keep its end only
            self._partial = self._partial[-LINE_CHARS:]
        for line in complete:
            self._add(line)

    def _add(self, line: str) -> None:
        self.total += 1
        self.lines.append(line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + " [cut]")

    def close(self) -> None:
        if self._partial:
            self._add(self._partial)
            self._partial = ""

    def text(self) -> str:
        dropped = self.total - len(self.lines)
        head = [f"[{dropped} earlier lines not kept]"] if dropped > 0 else []
        return "\n".join(head + list(self.lines))

    def last_line(self) -> str:
        """The last non-empty line (a CLI agent's final answer)."""
        return next((line.strip() for line in reversed(self.lines) if line.strip()), "")


@dataclass
class Finished:
    """How a command ended: ``exit_code`` (negative: killed by that signal), ``timed_out``, its output's tails."""

    exit_code: int | None
    timed_out: bool
    seconds: float
    stdout: Tail
    stderr: Tail
    info: dict[str, Any] = field(default_factory=dict)


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _pump(stream: asyncio.StreamReader | None, tail: Tail) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        tail.feed(chunk.decode("utf-8", errors="replace"))
    tail.close()


async def run_command(argv: list[str], cwd: str | os.PathLike, env: Mapping[str, str], timeout: float,
                      lines: int = 50, not_counted: Callable[[], float] | None = None) -> Finished:
    """``argv`` in ``cwd`` with exactly ``env``, in a new session; killed with its process group once it has run
    ``timeout`` seconds (wall time less ``not_counted()``, the seconds its model calls spent in the gateway), and
    its group killed when it exits. A program that cannot be started is exit code 127 with the reason on its
    stderr tail (as a shell reports it)."""
    out, err = Tail(lines), Tail(lines)
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(*argv, cwd=str(cwd), env=dict(env), start_new_session=True,
                                                    stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except OSError as exc:
        err.feed(f"cannot start {argv[0]!r}: {exc}\n")
        err.close()
        return Finished(127, False, 0.0, out, err)
    pumps = asyncio.gather(_pump(proc.stdout, out), _pump(proc.stderr, err))
    exited = asyncio.ensure_future(proc.wait())
    timed_out = False
    try:
        while True:
            left = timeout - (time.monotonic() - started - (not_counted() if not_counted else 0.0))
            if left <= 0:
                timed_out = True
                break
            finished, _ = await asyncio.wait({exited}, timeout=left)
            if finished:
                break
    finally:  # also when the episode is cancelled: nothing of the command's group runs on
        kill_group(proc.pid)
        await exited
    try:  # the group is dead, so its pipes close; a process that left the group may still hold them
        await asyncio.wait_for(pumps, 5.0)
    except asyncio.TimeoutError:
        pumps.cancel()
    return Finished(proc.returncode, timed_out, time.monotonic() - started, out, err)


def read_number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


async def run_verifier(argv: list[str], cwd: Path, env: Mapping[str, str], timeout: float,
                       reward_file: str | None, lines: int = 50) -> tuple[float, dict[str, Any]]:
    """The verifier's reward and what to record of it (``reward_from``: ``reward_file``, ``last line`` or ``exit
    code``). ``reward_file`` is relative to ``cwd`` (the agent's working folder) unless absolute; a stale one is
    removed before the verifier runs."""
    target = (cwd / reward_file) if reward_file else None
    if target is not None:
        target.unlink(missing_ok=True)
    done = await run_command(argv, cwd, env, timeout, lines)
    info: dict[str, Any] = {"exit_code": done.exit_code, "timed_out": done.timed_out,
                            "stdout": done.stdout.text(), "stderr": done.stderr.text()}
    reward = None
    if target is not None and target.is_file():
        reward = read_number(target.read_text(errors="replace"))
        info["reward_from"] = "reward_file" if reward is not None else "exit code (reward_file holds no number)"
    if reward is None and not done.timed_out:
        reward = read_number(done.stdout.last_line())
        if reward is not None:
            info["reward_from"] = "last line"
    if reward is None:
        reward = 1.0 if done.exit_code == 0 and not done.timed_out else 0.0
        info.setdefault("reward_from", "exit code")
    info["reward"] = reward
    return reward, info
