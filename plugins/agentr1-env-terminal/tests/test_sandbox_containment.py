"""Containment of the host sandboxes (``local``, ``bwrap``), each case run for real and the host checked afterwards:
crashes, wall and CPU limits, background and escaped processes, huge and binary output, fork bombs, network,
writes outside the sandbox, the environment, two sandboxes side by side, close(), concurrent commands; and the
sandboxes built through the registry's entry points."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentr1_core.sandbox import SandboxUnavailable, build_sandbox
from agentr1_env_terminal.sandboxes.process import pids_of_uid


def test_crash_is_reported_and_the_sandbox_goes_on(make_sandbox):
    box = make_sandbox()
    result = box.run("kill -SEGV $$")
    assert result.exit_code is None and result.killed == "signal SIGSEGV"
    assert box.run("echo alive").stdout == "alive\n"


def test_wall_limit_kills_the_command(make_sandbox, gone):
    box = make_sandbox(wall_seconds=5)
    result = box.run("sleep 60.25")
    assert result.killed == "wall_time" and result.exit_code is None
    assert result.seconds < 30  # not the sleep's 60 s
    assert gone("sleep 60.25")
    assert box.run("sleep 1; echo slept").stdout == "slept\n"
    shorter = box.run("sleep 1; echo slept", timeout=0.3)  # timeout= lowers the limit for one command
    assert shorter.killed == "wall_time" and shorter.stdout == ""


def test_cpu_limit_kills_a_busy_loop(make_sandbox):
    box = make_sandbox(cpu_seconds=1, wall_seconds=8)
    result = box.run("while :; do :; done")
    assert result.killed == "cpu_time", result  # not "wall_time": the CPU limit bit first


def test_background_process_does_not_outlive_the_command(make_sandbox, gone):
    box = make_sandbox()
    result = box.run("sleep 300.5 & echo started")
    assert result.stdout == "started\n" and result.exit_code == 0
    assert result.seconds < 150  # the command did not wait for its background sleep
    assert gone("sleep 300.5")


def test_many_quick_commands_do_not_use_up_the_process_limit(make_sandbox, gone):
    box = make_sandbox(processes=8)  # what a command leaves (zombies included) would count against the next ones
    results = [box.run("sleep 30.625 & true" if i % 2 else "true") for i in range(24)]
    assert [r.exit_code for r in results] == [0] * 24, [r.describe() for r in results if r.exit_code != 0][:1]
    assert gone("sleep 30.625")


def test_close_kills_what_escaped_its_group(make_sandbox, sandbox_cls, gone):
    box = make_sandbox()
    if box.uid is None and sandbox_cls.name == "local":
        pytest.skip("not root here: local has no uid of its own to find an escaped process by (bwrap's pid "
                    "namespace still ends it)")
    box.run("setsid sleep 300.75 >/dev/null 2>&1 < /dev/null &")
    box.close()
    assert gone("sleep 300.75")


def test_huge_output_is_capped(make_sandbox):
    box = make_sandbox(output_bytes=4096)
    result = box.run("yes | head -c 50000000")
    assert result.truncated
    assert len(result.stdout) <= 4096 and result.stdout.startswith("y\ny\n")


def test_fork_bomb_is_contained(make_sandbox, gone):
    box = make_sandbox(processes=16, wall_seconds=3)
    if box.uid is None:
        pytest.skip("not root here: the process limit counts the caller's own processes, no uid of its own")
    flood = make_sandbox(processes=16, wall_seconds=1).run("for i in $(seq 40); do sleep 30.5 & done; wait")
    assert "Resource temporarily unavailable" in flood.stderr  # the limit bit
    with ThreadPoolExecutor(1) as pool:
        bomb = pool.submit(box.run, "b(){ b | b & }; b; sleep 1.5; echo waited")
        time.sleep(0.7)  # the bomb at its peak
        assert len(pids_of_uid(box.uid)) <= 16
        assert subprocess.run(["true"]).returncode == 0  # the host can still fork
        result = bomb.result()
    assert result.stdout == "waited\n" or result.killed
    uid = box.uid
    box.close()
    assert pids_of_uid(uid) == []
    assert gone("sleep 30.5")


def test_binary_output_is_decoded_with_replacement(make_sandbox):
    box = make_sandbox()
    result = box.run("head -c 2000 /dev/urandom; printf '\\377\\376' >&2")
    assert result.exit_code == 0 and result.info["stdout_bytes"] == 2000
    assert isinstance(result.stdout, str) and "\ufffd" in result.stderr


def test_no_network_to_the_host(make_sandbox, sandbox_cls):
    line = sandbox_cls.check().isolation
    if "network: NOT isolated" in line:
        pytest.skip(f"network is not isolated here: {line}")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    try:
        box = make_sandbox()
        result = box.run(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected")
        assert result.exit_code != 0 and "connected" not in result.stdout
        with pytest.raises(socket.timeout):
            server.accept()
        assert "connected" in make_sandbox(network=True).run(
            f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected").stdout  # the probe itself works
    finally:
        server.close()


def test_writes_outside_fail_and_inside_work(make_sandbox, tmp_path):
    box = make_sandbox()
    name = f"agentr1-probe-{uuid.uuid4().hex[:8]}"
    refused = [tmp_path / name, Path.home() / name, Path("/etc") / name]
    for target in refused:
        result = box.run(f"echo x > {target}")
        assert result.exit_code != 0, (target, result)
        assert not target.exists()
    box.run(f"echo x > /tmp/{name}")  # may land in the sandbox's own /tmp: never in the host's
    assert not Path("/tmp", name).exists()
    assert box.run("echo inside > made.txt && cat made.txt").stdout == "inside\n"
    assert (box.host_path("app") / "made.txt").read_text() == "inside\n"
    assert box.run("echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"").stdout == "t\n"


def test_environment_is_stripped(make_sandbox, monkeypatch):
    monkeypatch.setenv("AGENTR1_PROBE_SECRET", "leaked")
    box = make_sandbox()
    result = box.run("env", env={"GIVEN": "yes"})
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines()}
    assert "AGENTR1_PROBE_SECRET" not in names and "leaked" not in result.stdout
    assert {"PATH", "HOME", "LANG", "TMPDIR", "GIVEN"} <= names <= {"PATH", "HOME", "LANG", "TMPDIR", "GIVEN",
                                                                   "PWD", "SHLVL", "_"}
    assert f"HOME={box.path('app')}" in result.stdout


def test_two_sandboxes_do_not_see_each_other(make_sandbox):
    a, b = make_sandbox(), make_sandbox()
    a.run("echo secret > mine.txt")
    theirs = a.host_path("app")
    result = b.run(f"cat {theirs}/mine.txt; ls {theirs}")
    assert "secret" not in result.stdout and result.exit_code != 0
    assert b.run("ls").stdout == ""


def test_folders_paths_stdin_and_argv(make_sandbox, sandbox_cls):
    box = make_sandbox()
    assert box.run("pwd").stdout.strip() == box.path("app")
    if sandbox_cls.name == "bwrap":
        assert [box.path(n) for n in ("app", "tests", "logs", "solution")] == ["/app", "/tests", "/logs", "/solution"]
    (box.host_path("tests") / "test.sh").write_text("echo from-tests\n")  # asked for after start
    assert box.run(f"bash {box.path('tests')}/test.sh").stdout == "from-tests\n"
    assert box.run("cat", stdin="hello\n").stdout == "hello\n"
    assert box.run(["printf", "%s|", "a b", "$HOME"]).stdout == "a b|$HOME|"
    assert box.run("python3 -c 'print(6 * 7)'").stdout == "42\n"  # python fits the default memory limit
    assert box.run("exit 3").exit_code == 3


def test_close_removes_the_folder_and_is_idempotent(sandbox_cls):
    box = sandbox_cls()
    box.start()
    folder = box.host_path("app").parent
    box.run("mkdir -p deep/er && touch deep/er/f && chmod 000 deep")
    box.close()
    assert not folder.exists()
    box.close()
    with pytest.raises(RuntimeError):
        box.run("true")


def test_concurrent_commands_on_one_sandbox(make_sandbox):
    box = make_sandbox()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: box.run(f"echo start-{i}; sleep 0.2; echo end-{i} >&2"), range(8)))
    for i, result in enumerate(results):
        assert (result.exit_code, result.stdout, result.stderr) == (0, f"start-{i}\n", f"end-{i}\n")
    assert threading.active_count() < 20


# --- through the registry (the installed entry points) --------------------------------------------------------

def test_build_local_through_the_registry():
    box = build_sandbox("local")
    try:
        assert type(box).__name__ == "LocalSandbox"
        box.start()
        assert box.run("echo ok").stdout == "ok\n"
    finally:
        box.close()


def test_build_bwrap_through_the_registry():
    from agentr1_env_terminal.sandboxes.bwrap import BwrapSandbox
    availability = BwrapSandbox.check()
    if not availability.ok:
        pytest.skip(f"bwrap cannot run here: {availability.isolation}")
    box = build_sandbox({"name": "bwrap", "memory_mb": 512})
    try:
        assert type(box).__name__ == "BwrapSandbox" and box.limits.memory_mb == 512
        box.start()
        assert box.run("echo ok").stdout == "ok\n"
    finally:
        box.close()


def test_build_docker_is_refused_in_one_line():
    from agentr1_env_terminal.sandboxes.docker import DockerSandbox
    if DockerSandbox.check().ok:
        pytest.skip("a Docker daemon is reachable here: the refusal cannot be tested")
    with pytest.raises(SandboxUnavailable) as info:
        build_sandbox("docker")
    message = str(info.value)
    assert "\n" not in message and message.startswith("sandbox 'docker' cannot run here: ")
    assert "docker" in message.lower()


def test_check_lines_say_what_is_in_force(sandbox_cls):
    availability = sandbox_cls.check()
    assert availability.ok and "\n" not in availability.isolation
    if os.geteuid() == 0:
        assert "own unprivileged uid per sandbox" in availability.isolation


def test_bwrap_refusals_are_one_line(monkeypatch):
    from agentr1_env_terminal.sandboxes.bwrap import NOT_INSTALLED, BwrapSandbox
    empty = tempfile.mkdtemp(prefix="agentr1-nobwrap-")
    try:
        monkeypatch.setenv("PATH", empty)
        assert BwrapSandbox.check().ok is False and BwrapSandbox.check().isolation == NOT_INSTALLED
        fake = Path(empty) / "bwrap"  # on PATH, but cannot make a sandbox: its own last line is the reason
        fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
        os.chmod(empty, 0o755)
        fake.chmod(0o755)
        availability = BwrapSandbox.check()
        assert availability == type(availability)(
            False, "bwrap cannot make a sandbox here: bwrap: setting up uid map: Permission denied")
    finally:
        shutil.rmtree(empty)
