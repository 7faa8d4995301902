"""The gateway with the official ``openai`` client: completions and tool calls recorded as steps with the engine's own
token ids and log-probs, prompts identical to a native ``tool_env`` episode, concurrent episodes and parallel calls
kept apart, and every way an agent can go wrong ending its episode as counted."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import torch

from agentr1_core.builtin.rewards import AnswerMatch
from agentr1_core.flows import AgentEnvLoop, FlowContext
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.rollout.driver import rollout_async
from agentr1_gateway.flow import OpenAIAgentFlow
from agentr1_gateway.server import EpisodeGateway

AGENTS = Path(__file__).with_name("agent_functions.py")
SYSTEM = ("Solve the user's arithmetic problem. First call the calculator tool with the expression, then reply with "
          "only the result as <answer>NUMBER</answer>.")


def ctx(engine, tokenizer, **kw):
    kw.setdefault("sampling", SamplingParams(temperature=1.0, max_new_tokens=16))
    return FlowContext(engine=engine, tokenizer=tokenizer, **kw)


def run_flow(agent: str, context: FlowContext, row: dict, **params):
    flow = OpenAIAgentFlow(context, agent=agent, **params)
    return asyncio.run(flow.run(row))


def test_a_completion_is_recorded_with_the_engines_token_ids_and_logprobs(tokenizer, tiny_model):
    from agentr1_core.rollout.transformers_engine import TransformersEngine

    engine = TransformersEngine(tiny_model, tokenizer, max_batch_size=4, seed=0)
    try:
        traj = run_flow(f"{AGENTS}:ask", ctx(engine, tokenizer), {"prompt": "Say hi."})
    finally:
        engine.close()
    assert traj.termination == "done" and len(traj.steps) == 1
    step = traj.steps[0]
    assert 0 < len(step.response_ids) <= 6  # the request's max_tokens lowered the run's cap of 16
    # the step's prompt is the chat template of what the agent sent, and its response is what the engine sampled:
    # a scoring pass of the same model over prompt + response gives the recorded log-probs
    expected = tokenizer.apply_chat_template([{"role": "user", "content": "Say hi."}], add_generation_prompt=True,
                                             tokenize=True)
    expected = expected["input_ids"] if hasattr(expected, "keys") else expected
    assert step.prompt_ids == list(expected)
    ids = torch.tensor([step.prompt_ids + step.response_ids])
    with torch.no_grad():
        logits = tiny_model(ids).logits[0, len(step.prompt_ids) - 1:-1].float()
    scored = torch.log_softmax(logits, -1).gather(1, torch.tensor(step.response_ids)[:, None])[:, 0]
    assert torch.allclose(scored, torch.tensor(step.response_logprobs), atol=1e-4)
    assert traj.info["answer"] == tokenizer.decode(step.response_ids, skip_special_tokens=True)


def test_a_tool_call_round_trip_shows_the_model_what_tool_env_shows_it(tokenizer, scripted):
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
    engine = scripted([call, "<answer>42</answer>"])
    row = {"prompt": "What is 6*7?", "reward_model": {"ground_truth": "42"}}
    traj = run_flow("agentr1_gateway.examples.calculator_agent:agent", ctx(engine, tokenizer, reward_fn=AnswerMatch(),
                                                                            max_turns=3), row)
    assert traj.termination == "done" and [s.action_text for s in traj.steps] == [call, "<answer>42</answer>"]
    assert traj.final_reward == 1.0 and traj.info["answer"] == "<answer>42</answer>"
    assert traj.steps[0].feedback == "<tool_response>\n42\n</tool_response>"
    # the same episode as a native tool_env agent: the same prompts, token for token
    native = scripted([call, "<answer>42</answer>"])
    env_config = {"name": "tool_env", "tools": ["calculator"], "system_prompt": SYSTEM}
    reference = asyncio.run(AgentEnvLoop(ctx(native, tokenizer, env_config=env_config, max_turns=3)).run(row))
    assert [s.prompt_ids for s in traj.steps] == [s.prompt_ids for s in reference.steps]
    assert [s.response_ids for s in traj.steps] == [s.response_ids for s in reference.steps]


def test_concurrent_episodes_and_parallel_calls_stay_apart(tokenizer, scripted):
    engine = scripted(["ok"])
    context = ctx(engine, tokenizer, max_turns=4)
    rows = [{"prompt": "apples"}, {"prompt": "pears"}]

    def make_flow():
        return OpenAIAgentFlow(context, agent=f"{AGENTS}:two_in_parallel")

    trajs = asyncio.run(rollout_async(rows, 2, make_flow, progress=False))
    assert len(trajs) == 4 and all(t.termination == "done" for t in trajs)
    for traj, fruit in zip(trajs, ["apples", "apples", "pears", "pears"]):
        prompts = [tokenizer.decode(s.prompt_ids) for s in traj.steps]
        assert len(prompts) == 2 and all(fruit in p for p in prompts)
        assert sorted("(first)" in p for p in prompts) == [False, True]  # each call kept its own prompt
        assert [s.info["call"] for s in traj.steps] == [0, 1]  # in the order the calls arrived


@pytest.mark.parametrize("agent,params,termination,answer", [
    ("keeps_asking", {}, "max_turns", "RateLimitError: max_turns"),
    ("long_prompt", {}, "context_limit", "BadRequestError: context_length_exceeded"),
])
def test_limits_reach_the_agent_as_openai_errors(tokenizer, scripted, agent, params, termination, answer):
    context = ctx(scripted(["ok"]), tokenizer, max_turns=3, max_prompt_tokens=200)
    traj = run_flow(f"{AGENTS}:{agent}", context, {"prompt": "go"}, **params)
    assert traj.termination == termination and traj.info["answer"] == answer
    assert len(traj.steps) == (3 if agent == "keeps_asking" else 0)


def test_agents_that_raise_hang_or_never_call_end_as_env_errors_and_the_rollout_goes_on(tokenizer, scripted):
    context = ctx(scripted(["ok"]), tokenizer, max_turns=3)
    rows = [{"prompt": name, "agent": name} for name in ("raises", "hangs", "never_calls", "returns_reward")]

    class PerRow(OpenAIAgentFlow):
        async def run(self, row):
            self.agent = __import__("agentr1_gateway.flow", fromlist=["load_agent"]).load_agent(
                f"{AGENTS}:{row['agent']}")
            return await super().run(row)

    trajs = asyncio.run(rollout_async(rows, 1, lambda: PerRow(context, agent=f"{AGENTS}:ask", timeout=1.0),
                                      progress=False))
    by_name = dict(zip([r["agent"] for r in rows], trajs))
    assert by_name["raises"].termination == "env_error" and "RuntimeError: agent bug" in by_name["raises"].info[
        "error"] and len(by_name["raises"].steps) == 1 and by_name["raises"].steps[0].truncated
    assert by_name["hangs"].termination == "env_error" and "did not return within 1s" in by_name["hangs"].info["error"]
    assert by_name["never_calls"].termination == "env_error" and "without calling the model" in \
        by_name["never_calls"].info["error"]
    paid = by_name["returns_reward"]  # no reward function: the agent's number is the episode's reward
    assert paid.termination == "done" and paid.final_reward == 0.75 and paid.metrics["hops"] == 2.0


def test_the_agent_never_sees_the_answer(tokenizer, scripted):
    row = {"prompt": "q", "reward_model": {"ground_truth": "secret"}, "expert_actions": ["x"], "data_source": "s"}
    traj = run_flow(f"{AGENTS}:sees_the_task", ctx(scripted(["ok"]), tokenizer), row)
    assert traj.info["answer"] == "data_source,prompt"


def test_expert_mode_answers_with_the_rows_demonstration(tokenizer):
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>'
    row = {"prompt": "What is 2+2?", "reward_model": {"ground_truth": "4"}, "expert_actions": [call, "<answer>4</answer>"]}
    context = ctx(None, tokenizer, reward_fn=AnswerMatch(), max_turns=3, policy="expert")
    traj = run_flow("agentr1_gateway.examples.calculator_agent:agent", context, row)
    assert [s.action_text for s in traj.steps] == [call, "<answer>4</answer>"] and traj.final_reward == 1.0
    assert traj.steps[0].response_ids[-1] == tokenizer.eos_token_id


def test_bad_requests_wrong_keys_and_unknown_paths_are_refused(tokenizer, scripted):
    async def go():
        gateway = EpisodeGateway(respond=None, tokenizer=tokenizer, tool_format=_hermes(),
                                 sampling=SamplingParams())
        url = await gateway.start()
        auth = {"Authorization": f"Bearer {gateway.key}"}
        try:
            async with httpx.AsyncClient(trust_env=False) as client:
                out = {
                    "no_key": await client.post(f"{url}/chat/completions", json={"messages": []}),
                    "wrong_key": await client.post(f"{url}/chat/completions", json={}, headers={
                        "Authorization": "Bearer nope"}),
                    "not_json": await client.post(f"{url}/chat/completions", content=b"{oops", headers=auth),
                    "no_messages": await client.post(f"{url}/chat/completions", json={"model": "m"}, headers=auth),
                    "bad_role": await client.post(f"{url}/chat/completions", json={
                        "messages": [{"role": "wizard", "content": "x"}]}, headers=auth),
                    "n_2": await client.post(f"{url}/chat/completions", json={
                        "messages": [{"role": "user", "content": "x"}], "n": 2}, headers=auth),
                    "models": await client.get(f"{url}/models", headers=auth),
                }
        finally:
            await gateway.close()
        return url, out

    url, out = asyncio.run(go())
    assert url.startswith("http://127.0.0.1:")
    assert out["no_key"].status_code == out["wrong_key"].status_code == 401
    assert out["no_key"].json()["error"]["code"] == "invalid_api_key"
    for name in ("not_json", "no_messages", "bad_role", "n_2"):
        assert out[name].status_code == 400 and out[name].json()["error"]["message"], name
    assert out["bad_role"].json()["error"]["param"] == "messages[0].role"  # every malformed field: see
    # test_malformed_requests.py
    assert out["models"].json()["data"][0]["id"] == "agentr1-policy"


def _hermes():
    from agentr1_core.tool_formats import HermesFormat

    return HermesFormat()


def test_a_history_the_agent_wrote_itself_is_rendered_with_the_tool_format(tokenizer):
    from agentr1_gateway.chat import Issued, model_messages

    messages = [{"role": "user", "content": "q"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "mine", "type": "function", "function": {"name": "calc", "arguments": '{"x": 1}'}}]},
                {"role": "tool", "tool_call_id": "mine", "name": "calc", "content": "2"}]
    shown = model_messages(messages, [{"type": "function", "function": {"name": "calc"}}], _hermes(), Issued())
    assert shown[0]["role"] == "system" and "<tools>" in shown[0]["content"]
    assert json.loads(shown[2]["content"][len("<tool_call>"):-len("</tool_call>")]) == {"name": "calc",
                                                                                       "arguments": {"x": 1}}
    assert shown[3] == {"role": "tool", "name": "calc", "content": "<tool_response>\n2\n</tool_response>"}


def test_a_request_from_another_machine_is_refused(tokenizer):
    from unittest import mock

    from aiohttp.test_utils import make_mocked_request

    gateway = EpisodeGateway(respond=None, tokenizer=tokenizer, tool_format=_hermes(), sampling=SamplingParams())

    async def handler(request):
        raise AssertionError("the handler must not run")

    async def go(peer):
        transport = mock.Mock()
        transport.get_extra_info.side_effect = lambda name, default=None: peer if name == "peername" else default
        request = make_mocked_request("POST", "/v1/chat/completions", transport=transport,
                                      headers={"Authorization": f"Bearer {gateway.key}"})
        return await gateway._guard(request, handler)

    refused = asyncio.run(go(("192.0.2.7", 4242)))
    assert refused.status == 403 and json.loads(refused.body)["error"]["type"] == "permission_error"
    with pytest.raises(AssertionError, match="must not run"):  # the same request from this machine gets through
        asyncio.run(go(("127.0.0.1", 4242)))


def test_time_waiting_for_the_model_does_not_count_against_the_agents_timeout(tokenizer, scripted):
    class SlowEngine:
        def __init__(self):
            self.inner = scripted(["ok"])

        async def generate(self, prompt_ids, sampling):
            await asyncio.sleep(1.5)  # a busy engine: longer than the agent's whole timeout
            return await self.inner.generate(prompt_ids, sampling)

    traj = run_flow(f"{AGENTS}:ask", ctx(SlowEngine(), tokenizer), {"prompt": "hi"}, timeout=1.0)
    assert traj.termination == "done" and traj.info["answer"] == "ok"
