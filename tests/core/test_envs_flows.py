"""ToolEnv and AgentEnvLoop: tool calls per turn, error observations, context modes, and failure handling."""

from __future__ import annotations

import asyncio

import pytest

from agentr1_core.builtin.calculator import CalculatorTool
from agentr1_core.envs import AgentEnv, ToolEnv
from agentr1_core.flows import AgentEnvLoop, FlowContext, render_prompt
from agentr1_core.mdp import Action, Observation, StepResult
from agentr1_core.rollout.base import Generation, SamplingParams
from agentr1_core.testing import check_env, run_async
from agentr1_core.tools import BaseTool


def act(text: str) -> Action:
    return Action(text, [1], [0.0])


def call(name: str, **args) -> str:
    import json

    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


class _Rendezvous(BaseTool):
    """Two calls of this tool in one turn only finish if they run concurrently (each waits for the other)."""

    name = "meet"
    description = "waits for its partner"
    parameters = {"type": "object", "properties": {"who": {"type": "string"}}, "required": ["who"]}
    timeout = 5.0
    runs_in_thread = False  # its calls share asyncio events, which belong to one event loop

    def __init__(self):
        self.arrived: dict[str, asyncio.Event] = {}

    async def execute(self, who: str) -> str:
        other = "b" if who == "a" else "a"
        self.arrived.setdefault(who, asyncio.Event()).set()
        await asyncio.wait_for(self.arrived.setdefault(other, asyncio.Event()).wait(), 2.0)
        return f"{who} met {other}"


def test_tool_env_runs_calls_and_reports_errors():
    env = ToolEnv(tools=[{"name": "calculator"}], system_prompt="Be brief.", max_turns=3)
    obs = run_async(env.reset({"prompt": "What is 6*7?"}))
    assert obs.messages[0]["role"] == "system" and "calculator" in obs.messages[0]["content"]
    assert obs.messages[1] == {"role": "user", "content": "What is 6*7?"}
    text = call("calculator", expression="6*7") + call("nope", x=1) + call("calculator", expr="1") + \
        "<tool_call>{bad json</tool_call>"
    res = run_async(env.step(act(text)))
    assert not res.done and not res.truncated
    contents = [m["content"] for m in res.observation.messages[-4:]]
    assert "42" in contents[0]
    assert "unknown tool 'nope'; available tools: calculator" in contents[1]
    assert "missing required argument(s): expression" in contents[2]
    assert "not valid JSON" in contents[3]
    assert res.info["tool_errors"] == {"unknown_tool": 1, "bad_arguments": 1, "parse_error": 1}
    final = run_async(env.step(act("<answer>42</answer>")))
    assert final.done and final.observation is None


def test_tool_env_runs_one_turns_calls_concurrently():
    env = ToolEnv(tools=[_Rendezvous()], max_turns=2)
    run_async(env.reset({"prompt": "meet"}))
    res = run_async(env.step(act(call("meet", who="a") + call("meet", who="b"))))
    assert [m["content"] for m in res.observation.messages[-2:]] == [
        "<tool_response>\na met b\n</tool_response>", "<tool_response>\nb met a\n</tool_response>"]


def test_tool_env_window_keeps_prompt_flat_and_caps_turns():
    env = ToolEnv(tools=[CalculatorTool()], max_turns=4, context="window", window=1)
    run_async(env.reset({"prompt": "go"}))
    sizes = []
    for i in range(4):
        res = run_async(env.step(act(call("calculator", expression=f"{i}+1"))))
        sizes.append(len(res.observation.messages))
    assert sizes == [4, 4, 4, 4]  # system, task, last assistant turn, its tool result
    assert res.truncated
    assert check_env(ToolEnv(tools=["calculator"], max_turns=3), {"prompt": "x"},
                     actions=[call("calculator", expression="1+1")] * 5) == 3


def test_tool_env_rejects_unknown_context_mode():
    with pytest.raises(ValueError, match="context must be"):
        ToolEnv(context="everything")


class _ScriptedEngine:
    """Fault injection: an engine whose answers are fixed strings (an empty one simulates a failed generation)."""

    def __init__(self, tokenizer, answers):
        self.tokenizer, self.answers, self.prompts = tokenizer, list(answers), []

    async def generate(self, prompt_ids, sampling):
        self.prompts.append(list(prompt_ids))
        text = self.answers.pop(0)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return Generation(ids, [-0.5] * len(ids), text, "stop" if ids else "error")


class _CrashingEnv(AgentEnv):
    async def reset(self, row):
        return Observation(text="start")

    async def step(self, action):
        raise RuntimeError("simulator died")


def _ctx(tokenizer, engine=None, **kw):
    return FlowContext(engine=engine, tokenizer=tokenizer, sampling=SamplingParams(), **kw)


def test_expert_episode_carries_exact_token_ids(smol_tokenizer):
    from agentr1_core.builtin.rewards import AnswerMatch

    row = {"prompt": "What is 6*7?", "reward_model": {"ground_truth": "42"},
           "expert_actions": [call("calculator", expression="6*7"), "<answer>42</answer>"]}
    ctx = _ctx(smol_tokenizer, env_config={"name": "tool_env", "tools": ["calculator"]},
               reward_fn=AnswerMatch(), policy="expert")
    traj = run_async(AgentEnvLoop(ctx).run(row))
    assert traj.termination == "done" and traj.final_reward == 1.0 and len(traj.steps) == 2
    first, second = traj.steps
    start = run_async(ToolEnv(tools=["calculator"]).reset(row))
    assert first.prompt_ids == render_prompt(smol_tokenizer, start)
    assert first.response_ids[-1] == smol_tokenizer.eos_token_id
    assert smol_tokenizer.decode(first.response_ids[:-1]) == row["expert_actions"][0]
    # the second prompt is the rendering of the env's next observation, which holds the tool result
    assert second.prompt_ids == render_prompt(smol_tokenizer, first.next_observation)
    assert "42" in smol_tokenizer.decode(second.prompt_ids[len(first.prompt_ids):])
    assert second.reward == 1.0 and first.reward == 0.0


class _PayingEnv(AgentEnv):
    """A user's env: pays 0.25 per step and 1.0 on "stop"; its reset knows nothing about experts."""

    async def reset(self, row):
        self.turn = 0
        return Observation(messages=[{"role": "user", "content": str(row["prompt"])}])

    async def step(self, action):
        self.turn += 1
        won = action.text.strip() == "stop"
        return StepResult(observation=Observation(text=f"turn {self.turn}"), reward=1.0 if won else 0.25,
                          done=won, feedback="correct" if won else "again")


def test_without_a_reward_function_the_env_step_rewards_are_the_episode_reward(smol_tokenizer):
    engine = _ScriptedEngine(smol_tokenizer, ["go", "go", "stop"])
    loop = AgentEnvLoop(_ctx(smol_tokenizer, engine, env_config={"name": "x"}, reward_fn=None, max_turns=5))
    loop.make_env = lambda row: _PayingEnv()
    traj = run_async(loop.run({"prompt": "play"}))
    assert [s.reward for s in traj.steps] == [0.25, 0.25, 1.0]
    assert traj.final_reward == 1.5 == traj.total_reward and traj.success()
    assert traj.info["reward_source"] == "env"


def test_a_reward_function_result_is_the_episode_reward_and_env_rewards_stay_in_the_steps(smol_tokenizer):
    engine = _ScriptedEngine(smol_tokenizer, ["go", "stop"])
    loop = AgentEnvLoop(_ctx(smol_tokenizer, engine, env_config={"name": "x"}, reward_fn=lambda traj, row: 0.5))
    loop.make_env = lambda row: _PayingEnv()
    traj = run_async(loop.run({"prompt": "play"}))
    assert traj.final_reward == 0.5 and not traj.success()
    assert [s.reward for s in traj.steps] == [0.25, 1.5] and traj.info["reward_source"] == "reward_fn"


def test_any_env_replays_the_rows_expert_actions(smol_tokenizer):
    loop = AgentEnvLoop(_ctx(smol_tokenizer, env_config={"name": "x"}, policy="expert", max_turns=5))
    loop.make_env = lambda row: _PayingEnv()
    traj = run_async(loop.run({"prompt": "play", "expert_actions": ["go", "stop"]}))
    assert [s.action_text for s in traj.steps] == ["go", "stop"] and traj.termination == "done"
    assert traj.final_reward == 1.25
    empty = run_async(loop.run({"prompt": "play"}))  # no demonstration: the expert has nothing to say
    assert empty.steps == [] and empty.termination == "expert_exhausted"


def test_engine_failure_and_env_crash_end_the_episode_cleanly(smol_tokenizer):
    engine = _ScriptedEngine(smol_tokenizer, [call("calculator", expression="1+1"), ""])
    ctx = _ctx(smol_tokenizer, engine, env_config={"name": "tool_env", "tools": ["calculator"]})
    traj = run_async(AgentEnvLoop(ctx).run({"prompt": "hi"}))
    assert traj.termination == "engine_error" and len(traj.steps) == 1 and traj.steps[-1].truncated

    crash = AgentEnvLoop(_ctx(smol_tokenizer, _ScriptedEngine(smol_tokenizer, ["x"]), env_config={"name": "x"}))
    crash.make_env = lambda row: _CrashingEnv()
    traj = run_async(crash.run({"prompt": "hi"}))
    assert traj.termination == "env_error" and "simulator died" in traj.info["error"]
    assert traj.steps[-1].truncated and traj.steps[-1].response_logprobs == [-0.5]


def test_max_turns_and_context_limit(smol_tokenizer):
    engine = _ScriptedEngine(smol_tokenizer, [call("calculator", expression="1+1")] * 3)
    ctx = _ctx(smol_tokenizer, engine, env_config={"name": "tool_env", "tools": ["calculator"], "max_turns": 10},
               max_turns=3)
    traj = run_async(AgentEnvLoop(ctx).run({"prompt": "loop"}))
    assert traj.termination == "max_turns" and len(traj.steps) == 3 and traj.steps[-1].truncated
    short = _ctx(smol_tokenizer, _ScriptedEngine(smol_tokenizer, []), env_config={"name": "tool_env"},
                 max_prompt_tokens=5)
    traj = run_async(AgentEnvLoop(short).run({"prompt": "a prompt longer than five tokens for sure"}))
    assert traj.termination == "context_limit" and traj.steps == []


def test_row_env_kwargs_override_config(smol_tokenizer):
    ctx = _ctx(smol_tokenizer, env_config={"name": "tool_env", "max_turns": 9})
    env = AgentEnvLoop(ctx).make_env({"env_kwargs": {"max_turns": 2}})
    assert isinstance(env, ToolEnv) and env.max_turns == 2


def test_step_result_and_action_validation():
    with pytest.raises(ValueError):
        Action("x", [1, 2], [0.0])
    with pytest.raises(ValueError):
        Observation(text="a", token_ids=[1])
    assert StepResult(observation=None).reward == 0.0


def test_function_style_reward_and_in_process_plugin(tmp_path, monkeypatch, agentr1_registry):
    from agentr1_core import RewardSpec, hookimpl
    from agentr1_core.components import check_components
    from agentr1_core.config import load_config

    (tmp_path / "my_rewards.py").write_text("def longest(trajectory, row, scale: float = 1.0):\n"
                                            "    return scale * len(trajectory.steps)\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    class Plugin:
        @hookimpl
        def agentr1_rewards(self):
            return [RewardSpec("longest", "my_rewards:longest", "episode length")]

    agentr1_registry.register_module(Plugin(), name="mine")
    check_components(load_config(None, ["reward.name=longest", "reward.scale=2"]), agentr1_registry)
    with pytest.raises(Exception, match="reward.scale: expected float"):
        check_components(load_config(None, ["reward.name=longest", "reward.scale=big"]), agentr1_registry)
