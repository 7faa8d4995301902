"""The calculator agent written with the vendors' own SDKs (the OpenAI Agents SDK on its Responses and chat-completions
models, the anthropic client plain and streamed) trains unchanged: with the warm start's expert policy (the gateway
answers with the row's demonstration) each completes the default run's rows with reward 1, and records the same
steps, prompt for prompt and token for token, as the plain chat-completions agent of ``calculator-openai``."""

from __future__ import annotations

import asyncio
import gc

import pytest

from agentr1_core.builtin.datasets import arithmetic_rows
from agentr1_core.builtin.rewards import AnswerMatch
from agentr1_core.flows import FlowContext
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.rollout.driver import rollout_async
from agentr1_gateway.flow import OpenAIAgentFlow

pytest.importorskip("agents")
pytest.importorskip("anthropic")

EXAMPLES = "agentr1_gateway.examples"
PLAIN = f"{EXAMPLES}.calculator_agent:agent"
SDK = f"{EXAMPLES}.agents_sdk_calculator"
ANTHROPIC = f"{EXAMPLES}.anthropic_calculator"
AGENTS = {  # name -> (agent, flow parameters)
    "agents-sdk": (f"{SDK}:agent", {"agent_params": {"api": "responses"}}),
    "agents-sdk-chat": (f"{SDK}:agent", {"agent_params": {"api": "chat"}}),
    "agents-sdk-run-sync": (f"{SDK}:agent_run_sync", {}),
    "anthropic": (f"{ANTHROPIC}:agent", {}),
    "anthropic-stream": (f"{ANTHROPIC}:agent", {"agent_params": {"stream": True}}),
}


@pytest.fixture(scope="module")
def rows():
    """The default run's first held-out rows: plain expressions and word problems."""
    return arithmetic_rows("val", train_size=512, val_size=64, seed=0)[:3]


def expert_ctx(tokenizer, max_turns=3):
    return FlowContext(engine=None, tokenizer=tokenizer, sampling=SamplingParams(max_new_tokens=48),
                       reward_fn=AnswerMatch(), max_turns=max_turns, policy="expert")


def run(tokenizer, agent, row, max_turns=3, **params):
    return asyncio.run(OpenAIAgentFlow(expert_ctx(tokenizer, max_turns), agent=agent, **params).run(row))


def steps(traj):
    return [(s.prompt_ids, s.response_ids, s.response_logprobs, s.action_text, s.feedback, s.done)
            for s in traj.steps]


@pytest.mark.parametrize("name", list(AGENTS))
def test_each_sdk_agent_solves_the_rows_with_the_plain_agents_prompts(tokenizer, rows, name):
    agent, params = AGENTS[name]
    for row in rows:
        reference = run(tokenizer, PLAIN, row)
        traj = run(tokenizer, agent, row, **params)
        assert traj.termination == "done" and traj.final_reward == 1.0, traj.info
        assert traj.info["answer"] == row["expert_actions"][-1]
        assert [s.action_text for s in traj.steps] == row["expert_actions"]
        # the same system prompt, task and tool schema, whatever API carried them: the same steps, token for token
        assert steps(traj) == steps(reference)
        assert traj.steps[0].prompt_ids == reference.steps[0].prompt_ids


def test_a_streamed_and_a_plain_anthropic_episode_record_identical_steps(tokenizer, rows):
    for row in rows:
        plain = run(tokenizer, f"{ANTHROPIC}:agent", row)
        streamed = run(tokenizer, f"{ANTHROPIC}:streaming_agent", row)
        assert plain.termination == streamed.termination == "done"
        assert steps(plain) == steps(streamed) and len(plain.steps) == 2
        assert plain.info["answer"] == streamed.info["answer"] == row["expert_actions"][-1]


@pytest.mark.parametrize("agent", [f"{SDK}:agent", f"{SDK}:agent_run_sync", f"{ANTHROPIC}:streaming_agent"])
def test_in_a_child_process_too(tokenizer, rows, agent):
    reference = run(tokenizer, PLAIN, rows[0])
    traj = run(tokenizer, agent, rows[0], isolation="process")
    assert traj.termination == "done" and traj.final_reward == 1.0 and steps(traj) == steps(reference)


@pytest.mark.parametrize("agent", [f"{SDK}:agent", f"{SDK}:agent_run_sync"])
def test_sdk_episodes_in_threads_next_to_the_rollouts_loop_each_run_and_close_their_own_loop(tokenizer, rows, agent):
    """Runner.run_sync and asyncio.run each need a thread with no running loop: the agent's thread has none, even
    while the rollout's loop runs episodes side by side. Their clients are closed on their own loops: nothing is
    left for the garbage collector to close later on the rollout's loop (where it would fail)."""
    context = expert_ctx(tokenizer)

    async def main():
        problems = []
        asyncio.get_running_loop().set_exception_handler(lambda loop, info: problems.append(info))
        trajs = await rollout_async(rows, 2, lambda: OpenAIAgentFlow(context, agent=agent), progress=False)
        gc.collect()
        for _ in range(5):
            await asyncio.sleep(0.01)
        return trajs, problems

    trajs, problems = asyncio.run(main())
    assert len(trajs) == 6 and all(t.termination == "done" and t.final_reward == 1.0 for t in trajs)
    assert problems == []


def test_the_sdks_own_turn_limit_and_the_runs_both_end_the_loop(tokenizer, rows):
    row = rows[0]
    # the SDK's limit: one model call, a tool call, no final output -> the agent returns None, reward 0
    own = run(tokenizer, f"{SDK}:agent", row, agent_params={"max_turns": 1})
    assert own.termination == "done" and own.final_reward == 0.0 and len(own.steps) == 1
    # the run's limit (rollout.max_turns=1): the SDK's second call is refused, the episode ends at max_turns
    capped = run(tokenizer, f"{SDK}:agent", row, max_turns=1)
    assert capped.termination == "max_turns" and len(capped.steps) == 1 and capped.steps[0].truncated


class FixedEngine:
    """Every reply the same text, with the given finish reason."""

    def __init__(self, tokenizer, text, finish_reason):
        self.tokenizer, self.text, self.finish_reason = tokenizer, text, finish_reason

    async def generate(self, prompt_ids, sampling):
        from agentr1_core.rollout.base import Generation

        ids = self.tokenizer.encode(self.text, add_special_tokens=False)
        if self.finish_reason == "stop":
            ids.append(self.tokenizer.eos_token_id)
        return Generation(ids, [-0.5] * len(ids), self.text, self.finish_reason)


def run_engine(tokenizer, engine, agent, row, **params):
    context = FlowContext(engine=engine, tokenizer=tokenizer, sampling=SamplingParams(max_new_tokens=48),
                          reward_fn=AnswerMatch(), max_turns=3)
    return asyncio.run(OpenAIAgentFlow(context, agent=agent, **params).run(row))


@pytest.mark.parametrize("name,answer", [("agents-sdk", None), ("agents-sdk-chat", "<answer>4"),
                                         ("anthropic", "<answer>4"), ("anthropic-stream", "<answer>4")])
def test_a_reply_cut_by_the_token_cap_is_a_failed_episode_not_an_env_error(tokenizer, rows, name, answer):
    """On the Responses API a cut reply is an ``incomplete`` response, which the SDK raises (``ModelBehaviorError``):
    the example counts it as the model's failure. The other APIs hand the cut text back as the answer."""
    agent, params = AGENTS[name]
    traj = run_engine(tokenizer, FixedEngine(tokenizer, "<answer>4", "length"), agent, rows[0], **params)
    assert traj.termination == "done" and traj.final_reward == 0.0 and len(traj.steps) == 1
    assert traj.info.get("answer") == answer and traj.steps[0].info["finish_reason"] == "length"


@pytest.mark.parametrize("name", ["agents-sdk", "agents-sdk-chat"])
def test_a_call_to_a_tool_the_sdk_agent_does_not_have_is_a_failed_episode(tokenizer, rows, name):
    agent, params = AGENTS[name]
    call = '<tool_call>{"name": "abacus", "arguments": {"expression": "2+2"}}</tool_call>'
    traj = run_engine(tokenizer, FixedEngine(tokenizer, call, "stop"), agent, rows[0], **params)
    assert traj.termination == "done" and traj.final_reward == 0.0 and len(traj.steps) == 1
    assert "answer" not in traj.info
