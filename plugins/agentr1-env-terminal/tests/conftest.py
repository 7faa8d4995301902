"""Shared fixtures of the plugin's tests: every sandbox this machine can run (skipped with check()'s own line where
it cannot), a factory that starts one with given limits and closes it afterwards, a /proc scan (``gone``), and
``sandbox_factory``: the ``local`` sandbox, in which the task tests run the generated tasks as the env does.
Fixtures, not imports: the suite runs with ``--import-mode=importlib``, where test folders are not on sys.path."""

from __future__ import annotations

import os

import pytest

from agentr1_env_terminal.sandboxes.bwrap import BwrapSandbox
from agentr1_env_terminal.sandboxes.local import LocalSandbox

HOST_SANDBOXES = {"local": LocalSandbox, "bwrap": BwrapSandbox}


@pytest.fixture(params=sorted(HOST_SANDBOXES))
def sandbox_cls(request):
    cls = HOST_SANDBOXES[request.param]
    availability = cls.check()
    if not availability.ok:
        pytest.skip(f"{request.param} sandbox cannot run here: {availability.isolation}")
    return cls


@pytest.fixture
def make_sandbox(sandbox_cls):
    """``make_sandbox(**limits)``: a started sandbox of the parametrized kind, closed at the end of the test."""
    made = []

    def make(**params):
        box = sandbox_cls(**params)
        box.start()
        made.append(box)
        return box

    yield make
    for box in made:
        box.close()


def pids_running(text: str) -> list[int]:
    """The processes whose command line contains ``text`` (zombies, with an empty command line, do not count)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry))
    return found


def _gone(text: str, within: float = 1.0) -> bool:
    """Whether no process runs ``text`` by ``within`` seconds from now (a dying pid namespace takes a few ms)."""
    import time

    deadline = time.monotonic() + within
    while pids_running(text):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def gone():
    """``gone(text, within=1.0)``: whether no process runs ``text`` by ``within`` seconds from now."""
    return _gone


@pytest.fixture
def sandbox_factory():
    """What the task checks start one sandbox per task with: the real ``local`` sandbox."""
    return LocalSandbox
