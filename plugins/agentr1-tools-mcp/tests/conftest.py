"""Fixtures of the MCP plugin's tests: real MCP servers (the toolbox test server and the example calculator, over
stdio and over streamable HTTP on 127.0.0.1), sources started and closed around a test, the processes a test must
see gone, the console script, the real SmolLM2 tokenizer, and the Ray lock of the tests that start Ray.

The suite runs with ``--import-mode=importlib`` from the repository's root, where a test module cannot import this
file or a sibling: what the tests share are fixtures.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.register_assert_rewrite("agentr1_core.testing.fixtures")  # as when the root's conftest loads it first
from agentr1_core.testing.fixtures import ray_lock  # noqa: E402,F401 - the Ray tests of every folder take turns

SERVERS = Path(__file__).parent / "servers"
TOOLBOX = SERVERS / "toolbox_server.py"
CLI = shutil.which("agentr1-core") or str(Path(sys.executable).parent / "agentr1-core")


def toolbox_settings(*flags: str, **settings) -> dict:
    """The settings of a stdio toolbox server."""
    return {"command": "python", "args": [str(TOOLBOX), *flags], **settings}


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie waiting for its parent counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_until_gone(pids, seconds: float = 15.0) -> list[int]:
    """The pids still running after ``seconds`` (polled): [] when every one exited."""
    deadline = time.monotonic() + seconds
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if alive(p)]
    return left


def pids_where(proc_file: str, matches) -> list[int]:
    """The pids whose ``/proc/PID/<proc_file>`` (bytes) ``matches``; processes that end or hide it meanwhile are
    left out."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/{proc_file}", "rb") as fh:
                    if matches(fh.read()):
                        found.append(int(entry))
            except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
                pass
    return found


def children_of(pid: int) -> list[int]:
    """The pids whose parent is ``pid``."""
    return pids_where("stat", lambda stat: int(stat.rsplit(b")", 1)[1].split()[1]) == pid)


@pytest.fixture(scope="session")
def toolbox():
    """``toolbox(*flags, **settings)``: the ``mcp.servers`` entry of a stdio toolbox server; ``toolbox.path`` is its
    script, ``toolbox.module`` the script loaded (its ``TOOLS``), ``toolbox.servers`` the folder of test servers."""
    spec = importlib.util.spec_from_file_location("agentr1_mcp_test_toolbox", TOOLBOX)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    toolbox_settings.path, toolbox_settings.module, toolbox_settings.servers = TOOLBOX, module, SERVERS
    return toolbox_settings


def runs(pid: int, text: str) -> bool:
    """Whether the command line of ``pid`` holds ``text``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return text.encode() in cmdline.read()
    except (FileNotFoundError, ProcessLookupError):
        return False


def tagged(tag: str) -> list[int]:
    """The running processes whose environment holds ``AGENTR1_MCP_TEST_TAG=tag`` (a server a test started)."""
    wanted = f"AGENTR1_MCP_TEST_TAG={tag}".encode()
    return [p for p in pids_where("environ", lambda env: wanted in env.split(b"\0")) if alive(p)]


@pytest.fixture(scope="session")
def processes():
    """What the tests ask of processes: ``alive(pid)``, ``children_of(pid)``, ``wait_until_gone(pids)``,
    ``runs(pid, text)``, ``tagged(tag)``."""
    return SimpleNamespace(alive=alive, children_of=children_of, wait_until_gone=wait_until_gone, runs=runs,
                           tagged=tagged)


@pytest.fixture(scope="session")
def run_cli():
    """``run_cli(*args)``: the installed ``agentr1-core`` console script, its output captured."""

    def run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
        return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)

    run.path = CLI
    return run


@pytest.fixture
def start_source():
    """``start_source(servers)``: a started ``MCPToolSource``; every one is closed after the test."""
    from agentr1_tools_mcp.source import MCPToolSource

    started = []

    def start(servers: dict):
        source = MCPToolSource(servers)
        started.append(source)
        source.start()
        return source

    yield start
    for source in started:
        source.close()


@pytest.fixture
def http_toolbox():
    """A toolbox server over streamable HTTP on 127.0.0.1 (a free port), as ``(url, process)``."""
    process = subprocess.Popen([sys.executable, str(TOOLBOX), "--http"], stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}/mcp", process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def smol_tokenizer():
    """The real SmolLM2-135M-Instruct tokenizer (the core tests' fixture of the same name)."""
    from agentr1_core.models import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")


@pytest.fixture(autouse=True)
def no_source_left_running():
    """A test that started the core's sources (``tool_sources.active``) leaves none to the next."""
    yield
    from agentr1_core import tool_sources

    tool_sources.close_all()
