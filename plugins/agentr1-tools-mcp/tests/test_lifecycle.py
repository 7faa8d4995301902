"""Servers that die, and no server left behind: a stdio server that dies mid-call is started again once at the next
call and not after; an HTTP server that goes away is an error observation; ``close`` stops the servers; a server
whose parent is killed outright (SIGKILL) goes away with it, one that ignores the end of its input included; a real
``agentr1-core run`` stopped with SIGTERM leaves no server running."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from agentr1_core.tools import call_tool


def call(tool, arguments=None):
    return asyncio.run(call_tool(tool, arguments or {}))


def test_a_server_that_dies_is_started_again_once_at_the_next_call(start_source, toolbox, processes):
    source = start_source({"box": toolbox()})
    tools = {t.name: t for t in source.tools("box")}
    first = int(call(tools["whoami"]).text)
    died = call(tools["crash"])
    assert died.error == "server_unavailable"
    assert died.text.startswith("Error: crash: the MCP server box stopped during the call (its connection closed; "
                                "command: python ") and died.text.endswith("it is started again at the next call")
    assert processes.wait_until_gone([first]) == []
    second = int(call(tools["whoami"]).text)  # the next call started a new server
    assert second != first and processes.alive(second)
    again = call(tools["crash"])
    assert again.error == "server_unavailable" and again.text.endswith("it is not started again")
    for _ in range(2):  # from now on every call is an error observation, and nothing is started
        after = call(tools["echo"], {"text": "hi"})
        assert after.error == "server_unavailable"
        assert after.text.startswith("Error: echo: the MCP server box stopped again and is not restarted")
    assert processes.wait_until_gone([second]) == []
    assert [p for p in processes.children_of(os.getpid()) if processes.alive(p) and processes.runs(p, "toolbox")] == []


def test_an_http_server_that_goes_away_is_an_error_observation(start_source, http_toolbox):
    url, process = http_toolbox
    source = start_source({"box": {"url": url, "timeout": 5}})
    echo = source.tools("box/echo")[0]
    assert call(echo, {"text": "hi"}).text == "hi"
    process.kill()
    process.wait()
    gone = call(echo, {"text": "hi"})
    assert gone.error == "server_unavailable", gone.text
    assert gone.text.startswith("Error: echo: the MCP server box ")
    again = call(echo, {"text": "hi"})  # its one restart cannot reach it: still an observation, never an exception
    assert again.error == "server_unavailable" and "did not start again" in again.text, again.text


def test_close_stops_every_stdio_server_even_one_that_ignores_the_end_of_its_input(start_source, toolbox, processes):
    source = start_source({"polite": toolbox(), "stubborn": toolbox("--stubborn")})
    pids = [int(call(source.tools(f"{name}/whoami")[0]).text) for name in ("polite", "stubborn")]
    assert all(processes.alive(p) for p in pids)
    source.close()
    assert processes.wait_until_gone(pids, seconds=1) == []  # close waited for them: the stubborn one got SIGTERM
    source.close()  # twice is fine


HOLDER = textwrap.dedent("""
    import asyncio, sys, time
    from agentr1_core.tools import call_tool
    from agentr1_tools_mcp.source import MCPToolSource
    source = MCPToolSource({"box": {"command": "python", "args": [sys.argv[1], "--stubborn"]}})
    source.start()
    print(asyncio.run(call_tool(source.tools("box/whoami")[0], {})).text, flush=True)
    time.sleep(600)
""")


def test_a_server_dies_with_a_parent_killed_outright(toolbox, processes):
    """The server ignores the end of its input (``--stubborn``), so only the parent-death signal stops it."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(toolbox.path)], stdout=subprocess.PIPE, text=True)
    try:
        server = int(holder.stdout.readline())
        assert processes.alive(server) and server in processes.children_of(holder.pid)
        holder.kill()
        holder.wait()
        assert processes.wait_until_gone([server]) == [], "the server outlived its parent"
    finally:
        holder.kill()


TINY_RUN = """
base: tiny
mcp:
  servers:
    box:  # beside the native calculator; it ignores the end of its input: only a close or a signal stops it
      command: python
      args: [{toolbox}, --stubborn]
      env: {{AGENTR1_MCP_TEST_TAG: "{tag}"}}
env:
  tools: [calculator, mcp:box/echo]
trainer: {{total_steps: 50}}
"""


@pytest.mark.slow
def test_sigterm_to_a_real_run_leaves_no_server_running(tmp_path, toolbox, processes, run_cli):
    tag = uuid.uuid4().hex
    config = tmp_path / "tiny-mcp.yaml"
    config.write_text(TINY_RUN.format(tag=tag, toolbox=toolbox.path))
    run = subprocess.Popen([run_cli.path, "run", str(config), f"run_dir={tmp_path / 'run'}", "validation.before=false"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen: list[int] = []
        for line in run.stdout:  # the trainer's own server starts before [setup] (the checks' one is closed by then)
            if line.startswith("[setup]"):
                seen = processes.tagged(tag)
                break
        assert seen and all(p in processes.children_of(run.pid) for p in seen), seen
        time.sleep(1)
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=600)
        assert run.returncode == 128 + signal.SIGTERM, err[-2000:]
        assert processes.wait_until_gone(seen, seconds=5) == [] and processes.tagged(tag) == []
    finally:
        run.kill()
