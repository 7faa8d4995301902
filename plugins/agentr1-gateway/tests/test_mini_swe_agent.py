"""mini-swe-agent (from the package index, unchanged, in .venv-mini) as a ``cli_agent`` harness, through the shipped
``terminal-mini-swe-agent`` config: with the tasks' solutions as the expert's answers it solves generated terminal
tasks (its own bash tool, its submit command last, the tasks' tests give reward 1); a model that never calls the
tool gets mini's format errors and reward 0, not a dead run; a call past max_turns is refused and mini stops at
once instead of retrying. The harness is found by $AGENTR1_MINI_SWE_AGENT or at .venv-mini/bin/mini (built by
scripts/setup_mini_swe_agent.sh, which CI runs)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from agentr1_core.errors import ConfigError
from agentr1_core.flows import FlowContext
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.rollout.driver import rollout_async
from agentr1_gateway.cli_flow import CLIAgentFlow

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@pytest.fixture(scope="module")
def flow_params(mini_program):
    """The shipped config's agent_flow, with mini found where the setup script puts it."""
    from omegaconf import OmegaConf

    from agentr1_core.config import load_config

    program = mini_program
    before = os.environ.get("AGENTR1_MINI_SWE_AGENT")
    os.environ["AGENTR1_MINI_SWE_AGENT"] = program
    try:
        params = OmegaConf.to_container(load_config("terminal-mini-swe-agent").agent_flow, resolve=True)
    finally:
        if before is None:
            os.environ.pop("AGENTR1_MINI_SWE_AGENT")
        else:
            os.environ["AGENTR1_MINI_SWE_AGENT"] = before
    assert params.pop("name") == "cli_agent" and params["command"][0] == program
    return params


@pytest.fixture(scope="module")
def terminal_rows(terminal_rows_of):
    return terminal_rows_of(("count", "rename", "csv_sum"))  # one task of each of three families


def run(rows, ctx, params):
    return asyncio.run(rollout_async(rows, 1, lambda: CLIAgentFlow(ctx, **params), progress=False))


def context(engine=None, tokenizer=None, policy="model", max_turns=4):
    return FlowContext(engine=engine, tokenizer=tokenizer, sampling=SamplingParams(max_new_tokens=64),
                       max_turns=max_turns, policy=policy, env_config={"name": "terminal", "sandbox": "local"})


def test_the_config_s_harness_files_are_in_the_installed_package(flow_params):
    config = Path(flow_params["command"][flow_params["command"].index("--config") + 1])
    assert config.is_file() and "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in config.read_text()
    assert Path(flow_params["env"]["MSWEA_GLOBAL_CONFIG_DIR"]).is_dir()
    assert not (Path(flow_params["env"]["MSWEA_GLOBAL_CONFIG_DIR"]) / ".env").exists()  # no keys, no model named


def test_mini_solves_terminal_tasks_with_their_solutions_then_its_submit_command(
        tokenizer, terminal_rows, flow_params):
    from agentr1_env_terminal.harbor import read_task, solution_commands

    trajs = run(terminal_rows, context(tokenizer=tokenizer, policy="expert"), flow_params)
    for row, traj in zip(terminal_rows, trajs):
        commands = solution_commands(read_task(row["env_kwargs"]["task_dir"]))
        assert traj.termination == "done" and traj.info["exit_code"] == 0, traj.info
        assert traj.final_reward == 1.0 and traj.info["tests"]["reward"] == 1.0, traj.info
        assert len(traj.steps) == len(commands) + 1
        assert json.dumps(commands[0]) in traj.steps[0].action_text
        assert json.dumps(SUBMIT) in traj.steps[-1].action_text and traj.steps[-1].done
        # what mini showed the model: its own system prompt (our harness file) with its bash tool, then the task
        first = tokenizer.decode(traj.steps[0].prompt_ids)
        assert "Do the task with the bash tool" in first and row["prompt"] in first
        assert '"name": "bash"' in first and "Execute a bash command" in first  # mini's tool, not the env's
        # the command's output came back in mini's observation template, as the next prompt's last message
        assert "[exit code 0]" in tokenizer.decode(traj.steps[1].prompt_ids)
        assert traj.steps[1].info["requested_model"] == "agentr1-policy"  # -m openai/{model}, LiteLLM's prefix off


def test_a_model_that_never_calls_the_tool_gets_mini_s_format_errors_and_reward_0(
        tokenizer, scripted, terminal_rows, flow_params):
    engine = scripted(["I think the answer is 3."])
    [traj] = run(terminal_rows[:1], context(engine, tokenizer), flow_params)
    assert traj.termination == "done" and traj.final_reward == 0.0, traj.info
    assert traj.info["tests"]["exit_code"] != 0
    assert len(traj.steps) == 3  # mini's max_consecutive_format_errors (3), then it exits
    second = tokenizer.decode(traj.steps[1].prompt_ids)
    assert "No tool calls found" in second and SUBMIT in second  # mini's error through our format_error_template


def test_a_call_past_max_turns_is_refused_and_mini_stops_without_retrying(
        tokenizer, scripted, terminal_rows, flow_params):
    call = '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'
    [traj] = run(terminal_rows[:1], context(scripted([call]), tokenizer, max_turns=2), flow_params)
    assert traj.termination == "max_turns" and len(traj.steps) == 2 and traj.steps[-1].truncated, traj.info
    assert "RateLimitError" in traj.info["stderr"]
    # mini's own retries (10 attempts, 4 to 60 s apart) would outlast the flow's timeout and be killed there;
    # MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT=1 turns them off, so mini exits by itself
    assert "error" not in traj.info and traj.info["exit_code"] is not None and traj.info["exit_code"] >= 0


def test_a_harness_that_is_not_installed_is_one_line_before_the_first_episode(tokenizer, flow_params):
    params = dict(flow_params, command=["no-such-harness-7d1c", "--task", "{prompt}"])
    with pytest.raises(ConfigError, match=r"agent_flow.command: no program 'no-such-harness-7d1c' \(not on PATH\)"):
        CLIAgentFlow(context(tokenizer=tokenizer), **params)
    with pytest.raises(ConfigError, match="not an executable file"):
        CLIAgentFlow(context(tokenizer=tokenizer), **dict(params, command=["/nonexistent/mini"]))
