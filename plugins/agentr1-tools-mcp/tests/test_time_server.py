"""A third-party server from the package index, ``mcp-server-time`` (the plugin's test extra installs it), as the
``time-mcp`` config starts it: its ``convert_time`` tool as the model sees it, the task's answers agreeing with the
server on every held-out row, and the task's expert episodes through ToolEnv."""

from __future__ import annotations

import asyncio
import importlib.util
import json

import pytest

from agentr1_core import tool_sources
from agentr1_core.config import load_config
from agentr1_core.envs import ToolEnv
from agentr1_core.mdp import Action
from agentr1_core.plugins import get_registry
from agentr1_core.testing.ci import missing
from agentr1_core.tools import call_tool
from agentr1_tools_mcp.examples.time_task import time_conversion_rows


@pytest.fixture
def time_env() -> ToolEnv:
    if importlib.util.find_spec("mcp_server_time") is None:
        missing("mcp-server-time is not installed (pip install -c constraints.txt "
                "-e 'plugins/agentr1-tools-mcp[test]')")
    cfg = load_config("time-mcp")
    tool_sources.configure(cfg, get_registry())
    return ToolEnv(tools=list(cfg.env.tools), system_prompt=cfg.env.system_prompt)


def test_the_time_servers_tool_as_the_model_sees_it(time_env):
    (tool,) = time_env.tools.values()
    assert tool.name == "convert_time" and tool.description == "Convert time between timezones"
    assert tool.parameters["required"] == ["source_timezone", "time", "target_timezone"]
    assert "Use 'UTC' as local timezone" in tool.parameters["properties"]["source_timezone"]["description"]
    assert json.dumps(tool.openai_schema()) in time_env.system_message()


def test_the_tasks_answers_are_the_servers_on_every_held_out_row(time_env):
    tool = time_env.tools["convert_time"]
    rows = time_conversion_rows("val", train_size=512, val_size=64)

    async def convert_all():
        calls = [call_tool(tool, json.loads(r["expert_actions"][0].removeprefix("<tool_call>")
                                            .removesuffix("</tool_call>"))["arguments"]) for r in rows]
        return await asyncio.gather(*calls)

    for row, result in zip(rows, asyncio.run(convert_all())):
        assert result.error is None, result.text
        target = json.loads(result.text)["target"]["datetime"]  # 2026-12-06T11:15:00+05:45
        assert target[11:16] == row["reward_model"]["ground_truth"], (row["prompt"], target)
    unknown = asyncio.run(call_tool(tool, {"source_timezone": "Asia/Tokio", "time": "10:00",
                                           "target_timezone": "UTC"}))
    assert unknown.error == "tool_error" and "No time zone found with key Asia/Tokio" in unknown.text


def test_an_expert_episode_ends_with_the_answer_after_the_servers_result(time_env):
    row = time_conversion_rows("train", train_size=1, val_size=0)[0]

    async def play():
        await time_env.reset(row)
        called = await time_env.step(Action(row["expert_actions"][0], [], []))
        answered = await time_env.step(Action(row["expert_actions"][1], [], []))
        return called, answered

    called, answered = asyncio.run(play())
    assert called.info["tool_errors"] == {} and row["reward_model"]["ground_truth"] in called.feedback
    assert answered.done and answered.info["answer"] == f"<answer>{row['reward_model']['ground_truth']}</answer>"
