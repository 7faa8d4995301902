"""The ``docker`` sandbox: its refusal for real (a client without a daemon, or no client), and the command lines
it builds, read from a fake ``docker`` on PATH that records its argv and runs ``exec``'s command on the host (so the
in-container wrapper's wall limit and group kill run for real). No test here needs a Docker daemon."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from agentr1_env_terminal.sandboxes.docker import NOT_INSTALLED, DockerSandbox

FAKE = f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_DOCKER_LOG"], "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[0] == "info":
    print("99.1.0")
elif args[0] == "run":
    print("c0ffee")
elif args[0] == "exec":
    i, env = 1, {{}}
    while args[i].startswith("-"):
        if args[i] in ("-w", "-e"):
            if args[i] == "-e":
                key, _, value = args[i + 1].partition("=")
                env[key] = value
            i += 2
        else:
            i += 1
    os.execvpe(args[i + 1], args[i + 1:], env)
"""


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    """A fake ``docker`` first on PATH; returns a function giving the argv lists it was called with."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "docker"
    exe.write_text(FAKE)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    log = tmp_path / "docker.log"
    log.write_text("")
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    return lambda: [json.loads(line) for line in log.read_text().splitlines()]


def test_refused_for_real_without_a_daemon():
    availability = DockerSandbox.check()
    if availability.ok:
        pytest.skip(f"a Docker daemon is reachable here ({availability.isolation}): the refusal cannot be tested")
    assert "\n" not in availability.isolation
    assert availability.isolation.startswith(("no Docker daemon reachable: ", "docker is not installed"))


def test_refused_without_a_client(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert DockerSandbox.check() == type(DockerSandbox.check())(False, NOT_INSTALLED)


def test_fake_docker_check_start_run_close(fake_docker, tmp_path):
    assert DockerSandbox.check().ok and "99.1.0" in DockerSandbox.check().isolation
    box = DockerSandbox(image="img:1", memory_mb=512, processes=32, cpu_seconds=5, file_size_mb=8, root=str(tmp_path))
    box.start()
    folder = box.host_path("app").parent
    run = [call for call in fake_docker() if call[0] == "run"][0]
    assert run == ["run", "-d", "--network", "none", "--memory", "512m", "--memory-swap", "512m", "--pids-limit",
                   "32", "--cpus", "1.0", "--ulimit", "cpu=5:6", "--ulimit", f"fsize={8 * 1024 * 1024}",
                   "--ulimit", "core=0", "--label", "agentr1.sandbox=1",
                   "-v", f"{folder}/app:/app", "-v", f"{folder}/logs:/logs", "-v", f"{folder}/solution:/solution",
                   "-v", f"{folder}/tests:/tests", "-w", "/app", "img:1", "sleep", "infinity"]
    assert box.path("tests") == "/tests"
    result = box.run("echo hi; echo $HOME $GIVEN; echo err >&2", env={"GIVEN": "yes"})
    assert (result.exit_code, result.stdout, result.stderr) == (0, "hi\n/app yes\n", "err\n")
    exec_call = fake_docker()[-1]
    assert exec_call[:3] == ["exec", "-w", "/app"] and "c0ffee" in exec_call
    assert exec_call[-3:] == ["bash", "-c", "echo hi; echo $HOME $GIVEN; echo err >&2"]
    assert "-e" in exec_call and "HOME=/app" in exec_call and "GIVEN=yes" in exec_call
    assert box.run("cat", stdin="in\n").stdout == "in\n" and "-i" in fake_docker()[-1]
    box.close()
    box.close()
    assert [call for call in fake_docker() if call[0] == "rm"] == [["rm", "-f", "c0ffee"]]
    assert not folder.exists()


def test_fake_docker_wall_limit_and_background_jobs(fake_docker, tmp_path, gone):
    box = DockerSandbox(wall_seconds=1, root=str(tmp_path))
    box.start()
    try:
        result = box.run("sleep 30.125")
        assert result.killed == "wall_time" and result.seconds < 15  # not the sleep's 30 s
        background = box.run("sleep 30.375 & echo bg")
        assert background.stdout == "bg\n" and background.seconds < 15  # did not wait for the sleep
        assert gone("sleep 30.125") and gone("sleep 30.375")
    finally:
        box.close()


def test_fake_docker_folders_are_fixed_at_start(fake_docker, tmp_path):
    box = DockerSandbox(root=str(tmp_path))
    box.host_path("data")  # before start: mounted too
    box.start()
    try:
        assert any(arg.endswith("/data:/data") for arg in fake_docker()[-1])
        with pytest.raises(ValueError, match="not mounted at start"):
            box.host_path("later")
    finally:
        box.close()
