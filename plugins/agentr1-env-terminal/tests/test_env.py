"""The terminal env end to end with the real local sandbox and generated tasks: the expert's episode passes the
task's tests, an agent that does nothing fails them, tools see the task's files and not the tests, errors are
observations, and every episode's sandbox is gone after close."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentr1_core.mdp import Action
from agentr1_core.plugins import get_registry
from agentr1_env_terminal.env import DONE


@pytest.fixture(scope="module")
def val_rows():
    return get_registry().build("dataset", "terminal_tasks", {"split": "val"})


def make_env(row, **params):
    cfg = {"sandbox": "local", **params, **row["env_kwargs"]}
    return get_registry().build("env", "terminal", cfg)


def call(command: str) -> Action:
    text = '<tool_call>' + json.dumps({"name": "bash", "arguments": {"command": command}}) + '</tool_call>'
    return Action(text, [1], [0.0])


async def play(env, row, actions):
    env.load_expert(row)
    await env.reset(row)
    results = []
    try:
        for action in actions:
            result = await env.step(action)
            results.append(result)
            if result.done or result.truncated:
                break
    finally:
        await env.close()
    return results


def expert_actions(env, row):
    env.load_expert(row)
    actions = []
    while (text := env.expert_action()) is not None:
        actions.append(Action(text, [1], [0.0]))
    return actions


def test_the_expert_passes_every_family_and_doing_nothing_fails(val_rows):
    seen = set()
    for row in val_rows:
        family = row["data_source"]
        if family in seen:
            continue
        seen.add(family)
        env = make_env(row)
        actions = expert_actions(env, row)
        assert actions[-1].text == DONE and len(actions) >= 2
        results = asyncio.run(play(env, row, actions))
        assert results[-1].done and results[-1].reward == 1.0, (family, results[-1].info)
        assert results[-1].info["tests"]["exit_code"] == 0
        lazy = asyncio.run(play(make_env(row), row, [Action("I am done.", [1], [0.0])]))
        assert lazy[-1].done and lazy[-1].reward == 0.0 and lazy[-1].info["tests"]["exit_code"] == 1, family
    assert len(seen) == 8


def test_tools_see_the_tasks_files_but_not_its_tests_and_errors_are_observations(val_rows):
    row = val_rows[0]
    env = make_env(row, max_turns=5)
    results = asyncio.run(play(env, row, [
        call("ls -a; ls /tests 2>&1; echo $LOGS_DIR"),
        Action('<tool_call>{"name": "bash", "arguments": {}}</tool_call>', [1], [0.0]),
        call("sleep 30"),
        Action(DONE, [1], [0.0]),
    ]))
    listing = results[0].info["calls"][0]["output"]
    assert "docs" in listing and "test.sh" not in listing and "[exit code 0]" in listing
    assert results[1].info["tool_errors"] == {"bad_arguments": 1}
    assert results[2].info["calls"][0]["error"] == "timeout"
    assert results[3].done and results[3].reward == 0.0


def test_the_last_turn_runs_the_tests_and_the_sandbox_is_removed(val_rows):
    row = val_rows[0]
    env = make_env(row, max_turns=1)
    results = asyncio.run(play(env, row, [call("true")]))
    assert results[-1].truncated and "tests" in results[-1].info
    assert env.box is None


def test_python_tool_runs_in_the_sandbox_and_without_a_sandbox_refuses():
    from agentr1_env_terminal.tools import PythonTool
    from agentr1_core.tools import call_tool

    alone = asyncio.run(call_tool(PythonTool(), {"code": "print(1)"}))
    assert alone.error == "no_sandbox"
    env = get_registry().build("env", "terminal", {"tools": ["python"], "sandbox": "local"})
    row = {"prompt": "compute"}
    program = 'import os; print(6*7, os.getcwd() != "/")'
    code = "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": program}}) + "</tool_call>"
    results = asyncio.run(play(env, row, [Action(code, [1], [0.0]), Action("<answer>42</answer>", [1], [0.0])]))
    assert results[0].info["calls"][0]["output"].startswith("42 True")
    assert results[1].done and "tests" not in results[1].info


def test_an_unavailable_sandbox_is_refused_when_the_env_is_built(val_rows):
    with pytest.raises(Exception, match="docker"):
        make_env(val_rows[0], sandbox="docker")


def _run_cli(*args):
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    exe = shutil.which("agentr1-core") or str(Path(sys.executable).parent / "agentr1-core")
    return subprocess.run([exe, "run", "terminal-cpu", "run_dir=/nonexistent-run-dir-is-not-made", *args],
                          capture_output=True, text=True, timeout=300)


def test_an_unusable_or_unknown_sandbox_stops_the_run_before_the_model_loads():
    refused = _run_cli("env.sandbox=docker")
    assert refused.returncode == 2, refused.stderr[-2000:]
    lines = [ln for ln in refused.stderr.splitlines() if "docker" in ln]
    assert lines and "cannot run here" in lines[0] and "Loading weights" not in refused.stderr + refused.stdout
    unknown = _run_cli("env.sandbox=lokal")
    assert unknown.returncode == 2
    assert "local" in unknown.stderr and "bwrap" in unknown.stderr, unknown.stderr[-2000:]


def test_the_isolation_in_force_is_printed_once_per_process(capsys):
    from agentr1_core.sandbox import availability_of
    from agentr1_env_terminal.sandboxes.local import LocalSandbox

    class Probe(LocalSandbox):
        pass

    first = availability_of(Probe, "local")
    availability_of(Probe, "local")
    out = capsys.readouterr().out
    assert out.count("[sandbox] local: ") == 1 and first.isolation in out
