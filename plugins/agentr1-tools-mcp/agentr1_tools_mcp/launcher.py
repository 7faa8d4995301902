"""Start an MCP server so that it dies with the process that started it: ``python -m agentr1_tools_mcp.launcher
PARENT_PID COMMAND [ARGS...]`` asks Linux to kill it when its parent dies (``PR_SET_PDEATHSIG``), then becomes the
command (``exec``: no process stays in between, and the server's stdin, stdout and stderr are the launcher's).

The MCP SDK starts a stdio server in a session of its own and stops it when its client closes; a parent killed
outright (SIGKILL, the out-of-memory killer) closes nothing, and a server that does not stop at the end of its
input would run on. The signal is sent when the thread that started the server ends: the source's event-loop
thread, which lives as long as the source. Elsewhere than Linux the launcher only runs the command.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Ask for SIGKILL when the parent dies; exit at once if it died before the request took effect."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent was gone before the request: nobody is left to serve
        os._exit(1)


def main(argv: list[str]) -> None:
    if len(argv) < 2 or not argv[0].isdigit():
        sys.exit("usage: python -m agentr1_tools_mcp.launcher PARENT_PID COMMAND [ARGS...]")
    die_with_parent(int(argv[0]))
    command = argv[1]
    path = shutil.which(command) if os.sep not in command else command
    if path is None:
        sys.exit(f"command not found: {command}")
    try:
        os.execv(path, [command, *argv[2:]])
    except OSError as exc:
        sys.exit(f"cannot run {command}: {exc.strerror}")


if __name__ == "__main__":
    main(sys.argv[1:])
